"""Property-based cancellation tests of the trio side of :mod:`supervisors`.

Hypothesis draws a whole supervision tree (depth <= 4, fan-out <= 5): interior actors open a
nested supervisor with a drawn strategy and intensity and spawn their children; every actor
incarnation follows a drawn behaviour (sleep, then return / crash / block on its mailbox /
sleep forever, with an optional shielded, bounded cleanup in ``finally``); restart policies
and grace periods are drawn; the root is cancelled at a drawn (simulated) time. Each scenario
runs under ``MockClock(autojump_threshold=0)`` inside a synchronous ``@given`` test, and its
recorded history (starts, cleanups, cancels and the exit listener's records) is checked
against the invariants the package promises:

- every actor incarnation and every supervisor gets exactly one exit reason;
- children's exits are recorded before their parent's;
- no task survives the root ``async with``;
- crashes propagate as the strategies and restart policies say, and the root either raises
  :class:`RestartIntensityExceeded` or is cancelled with the given reason, nothing else;
- nothing is (re)started under a supervisor after it was cancelled;
- the same scenario replays identically.

The helpers are deliberately plain so that a failing example (printed with constructor-like
reprs) can be pasted into :func:`run_scenario` to debug it.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

# trio's scheduler draws from this Random; importing Hypothesis makes trio register it and
# schedule deterministically from its state. Replaying a scenario means restoring that state,
# and there is no public handle on it (trio/_core/_run.py, ``_hypothesis_plugin_setup``).
from trio._core._run import _r as trio_scheduler_random

from supervisors import (
    Cancelled,
    Crashed,
    ExitReason,
    ExitRecord,
    Mailbox,
    Normal,
    Restart,
    RestartIntensityExceeded,
    Shutdown,
    Strategy,
    Supervisor,
    open_supervisor,
)
from supervisors.testing import ExitLog

ROOT_REASON = "root cancelled by the test"
CLEANUP_BOUND = 2.0
"""Every shielded cleanup runs under ``move_on_after(CLEANUP_BOUND, shield=True)``."""
MAX_DEPTH = 4
MAX_FAN_OUT = 5

Ending = Literal["return", "crash", "mailbox", "forever", "shutdown", "cancel"]
LEAF_ENDINGS: tuple[Ending, ...] = ("return", "crash", "mailbox", "forever")
INTERIOR_ENDINGS: tuple[Ending, ...] = (*LEAF_ENDINGS, "shutdown", "cancel")


# -- scenarios ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What one incarnation does: sleep ``delay``, then ``ending``; ``cleanup`` in finally.

    Endings: ``return``; ``crash`` (raise :class:`Boom`); ``mailbox`` (receive until
    stopped); ``forever`` (``sleep_forever``). An interior actor does this inside its nested
    supervisor's block and may also end with ``shutdown`` (``sup.shutdown()`` and return) or
    ``cancel`` (``sup.cancel(reason)`` and return). ``cleanup`` (if not None) is a shielded
    sleep of that length, cut off after :data:`CLEANUP_BOUND`.
    """

    delay: float
    ending: Ending
    cleanup: float | None = None


@dataclass(frozen=True)
class SupSpec:
    strategy: Strategy
    intensity: int
    period: float
    children: tuple[ActorSpec, ...]


@dataclass(frozen=True)
class ActorSpec:
    """One child: incarnation ``i`` runs ``steps[min(i, len(steps) - 1)]``.

    With ``sup`` it is an interior actor: it opens that nested supervisor and spawns its
    children before running its step inside the supervisor's block.
    """

    name: str
    restart: Restart
    grace: float
    steps: tuple[Step, ...]
    sup: SupSpec | None = None


@dataclass(frozen=True)
class Scenario:
    root: SupSpec
    cancel_at: float


