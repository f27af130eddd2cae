"""Tests for the pure supervision decision core, ``supervisors.decide``.

``DecideMachine`` is a Hypothesis state machine that plays the trio shell around ``decide``
(it keeps the live instances from ``Start`` commands and lets terminated children exit) and
checks every command against a model written from the module docstring's semantics. The
example tests below it pin one behaviour each, so a failure points at the rule that broke.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import get_args

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from immutables import Map

from supervisors import ChildState, DuplicateChild, ExitKind, SupervisorClosed
from supervisors.decision import (
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

STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
RESTARTS: tuple[Restart, ...] = get_args(Restart)
NAMES = ("a", "b", "c", "d", "e")
KINDS: tuple[ExitKind, ...] = get_args(ExitKind)
PERIODS = (0.5, 1.0, 2.5, 5.0)
# Time passes in these fractions of the period. They are exact in binary floating point, so
# restart decisions land exactly on the edge of the intensity window now and then.
STEPS = (0.25, 0.5, 1.0, 2.0)
STEP_COUNT = 120


def typed(commands: tuple[Command, ...]) -> list[tuple[type, Command]]:
    """Commands with their types, so a ``GiveUp('a', 1)`` never passes for a ``Start('a', 1)``."""
    return [(type(command), command) for command in commands]


def wants_restart(restart: Restart, kind: ExitKind) -> bool:
    """The restart policies, for an exit the supervisor did not ask for."""
    return restart == "permanent" or (restart == "transient" and kind == "crashed")


@dataclass
class ModelChild:
    restart: Restart
    order: int
    """Start order, assigned at spawn and kept across restarts."""
    incarnation: int


@dataclass
class Model:
    """What the supervisor should be doing, straight from the docstring's semantics."""

    config: SupervisorConfig
    children: dict[str, ModelChild] = field(default_factory=dict)
    """The children the supervisor is responsible for: live ones and those awaiting restart."""
    next_order: int = 0
    group: set[str] = field(default_factory=set)
    """Children terminated by a group restart that have not exited yet."""
    rejoin: set[str] = field(default_factory=set)
    """Group members to start again once they have exited (not temporary, not stopped)."""
    awaiting: set[str] = field(default_factory=set)
    """Exited children to start once every group member has exited."""
    decisions: list[float] = field(default_factory=list)
    """Times of the restart decisions inside the intensity window."""

    def order(self, name: str) -> int:
        return self.children[name].order

    def close(self) -> None:
        """Shutdown, cancel or give up: whatever was waiting for a restart never gets one."""
        for name in self.awaiting:
            del self.children[name]
        self.awaiting.clear()

    def finish_group(self) -> tuple[Command, ...]:
        """Start everything awaiting, in start order, once no group member is still live."""
        if self.group:
            return ()
        starts = []
        for name in sorted(self.awaiting, key=self.order):
            child = self.children[name]
            child.incarnation += 1
            starts.append(Start(name, child.incarnation))
        self.awaiting.clear()
        return tuple(starts)


