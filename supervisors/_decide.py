"""The supervision decision core: a pure function ``decide(state, event) -> (state, commands)``.

Nothing here touches trio or the clock: every event carries the time it happened, and the
result says what to do (start, terminate, give up). ``Supervisor`` carries the commands out.
This is what makes the strategies cheap to test exhaustively (``tests/supervisors/
test_decide.py`` runs a Hypothesis state machine over it).

Semantics (Erlang/OTP's, adapted):

- Restart policy per child: ``permanent`` children are restarted whenever they exit on their
  own; ``transient`` ones only when they crashed; ``temporary`` ones never.
- Strategy: ``one_for_one`` restarts the child alone; ``one_for_all`` terminates every other
  child and then restarts them all; ``rest_for_one`` does that for the children started after
  the failed one. Terminated ``temporary`` children are not restarted. A group restart waits
  until every terminated member has exited, so there is never more than one live instance
  of a child.
- Intensity: each restart decision is counted; a decision that would make more than
  ``intensity`` restarts within ``period`` seconds makes the supervisor give up instead.
- Children the supervisor terminated (``stop_child``, ``shutdown``) are never restarted;
  after ``shutdown``, ``cancel`` or giving up, nothing is started again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeAlias

from immutables import Map

from ._exceptions import DuplicateChild, SupervisorClosed
from ._exit import ExitKind

Strategy: TypeAlias = Literal["one_for_one", "one_for_all", "rest_for_one"]
Restart: TypeAlias = Literal["permanent", "transient", "temporary"]
ChildStatus: TypeAlias = Literal["running", "stopping", "awaiting_restart"]

STRATEGIES: tuple[Strategy, ...] = ("one_for_one", "one_for_all", "rest_for_one")
RESTARTS: tuple[Restart, ...] = ("permanent", "transient", "temporary")


# Named tuples are fast to make, which matters on the spawn/exit hot path, but two of them
# with equal fields would compare equal as plain tuples: ``ShutdownRequested(1.0) ==
# CancelRequested(1.0)``. Events, commands and states compare by type as well.
def _typed_eq(self: tuple[Any, ...], other: object) -> bool:
    return type(self) is type(other) and tuple.__eq__(self, other)


def _typed_ne(self: tuple[Any, ...], other: object) -> bool:
    return not _typed_eq(self, other)


def _typed_hash(self: tuple[Any, ...]) -> int:
    return hash((type(self), tuple.__hash__(self)))


# The hot paths (a spawn, an exit) build their named tuples with ``tuple.__new__(cls, fields)``,
# every field given in order: about half the cost of the generated ``__new__``, which is a
# Python function taking keywords and defaults.
_new = tuple.__new__


@dataclass(frozen=True, slots=True)
class SupervisorConfig:
    """How a supervisor reacts to failures. Validated on construction."""

    strategy: Strategy = "one_for_one"
    intensity: int = 3
    """At most this many restarts ..."""
    period: float = 5.0
    """... within this many seconds; one more and the supervisor gives up."""

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; use one of {STRATEGIES}")
        if (
            not isinstance(self.intensity, int)
            or isinstance(self.intensity, bool)
            or self.intensity < 0
        ):
            raise ValueError(f"intensity must be an int >= 0, not {self.intensity!r}")
        if not (self.period > 0) or math.isinf(self.period):
            raise ValueError(f"period must be a finite number of seconds > 0, not {self.period!r}")


_EMPTY: Map[str, ChildState] = Map()


class ChildState(NamedTuple):
    name: str
    restart: Restart
    order: int
    """Start order; ``rest_for_one`` terminates children with a larger order."""
    incarnation: int
    status: ChildStatus = "running"
    restart_after_stop: bool = False
    """Set while stopping as part of a group restart: restart it once it has exited."""
    in_group: bool = False
    """Stopping as part of a group restart (the restart waits for it)."""


_DEFAULT_CONFIG = SupervisorConfig()


class SupervisorState(NamedTuple):
    config: SupervisorConfig = _DEFAULT_CONFIG
    children: Map[str, ChildState] = _EMPTY
    restarts: tuple[float, ...] = ()
    """Times of the restart decisions still inside the intensity window."""
    group_stopping: int = 0
    """Group members asked to stop that have not exited yet."""
    next_order: int = 0
    stopping: bool = False
    gave_up: bool = False

    def with_children(self, children: Map[str, ChildState]) -> SupervisorState:
        """This state with other children (a fast ``_replace``: the hot path)."""
        return _new(
            SupervisorState,
            (
                self.config,
                children,
                self.restarts,
                self.group_stopping,
                self.next_order,
                self.stopping,
                self.gave_up,
            ),
        )


# -- events -------------------------------------------------------------------------------


class Spawn(NamedTuple):
    name: str
    restart: Restart
    at: float


class Exited(NamedTuple):
    name: str
    incarnation: int
    kind: ExitKind
    at: float


class StopChild(NamedTuple):
    name: str
    at: float


class ShutdownRequested(NamedTuple):
    at: float


class CancelRequested(NamedTuple):
    """The supervisor's scope was cancelled: its children are going down with it."""

    at: float


