"""Addresses of actors (:class:`ActorRef`) and the reply half of an ask (:class:`Reply`)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import trio
from outcome import Error, Outcome, Value

from ._exceptions import ActorExited, MailboxFull, ReplyAlreadySent
from ._exit import Crashed, ExitReason
from ._mailbox_statistics import MailboxStatistics
from ._node import ActorInfo, Node

M = TypeVar("M")
R = TypeVar("R")


class Inbox(Protocol[M]):
    """What an :class:`ActorRef` needs of its actor's mailbox (a ``Mailbox``): the sending side.

    A protocol because ``_mailbox`` imports this module: a mailbox hands out its owner's ref.
    """

    _ref: ActorRef[M] | None
    _capacity: int

    def statistics(self) -> MailboxStatistics: ...

    def _put_nowait(self, message: M, describe: str) -> None: ...

    async def _put(self, message: M, describe: str) -> None: ...

    async def _wait_for_room(self, message: M) -> None: ...

    def _close(self, describe: str) -> None: ...


class Reply(Generic[R]):
    """The answer slot of one ``ask``. The actor resolves it once, with ``send`` or ``fail``.

    If the actor responsible for it exits before resolving it, the asker gets
    :class:`ActorExited`. An actor may pass the job on with :meth:`hand_off` (a router):
    then the receiving actor is responsible. Concurrency: resolving is synchronous and never
    blocks; the first resolution wins and later ones raise :class:`ReplyAlreadySent`.
    """

    __slots__ = ("_exited", "_node", "_outcome", "_task")

    def __init__(self) -> None:
        self._outcome: Outcome[R] | None = None
        self._task: trio.lowlevel.Task | None = None
        self._node: Node | None = None  # the actor responsible for answering
        self._exited: str | None = None  # why it failed, if its actor exited first

    @property
    def resolved(self) -> bool:
        return self._outcome is not None

    def send(self, value: R) -> None:
        """Answer the ask with ``value``."""
        self._resolve(Value(value))

    def fail(self, exception: BaseException) -> None:
        """Make the ask raise ``exception`` in the asker."""
        self._resolve(Error(exception))

    def hand_off(self, to: ActorRef[Any]) -> None:
        """Make actor ``to`` responsible for answering (forwarding the ask to it).

        From now on the ask fails with :class:`ActorExited` if ``to`` exits without
        answering, not if the current actor does.
        """
        self._check_unresolved()
        if self._node is not None and self._node.replies is not None:
            self._node.replies.discard(self)
        node = to._node
        self._node = node
        if node.exit_reason is not None:
            self._actor_exited(node.name, node.exit_reason)
            return
        if node.replies is None:
            node.replies = set()
        node.replies.add(self)

    def _check_unresolved(self) -> None:
        if self._exited is not None:
            raise ReplyAlreadySent(f"this ask already failed: {self._exited}")
        if self._outcome is not None:
            raise ReplyAlreadySent("this ask was already answered; a Reply resolves once")

    def _resolve(self, outcome: Outcome[R]) -> None:
        self._check_unresolved()
        self._outcome = outcome
        if self._task is not None:
            task, self._task = self._task, None
            trio.lowlevel.reschedule(task, Value(None))

    def _actor_exited(self, name: str, reason: ExitReason) -> None:
        if self._outcome is None:
            why = f"actor {name!r} exited before replying ({reason})"
            error = ActorExited(why, reason)
            if isinstance(reason, Crashed):
                error.__cause__ = reason.exception
            self._resolve(Error(error))
            self._exited = why

    async def _wait(self) -> R:
        if self._outcome is None:
            self._task = trio.lowlevel.current_task()

            def abort_fn(_: Any) -> trio.lowlevel.Abort:
                self._task = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort_fn)
        else:
            await trio.lowlevel.checkpoint()
        assert self._outcome is not None
        return self._outcome.unwrap()


class ActorRef(Generic[M]):
    """The address of one actor incarnation: send it messages, ask it, stop it, watch it.

    A restarted child is a new incarnation with a new ref; ``Supervisor.child(name)`` returns
    the current one. Concurrency: every method may be called from any task on the trio
    thread; ``tell`` either enqueues the message and returns, or raises and enqueues nothing.
    """

    __slots__ = ("__weakref__", "_describe", "_fn", "_grace", "_mailbox", "_node")

    def __init__(
        self,
        node: Node,
        mailbox: Inbox[M],
        grace: float,
        fn: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self._node = node
        self._mailbox = mailbox
        self._grace = grace
        self._fn = fn
        """The actor's function: its supervisor restarts it as this incarnation was started."""
        self._describe = f"actor {node.name!r}"
        mailbox._ref = self

    @classmethod
    def _of_exited(cls, node: Node, mailbox: Inbox[M]) -> ActorRef[M]:
        """Another address of an exited actor (``mailbox.ref`` once its own was dropped)."""
        assert node.exit_reason is not None
        ref = cls.__new__(cls)
        ref._node = node
        ref._mailbox = mailbox
        ref._grace = 0.0
        ref._fn = None
        ref._describe = f"actor {node.name!r}"
        return ref

    def __repr__(self) -> str:
        return f"<ActorRef {self._node.actor_info().path!r} {self._node.state}>"

    @property
    def name(self) -> str:
        return self._node.name

    @property
    def info(self) -> ActorInfo:
        return self._node.actor_info()

    @property
    def exit_reason(self) -> ExitReason | None:
        """``None`` while the actor is alive, then its one exit reason."""
        return self._node.exit_reason

    # -- messages --------------------------------------------------------------------------

    async def tell(self, message: M) -> None:
        """Enqueue ``message``, waiting for room if the mailbox is full (backpressure).

        Raises :class:`MailboxClosed` if the actor has exited or is stopping.
        """
        await self._mailbox._put(message, self._describe)

    def tell_nowait(self, message: M) -> None:
        """Enqueue ``message`` or raise :class:`MailboxFull` / :class:`MailboxClosed`."""
        self._mailbox._put_nowait(message, self._describe)

    async def ask(self, build: Callable[[Reply[R]], M]) -> R:
        """Send ``build(reply)`` and wait for the actor to resolve ``reply``.

        Example: ``await ref.ask(lambda reply: Get("key", reply))``. Raises what the actor
        passed to ``reply.fail``, or :class:`ActorExited` if the actor exited first (its
        crash, if any, is the ``__cause__``): an ask never hangs on a dead actor.
        """
        reply: Reply[R] = Reply()
        node = self._node
        if node.replies is None:
            node.replies = set()
        node.replies.add(reply)
        reply._node = node
        mailbox = self._mailbox
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            message = build(reply)
            try:
                mailbox._put_nowait(message, self._describe)
            except MailboxFull:
                await mailbox._wait_for_room(message)
            # No checkpoint between sending and waiting: waiting for the reply is one.
            return await reply._wait()
        finally:
            responsible = reply._node
            if responsible is not None and responsible.replies is not None:
                responsible.replies.discard(reply)

    def statistics(self) -> MailboxStatistics:
        return self._mailbox.statistics()

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self, grace: float | None = None) -> None:
        """Ask the actor to stop: its mailbox takes no new messages and ends when drained.

        If it has not exited after ``grace`` seconds (default: the grace given at spawn) it
        is cancelled. Its exit reason is ``Shutdown(forced=...)``, and its supervisor does
        not restart it (as ``Supervisor.stop_child``). Calling it again with a shorter
        ``grace`` shortens the wait; otherwise it is idempotent.
        """
        if grace is not None and not grace >= 0:
            raise ValueError(f"grace must be a number of seconds >= 0, not {grace!r}")
        node = self._node
        if node.exit_reason is not None:
            return
        self._stop(grace)
        if node.owner is not None:
            # Also while it is already stopping as part of a group restart: then the
            # supervisor must drop the planned restart.
            node.owner._stop_requested(node.name)

    def _stop(self, grace: float | None = None) -> None:
        node = self._node
        if node.exit_reason is not None:
            return
        if node.state == "running":
            node.state = "stopping"
            self._mailbox._close(self._describe)
            grace = self._grace if grace is None else grace
        elif grace is None:
            return  # already stopping; an explicit grace may still shorten the wait
        if not node.cancelled_explicitly:
            # What the actor's descendants record if the grace period runs out.
            node.cancel_reason = (
                f"actor {node.actor_info().path!r} did not stop within its grace of {grace:g}s"
            )
        if grace != math.inf:
            scope = node.cancel_scope()
            scope.deadline = min(scope.deadline, trio.current_time() + grace)

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the actor now; its exit reason is ``Cancelled(reason)``. Idempotent."""
        node = self._node
        if node.exit_reason is not None:
            return
        scope = node.cancel_scope()
        if scope.cancel_called:
            return
        node.cancelled_explicitly = True
        node.cancel_reason = reason
        scope.cancel(reason)

    async def wait_exit(self) -> ExitReason:
        """Wait until the actor has exited and return its exit reason."""
        node = self._node
        if node.exit_reason is None:
            if node.exit_event is None:
                node.exit_event = trio.Event()
            await node.exit_event.wait()
        else:
            await trio.lowlevel.checkpoint()
        assert node.exit_reason is not None
        return node.exit_reason