DELAYS = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0])
CLEANUPS = st.sampled_from([None, None, 0.5, 1.0, 2.5])
STRATEGIES: tuple[Strategy, ...] = ("one_for_one", "one_for_all", "rest_for_one")
RESTARTS: tuple[Restart, ...] = ("permanent", "transient", "temporary")


def steps_strategy(endings: tuple[Ending, ...]) -> st.SearchStrategy[tuple[Step, ...]]:
    step = st.builds(Step, DELAYS, st.sampled_from(endings), CLEANUPS)
    return st.lists(step, min_size=1, max_size=3).map(tuple)


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    max_actors: int = 12,
    leaf_endings: tuple[Ending, ...] = LEAF_ENDINGS,
    interior_endings: tuple[Ending, ...] = INTERIOR_ENDINGS,
    restarts: tuple[Restart, ...] = RESTARTS,
) -> Scenario:
    """A random tree of at most ``max_actors`` actors, ``MAX_DEPTH`` actor levels deep."""
    budget = max_actors

    def sup_spec(depth: int) -> SupSpec:
        nonlocal budget
        n = draw(st.integers(1, min(MAX_FAN_OUT, budget)))
        budget -= n
        strategy = draw(st.sampled_from(STRATEGIES))
        intensity = draw(st.integers(0, 3))
        period = draw(st.sampled_from([0.5, 1.0, 5.0]))
        children = tuple(actor_spec(depth, f"a{i}") for i in range(n))
        return SupSpec(strategy, intensity, period, children)

    def actor_spec(depth: int, name: str) -> ActorSpec:
        restart = draw(st.sampled_from(restarts))
        grace = draw(st.sampled_from([0.0, 0.5, 1.0, 5.0]))
        interior = depth < MAX_DEPTH and budget > 0 and draw(st.booleans())
        steps = draw(steps_strategy(interior_endings if interior else leaf_endings))
        sup = sup_spec(depth + 1) if interior else None
        return ActorSpec(name, restart, grace, steps, sup)

    root = sup_spec(1)
    cancel_at = draw(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]))
    return Scenario(root, cancel_at)


# -- running a scenario ---------------------------------------------------------------------


class Boom(Exception):
    """The crash a ``crash`` step raises; it names the incarnation that raised it."""

    def __init__(self, path: str, actor_id: int) -> None:
        super().__init__(path, actor_id)
        self.path = path
        self.actor_id = actor_id


@dataclass(frozen=True)
class Started:
    id: int
    parent_id: int | None
    path: str
    kind: str
    incarnation: int
    at: float


@dataclass(frozen=True)
class CleanupBegan:
    id: int
    at: float


@dataclass(frozen=True)
class CleanupEnded:
    id: int
    at: float


@dataclass(frozen=True)
class CancelIssued:
    """A supervisor's block was cancelled (``cancel``) or raised (``crash``) at ``at``."""

    sup_id: int
    at: float
    reason: str


@dataclass(frozen=True)
class Exited:
    record: ExitRecord


HistoryEvent = Started | CleanupBegan | CleanupEnded | CancelIssued | Exited


@dataclass
class Run:
    """Everything one scenario run recorded, in the order it happened."""

    history: list[HistoryEvent] = field(default_factory=list)
    incarnations: dict[tuple[int | None, str], int] = field(
        default_factory=lambda: defaultdict(int)
    )
    running: int = 0
    in_cleanup: set[int] = field(default_factory=set)
    outcome: BaseException | None = None
    tasks_before: int = 0
    tasks_after: int = 0
    log: ExitLog | None = None

    def exits(self) -> list[ExitRecord]:
        return [e.record for e in self.history if isinstance(e, Exited)]