Event: TypeAlias = Spawn | Exited | StopChild | ShutdownRequested | CancelRequested


# -- commands -----------------------------------------------------------------------------


class Start(NamedTuple):
    name: str
    incarnation: int


class Terminate(NamedTuple):
    """Request a graceful stop, then cancel after the child's grace period."""

    name: str


class GiveUp(NamedTuple):
    """Restart intensity exceeded by ``name``: cancel everything and raise.

    ``restarts`` is how many restarts (of any child) the window would hold with this one;
    ``kind`` is how ``name`` exited.
    """

    name: str
    restarts: int
    kind: ExitKind = "crashed"


Command: TypeAlias = Start | Terminate | GiveUp


for _cls in (
    ChildState,
    SupervisorState,
    Spawn,
    Exited,
    StopChild,
    ShutdownRequested,
    CancelRequested,
    Start,
    Terminate,
    GiveUp,
):
    # method-assign: deliberate, see _typed_eq; the signatures match tuple's.
    _cls.__eq__ = _typed_eq  # type: ignore[method-assign]
    _cls.__ne__ = _typed_ne  # type: ignore[assignment,method-assign]
    _cls.__hash__ = _typed_hash  # type: ignore[method-assign]
del _cls


def decide(state: SupervisorState, event: Event) -> tuple[SupervisorState, tuple[Command, ...]]:
    """Apply ``event`` to ``state``; return the new state and the commands to carry out.

    Raises :class:`DuplicateChild` / :class:`SupervisorClosed` for a spawn that cannot be
    accepted (the state is then unchanged).
    """
    return _HANDLERS[type(event)](state, event)


def _spawn(state: SupervisorState, event: Spawn) -> tuple[SupervisorState, tuple[Command, ...]]:
    if event.restart not in RESTARTS:
        raise ValueError(f"unknown restart policy {event.restart!r}; use one of {RESTARTS}")
    if state.stopping:
        why = "gave up" if state.gave_up else "is shutting down"
        raise SupervisorClosed(f"cannot spawn {event.name!r}: the supervisor {why}")
    if event.name in state.children:
        raise DuplicateChild(
            f"a child named {event.name!r} is already live; stop it first or pick another name"
        )
    child = _new(
        ChildState, (event.name, event.restart, state.next_order, 0, "running", False, False)
    )
    state = _new(
        SupervisorState,
        (
            state.config,
            state.children.set(event.name, child),
            state.restarts,
            state.group_stopping,
            state.next_order + 1,
            state.stopping,
            state.gave_up,
        ),
    )
    return state, (_new(Start, (event.name, 0)),)


def _wants_restart(child: ChildState, kind: ExitKind) -> bool:
    if child.restart == "permanent":
        return True
    if child.restart == "transient":
        return kind == "crashed"
    return False