class DecideMachine(RuleBasedStateMachine):
    """Plays the trio shell around ``decide`` and checks each command against ``Model``.

    The shell's view comes only from the commands: ``live`` (name -> incarnation, from
    ``Start``) and ``asked_to_stop`` (from ``Terminate``). The model says which commands each
    event must produce; they are compared exactly, including order (terminate newest first,
    start oldest first, as Erlang does).
    """

    def __init__(self) -> None:
        super().__init__()
        self.state = SupervisorState()
        self.model = Model(self.state.config)
        self.now = 0.0
        self.live: dict[str, int] = {}
        self.asked_to_stop: set[str] = set()
        self.closed = False
        """Shutdown or cancel was requested, or a GiveUp came back."""
        self.gave_up = False
        self.steps = 0
        self.close_after = 0
        """Shutdown and cancel end the interesting part; keep them off for this many steps."""

    # -- plumbing ---------------------------------------------------------------------------

    def feed(self, event: Event, expected: tuple[Command, ...]) -> None:
        """Run ``decide``, carry its commands out as the shell would, compare with the model."""
        self.steps += 1
        self.state, commands = decide(self.state, event)
        for command in commands:
            if isinstance(command, Start):
                assert not self.closed, f"{command!r} after the supervisor stopped"
                assert command.name not in self.live, (
                    f"{command!r} while incarnation {self.live[command.name]} is live"
                )
                self.live[command.name] = command.incarnation
            elif isinstance(command, Terminate):
                assert command.name in self.live, f"{command!r} of a child that is not live"
                assert command.name not in self.asked_to_stop, f"{command!r} twice"
                self.asked_to_stop.add(command.name)
            else:
                assert not self.closed, f"{command!r} after the supervisor stopped"
                self.closed = self.gave_up = True
        assert typed(commands) == typed(expected), f"{event!r} gave {commands!r}, not {expected!r}"

    def running(self) -> list[str]:
        """Live children nobody asked to stop, by name."""
        return sorted(set(self.live) - self.asked_to_stop)

    def expect_exit(self, name: str, kind: ExitKind, requested: bool) -> tuple[Command, ...]:
        model = self.model
        if self.closed:
            del model.children[name]
            return ()
        if requested:
            if name in model.group:
                model.group.remove(name)
                if name in model.rejoin:
                    model.rejoin.remove(name)
                    model.awaiting.add(name)
                else:
                    del model.children[name]
            else:  # stop_child: never restarted
                del model.children[name]
            return model.finish_group()

        child = model.children[name]
        if not wants_restart(child.restart, kind):
            del model.children[name]
            return ()

        # A restart decision. The one that would make intensity + 1 decisions within
        # (now - period, now] gives up instead, and only that one: ``feed`` compares exactly.
        config = model.config
        window = [t for t in model.decisions if t > self.now - config.period]
        model.decisions = window
        if len(window) >= config.intensity:
            del model.children[name]
            model.close()
            return (GiveUp(name, len(window) + 1, kind),)
        model.decisions.append(self.now)

        if config.strategy == "one_for_one":
            child.incarnation += 1
            return (Start(name, child.incarnation),)
        members = [
            other
            for other, c in model.children.items()
            if other != name and (config.strategy == "one_for_all" or c.order > child.order)
        ]
        terminate = sorted(
            (m for m in members if m in self.live and m not in self.asked_to_stop),
            key=model.order,
            reverse=True,
        )
        model.group.update(terminate)
        model.rejoin.update(m for m in terminate if model.children[m].restart != "temporary")
        model.awaiting.add(name)
        return (*(Terminate(m) for m in terminate), *model.finish_group())

    def exit(self, name: str, kind: ExitKind) -> None:
        incarnation = self.live.pop(name)
        requested = name in self.asked_to_stop
        self.asked_to_stop.discard(name)
        expected = self.expect_exit(name, kind, requested)
        self.feed(Exited(name, incarnation, kind, self.now), expected)

    # -- rules ------------------------------------------------------------------------------

    @initialize(
        strategy=st.sampled_from(STRATEGIES),
        intensity=st.integers(0, 4) | st.just(1000),
        period=st.sampled_from(PERIODS),
        close_after=st.integers(0, STEP_COUNT),
    )
    def configure(
        self, strategy: Strategy, intensity: int, period: float, close_after: int
    ) -> None:
        self.state = SupervisorState(SupervisorConfig(strategy, intensity, period))
        self.model = Model(self.state.config)
        self.close_after = close_after

    def may_close(self) -> bool:
        return self.steps >= self.close_after

    @rule(name=st.sampled_from(NAMES), restart=st.sampled_from(RESTARTS))
    def spawn(self, name: str, restart: Restart) -> None:
        before = self.state
        event = Spawn(name, restart, self.now)
        if self.closed:
            with pytest.raises(SupervisorClosed):
                decide(self.state, event)
        elif name in self.model.children:
            with pytest.raises(DuplicateChild):
                decide(self.state, event)
        else:
            self.model.children[name] = ModelChild(restart, self.model.next_order, 0)
            self.model.next_order += 1
            self.feed(event, (Start(name, 0),))
            return
        self.steps += 1
        assert self.state == before  # a refused spawn changes nothing

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        self.exit(data.draw(st.sampled_from(self.running()), label="name"), "crashed")

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def exit_normally(self, data: st.DataObject) -> None:
        self.exit(data.draw(st.sampled_from(self.running()), label="name"), "normal")

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def exit_cancelled(self, data: st.DataObject) -> None:
        self.exit(data.draw(st.sampled_from(self.running()), label="name"), "cancelled")

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def exit_shutdown(self, data: st.DataObject) -> None:
        self.exit(data.draw(st.sampled_from(self.running()), label="name"), "shutdown")

    @precondition(lambda self: self.asked_to_stop)
    @rule(data=st.data(), kind=st.sampled_from(KINDS))
    def terminated_child_exits(self, data: st.DataObject, kind: ExitKind) -> None:
        self.exit(data.draw(st.sampled_from(sorted(self.asked_to_stop)), label="name"), kind)

    @rule(data=st.data(), name=st.sampled_from(NAMES), kind=st.sampled_from(KINDS))
    def stale_exit(self, data: st.DataObject, name: str, kind: ExitKind) -> None:
        live = self.live.get(name)
        incarnation = data.draw(st.integers(0, 4).filter(lambda i: i != live), label="stale")
        before = self.state
        self.feed(Exited(name, incarnation, kind, self.now), ())
        assert self.state == before

    @rule(fraction=st.sampled_from(STEPS))
    def pass_time(self, fraction: float) -> None:
        self.steps += 1
        self.now += fraction * self.model.config.period

    @rule(data=st.data())
    def stop_child(self, data: st.DataObject) -> None:
        # Mostly children the supervisor knows (live or awaiting a restart), sometimes not.
        known = sorted(self.model.children)
        name = data.draw(st.sampled_from([*known, "nobody"]), label="name")
        model = self.model
        expected: tuple[Command, ...] = ()
        if name in model.awaiting:
            model.awaiting.remove(name)
            del model.children[name]
        elif name in self.asked_to_stop:
            model.rejoin.discard(name)
        elif name in self.live:
            expected = (Terminate(name),)
        self.feed(StopChild(name, self.now), expected)

    @precondition(may_close)
    @rule()
    def shutdown(self) -> None:
        expected: tuple[Command, ...] = ()
        if not self.closed:
            newest_first = sorted(self.running(), key=self.model.order, reverse=True)
            expected = tuple(Terminate(name) for name in newest_first)
            self.model.close()
            self.closed = True
        self.feed(ShutdownRequested(self.now), expected)

    @precondition(may_close)
    @rule()
    def cancel(self) -> None:
        if not self.closed:
            self.model.close()
            self.closed = True
        self.feed(CancelRequested(self.now), ())

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def core_agrees_with_the_shell(self) -> None:
        children = self.state.children
        live = {n: c.incarnation for n, c in children.items() if c.status != "awaiting_restart"}
        assert live == self.live
        assert {n for n, c in children.items() if c.status == "stopping"} == self.asked_to_stop
        assert self.state.stopping == self.closed
        assert self.state.gave_up == self.gave_up


