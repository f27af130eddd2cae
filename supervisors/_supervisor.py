"""Supervisors: own a nursery of actors, restart them by strategy, give up past intensity.

The decisions come from the pure :func:`supervisors._decide.decide`; this module only carries
out its commands on trio and turns each actor's way of ending into one exit reason.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import trio

from ._cancellation import (
    cancel_reason_text,
    first_cancelled,
    only_cancelled,
    raise_with,
    reason_from_above,
)
from ._decide import (
    CancelRequested,
    Command,
    Event,
    Exited,
    GiveUp,
    Restart,
    ShutdownRequested,
    Spawn,
    Start,
    StopChild,
    Strategy,
    SupervisorConfig,
    SupervisorState,
    Terminate,
    decide,
)
from ._exceptions import RestartIntensityExceeded, SupervisorClosed
from ._exit import Cancelled, Crashed, ExitReason, Normal, Shutdown
from ._mailbox import Mailbox
from ._node import (
    ExitListener,
    Node,
    TreeSnapshot,
    current_node,
    enter_actor_task,
    enter_task,
    exit_task,
    leave_actor_task,
)
from ._ref import ActorRef

M = TypeVar("M")

ActorFunction = Callable[[Mailbox[M]], Awaitable[None]]


_NORMAL = Normal()
_SHUTDOWN = Shutdown()

# Every spawn and every exit makes an event: built with ``tuple.__new__(cls, fields)``, all
# fields in order, at about half the cost of the named tuple's generated ``__new__``.
_new = tuple.__new__


class FaultHooks(Protocol):
    """What a supervisor needs of a fault plan attached above it (``supervisors.testing.Faults``).

    A protocol because ``_faults`` imports this module: ``Faults.attach`` takes a supervisor.
    """

    def _covers(self, node: Node) -> bool: ...

    def _mailbox(self, node: Node, capacity: int) -> Mailbox[Any]: ...

    def _starting(self, node: Node) -> None: ...


class Supervisor:
    """Runs child actors in its nursery and restarts them according to its strategy.

    Made by :func:`open_supervisor`. Concurrency: every method is synchronous and must be
    called on the trio thread (any task); the decision for one event is made and carried
    out atomically, before any other task runs.
    """

    def __init__(self, node: Node, config: SupervisorConfig, nursery: trio.Nursery) -> None:
        self._node = node
        self._nursery = nursery
        self._state = SupervisorState(config)
        # The latest incarnation of every child the decision core still holds: live, or
        # exited and awaiting a restart. Its ref carries what a restart starts again (the
        # function, the mailbox's capacity, the grace), so no separate spec object is kept
        # per child: one object less per actor for the cyclic GC to traverse.
        self._latest: dict[str, ActorRef[Any]] = {}
        # What ``spawn`` asks the decision core to start, while it decides (see _start).
        self._spawning: tuple[ActorFunction[Any], int, float] | None = None
        self._auto_names = 0
        self._cancel_seen = False
        self._cancel_text: str | None = None
        self._shutdown_requested = False
        self._last_crash: BaseException | None = None
        # Restarts whose start raised, for ``_finish`` to settle (see ``_start_failed``).
        self._failed_starts: deque[tuple[ActorRef[Any], int]] | None = None
        # The fault plan of ``supervisors.testing``, when one is attached at or above this
        # supervisor; ``None`` in production, and then ``_start`` only checks that.
        faults = node.tree.faults
        self._faults: FaultHooks | None = (
            faults if faults is not None and faults._covers(node) else None
        )
        self.gave_up: RestartIntensityExceeded | None = None

    def __repr__(self) -> str:
        return f"<Supervisor {self.path!r} {self._state.config.strategy}>"

    @property
    def name(self) -> str:
        return self._node.name

    @property
    def path(self) -> str:
        return self._node.actor_info().path

    @property
    def config(self) -> SupervisorConfig:
        return self._state.config

    @property
    def decision_state(self) -> SupervisorState:
        """The pure decision core's current state (for introspection and tests)."""
        return self._state

    # -- children --------------------------------------------------------------------------

    def spawn(
        self,
        fn: ActorFunction[M],
        *,
        name: str | None = None,
        restart: Restart = "permanent",
        capacity: int = 64,
        grace: float = 5.0,
    ) -> ActorRef[M]:
        """Start ``fn(mailbox)`` as a child actor and return its ref at once.

        ``restart`` is the policy (``permanent``, ``transient``, ``temporary``); ``capacity``
        bounds the mailbox; ``grace`` is how long a stop request waits before cancelling.
        Messages can be sent to the ref before the actor's task first runs.

        ``fn(mailbox)`` is called here, as trio's ``start_soon`` does: if that call raises (a
        start failure) or returns no coroutine, ``spawn`` raises and no child is added. When
        a *restart* fails to start, that incarnation exits at once with ``Crashed(error)``,
        which the supervisor handles like any other crash: the restart counts towards the
        intensity, so a child that never starts again makes the supervisor give up.
        """
        if not callable(fn):
            raise TypeError(f"an actor is an async function taking a Mailbox, not {fn!r}")
        if name is None:
            self._auto_names += 1
            name = f"{getattr(fn, '__name__', 'actor')}-{self._auto_names}"
        elif not isinstance(name, str) or not name or "/" in name or name != name.strip():
            raise ValueError(
                f"child name {name!r} must be a non-empty str without '/' or surrounding spaces"
            )
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
            raise ValueError(f"capacity must be an int >= 0, not {capacity!r}")
        if not (grace >= 0):
            raise ValueError(f"grace must be a number of seconds >= 0, not {grace!r}")
        node = self._node
        if node.exit_reason is not None or node.cancel_scope().cancel_called:
            why = "has exited" if node.exit_reason is not None else "was cancelled"
            raise SupervisorClosed(f"cannot spawn {name!r}: supervisor {self.path!r} {why}")
        previous_state = self._state
        self._spawning = (fn, capacity, grace)
        try:
            self._apply(_new(Spawn, (name, restart, trio.current_time())))
        except BaseException:
            # Nothing changed: the decision is undone (``_start`` records a child last).
            self._state = previous_state
            raise
        finally:
            self._spawning = None
        return self._latest[name]

    def child(self, name: str) -> ActorRef[Any]:
        """The live incarnation of child ``name``. Raises ``KeyError`` if there is none."""
        ref = self._latest.get(name)
        if ref is None or ref._node.exit_reason is not None:
            raise KeyError(f"supervisor {self.path!r} has no live child named {name!r}")
        return ref

    def children(self) -> dict[str, ActorRef[Any]]:
        """The live children by name (a copy)."""
        return {name: ref for name, ref in self._latest.items() if ref._node.exit_reason is None}

    def stop_child(self, name: str) -> None:
        """Stop child ``name`` gracefully and do not restart it. Idempotent."""
        self._stop_requested(name)

    def _stop_requested(self, name: str) -> None:
        self._apply(StopChild(name, trio.current_time()))
        self._forget_if_gone(name)

    def _forget_if_gone(self, name: str) -> None:
        if name not in self._state.children:
            ref = self._latest.pop(name, None)  # no incarnation will be started again
            if ref is not None:
                ref._fn = None

    def shutdown(self) -> None:
        """Stop every child gracefully, all at once, and take no new children.

        Each child gets its grace period, then is cancelled. The ``async with`` exits once
        they have all exited and its body has finished.
        """
        self._shutdown_requested = True
        if self._node.state == "running":
            self._node.state = "stopping"
        self._apply(ShutdownRequested(trio.current_time()))

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the supervisor: every child and the ``async with`` body are cancelled."""
        node = self._node
        if node.exit_reason is not None:
            return
        scope = node.cancel_scope()
        if not scope.cancel_called:
            node.cancelled_explicitly = True
            node.cancel_reason = reason
        node.state = "stopping"
        scope.cancel(reason)
        if not self._cancel_seen:
            self._cancel_seen = True
            self._apply(CancelRequested(trio.current_time()))

    # -- introspection ---------------------------------------------------------------------

    def snapshot(self) -> TreeSnapshot:
        """Every live node from this supervisor down, parents before children."""
        out: list[Any] = []
        self._node.snapshot_into(out)
        return TreeSnapshot(tuple(out))

    def add_exit_listener(self, listener: ExitListener) -> None:
        """Call ``listener(record)`` for every exit under this supervisor, itself included.

        Records arrive in exit order, so children's arrive before their parent's. Listeners
        run synchronously on the exiting task and must not block. If one raises, the others
        still run and the error propagates from the exiting actor's task, so it crashes this
        supervisor (together with any cancellation that was already under way).
        """
        if self._node.listeners is None:
            self._node.listeners = []
        self._node.listeners.append(listener)

    # -- carrying out decisions ------------------------------------------------------------

    def _apply(self, event: Event) -> None:
        self._state, commands = decide(self._state, event)
        for command in commands:
            self._execute(command)

    def _execute(self, command: Command) -> None:
        if isinstance(command, Start):
            self._start(command.name, command.incarnation)
        elif isinstance(command, Terminate):
            self._latest[command.name]._stop()
        elif isinstance(command, GiveUp):
            self._give_up(command)

    def _start(self, name: str, incarnation: int) -> None:
        spec = self._spawning
        if incarnation:  # a restart: started again as its latest incarnation was
            latest = self._latest[name]
            assert latest._fn is not None  # only refs of exited actors have none
            spec = (latest._fn, latest._mailbox._capacity, latest._grace)
        assert spec is not None  # incarnation 0 is a spawn's Start
        fn, capacity, grace = spec
        faults = self._faults
        if faults is None:
            mailbox: Mailbox[Any] = Mailbox(capacity)
            node = Node(
                name=name, kind="actor", parent=self._node, mailbox=mailbox, restarts=incarnation
            )
        else:  # a fault plan is attached: it may give this incarnation a faulty mailbox
            node = Node(name=name, kind="actor", parent=self._node, restarts=incarnation)
            try:
                mailbox = node.mailbox = faults._mailbox(node, capacity)
            except BaseException:  # a rule's predicate raised
                del self._node.children[node.id]  # type: ignore[union-attr]
                raise
        ref = ActorRef(node, mailbox, grace, fn)
        node.owner = self
        try:
            if faults is not None:
                faults._starting(node)  # an injected start failure raises here
            # Like trio's start_soon: call the function now, so a plain function fails here.
            coro = fn(mailbox)
            if not inspect.iscoroutine(coro):
                raise TypeError(
                    f"actor {name!r}: {fn!r} returned {coro!r}, not a coroutine; an actor "
                    "is an 'async def' function taking a Mailbox"
                )
        except BaseException as error:
            self._start_failed(ref, incarnation, error)
            return
        try:
            self._nursery.start_soon(self._run, ref, coro, incarnation)
        except BaseException:
            coro.close()
            del self._node.children[node.id]  # type: ignore[union-attr]
            raise
        self._latest[name] = ref

    def _start_failed(self, ref: ActorRef[Any], incarnation: int, error: BaseException) -> None:
        """Calling the child's function raised ``error`` (or it returned no coroutine).

        A spawn raises it to its caller and leaves nothing behind. A restart has no caller:
        the incarnation exits at once with ``Crashed(error)``. Its exit is decided on in
        ``_finish``, once the decision that started it has been carried out (a group restart
        starts the rest of its members first), never in the middle of it.
        """
        node = ref._node
        if not incarnation or not isinstance(error, Exception):
            # A spawn, or KeyboardInterrupt and the like, which end the program anyway.
            del self._node.children[node.id]  # type: ignore[union-attr]
            raise error
        ref._mailbox._close(ref._describe)
        node.record_exit(Crashed(error))
        self._latest[node.name] = ref  # what the next restart starts again
        if self._failed_starts is None:
            self._failed_starts = deque()
        self._failed_starts.append((ref, incarnation))

    def _settle_failed_starts(self) -> list[Node]:
        """Let ``decide`` react to each restart that failed to start; return their nodes.

        Each one is an exit like any other: the child may be restarted again (counted towards
        the intensity, at the same instant, so this ends at the latest when the supervisor
        gives up) or, past the intensity, the supervisor gives up with ``error`` as the cause.
        """
        settled: list[Node] = []
        failed = self._failed_starts
        while failed:
            ref, incarnation = failed.popleft()
            node = ref._node
            reason = node.exit_reason
            assert isinstance(reason, Crashed)
            self._last_crash = reason.exception
            self._apply(_new(Exited, (node.name, incarnation, "crashed", trio.current_time())))
            self._forget_if_gone(node.name)
            settled.append(node)
        return settled

    def _give_up(self, command: GiveUp) -> None:
        config = self._state.config
        how = {
            "crashed": "crashed",
            "normal": "exited",
            "cancelled": "was cancelled",
            "shutdown": "was shut down",
        }[command.kind]
        message = (
            f"supervisor {self.path!r} gave up: child {command.name!r} {how}, and restarting "
            f"it would make {command.restarts} restarts within {config.period:g}s, more than "
            f"its intensity of {config.intensity}"
        )
        error = RestartIntensityExceeded(message, supervisor=self.path, child=command.name)
        error.__cause__ = self._last_crash
        self.gave_up = error
        self._node.cancel_reason = message
        self._node.cancel_scope().cancel(message)

    async def _run(
        self, ref: ActorRef[Any], coro: Coroutine[Any, Any, None], incarnation: int
    ) -> None:
        """The task of one actor incarnation: run it, record its one exit reason.

        A ``trio.Cancelled`` from above ends here, after it is recorded: the task is over,
        and the supervisor's nursery meets the same cancellation at its own checkpoint. Passing
        it on would only build an exception group holding every cancelled actor of the tree
        (with tracebacks), which the cancelled scope then discards.
        """
        node = ref._node
        task = enter_actor_task(node)
        scope = node.cancel_scope()
        try:
            with scope:
                await coro
        except trio.Cancelled as exc:
            leave_actor_task(task)
            text = reason_from_above(node, cancel_reason_text(exc))
            errors = self._finish(ref, incarnation, Cancelled(text), cancelling=True)
            raise_with(None, errors)
            return  # see "Where a Cancelled stops" in docs/design.md
        except BaseException as exc:
            leave_actor_task(task)
            cancelled: BaseException | None = None
            error: BaseException = exc
            if isinstance(exc, BaseExceptionGroup):
                if only_cancelled(exc):  # cancelled from above, seen through a nursery
                    text = reason_from_above(node, first_cancelled(exc))
                    errors = self._finish(ref, incarnation, Cancelled(text), cancelling=True)
                    raise_with(None, errors)
                    return
                cancelled, rest = exc.split(trio.Cancelled)
                assert rest is not None
                error = rest
            # KeyboardInterrupt, SystemExit and the like end the program: nothing restarts.
            fatal = not isinstance(error, Exception)
            errors = self._finish(
                ref, incarnation, Crashed(error), cancelling=fatal or cancelled is not None
            )
            if fatal:
                raise_with(exc, errors)
            raise_with(None, errors)  # a Cancelled part ends here too, as above
            return
        leave_actor_task(task)
        if scope.cancel_called:
            reason: ExitReason = (
                Cancelled(node.cancel_reason) if node.cancelled_explicitly else Shutdown(True)
            )
        elif node.state == "stopping":
            reason = _SHUTDOWN
        else:
            reason = _NORMAL
        raise_with(None, self._finish(ref, incarnation, reason, cancelling=False))

    def _finish(
        self, ref: ActorRef[Any], incarnation: int, reason: ExitReason, *, cancelling: bool
    ) -> list[BaseException]:
        """Record the exit, let ``decide`` react, then notify; returns listener errors.

        Called exactly once per incarnation, on its own task, whichever way it ended.
        """
        node = ref._node
        name = node.name
        ref._mailbox._close(ref._describe)
        node.record_exit(reason)  # from now on it is not among children()
        now = trio.current_time()
        # A child that ends on its own (say after a shielded cleanup) while this supervisor,
        # or a scope above it, is cancelled must not be restarted either.
        if cancelling or trio.current_effective_deadline() <= now:
            if not self._cancel_seen:
                self._cancel_seen = True
                if isinstance(reason, Cancelled):
                    self._cancel_text = reason.reason
                self._apply(CancelRequested(now))
        self._last_crash = reason.exception if isinstance(reason, Crashed) else None
        self._apply(_new(Exited, (name, incarnation, reason.kind, now)))
        self._forget_if_gone(name)
        if self._failed_starts:  # restarts this exit caused, which failed to start
            failed = self._settle_failed_starts()
            errors = node.notify_exit()
            for failed_node in failed:  # after this exit: they were started because of it
                errors += failed_node.notify_exit()
            return errors
        return node.notify_exit()


@asynccontextmanager
async def open_supervisor(
    *,
    name: str = "supervisor",
    strategy: Strategy = "one_for_one",
    intensity: int = 3,
    period: float = 5.0,
) -> AsyncIterator[Supervisor]:
    """Open a supervisor whose children live no longer than this ``async with`` block.

    Like a nursery, the block waits for the children when its body ends: call
    ``sup.shutdown()`` to stop them gracefully or ``sup.cancel(reason)`` to cancel them.
    If the supervisor gives up (restart intensity exceeded) it cancels everything and the
    block raises :class:`RestartIntensityExceeded`; if the body raises, the children are
    cancelled and the body's exception propagates unwrapped. Opened inside an actor, the
    supervisor becomes that actor's child in the tree.
    """
    config = SupervisorConfig(strategy, intensity, period)
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        raise ValueError(
            f"supervisor name {name!r} must be a non-empty str without '/' or surrounding spaces"
        )
    node = Node(name=name, kind="supervisor", parent=current_node())
    previous_node = enter_task(node)
    supervisor: Supervisor | None = None
    reason: ExitReason | None = None
    inflight: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            node.scope = nursery.cancel_scope
            supervisor = Supervisor(node, config, nursery)
            yield supervisor
    except trio.Cancelled as exc:
        inflight = exc
        first = reason_from_above(node, cancel_reason_text(exc))
        reason = _gave_up_reason(supervisor) or Cancelled(first)
        raise
    except BaseExceptionGroup as group:
        inflight = group
        if only_cancelled(group):
            first = reason_from_above(node, first_cancelled(group))
            reason = _gave_up_reason(supervisor) or Cancelled(first)
            raise
        cancelled, rest = group.split(trio.Cancelled)
        assert rest is not None
        if len(rest.exceptions) == 1 and cancelled is None:
            error = inflight = rest.exceptions[0]
            reason = Crashed(error)
            raise error from error.__cause__
        # Cancelled from above at the same time: the group must travel on (it carries the
        # Cancelled), but the recorded reason is the error itself, as in the plain case.
        reason = Crashed(rest.exceptions[0] if len(rest.exceptions) == 1 else rest)
        raise
    except BaseException as exc:
        inflight = exc
        reason = Crashed(exc)
        raise
    else:
        gave_up = _gave_up_reason(supervisor)
        if gave_up is not None:
            reason = gave_up
            inflight = gave_up.exception
            raise gave_up.exception
        if node.cancelled_explicitly:
            reason = Cancelled(node.cancel_reason)
        elif supervisor is not None and supervisor._cancel_seen:
            # Cancelled from above. The children's tasks ended quietly (see Supervisor._run),
            # so the nursery need not have raised: raise the cancellation once, here.
            try:
                await trio.lowlevel.checkpoint_if_cancelled()
            except trio.Cancelled as exc:
                inflight = exc
                fallback = supervisor._cancel_text or cancel_reason_text(exc)
                reason = Cancelled(reason_from_above(node, fallback))
                raise
            reason = Normal()  # not cancelled after all (a shield above this block)
        elif supervisor is not None and supervisor._shutdown_requested:
            reason = Shutdown()
        else:
            reason = Normal()
    finally:
        exit_task(previous_node)
        node.record_exit(reason if reason is not None else Normal())
        errors = node.notify_exit()
        if errors:
            raise_with(inflight, errors)


def _gave_up_reason(supervisor: Supervisor | None) -> Crashed | None:
    if supervisor is not None and supervisor.gave_up is not None:
        return Crashed(supervisor.gave_up)
    return None