async def run_scenario(scenario: Scenario) -> Run:
    """Run ``scenario`` (call under ``trio.run`` with a ``MockClock``) and return its record."""
    run = Run()
    run.tasks_before = trio.lowlevel.current_statistics().tasks_living

    def started(info: Any, kind: str, incarnation: int) -> None:
        run.history.append(
            Started(info.id, info.parent_id, info.path, kind, incarnation, trio.current_time())
        )

    def make_actor(spec: ActorSpec) -> Any:
        async def actor(mailbox: Mailbox[object]) -> None:
            info = mailbox.ref.info
            key = (info.parent_id, info.name)
            incarnation = run.incarnations[key]
            run.incarnations[key] += 1
            step = spec.steps[min(incarnation, len(spec.steps) - 1)]
            started(info, "actor", incarnation)
            run.running += 1
            try:
                if spec.sup is None:
                    await trio.sleep(step.delay)
                    await finish(step.ending, mailbox, info)
                else:
                    await interior(spec.sup, step, mailbox, info)
            finally:
                if step.cleanup is not None:
                    run.history.append(CleanupBegan(info.id, trio.current_time()))
                    run.in_cleanup.add(info.id)
                    with trio.move_on_after(CLEANUP_BOUND, shield=True):
                        await trio.sleep(step.cleanup)
                    run.in_cleanup.discard(info.id)
                    run.history.append(CleanupEnded(info.id, trio.current_time()))
                run.running -= 1

        return actor

    async def finish(ending: Ending, mailbox: Mailbox[object], info: Any) -> None:
        if ending == "crash":
            raise Boom(info.path, info.id)
        if ending == "mailbox":
            async for _ in mailbox:
                pass
        elif ending == "forever":
            await trio.sleep_forever()

    async def interior(sup_spec: SupSpec, step: Step, mailbox: Mailbox[object], info: Any) -> None:
        async with open_supervisor(
            name="sup",
            strategy=sup_spec.strategy,
            intensity=sup_spec.intensity,
            period=sup_spec.period,
        ) as sup:
            sup_info = sup.snapshot().actors[0].actor
            started(sup_info, "supervisor", 0)
            spawn_children(sup, sup_spec)
            await trio.sleep(step.delay)
            if step.ending == "shutdown":
                sup.shutdown()
            elif step.ending == "cancel":
                reason = f"inner cancel by {info.path}#{info.id}"
                run.history.append(CancelIssued(sup_info.id, trio.current_time(), reason))
                sup.cancel(reason)
            else:
                if step.ending == "crash":
                    run.history.append(CancelIssued(sup_info.id, trio.current_time(), "crash"))
                await finish(step.ending, mailbox, info)

    def spawn_children(sup: Any, sup_spec: SupSpec) -> None:
        for child in sup_spec.children:
            sup.spawn(make_actor(child), name=child.name, restart=child.restart, grace=child.grace)

    root_spec = scenario.root
    try:
        async with open_supervisor(
            name="root",
            strategy=root_spec.strategy,
            intensity=root_spec.intensity,
            period=root_spec.period,
        ) as root:
            root.add_exit_listener(lambda record: run.history.append(Exited(record)))
            run.log = ExitLog.attach(root)
            started(root.snapshot().actors[0].actor, "supervisor", 0)
            spawn_children(root, root_spec)
            await trio.sleep(scenario.cancel_at)
            run.history.append(CancelIssued(0, trio.current_time(), ROOT_REASON))
            root.cancel(ROOT_REASON)
    except RestartIntensityExceeded as exc:
        run.outcome = exc
    # Let anything that would (wrongly) still be scheduled run before counting tasks.
    await trio.testing.wait_all_tasks_blocked()
    run.tasks_after = trio.lowlevel.current_statistics().tasks_living
    return run


def play(scenario: Scenario) -> Run:
    return trio.run(run_scenario, scenario, clock=trio.testing.MockClock(autojump_threshold=0))


def replay_key(run: Run) -> list[tuple[object, ...]]:
    """The run's history as plain values (exceptions by repr), for comparing two runs."""
    out: list[tuple[object, ...]] = []
    for event in run.history:
        if isinstance(event, Exited):
            r = event.record
            out.append(("exit", r.actor, r.reason.kind, str(r.reason), r.at))
        else:
            out.append((type(event).__name__, *vars(event).values()))
    out.append(("outcome", repr(run.outcome)))
    return out