TestDecide = DecideMachine.TestCase
TestDecide.settings = settings(TestDecide.settings, stateful_step_count=STEP_COUNT)


# -- example-based tests --------------------------------------------------------------------


def spawned(
    *children: tuple[str, Restart],
    strategy: Strategy = "one_for_one",
    intensity: int = 3,
    period: float = 5.0,
) -> SupervisorState:
    """A supervisor with ``children`` spawned at time 0, in that order."""
    state = SupervisorState(SupervisorConfig(strategy, intensity, period))
    for name, restart in children:
        state, _ = decide(state, Spawn(name, restart, at=0.0))
    return state


def then(state: SupervisorState, event: Event, *expected: Command) -> SupervisorState:
    """Feed ``event``; assert it gives exactly the ``expected`` commands; return the state."""
    state, commands = decide(state, event)
    assert typed(commands) == typed(expected)
    return state


def crash(name: str, incarnation: int = 0, at: float = 1.0) -> Exited:
    return Exited(name, incarnation, "crashed", at)


def stopped(name: str, incarnation: int = 0, at: float = 1.0) -> Exited:
    """The exit of a child that was asked to stop."""
    return Exited(name, incarnation, "shutdown", at)


def test_commands_and_events_of_different_kinds_are_never_equal() -> None:
    # Commands and events are values: a test or a set of commands must never mistake a
    # GiveUp for a Start, or a cancel for a shutdown.
    assert Start("a", 1) != GiveUp("a", 1)
    assert len({Start("a", 1), GiveUp("a", 1)}) == 2
    assert ShutdownRequested(1.0) != CancelRequested(1.0)
    assert StopChild("a", 1.0) != Start("a", 1)


