"""Bounded, typed mailboxes.

A mailbox is a FIFO queue of at most ``capacity`` ordinary messages plus an unbounded queue
of *notices* (monitor messages), which are delivered first and never refused for lack of
room, so that an exit notice is never lost. The implementation follows
``trio/_channel.py``: a waiting receiver is handed a message directly, a sender that finds
the mailbox full parks until a receiver makes room.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import trio
from outcome import Error, Outcome, Value, capture

from ._exceptions import MailboxClosed, MailboxFull
from ._exit import ExitReason
from ._mailbox_statistics import MailboxStatistics
from ._node import Node
from ._ref import ActorRef

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class ExitNotice:
    """What a monitor receives: which actor exited and why."""

    ref: ActorRef[Any]
    reason: ExitReason


class Mailbox(Generic[M]):
    """The receiving end of an actor's mailbox, handed to the actor's function.

    ``async for message in mailbox`` receives until a stop is requested and the mailbox is
    drained. Concurrency: ``receive`` is atomic with respect to cancellation (a cancelled
    ``receive`` takes no message); senders are served in FIFO order when the mailbox is full.
    """

    __slots__ = (
        "__weakref__",
        "_capacity",
        "_closed",
        "_data",
        "_exited_node",
        "_exited_ref",
        "_notices",
        "_received",
        "_receiver",
        "_receivers",
        "_ref",
        "_senders",
        "_sent",
    )

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
            raise ValueError(f"mailbox capacity must be an int >= 0, not {capacity!r}")
        self._capacity = capacity
        # Made on the first message that has to wait (most are handed straight to a waiting
        # receiver): one object less per actor for the cyclic GC to traverse.
        self._data: deque[M] | None = None
        self._notices: deque[Outcome[M]] | None = None  # made on the first notice
        # Plain dicts keep insertion order and are cheaper than OrderedDict to make; an
        # actor's mailbox is made for every spawn, so this is on the hot path.
        self._receiver: trio.lowlevel.Task | None = None  # the oldest waiting receiver
        self._receivers: dict[trio.lowlevel.Task, None] = {}  # any others, oldest first
        self._senders: dict[trio.lowlevel.Task, M] = {}
        self._closed = False
        self._sent = 0
        self._received = 0
        self._ref: ActorRef[M] | None = None  # the owner's address, while it is alive
        # Once the owner exited (see _owner_exited): its address, held weakly, and its node.
        self._exited_ref: Callable[[], ActorRef[M] | None] | None = None
        self._exited_node: Node | None = None

    @property
    def ref(self) -> ActorRef[M]:
        """The :class:`ActorRef` of the actor that owns this mailbox (its own address)."""
        ref = self._ref
        if ref is None and self._exited_ref is not None:
            ref = self._exited_ref()
            if ref is None:
                # Nothing held it: a new address of the exited actor, held weakly as the
                # first was, so that it too is one object for as long as anything holds it.
                assert self._exited_node is not None
                ref = ActorRef._of_exited(self._exited_node, self)
                self._exited_ref = weakref.ref(ref)
        assert ref is not None, "a mailbox's ref is set when its actor is spawned"
        return ref

    def _owner_exited(self, node: Node) -> None:
        """The owning actor (``node``) exited: hold its ref weakly from now on.

        While the actor lives, its mailbox, its ref and its node refer to one another. Once
        it has exited, nothing needs that loop, and keeping it would leave every exited actor
        (with its node, its supervisor and their trio tasks) to the cyclic garbage collector
        instead of freeing it when the last reference is dropped.
        """
        ref = self._ref
        if ref is not None:
            self._exited_ref = weakref.ref(ref)
            self._exited_node = node
            self._ref = None

    @property
    def stop_requested(self) -> bool:
        """True once the actor was asked to stop (or has exited): no new messages arrive."""
        return self._closed

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(
            capacity=self._capacity,
            depth=len(self),
            sent=self._sent,
            received=self._received,
            waiting_senders=len(self._senders),
            waiting_receivers=len(self._receivers) + (self._receiver is not None),
            closed=self._closed,
        )

    def monitor(self, target: ActorRef[Any], message: Callable[[ExitNotice], M]) -> Monitor:
        """Watch ``target``: when it exits, ``message(notice)`` arrives in this mailbox.

        The notice bypasses the capacity limit and is received before ordinary messages, so
        it is never refused or lost. If ``target`` has already exited, it arrives at once.
        ``message`` runs when the notice is received, in the receiving actor: if it raises,
        ``receive`` raises it there. The watch ends when either actor exits, or with
        ``Monitor.cancel()``.
        """
        key = object()
        monitor = Monitor(target, self, key)
        target_node = target._node
        if target_node.exit_reason is not None:
            self._put_notice(message, ExitNotice(target, target_node.exit_reason))
            return monitor

        def deliver(reason: ExitReason) -> None:
            watcher = self._ref._node if self._ref is not None else None
            if watcher is not None and watcher.watching is not None:
                watcher.watching.pop(key, None)
            self._put_notice(message, ExitNotice(target, reason))

        if target_node.monitors is None:
            target_node.monitors = {}
        target_node.monitors[key] = deliver
        watcher = self._ref._node if self._ref is not None else None
        if watcher is not None:
            if watcher.watching is None:
                watcher.watching = {}
            watcher.watching[key] = monitor.cancel
        return monitor

    def __len__(self) -> int:
        return (len(self._data) if self._data else 0) + (len(self._notices) if self._notices else 0)

    # -- receiving (the actor's side) ------------------------------------------------------

    def receive_nowait(self) -> M:
        """Take the next message, or raise ``trio.WouldBlock`` if there is none.

        Raises ``trio.EndOfChannel`` once a stop was requested and the mailbox is drained.
        """
        if self._notices:
            self._received += 1
            return self._notices.popleft().unwrap()
        if self._senders:
            task = next(iter(self._senders))
            message = self._senders.pop(task)
            trio.lowlevel.reschedule(task, Value(None))
            self._sent += 1
            if not self._data:  # nothing older waits: this one is next
                self._received += 1
                return message
            self._data.append(message)
        if self._data:
            self._received += 1
            return self._data.popleft()
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> M:
        """Wait for the next message (notices first).

        Raises ``trio.EndOfChannel`` once a stop was requested and the mailbox is drained.
        """
        return await self._receive(False)

    def __aiter__(self) -> Mailbox[M]:
        return self

    def __anext__(self) -> Coroutine[Any, Any, M]:
        # Not an async generator (those leak finalizers when the actor crashes mid-loop),
        # and not a coroutine wrapping ``receive``: one frame less per waiting actor.
        return self._receive(True)

    async def _receive(self, iterating: bool) -> M:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            message = self.receive_nowait()
        except trio.WouldBlock:
            pass
        except trio.EndOfChannel:
            if iterating:
                raise StopAsyncIteration from None
            raise
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return message

        task = trio.lowlevel.current_task()
        abort_fn: Callable[[Any], trio.lowlevel.Abort]
        if self._receiver is None and not self._receivers:
            # The common case, the actor alone waiting on its mailbox: a slot and a bound
            # method, not a dict entry and a closure (fewer objects for the GC per actor).
            self._receiver = task
            abort_fn = self._abort_receiver
        else:
            self._receivers[task] = None
            abort_fn = self._abort_one_of_receivers(task)
        try:
            return await trio.lowlevel.wait_task_rescheduled(abort_fn)  # type: ignore[no-any-return]
        except trio.EndOfChannel:  # closed while waiting
            if iterating:
                raise StopAsyncIteration from None
            raise

    def _abort_receiver(self, _: Any) -> trio.lowlevel.Abort:
        self._receiver = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _abort_one_of_receivers(
        self, task: trio.lowlevel.Task
    ) -> Callable[[Any], trio.lowlevel.Abort]:
        # A separate method: a closure inside ``receive`` would turn its locals into cells
        # on every call, also in the common single-receiver case.
        def abort_fn(_: Any) -> trio.lowlevel.Abort:
            del self._receivers[task]
            return trio.lowlevel.Abort.SUCCEEDED

        return abort_fn

    # -- sending (used by ActorRef) --------------------------------------------------------

    def _hand_to_receiver(self, message: M) -> bool:
        return self._hand_outcome_to_receiver(Value(message))

    def _hand_outcome_to_receiver(self, outcome: Outcome[M]) -> bool:
        task = self._receiver
        if task is not None:  # the oldest waiting receiver, when there is one
            self._receiver = None
            self._sent += 1
            self._received += 1
            trio.lowlevel.reschedule(task, outcome)
            return True
        if self._receivers:
            task = next(iter(self._receivers))
            del self._receivers[task]
            self._sent += 1
            self._received += 1
            trio.lowlevel.reschedule(task, outcome)
            return True
        return False

    def _put_nowait(self, message: M, describe: str) -> None:
        if self._closed:
            raise MailboxClosed(f"{describe} is not accepting messages (it exited or is stopping)")
        if self._hand_to_receiver(message):
            return
        data = self._data
        if data is None:
            if self._capacity:
                self._data = deque((message,))
                self._sent += 1
                return
        elif len(data) < self._capacity:
            data.append(message)
            self._sent += 1
            return
        if self._capacity == 0:
            raise MailboxFull(
                f"{describe} is not waiting in receive and its mailbox has capacity 0 "
                "(a rendezvous); use 'await ref.tell(...)' to wait for it"
            )
        raise MailboxFull(
            f"the mailbox of {describe} is full ({self._capacity} messages); "
            "use 'await ref.tell(...)' to wait for room"
        )

    async def _put(self, message: M, describe: str) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self._put_nowait(message, describe)
        except MailboxFull:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        await self._wait_for_room(message)

    async def _wait_for_room(self, message: M) -> None:
        """Park until a receiver takes ``message`` into the mailbox (it is full now)."""
        task = trio.lowlevel.current_task()
        self._senders[task] = message

        def abort_fn(_: Any) -> trio.lowlevel.Abort:
            del self._senders[task]
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort_fn)

    def _put_notice(self, message: Callable[[ExitNotice], M], notice: ExitNotice) -> None:
        """Deliver a notice (bypasses capacity); dropped only if the owner has exited."""
        if self._exited_node is not None or (
            self._ref is not None and self._ref.exit_reason is not None
        ):
            return
        outcome = capture(message, notice)  # an error in ``message`` raises in the receiver
        if self._hand_outcome_to_receiver(outcome):
            return
        if self._notices is None:
            self._notices = deque()
        self._notices.append(outcome)
        self._sent += 1

    def _close(self, describe: str) -> None:
        """Refuse new messages; wake blocked senders with MailboxClosed and idle receivers."""
        if self._closed:
            return
        self._closed = True
        for task in self._senders:
            trio.lowlevel.reschedule(
                task, Error(MailboxClosed(f"{describe} stopped before taking this message"))
            )
        self._senders.clear()
        if self._receiver is not None:
            trio.lowlevel.reschedule(self._receiver, Error(trio.EndOfChannel()))
            self._receiver = None
        for task in self._receivers:
            trio.lowlevel.reschedule(task, Error(trio.EndOfChannel()))
        self._receivers.clear()


class Monitor:
    """One mailbox watching one actor, from :meth:`Mailbox.monitor`.

    It ends by itself when the notice is delivered or the watcher exits;
    :meth:`cancel` ends it earlier (no notice arrives then). Idempotent.
    """

    __slots__ = ("_key", "_target", "_watcher")

    def __init__(self, target: ActorRef[Any], watcher: Mailbox[Any], key: object) -> None:
        self._target = target
        self._watcher = watcher
        self._key = key

    @property
    def active(self) -> bool:
        monitors = self._target._node.monitors
        return monitors is not None and self._key in monitors

    def cancel(self) -> None:
        monitors = self._target._node.monitors
        if monitors is not None:
            monitors.pop(self._key, None)
        ref = self._watcher._ref
        if ref is not None and ref._node.watching is not None:
            ref._node.watching.pop(self._key, None)