# -- invariants -----------------------------------------------------------------------------


def only_exception(exc: BaseException) -> BaseException:
    """``exc`` without single-member exception groups around it.

    A supervisor whose block raised while it was also cancelled from above records (and its
    owner crashes with) ``Crashed(ExceptionGroup([error]))`` rather than ``Crashed(error)``:
    the ``Cancelled`` has to travel on with the error.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def same_crash(a: ExitReason, b: ExitReason) -> bool:
    return (
        isinstance(a, Crashed)
        and isinstance(b, Crashed)
        and only_exception(a.exception) is only_exception(b.exception)
    )


def wants_restart(restart: Restart, kind: str) -> bool:
    return restart == "permanent" or (restart == "transient" and kind == "crashed")


def check_invariants(scenario: Scenario, run: Run) -> None:
    history = run.history
    pos = {id(event): i for i, event in enumerate(history)}
    starts = {e.id: e for e in history if isinstance(e, Started)}
    exits = run.exits()
    exit_of = {r.actor.id: r for r in exits}
    exit_pos = {e.record.actor.id: pos[id(e)] for e in history if isinstance(e, Exited)}

    # Exactly one exit reason for every node that was started, and for no other.
    exit_ids = [r.actor.id for r in exits]
    assert len(exit_ids) == len(set(exit_ids)), "a node exited twice"
    assert set(exit_ids) == set(starts), "started nodes and exited nodes differ"
    assert set(starts) == set(range(len(starts))), "ids are not 0..n-1: a node never started"
    assert run.log is not None
    assert run.log.records == exits

    # Children exit before their parents; parents start before their children.
    for record in exits:
        start = starts[record.actor.id]
        assert pos[id(start)] < exit_pos[record.actor.id]
        assert start.at <= record.at
        parent = record.actor.parent_id
        if parent is None:
            assert record.actor.id == 0
            continue
        assert exit_pos[parent] > exit_pos[record.actor.id], f"{record} after its parent"
        assert exit_of[parent].at >= record.at
        assert pos[id(starts[parent])] < pos[id(start)]
    assert exits[-1].actor.id == 0, "the root's exit is not the last one"

    # Nothing is left running once the root's ``async with`` has exited.
    assert run.running == 0
    assert not run.in_cleanup
    assert run.tasks_after == run.tasks_before

    # A shielded cleanup is bounded and completes before the actor's exit is recorded.
    ended = {e.id: e for e in history if isinstance(e, CleanupEnded)}
    for began in (e for e in history if isinstance(e, CleanupBegan)):
        end = ended[began.id]
        assert pos[id(began)] < pos[id(end)] < exit_pos[began.id]
        assert end.at - began.at <= CLEANUP_BOUND

    # The root is either cancelled with the test's reason or gives up, nothing else.
    root = exits[-1]
    root_cancel = [e for e in history if isinstance(e, CancelIssued) and e.sup_id == 0]
    if run.outcome is not None:
        assert isinstance(run.outcome, RestartIntensityExceeded)
        assert root.reason == Crashed(run.outcome)
        assert run.outcome.supervisor == "root"
        assert not root_cancel, "the root was cancelled, yet raised RestartIntensityExceeded"
    else:
        assert root.reason == Cancelled(ROOT_REASON)
        assert len(root_cancel) == 1
        assert root_cancel[0].at == scenario.cancel_at

    # Nothing is started under a supervisor after it was cancelled (or its block raised).
    parent_of = {s.id: s.parent_id for s in starts.values()}

    def ancestors(node: int) -> set[int]:
        out = set()
        parent = parent_of[node]
        while parent is not None:
            out.add(parent)
            parent = parent_of[parent]
        return out

    cancels = [e for e in history if isinstance(e, CancelIssued)]
    for start in starts.values():
        for cancel in cancels:
            if cancel.sup_id in ancestors(start.id):
                assert start.at <= cancel.at, (
                    f"{start.path} (id {start.id}) started at {start.at}, after its ancestor "
                    f"supervisor {cancel.sup_id} was cancelled at {cancel.at} ({cancel.reason!r})"
                )

    def ancestor_paths(path: str) -> list[str]:
        parts = path.split("/")
        return ["/".join(parts[:i]) for i in range(1, len(parts))]

    # Every cancellation names a cause that really happened.
    give_ups = [
        r.reason.exception
        for r in exits
        if isinstance(r.reason, Crashed)
        and isinstance(r.reason.exception, RestartIntensityExceeded)
    ]
    known_reasons = {c.reason for c in cancels if c.reason != "crash"} | {str(e) for e in give_ups}
    for record in exits:
        if isinstance(record.reason, Cancelled):
            reason = record.reason.reason
            assert reason is not None
            # A forced stop (grace over) of an ancestor actor names that ancestor.
            stopped_ancestor = any(
                reason.startswith(f"actor {path!r} did not stop within its grace of")
                for path in ancestor_paths(record.actor.path)
            )
            assert (
                reason in known_reasons
                or stopped_ancestor
                or reason == "deadline expired"
                or reason.startswith("Code block inside nursery contextmanager raised exception")
            ), record
            if reason == ROOT_REASON:
                assert exit_pos[record.actor.id] > pos[id(root_cancel[0])]

    # Crashes: a Boom comes from the incarnation's own step (or, for a supervisor, from its
    # owner's block); RestartIntensityExceeded from the supervisor that gave up, and it
    # crashes the actor that owns that supervisor unless that actor was being cancelled.
    specs = spec_by_node(scenario, starts)
    for record in exits:
        reason = record.reason
        node = record.actor
        if not isinstance(reason, Crashed):
            continue
        exc = only_exception(reason.exception)
        if isinstance(exc, Boom):
            owner = node.id if node.kind == "actor" else node.parent_id
            assert exc.actor_id == owner, record
        elif isinstance(exc, RestartIntensityExceeded):
            if node.kind == "supervisor":
                assert exc.supervisor == node.path
            else:
                nested = [r for r in exits if r.actor.parent_id == node.id]
                assert len(nested) == 1
                assert same_crash(nested[0].reason, reason), "crashed with another's give-up"
        else:
            raise AssertionError(f"unexpected crash {record}")
    for record in exits:
        if record.actor.kind == "supervisor" and record.actor.parent_id is not None:
            owner = exit_of[record.actor.parent_id]
            if isinstance(record.reason, Crashed):
                assert same_crash(owner.reason, record.reason) or isinstance(
                    owner.reason, (Cancelled, Shutdown)
                ), (record, owner)

    # Restarts, per supervisor instance and child name.
    for sup_id, sup_spec in specs.items():
        check_supervisor(sup_id, sup_spec, starts, exit_of, exit_pos, pos, history)


def spec_by_node(scenario: Scenario, starts: dict[int, Started]) -> dict[int, SupSpec]:
    """The spec of every supervisor that ran, by its node id."""
    out: dict[int, SupSpec] = {0: scenario.root}
    for start in sorted(starts.values(), key=lambda s: s.id):
        if start.kind == "supervisor" and start.parent_id is not None:
            owner = starts[start.parent_id]
            owner_spec = child_spec(out[owner.parent_id], owner.path)  # type: ignore[index]
            assert owner_spec.sup is not None
            out[start.id] = owner_spec.sup
    return out


def child_spec(sup_spec: SupSpec, path: str) -> ActorSpec:
    name = path.rsplit("/", 1)[1]
    return next(c for c in sup_spec.children if c.name == name)


def check_supervisor(
    sup_id: int,
    spec: SupSpec,
    starts: dict[int, Started],
    exit_of: dict[int, ExitRecord],
    exit_pos: dict[int, int],
    pos: dict[int, int],
    history: list[HistoryEvent],
) -> None:
    sup_exit = exit_of[sup_id]
    parent_of = {s.id: s.parent_id for s in starts.values()}
    cancels = [(pos[id(e)], e.sup_id) for e in history if isinstance(e, CancelIssued)]

    def cancelled_from_above(node: int, before: int) -> bool:
        parent = parent_of[node]
        while parent is not None:
            if exit_of[parent].reason.kind != "normal":
                return True
            if any(at < before and sup == parent for at, sup in cancels):
                return True
            parent = parent_of[parent]
        return False

    incarnations: dict[str, list[Started]] = defaultdict(list)
    for start in sorted(starts.values(), key=lambda s: s.id):
        if start.parent_id == sup_id:
            incarnations[start.path.rsplit("/", 1)[1]].append(start)
    assert list(incarnations) == [c.name for c in spec.children]

    restart_times = []
    for child in spec.children:
        runs = incarnations[child.name]
        assert [s.incarnation for s in runs] == list(range(len(runs)))
        if child.restart == "temporary":
            assert len(runs) == 1, f"temporary child {runs[0].path} was restarted"
        for before, after in itertools.pairwise(runs):
            # Never two live instances of one child.
            assert exit_pos[before.id] < pos[id(after)]
            kind = exit_of[before.id].reason.kind
            if spec.strategy == "one_for_one":
                assert wants_restart(child.restart, kind), (child, exit_of[before.id])
                assert after.at == exit_of[before.id].at
            restart_times.append(after.at)
        final = exit_of[runs[-1].id]
        if isinstance(sup_exit.reason, Normal) and wants_restart(child.restart, final.reason.kind):
            # Not restarted, yet the supervisor exited normally: only a cancellation from
            # above (which never reached a checkpoint in this supervisor) excuses that.
            assert cancelled_from_above(sup_id, exit_pos[final.actor.id]), (
                f"{final} was not restarted, yet its supervisor exited normally"
            )

    if spec.strategy == "one_for_one":
        # Each restart is one decision: never more than ``intensity`` in any period.
        for t in restart_times:
            window = [u for u in restart_times if t - spec.period < u <= t]
            assert len(window) <= spec.intensity

    reason = sup_exit.reason
    if isinstance(reason, Crashed) and isinstance(reason.exception, RestartIntensityExceeded):
        exc = reason.exception
        culprit = next(c for c in spec.children if c.name == exc.child)
        final = exit_of[incarnations[culprit.name][-1].id]
        assert wants_restart(culprit.restart, final.reason.kind), (exc, final)
        assert not isinstance(final.reason, Shutdown)
        if spec.strategy == "one_for_one":
            t = final.at
            window = [u for u in restart_times if t - spec.period < u <= t]
            assert len(window) == spec.intensity, (exc, window)


# -- property tests -------------------------------------------------------------------------


@given(scenarios())
def test_random_trees_keep_the_exit_invariants(scenario: Scenario) -> None:
    state = trio_scheduler_random.getstate()
    first = play(scenario)
    check_invariants(scenario, first)
    trio_scheduler_random.setstate(state)
    second = play(scenario)
    assert replay_key(second) == replay_key(first), "the same scenario replayed differently"


@given(
    scenarios(
        max_actors=16,
        leaf_endings=("mailbox", "forever"),
        interior_endings=("mailbox", "forever", "return"),
    )
)
def test_cancelling_the_root_reaches_every_descendant(scenario: Scenario) -> None:
    """With nothing failing on its own, the root's cancel is every node's exit reason.

    Each node exits when its own shielded cleanup (cut off at the bound) is over, after all
    of its children: exactly at the time computed from the spec.
    """
    run = play(scenario)
    check_invariants(scenario, run)
    exits = run.exits()
    assert run.log is not None
    assert all(r.reason == Cancelled(ROOT_REASON) for r in exits), run.log.render()
    assert all(s.incarnation == 0 for s in run.history if isinstance(s, Started))

    at = {r.actor.path: r.at for r in exits}
    t0 = scenario.cancel_at

    def expected_sup(path: str, spec: SupSpec) -> float:
        done = max((expected_actor(f"{path}/{c.name}", c) for c in spec.children), default=t0)
        assert at[path] == done, path
        return done

    def expected_actor(path: str, spec: ActorSpec) -> float:
        done = expected_sup(f"{path}/sup", spec.sup) if spec.sup is not None else t0
        cleanup = spec.steps[0].cleanup
        if cleanup is not None:
            done += min(cleanup, CLEANUP_BOUND)
        assert at[path] == done, path
        return done

    expected_sup("root", scenario.root)


# -- focused examples -----------------------------------------------------------------------


async def test_cancel_during_shielded_cleanup_does_not_restart_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Exposes a bug: a child exiting on its own after its supervisor was cancelled is
    restarted (and with intensity 0 the supervisor gives up instead of being cancelled).

    ``w`` returns at t=1 and is inside a shielded cleanup until t=3; the supervisor is
    cancelled at t=2. ``w`` then exits ``Normal`` at t=3, and nothing may start after the
    cancel: the block ends ``Cancelled('stop')`` without raising.
    """
    starts: list[float] = []

    async def worker(mailbox: Mailbox[object]) -> None:
        starts.append(trio.current_time())
        try:
            await trio.sleep(1)
        finally:
            with trio.move_on_after(5, shield=True):
                await trio.sleep(2)

    async with open_supervisor(name="root", intensity=0) as root:
        log = ExitLog.attach(root)
        root.spawn(worker, name="w", restart="permanent")
        await trio.sleep(2)
        root.cancel("stop")
    assert starts == [0.0]
    assert [(r.actor.path, r.reason, r.at) for r in log.records] == [
        ("root/w", Normal(), 3.0),
        ("root", Cancelled("stop"), 3.0),
    ]