# configuration


def test_config_defaults() -> None:
    config = SupervisorConfig()
    assert (config.strategy, config.intensity, config.period) == ("one_for_one", 3, 5.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"strategy": "one_for_some"},
            "unknown strategy 'one_for_some'; use one of "
            "('one_for_one', 'one_for_all', 'rest_for_one')",
        ),
        ({"intensity": -1}, "intensity must be an int >= 0, not -1"),
        ({"intensity": 2.0}, "intensity must be an int >= 0, not 2.0"),
        ({"period": 0}, "period must be a finite number of seconds > 0, not 0"),
        ({"period": -1.5}, "period must be a finite number of seconds > 0, not -1.5"),
        ({"period": math.inf}, "period must be a finite number of seconds > 0, not inf"),
        ({"period": math.nan}, "period must be a finite number of seconds > 0, not nan"),
    ],
)
def test_config_rejects_invalid_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        SupervisorConfig(**kwargs)  # type: ignore[arg-type]


# spawning


def test_spawn_starts_incarnation_zero() -> None:
    then(SupervisorState(), Spawn("a", "permanent", 0.0), Start("a", 0))


def test_spawn_builds_the_same_values_as_the_constructors() -> None:
    # decide builds its hot-path named tuples positionally (tuple.__new__): they must equal
    # what the named tuples' own constructors make, defaults included.
    config = SupervisorConfig("one_for_all", 2, 1.0)
    state, commands = decide(SupervisorState(config), Spawn("a", "transient", 0.0))
    assert state == SupervisorState(
        config, Map({"a": ChildState("a", "transient", 0, 0)}), next_order=1
    )
    assert typed(commands) == [(Start, Start("a", 0))]
    state, commands = decide(state, Exited("a", 0, "normal", 1.0))
    assert state == SupervisorState(config, Map(), next_order=1)
    assert commands == ()


def test_spawn_duplicate_live_name_raises_duplicate_child() -> None:
    state = spawned(("a", "permanent"))
    message = "a child named 'a' is already live; stop it first or pick another name"
    with pytest.raises(DuplicateChild, match=f"^{re.escape(message)}$"):
        decide(state, Spawn("a", "temporary", 1.0))


def test_spawn_of_a_stopping_child_raises_duplicate_child() -> None:
    state = then(spawned(("a", "permanent")), StopChild("a", 1.0), Terminate("a"))
    with pytest.raises(DuplicateChild):
        decide(state, Spawn("a", "permanent", 1.0))


def test_a_name_is_free_again_once_its_child_has_exited() -> None:
    state = then(spawned(("a", "transient")), Exited("a", 0, "normal", 1.0))
    then(state, Spawn("a", "permanent", 2.0), Start("a", 0))