def _exited(state: SupervisorState, event: Exited) -> tuple[SupervisorState, tuple[Command, ...]]:
    child = state.children.get(event.name)
    live = child is not None and child.status in ("running", "stopping")
    if child is None or not live or child.incarnation != event.incarnation:
        return state, ()  # not a live instance we know of: nothing to decide
    if state.stopping:
        return state.with_children(state.children.delete(event.name)), ()

    if child.status == "stopping":
        children = state.children
        if child.restart_after_stop:
            children = children.set(
                child.name,
                child._replace(status="awaiting_restart", in_group=False, restart_after_stop=False),
            )
        else:
            children = children.delete(child.name)
        if not child.in_group:  # stopped for good, not part of a group restart
            return state.with_children(children), ()
        state = state._replace(children=children, group_stopping=state.group_stopping - 1)
        return _maybe_finish_group(state)

    if not _wants_restart(child, event.kind):
        return state.with_children(state.children.delete(event.name)), ()

    window = tuple(t for t in state.restarts if t > event.at - state.config.period)
    if len(window) >= state.config.intensity:
        state = state._replace(
            children=_without_awaiting(state.children.delete(event.name)),
            restarts=window,
            stopping=True,
            gave_up=True,
        )
        return state, (GiveUp(event.name, len(window) + 1, event.kind),)
    state = state._replace(restarts=(*window, event.at))

    strategy = state.config.strategy
    if strategy == "one_for_one":
        restarted = child._replace(incarnation=child.incarnation + 1)
        state = state.with_children(state.children.set(child.name, restarted))
        return state, (Start(child.name, restarted.incarnation),)

    commands: list[Command] = []
    group_stopping = state.group_stopping
    with state.children.mutate() as mutation:
        mutation.set(child.name, child._replace(status="awaiting_restart"))
        members = sorted(
            (
                c
                for c in state.children.values()
                if c.name != child.name and (strategy == "one_for_all" or c.order > child.order)
            ),
            key=lambda c: c.order,
            reverse=True,
        )
        for member in members:
            if member.status == "running":
                mutation.set(
                    member.name,
                    member._replace(
                        status="stopping",
                        in_group=True,
                        restart_after_stop=member.restart != "temporary",
                    ),
                )
                group_stopping += 1
                commands.append(Terminate(member.name))
        new_children = mutation.finish()
    state = state._replace(children=new_children, group_stopping=group_stopping)
    state, starts = _maybe_finish_group(state)
    return state, (*commands, *starts)


def _maybe_finish_group(state: SupervisorState) -> tuple[SupervisorState, tuple[Command, ...]]:
    if state.group_stopping:
        return state, ()
    waiting = sorted(
        (c for c in state.children.values() if c.status == "awaiting_restart"),
        key=lambda c: c.order,
    )
    if not waiting:
        return state, ()
    with state.children.mutate() as mutation:
        for c in waiting:
            mutation.set(c.name, c._replace(status="running", incarnation=c.incarnation + 1))
        new_children = mutation.finish()
    state = state.with_children(new_children)
    return state, tuple(Start(c.name, c.incarnation + 1) for c in waiting)


def _stop_child(
    state: SupervisorState, event: StopChild
) -> tuple[SupervisorState, tuple[Command, ...]]:
    child = state.children.get(event.name)
    if child is None:
        return state, ()
    if child.status == "awaiting_restart":
        return state.with_children(state.children.delete(child.name)), ()
    if child.status == "stopping":
        if child.restart_after_stop:
            stopped = child._replace(restart_after_stop=False)
            return state.with_children(state.children.set(child.name, stopped)), ()
        return state, ()
    stopped = child._replace(status="stopping", restart_after_stop=False)
    return state.with_children(state.children.set(child.name, stopped)), (Terminate(child.name),)


def _shutdown(state: SupervisorState, _: object) -> tuple[SupervisorState, tuple[Command, ...]]:
    if state.stopping:
        return state, ()
    commands: list[Command] = []
    with state.children.mutate() as mutation:
        for child in sorted(state.children.values(), key=lambda c: c.order, reverse=True):
            if child.status == "awaiting_restart":
                del mutation[child.name]
            elif child.status == "running":
                mutation.set(child.name, child._replace(status="stopping"))
                commands.append(Terminate(child.name))
        new_children = mutation.finish()
    return state._replace(children=new_children, stopping=True), tuple(commands)


def _cancel(state: SupervisorState, _: object) -> tuple[SupervisorState, tuple[Command, ...]]:
    if state.stopping:
        return state, ()
    return state._replace(children=_without_awaiting(state.children), stopping=True), ()


def _without_awaiting(children: Map[str, ChildState]) -> Map[str, ChildState]:
    """Children with those waiting for a group restart dropped: nothing will start them."""
    return Map({n: c for n, c in children.items() if c.status != "awaiting_restart"})


_HANDLERS: dict[type, Callable[[SupervisorState, Any], tuple[SupervisorState, tuple[Command, ...]]]]
_HANDLERS = {
    Spawn: _spawn,
    Exited: _exited,
    StopChild: _stop_child,
    ShutdownRequested: _shutdown,
    CancelRequested: _cancel,
}