async def test_cancel_reason_reaches_every_descendant(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def idle(mailbox: Mailbox[object]) -> None:
        async for _ in mailbox:
            pass

    async def middle(mailbox: Mailbox[object]) -> None:
        async with open_supervisor(name="inner", strategy="one_for_all") as inner:
            inner.spawn(idle, name="x")
            inner.spawn(idle, name="y")
            await trio.sleep_forever()

    async with open_supervisor(name="app") as app:
        log = ExitLog.attach(app)
        app.spawn(middle, name="m")
        app.spawn(idle, name="z")
        await trio.testing.wait_all_tasks_blocked()
        app.cancel("bye")
    assert log.reasons() == {
        "app/m/inner/y": Cancelled("bye"),
        "app/m/inner/x": Cancelled("bye"),
        "app/m/inner": Cancelled("bye"),
        "app/m": Cancelled("bye"),
        "app/z": Cancelled("bye"),
        "app": Cancelled("bye"),
    }


async def test_shielded_cleanup_completes_before_the_parents_exit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[str] = []

    async def slow_cleanup(mailbox: Mailbox[object]) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.move_on_after(10, shield=True):
                await trio.sleep(3)
            events.append("cleanup done")

    async def middle(mailbox: Mailbox[object]) -> None:
        async with open_supervisor(name="inner") as inner:
            inner.spawn(slow_cleanup, name="c")
            await trio.sleep_forever()

    async with open_supervisor(name="app") as app:
        app.add_exit_listener(lambda r: events.append(f"{r.actor.path} {r.reason} {r.at:g}"))
        app.spawn(middle, name="m")
        await trio.sleep(1)
        app.cancel("bye")
    assert events == [
        "cleanup done",
        "app/m/inner/c cancelled: bye 4",
        "app/m/inner cancelled: bye 4",
        "app/m cancelled: bye 4",
        "app cancelled: bye 4",
    ]


async def test_nested_give_up_crashes_the_owner_and_propagates_to_the_root(
    autojump_clock: trio.testing.MockClock,
) -> None:
    crashes: list[Boom] = []

    async def crasher(mailbox: Mailbox[object]) -> None:
        crashes.append(Boom(mailbox.ref.info.path, mailbox.ref.info.id))
        raise crashes[-1]

    async def owner(mailbox: Mailbox[object]) -> None:
        async with open_supervisor(name="inner", intensity=1, period=10) as inner:
            inner.spawn(crasher, name="c")
            await trio.sleep_forever()

    logs: list[ExitLog] = []

    async def app_tree() -> None:
        async with open_supervisor(name="app", intensity=0) as app:
            logs.append(ExitLog.attach(app))
            app.spawn(owner, name="o", restart="transient")
            await trio.sleep_forever()

    with pytest.raises(RestartIntensityExceeded) as raised:
        await app_tree()
    [log] = logs
    error = raised.value
    assert (error.supervisor, error.child) == ("app", "o")
    inner_error = error.__cause__
    assert isinstance(inner_error, RestartIntensityExceeded)
    assert (inner_error.supervisor, inner_error.child) == ("app/o/inner", "c")
    assert inner_error.__cause__ is crashes[-1]
    assert [(r.actor.path, r.reason) for r in log.records] == [
        ("app/o/inner/c", Crashed(crashes[0])),
        ("app/o/inner/c", Crashed(crashes[1])),
        ("app/o/inner", Crashed(inner_error)),
        ("app/o", Crashed(inner_error)),
        ("app", Crashed(error)),
    ]
    assert all(r.at == 0 for r in log.records)


def test_temporary_crash_restarts_nothing() -> None:
    """A temporary child's crash restarts no one, whatever the strategy (all strategies)."""

    async def main() -> list[tuple[str, str]]:
        async def idle(mailbox: Mailbox[object]) -> None:
            async for _ in mailbox:
                pass

        async def crasher(mailbox: Mailbox[object]) -> None:
            await trio.sleep(1)
            raise Boom(mailbox.ref.info.path, mailbox.ref.info.id)

        out = []
        for strategy in STRATEGIES:
            async with open_supervisor(name=strategy, strategy=strategy, intensity=0) as sup:
                log = ExitLog.attach(sup)
                sup.spawn(idle, name="first")
                sup.spawn(crasher, name="t", restart="temporary")
                sup.spawn(idle, name="last")
                await trio.sleep(5)
                assert [r.actor.path for r in log.records] == [f"{strategy}/t"]
                assert sorted(sup.children()) == ["first", "last"]
                assert all(ref.info.id in (1, 3) for ref in sup.children().values())
                sup.shutdown()
            out += [(r.actor.path, str(r.reason).split(":")[0]) for r in log.records]
        return out

    out = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert [kind for _, kind in out] == ["crashed", "shutdown", "shutdown", "shutdown"] * 3


async def test_cancel_reason_survives_a_coinciding_inner_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Exposes a bug: when a scope inside the actor is cancelled at the moment its supervisor
    is (typically a ``trio.sleep`` or ``move_on_after`` deadline expiring at the same tick),
    the escaping ``trio.Cancelled`` carries the inner scope's reason, and the actor (and
    every supervisor it passes through) records that instead of the supervisor's reason.

    Made deterministic here by cancelling the inner scope explicitly just before the
    supervisor; with a real deadline it depends on which task trio runs first.
    """
    sups: list[Supervisor] = []

    async def actor(mailbox: Mailbox[object]) -> None:
        with trio.CancelScope() as inner:
            inner.cancel("inner timeout")
            sups[0].cancel("bye")
            await trio.sleep_forever()

    async with open_supervisor(name="app") as app:
        sups.append(app)
        log = ExitLog.attach(app)
        app.spawn(actor, name="s")
    assert log.reasons() == {"app/s": Cancelled("bye"), "app": Cancelled("bye")}