def test_spawn_with_unknown_restart_policy_raises_value_error() -> None:
    message = (
        "unknown restart policy 'sometimes'; use one of ('permanent', 'transient', 'temporary')"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        decide(SupervisorState(), Spawn("a", "sometimes", 0.0))  # type: ignore[arg-type]


def test_spawn_after_shutdown_raises_supervisor_closed() -> None:
    state = then(SupervisorState(), ShutdownRequested(0.0))
    message = "cannot spawn 'a': the supervisor is shutting down"
    with pytest.raises(SupervisorClosed, match=f"^{re.escape(message)}$"):
        decide(state, Spawn("a", "permanent", 1.0))


def test_spawn_after_cancel_raises_supervisor_closed() -> None:
    state = then(SupervisorState(), CancelRequested(0.0))
    with pytest.raises(SupervisorClosed, match="is shutting down"):
        decide(state, Spawn("a", "permanent", 1.0))


def test_spawn_after_giving_up_raises_supervisor_closed() -> None:
    state = then(spawned(("a", "permanent"), intensity=0), crash("a"), GiveUp("a", 1))
    message = "cannot spawn 'b': the supervisor gave up"
    with pytest.raises(SupervisorClosed, match=f"^{re.escape(message)}$"):
        decide(state, Spawn("b", "permanent", 1.0))


# restart policies

RESTARTED_AFTER: dict[Restart, set[ExitKind]] = {
    "permanent": {"normal", "cancelled", "crashed", "shutdown"},
    "transient": {"crashed"},
    "temporary": set(),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("restart", RESTARTS)
def test_restart_policy_decides_which_exits_restart(restart: Restart, kind: ExitKind) -> None:
    state = spawned(("a", restart))
    restarts = kind in RESTARTED_AFTER[restart]
    state = then(state, Exited("a", 0, kind, 1.0), *([Start("a", 1)] if restarts else []))
    assert ("a" in state.children) == restarts


# strategies


def test_one_for_one_restarts_only_the_failed_child() -> None:
    state = spawned(("a", "permanent"), ("b", "permanent"), ("c", "permanent"))
    then(state, crash("b"), Start("b", 1))


def test_one_for_all_terminates_every_other_child_newest_first() -> None:
    state = spawned(
        ("a", "permanent"), ("b", "permanent"), ("c", "permanent"), strategy="one_for_all"
    )
    then(state, crash("b"), Terminate("c"), Terminate("a"))


def test_one_for_all_waits_for_all_members_before_restarting() -> None:
    state = spawned(
        ("a", "permanent"), ("b", "permanent"), ("c", "permanent"), strategy="one_for_all"
    )
    state = then(state, crash("a"), Terminate("c"), Terminate("b"))
    state = then(state, stopped("c"))
    then(state, stopped("b"), Start("a", 1), Start("b", 1), Start("c", 1))


def test_one_for_all_does_not_restart_temporary_members() -> None:
    state = spawned(
        ("a", "permanent"), ("b", "temporary"), ("c", "transient"), strategy="one_for_all"
    )
    state = then(state, crash("a"), Terminate("c"), Terminate("b"))
    state = then(state, stopped("b"))
    state = then(state, stopped("c"), Start("a", 1), Start("c", 1))
    assert "b" not in state.children


def test_how_a_terminated_member_exits_does_not_matter() -> None:
    # Crashing while being terminated is part of the group restart, not a new decision:
    # with intensity 1, a second decision would give up.
    state = spawned(("a", "permanent"), ("b", "permanent"), strategy="one_for_all", intensity=1)
    state = then(state, crash("a"), Terminate("b"))
    then(state, crash("b"), Start("a", 1), Start("b", 1))


def test_rest_for_one_restarts_the_failed_child_and_younger_siblings() -> None:
    state = spawned(
        ("a", "permanent"), ("b", "permanent"), ("c", "permanent"), strategy="rest_for_one"
    )
    state = then(state, crash("b"), Terminate("c"))
    state = then(state, stopped("c"), Start("b", 1), Start("c", 1))
    assert state.children["a"].incarnation == 0


def test_rest_for_one_restarts_the_youngest_child_alone() -> None:
    state = spawned(("a", "permanent"), ("b", "permanent"), strategy="rest_for_one")
    then(state, crash("b"), Start("b", 1))


def test_rest_for_one_keeps_start_order_across_restarts() -> None:
    # a and b are restarted after c was spawned; they stay older than c, as in Erlang.
    state = spawned(("a", "permanent"), ("b", "permanent"), strategy="rest_for_one")
    state = then(state, crash("a"), Terminate("b"))
    state = then(state, Spawn("c", "permanent", 1.0), Start("c", 0))
    state = then(state, stopped("b"), Start("a", 1), Start("b", 1))
    then(state, crash("c", at=2.0), Start("c", 1))


def test_a_restart_during_a_group_restart_waits_for_the_group() -> None:
    # Never two live instances: c is restarted only once the terminated b has exited.
    state = spawned(
        ("a", "permanent"), ("b", "permanent"), ("c", "permanent"), strategy="rest_for_one"
    )
    state = then(state, crash("b"), Terminate("c"))
    state = then(state, crash("a"))
    then(state, stopped("c"), Start("a", 1), Start("b", 1), Start("c", 1))


# intensity


def test_restarts_beyond_intensity_within_period_give_up() -> None:
    state = spawned(("a", "permanent"), intensity=2, period=5.0)
    state = then(state, crash("a", 0, at=1.0), Start("a", 1))
    state = then(state, crash("a", 1, at=2.0), Start("a", 2))
    state = then(state, crash("a", 2, at=3.0), GiveUp("a", 3))
    assert state.gave_up


def test_a_restart_exactly_one_period_later_is_outside_the_window() -> None:
    state = spawned(("a", "permanent"), intensity=1, period=5.0)
    state = then(state, crash("a", 0, at=0.0), Start("a", 1))
    state = then(state, crash("a", 1, at=5.0), Start("a", 2))
    then(state, crash("a", 2, at=5.0), GiveUp("a", 2))


def test_intensity_zero_gives_up_on_the_first_restart() -> None:
    then(spawned(("a", "permanent"), intensity=0), crash("a"), GiveUp("a", 1))


def test_restarts_of_all_children_count_together() -> None:
    state = spawned(("a", "permanent"), ("b", "permanent"), intensity=1)
    state = then(state, crash("a"), Start("a", 1))
    then(state, crash("b"), GiveUp("b", 2))


def test_exits_that_need_no_restart_do_not_count() -> None:
    state = spawned(("a", "transient"), ("b", "permanent"), intensity=0)
    then(state, Exited("a", 0, "normal", 1.0))


def test_nothing_starts_after_giving_up() -> None:
    state = spawned(("a", "permanent"), ("b", "permanent"), strategy="one_for_all", intensity=1)
    state = then(state, crash("a"), Terminate("b"))
    state = then(state, Spawn("c", "permanent", 1.0), Start("c", 0))
    state = then(state, crash("c"), GiveUp("c", 2))
    then(state, stopped("b"))


# stop_child


def test_stop_child_terminates_it_and_it_is_never_restarted() -> None:
    state = then(spawned(("a", "permanent")), StopChild("a", 1.0), Terminate("a"))
    state = then(state, crash("a"))
    assert "a" not in state.children


def test_stop_child_is_idempotent() -> None:
    state = then(spawned(("a", "permanent")), StopChild("a", 1.0), Terminate("a"))
    then(state, StopChild("a", 1.0))


def test_stop_child_of_an_unknown_name_does_nothing() -> None:
    state = spawned(("a", "permanent"))
    assert then(state, StopChild("b", 1.0)) == state


def test_stop_child_during_a_group_restart_cancels_that_childs_restart() -> None:
    state = spawned(
        ("a", "permanent"), ("b", "permanent"), ("c", "permanent"), strategy="one_for_all"
    )
    state = then(state, crash("a"), Terminate("c"), Terminate("b"))
    state = then(state, StopChild("b", 1.0))
    state = then(state, stopped("b"))
    then(state, stopped("c"), Start("a", 1), Start("c", 1))


def test_stop_child_of_a_child_awaiting_restart_drops_it() -> None:
    state = spawned(("a", "permanent"), ("b", "permanent"), strategy="one_for_all")
    state = then(state, crash("a"), Terminate("b"))
    state = then(state, StopChild("a", 1.0))
    then(state, stopped("b"), Start("b", 1))


# shutdown and cancel


def test_shutdown_terminates_children_newest_first_and_restarts_none() -> None:
    state = spawned(("a", "permanent"), ("b", "permanent"), ("c", "permanent"))
    state = then(state, ShutdownRequested(1.0), Terminate("c"), Terminate("b"), Terminate("a"))
    for name in ("a", "b", "c"):
        state = then(state, crash(name))
    assert not state.children


def test_shutdown_twice_does_nothing_more() -> None:
    state = then(spawned(("a", "permanent")), ShutdownRequested(1.0), Terminate("a"))
    then(state, ShutdownRequested(2.0))


def test_shutdown_during_a_group_restart_starts_nothing() -> None:
    state = spawned(("a", "permanent"), ("b", "permanent"), strategy="one_for_all")
    state = then(state, crash("a"), Terminate("b"))
    state = then(state, ShutdownRequested(1.0))
    state = then(state, stopped("b"))
    assert not state.children


def test_cancel_issues_no_commands_and_restarts_nothing() -> None:
    state = then(spawned(("a", "permanent"), ("b", "permanent")), CancelRequested(1.0))
    state = then(state, Exited("a", 0, "cancelled", 1.0))
    then(state, crash("b"))


def test_cancel_during_a_group_restart_starts_nothing() -> None:
    state = spawned(("a", "permanent"), ("b", "permanent"), strategy="one_for_all")
    state = then(state, crash("a"), Terminate("b"))
    state = then(state, CancelRequested(1.0))
    state = then(state, Exited("b", 0, "cancelled", 1.0))
    assert not state.children


def test_shutdown_after_cancel_terminates_nothing() -> None:
    state = then(spawned(("a", "permanent")), CancelRequested(1.0))
    then(state, ShutdownRequested(1.0))


# exits the core does not know


def test_stale_incarnation_exits_are_ignored() -> None:
    state = then(spawned(("a", "permanent")), crash("a", 0), Start("a", 1))
    assert then(state, crash("a", 0, at=2.0)) == state


def test_exit_of_an_unknown_child_is_ignored() -> None:
    state = spawned(("a", "permanent"))
    assert then(state, crash("b")) == state


def test_exit_of_a_child_awaiting_restart_is_ignored() -> None:
    state = spawned(("a", "permanent"), ("b", "permanent"), strategy="one_for_all")
    state = then(state, crash("a"), Terminate("b"))
    assert then(state, crash("a")) == state


def test_intensity_must_not_be_a_bool() -> None:
    with pytest.raises(ValueError, match="intensity must be an int >= 0, not True"):
        SupervisorConfig(intensity=True)


def test_giving_up_drops_children_waiting_for_a_group_restart() -> None:
    state = spawned(
        ("a", "permanent"),
        ("b", "permanent"),
        ("c", "permanent"),
        strategy="rest_for_one",
        intensity=1,
    )
    state = then(state, crash("b"), Terminate("c"))  # 'b' now waits for 'c' to stop
    state = then(state, crash("a", at=1.5), GiveUp("a", 2, "crashed"))
    assert {name: child.status for name, child in state.children.items()} == {"c": "stopping"}
