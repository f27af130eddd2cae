"""Property-based cancellation tests of the runtime, across runs and runtimes.

Hypothesis draws a scenario: 1-3 threads, each with one run whose model asks, in its first
step, for 1-4 tool calls of four kinds:

- ``sleepy``: sleeps a drawn time, then returns;
- ``ask``: sleeps, suspends at ``approval``; each resume sleeps again, then suspends again
  (a new episode) until it was resumed ``rounds`` times, then returns;
- ``external``: no ``execute`` (its output comes from a client, through the implicit action);
- ``boom``: sleeps, then raises.

Then a sequence of operations, each after a drawn (simulated) delay, sometimes at a settled
moment (every task blocked), sometimes in the same tick as whatever else wakes: valid and
invalid submissions, ``cancel_action``, ``fail_action``, ``cancel_run`` (while calls
execute, while they are suspended, right after a submission, or racing one), a second
resolution of an action that already resolved, ``wait_idle``, and closing the runtime and
opening a new one on the same store. At the end a last runtime loads every thread, resolves
whatever is still pending until every run is over, and is closed.

Checked along the way and at the end (see :func:`check_parts`, :func:`check_quiescent`,
:func:`check_closed_store` and :func:`check_final`):

- every call ends in exactly one terminal state (``output-available`` / ``output-error``;
  the cancelled ones with ``errorText`` starting "The tool call was cancelled" and the
  ``cancelled`` sidecar set, and only those) or is still pending; at rest a pending call's
  run is ``waiting``, and after a close it stays ``waiting`` (or keeps an accepted
  submission whose resume never began, as stored intent);
- a cancelled run has no call running or pending; ``cancel_run`` records every call that was
  in flight as cancelled, with its reason, and an ``execute`` interrupted by a cancellation saw
  its ``ctx.signal`` aborted with the same reason;
- nothing runs once a runtime closed: every ``execute`` exited, the trio task count is back
  where it was, no run claims to be ``running``;
- ``pending_actions`` lists exactly the parts that show a pending action (a non-null
  ``pendingSuspension``, with the same action id; or, for a tool without ``execute``, an
  ``input-available`` part, action id = tool call id); each part has at most one ``pending``
  suspension, and it is the last;
- an action resolves once: a valid submission to a listed action is accepted, an invalid one
  is rejected and leaves it pending, a second submit/cancel/fail is rejected and changes
  nothing; the resume of an accepted submission enters ``execute`` at most once, and never
  two executes of one call overlap;
- when the model sees the results, every call of its step has one (no call running or
  pending), matching its part.

Scenarios replay deterministically: ``MockClock(autojump_threshold=0)``, the test runtime's
counter ids, and trio's scheduler seeded by Hypothesis (see
``tests/supervisors/test_cancellation_properties.py``). A failing example prints as
constructor calls that can be pasted into :func:`play`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from pai_actors import (
    Finish,
    MemoryStore,
    ModelEvent,
    ModelRequest,
    ModelToolMessage,
    ModelUserMessage,
    PendingActionRef,
    ResumeEntry,
    RuntimeClosed,
    SuspendPoint,
    TextDelta,
    ToolCallEvent,
    ToolContext,
    define_agent,
    define_tool,
    message_steps,
)
from pai_actors.testing import create_test_runtime

CANCELLED = "The tool call was cancelled"
TERMINAL = ("output-available", "output-error")
DEADLINE = 100_000.0
"""Simulated seconds a scenario may take: a hang ends in ``TooSlowError``, not a stuck test."""

# -- scenarios ------------------------------------------------------------------------------

Kind = Literal["sleepy", "ask", "external", "boom"]
OpKind = Literal[
    "submit",
    "invalid",
    "cancel_action",
    "fail_action",
    "cancel_run",
    "submit_cancel_run",
    "race",
    "resolve_again",
    "wait_idle",
    "reopen",
]


@dataclass(frozen=True)
class CallPlan:
    """One tool call: ``delay`` is each ``execute``'s sleep; ``ask`` suspends ``rounds``
    times."""

    kind: Kind
    delay: float = 0.0
    rounds: int = 1


@dataclass(frozen=True)
class ThreadPlan:
    """A thread's run: the model waits ``model_delay`` in each step, then calls ``calls``."""

    calls: tuple[CallPlan, ...]
    model_delay: float = 0.0


@dataclass(frozen=True)
class Op:
    """After ``wait`` simulated seconds (and, if ``settle``, once every task is blocked), do
    ``kind`` on thread ``thread``; ``pick`` chooses among its pending actions (modulo)."""

    kind: OpKind
    thread: int = 0
    pick: int = 0
    wait: float = 0.0
    settle: bool = True
    reason: str | None = None


@dataclass(frozen=True)
class Scenario:
    threads: tuple[ThreadPlan, ...]
    ops: tuple[Op, ...]


DELAYS = st.sampled_from([0.0, 0.5, 1.0, 1.5, 3.0])
WAITS = st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0, 2.0])
REASONS = st.sampled_from([None, "stop", "user left"])
OP_KINDS: tuple[OpKind, ...] = (  # repeated kinds are drawn more often
    "submit",
    "submit",
    "submit",
    "submit",
    "invalid",
    "cancel_action",
    "fail_action",
    "cancel_run",
    "submit_cancel_run",
    "race",
    "resolve_again",
    "wait_idle",
    "reopen",
)

call_plans = st.builds(
    CallPlan,
    kind=st.sampled_from(("sleepy", "ask", "ask", "external", "boom")),
    delay=DELAYS,
    rounds=st.integers(1, 3),
)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n_threads = draw(st.integers(1, 3))
    threads = tuple(
        ThreadPlan(
            calls=tuple(draw(st.lists(call_plans, min_size=1, max_size=4))),
            model_delay=draw(st.sampled_from([0.0, 0.5])),
        )
        for _ in range(n_threads)
    )
    ops = draw(
        st.lists(
            st.builds(
                Op,
                kind=st.sampled_from(OP_KINDS),
                thread=st.integers(0, n_threads - 1),
                pick=st.integers(0, 23),
                wait=WAITS,
                settle=st.booleans(),
                reason=REASONS,
            ),
            max_size=16,
        )
    )
    return Scenario(threads, tuple(ops))


# -- tools and model ------------------------------------------------------------------------


class Job(BaseModel):
    key: str
    delay: float = 0.0
    rounds: int = 1


class Decision(BaseModel):
    approved: bool


class Round(BaseModel):
    round: int


@dataclass(frozen=True)
class Execution:
    """One ``execute`` that exited: how, and what its ``ctx.signal`` said then."""

    tool_call_id: str
    action_id: str | None  # the resumed action, None for the initial entry
    outcome: Literal["returned", "raised", "cancelled"]
    aborted: bool
    reason: str | None


@dataclass
class Probe:
    """What the tools saw (their ``execute`` bodies record it in ``try``/``finally``)."""

    live: dict[str, str | None] = field(default_factory=dict)  # call id -> resumed action
    initial: Counter[str] = field(default_factory=Counter)
    resumed: Counter[str] = field(default_factory=Counter)
    executions: list[Execution] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def probed(self, body: Callable[[ToolContext], Awaitable[Any]]) -> Any:
        async def execute(ctx: ToolContext) -> Any:
            call_id = ctx.thread.tool_call_id
            if call_id in self.live:
                self.violations.append(f"two executes of {call_id} overlap")
            action_id = None
            if isinstance(ctx.entry, ResumeEntry):
                action_id = ctx.entry.action.action_id
                self.resumed[action_id] += 1
            else:
                self.initial[call_id] += 1
            self.live[call_id] = action_id
            outcome: Literal["returned", "raised", "cancelled"] = "returned"
            try:
                return await body(ctx)
            except trio.Cancelled:
                outcome = "cancelled"
                raise
            except Exception:
                outcome = "raised"
                raise
            finally:
                self.live.pop(call_id, None)
                signal = ctx.signal
                self.executions.append(
                    Execution(call_id, action_id, outcome, signal.aborted, signal.reason)
                )

        return execute


def make_agent(probe: Probe) -> Any:
    async def sleepy(ctx: ToolContext) -> Any:
        await trio.sleep(ctx.input.delay)
        return {"slept": ctx.input.key}

    async def ask(ctx: ToolContext) -> Any:
        await trio.sleep(ctx.input.delay)
        if not isinstance(ctx.entry, ResumeEntry):
            return ctx.suspend("approval", {"round": 1})
        done = len(ctx.suspend_history)  # the episodes so far, the resumed one included
        if done < ctx.input.rounds:
            return ctx.suspend("approval", {"round": done + 1})
        return {"approved": ctx.entry.resume.approved, "rounds": done}

    async def boom(ctx: ToolContext) -> Any:
        await trio.sleep(ctx.input.delay)
        raise ValueError(f"boom {ctx.input.key}")

    approval = SuspendPoint(suspend_schema=Round, resume_schema=Decision)
    tools = {
        "sleepy": define_tool(
            id="prop.sleepy.v1",
            description="Sleep.",
            input_schema=Job,
            execute=probe.probed(sleepy),
        ),
        "ask": define_tool(
            id="prop.ask.v1",
            description="Ask.",
            input_schema=Job,
            suspend={"approval": approval},
            execute=probe.probed(ask),
        ),
        "external": define_tool(
            id="prop.external.v1",
            description="External.",
            input_schema=Job,
            output_schema=Decision,
        ),
        "boom": define_tool(
            id="prop.boom.v1", description="Boom.", input_schema=Job, execute=probe.probed(boom)
        ),
    }
    return define_agent(name="prop", tools=tools)


def call_id(thread: int, index: int) -> str:
    return f"t{thread}c{index}"


class ScenarioModel:
    """Thread ``i``'s user text is ``"thread i"``: the first step calls its planned tools,
    a step that sees tool results answers ``"done"``."""

    def __init__(self, plans: tuple[ThreadPlan, ...]) -> None:
        self.plans = plans
        self.requests: list[tuple[int, ModelRequest]] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        user = next(m for m in request.messages if isinstance(m, ModelUserMessage))
        thread = int(user.text.split()[-1])
        self.requests.append((thread, request))
        plan = self.plans[thread]
        await trio.sleep(plan.model_delay)
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            yield TextDelta("done")
            yield Finish("stop")
            return
        for i, call in enumerate(plan.calls):
            job = {"key": call_id(thread, i), "delay": call.delay, "rounds": call.rounds}
            yield ToolCallEvent(tool_call_id=call_id(thread, i), tool_name=call.kind, input=job)
        yield Finish("tool-calls")


# -- running a scenario ---------------------------------------------------------------------


@dataclass
class World:
    """One scenario's run: its store, probes, and what the operations were told."""

    scenario: Scenario
    store: MemoryStore = field(default_factory=MemoryStore)
    probe: Probe = field(default_factory=Probe)
    model: Any = None
    agent: Any = None
    tids: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    # action_id -> (ref, how it was resolved, the payload / reason / error)
    resolved: dict[str, tuple[PendingActionRef, str, Any]] = field(default_factory=dict)
    kinds: dict[str, Kind] = field(default_factory=dict)  # tool_call_id -> kind
    fails: int = 0
    baseline_tasks: int = 0
    performed: Counter[str] = field(default_factory=Counter)  # what the ops did (statistics)


def tool_parts(state: Any) -> list[dict[str, Any]]:
    return [
        p.to_wire() for m in state.messages for p in m.parts if p.type not in ("text", "step-start")
    ]


def is_cancelled(part: dict[str, Any]) -> bool:
    return part["state"] == "output-error" and part["errorText"].startswith(CANCELLED)


def pending_id(part: dict[str, Any]) -> str | None:
    """The id of the pending action the part shows, if any."""
    if part["pendingSuspension"] is not None:
        return str(part["pendingSuspension"]["actionId"])
    if part["type"] == "tool-external" and part["state"] == "input-available":
        return str(part["toolCallId"])
    return None


def resumable(part: dict[str, Any]) -> bool:
    """An accepted submission whose resume has not (yet) ended: stored intent."""
    return (
        part["state"] == "input-available"
        and part["pendingSuspension"] is None
        and bool(part["suspensions"])
        and part["suspensions"][-1]["state"] == "submitted"
    )


def cancelled_text(reason: str | None) -> str:
    return f"{CANCELLED}: {reason}" if reason else f"{CANCELLED}."


def check_parts(world: World, thread: int, state: Any, actions: list[Any]) -> None:
    """What holds at any settled moment (and after a close): the parts agree with
    themselves, with their run, and with ``pending_actions``."""
    [run] = state.runs
    parts = tool_parts(state)
    for part in parts:
        cid = part["toolCallId"]
        where = f"{cid}: {part}"
        suspensions = part["suspensions"]
        states = [s["state"] for s in suspensions]
        assert states.count("pending") <= 1, where
        assert "pending" not in states[:-1], where
        expected = suspensions[-1] if states and states[-1] == "pending" else None
        assert part["pendingSuspension"] == expected, where
        assert part["state"] in (*TERMINAL, "input-available"), where
        if part["state"] in TERMINAL:
            assert part["pendingSuspension"] is None, where
            assert ("errorText" in part) == (part["state"] == "output-error"), where
            cancelled = is_cancelled(part)
            assert (part["cancelled"] is not None) == cancelled, where
            if cancelled:
                assert part["errorText"] == cancelled_text(part["cancelled"]["reason"]), where
        else:
            assert part["cancelled"] is None, where
            assert run.status in ("running", "waiting"), f"{run}: {where}"
        if run.status == "cancelled":
            assert part["state"] in TERMINAL, f"the run is cancelled, yet {where}"
    shown = {pending_id(p): p for p in parts if pending_id(p) is not None}
    listed = {a.ref.action_id: a for a in actions}
    assert set(listed) == set(shown), (listed, shown)
    for action_id, action in listed.items():
        part = shown[action_id]
        assert action.ref.tool_call_id == part["toolCallId"]
        assert action.ref.run_id == run.run_id
        if part["pendingSuspension"] is not None:
            assert action.name == f"{action.ref.tool_name}.approval"
            assert action.input == part["pendingSuspension"]["input"]
        else:
            assert action.name == "external"
            assert action.input == part["input"]


async def settled_views(rt: Any, world: World) -> list[tuple[Any, list[Any]]]:
    """Every thread's state and pending actions, read while every other task is blocked."""
    for tid in world.tids:  # loading may activate runs: let that happen first
        await rt.get_state(tid)
    await trio.testing.wait_all_tasks_blocked()
    views = [(await rt.get_state(tid), await rt.pending_actions(tid)) for tid in world.tids]
    for thread, (state, actions) in enumerate(views):
        check_parts(world, thread, state, actions)
    return views


async def check_quiescent(rt: Any, world: World) -> None:
    """Every thread idle: each call is terminal or pending, a pending call's run waits, a
    waiting run has a pending call, and no ``execute`` runs."""
    for _ in range(3):  # an activation may start a run that then has to go idle
        for tid in world.tids:
            await rt.get_state(tid)
            await rt.wait_idle(tid)
    views = await settled_views(rt, world)
    assert not world.probe.live, world.probe.live
    for state, actions in views:
        [run] = state.runs
        parts = tool_parts(state)
        assert run.status != "running", (run, parts)
        for part in parts:
            if part["state"] not in TERMINAL:
                assert pending_id(part) is not None, f"idle, yet {part}"
                assert run.status == "waiting", (run, part)
        if run.status == "waiting":
            assert actions, f"{run} waits on nothing: {parts}"


async def check_closed_store(world: World) -> None:
    """After a runtime closed: nothing runs, every unfinished call is durable and its run
    waits for it."""
    await trio.testing.wait_all_tasks_blocked()
    assert trio.lowlevel.current_statistics().tasks_living == world.baseline_tasks
    assert not world.probe.live, world.probe.live
    store = world.store.reopen()
    for tid in world.tids:
        [run] = await store.list_runs(tid)
        assert run.status != "running", f"{run} still runs after the runtime closed"
        parts = [
            p.to_wire()
            for m in await store.list_messages(tid)
            for p in m.parts
            if p.type not in ("text", "step-start")
        ]
        listed = {a.ref.action_id for a in await store.list_pending_actions(tid)}
        assert listed == {pending_id(p) for p in parts if pending_id(p) is not None}
        for part in parts:
            if part["state"] in TERMINAL:
                continue
            assert run.status == "waiting", (run, part)
            if resumable(part):
                # Kept as intent only if its resume never began execute (else: cancelled).
                action_id = part["suspensions"][-1]["actionId"]
                assert world.probe.resumed[action_id] == 0, part
            else:
                assert pending_id(part) is not None, part


def find_part(parts: list[dict[str, Any]], tool_call_id: str) -> dict[str, Any]:
    [part] = [p for p in parts if p["toolCallId"] == tool_call_id]
    return part


def episode(part: dict[str, Any], action_id: str) -> dict[str, Any] | None:
    return next((s for s in part["suspensions"] if s["actionId"] == action_id), None)


def valid_payload(pick: int) -> dict[str, Any]:
    return {"approved": pick % 2 == 0}


async def pick_action(rt: Any, world: World, op: Op) -> Any:
    actions = await rt.pending_actions(world.tids[op.thread])
    return actions[op.pick % len(actions)] if actions else None


async def accept_submission(rt: Any, world: World, action: Any, payload: Any) -> None:
    result = await rt.submit_action(action.ref, payload)
    assert result.status == "accepted", (action, result)
    world.resolved[action.ref.action_id] = (action.ref, "submit", payload)


async def in_flight(rt: Any, world: World, thread: int) -> tuple[str, set[str]]:
    """The run's status and its unfinished calls, read right now."""
    state = await rt.get_state(world.tids[thread])
    [run] = state.runs
    return run.status, {p["toolCallId"] for p in tool_parts(state) if p["state"] not in TERMINAL}


async def check_run_cancelled(
    rt: Any,
    world: World,
    op: Op,
    before: tuple[str, set[str]] | None,
    finished: frozenset[str] | set[str] = frozenset(),
) -> None:
    """After ``cancel_run`` returned: the run is over; if it was active at ``before`` (a
    settled snapshot), it is cancelled and so is every call then in flight (but those in
    ``finished``, whose output a submission racing the cancel provided)."""
    state = await rt.get_state(world.tids[op.thread])
    [run] = state.runs
    parts = tool_parts(state)
    assert run.status not in ("running", "waiting"), (run, parts)
    if before is None:
        return
    status, flying = before
    if status not in ("running", "waiting"):
        assert run.status == status
        return
    assert run.status == "cancelled", (run, parts)
    for cid in flying:
        part = find_part(parts, cid)
        if cid in finished and part["state"] == "output-available":
            continue
        assert is_cancelled(part), f"{cid} was in flight when its run was cancelled: {part}"
        assert part["cancelled"]["reason"] == op.reason, part


def note(world: World, what: str, thread: int) -> None:
    """Count ``what`` (an operation that did something) with what the thread was doing."""
    prefix = call_id(thread, 0)[:-1]
    running = [a for c, a in world.probe.live.items() if c.startswith(prefix)]
    resuming = any(a is not None for a in running)
    doing = "resuming" if resuming else "executing" if running else "not executing"
    world.performed[f"{what} ({doing})"] += 1


async def do_op(rt: Any, world: World, op: Op) -> None:
    tid = world.tids[op.thread]
    run_id = world.run_ids[op.thread]
    if op.kind in ("cancel_run", "wait_idle", "resolve_again"):
        note(world, op.kind, op.thread)
    if op.kind == "wait_idle":
        await rt.wait_idle(tid)
    elif op.kind == "cancel_run":
        before = await in_flight(rt, world, op.thread) if op.settle else None
        await rt.cancel_run(run_id, op.reason)
        await check_run_cancelled(rt, world, op, before)
    elif op.kind == "resolve_again":
        if not world.resolved:
            return
        resolved = sorted(world.resolved)
        action_id = resolved[op.pick % len(resolved)]
        ref = world.resolved[action_id][0]
        parts = tool_parts(await rt.get_state(ref.thread_id))
        before = find_part(parts, ref.tool_call_id)
        how = op.pick % 3
        if how == 0:
            result = await rt.submit_action(ref, valid_payload(op.pick))
        elif how == 1:
            result = await rt.cancel_action(ref, op.reason)
        else:
            result = await rt.fail_action(ref, "failed again")
        assert result.status == "rejected", (ref, result)
        after = find_part(tool_parts(await rt.get_state(ref.thread_id)), ref.tool_call_id)
        assert episode(after, action_id) == episode(before, action_id)
        if before["state"] in TERMINAL:
            assert after == before
    else:
        action = await pick_action(rt, world, op)
        if action is None:
            return
        ref = action.ref
        action_id = ref.action_id
        note(world, op.kind, op.thread)
        if op.kind == "submit":
            await accept_submission(rt, world, action, valid_payload(op.pick))
            listed = [a.ref.action_id for a in await rt.pending_actions(tid)]
            assert action_id not in listed
        elif op.kind == "invalid":
            result = await action.submit({"approved": "maybe"})
            assert result.status == "rejected", result
            assert "approved" in (result.error or ""), result
            listed = [a.ref.action_id for a in await rt.pending_actions(tid)]
            assert action_id in listed, "a rejected submission left the action pending"
        elif op.kind == "cancel_action":
            result = await rt.cancel_action(ref, op.reason)
            assert result.status == "accepted", result
            world.resolved[action_id] = (ref, "cancel", op.reason)
            part = find_part(tool_parts(await rt.get_state(tid)), ref.tool_call_id)
            assert part["errorText"] == cancelled_text(op.reason), part
            assert part["cancelled"]["reason"] == op.reason, part
        elif op.kind == "fail_action":
            world.fails += 1
            error = f"failed by the test ({world.fails})"
            result = await rt.fail_action(ref, error)
            assert result.status == "accepted", result
            world.resolved[action_id] = (ref, "fail", error)
            part = find_part(tool_parts(await rt.get_state(tid)), ref.tool_call_id)
            assert (part["state"], part["errorText"], part["cancelled"]) == (
                "output-error",
                error,
                None,
            )
        elif op.kind == "submit_cancel_run":
            # Cancel the run right after a submission: while its resume starts.
            before = await in_flight(rt, world, op.thread) if op.settle else None
            await accept_submission(rt, world, action, valid_payload(op.pick))
            await rt.cancel_run(run_id, op.reason)
            await check_run_cancelled(rt, world, op, before, {ref.tool_call_id})
        elif op.kind == "race":
            before = await in_flight(rt, world, op.thread) if op.settle else None
            results = []

            async def submit() -> None:
                results.append(await rt.submit_action(ref, valid_payload(op.pick)))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.cancel_run, run_id, op.reason)
                nursery.start_soon(submit)
            [result] = results
            if result.status == "accepted":
                world.resolved[action_id] = (ref, "submit", valid_payload(op.pick))
            await check_run_cancelled(rt, world, op, before, {ref.tool_call_id})
        else:  # pragma: no cover
            raise AssertionError(op.kind)


@dataclass
class Racer:
    """A submission or ``cancel_run`` started right before the runtime closes."""

    what: Literal["submit", "cancel_run"]
    thread: int
    reason: str | None = None
    ref: PendingActionRef | None = None
    payload: Any = None
    outcome: str = "not run"


async def race_the_close(rt: Any, world: World, op: Op, nursery: trio.Nursery) -> Racer | None:
    """Start (``pick % 3``) nothing, a submission or a ``cancel_run`` in a task outside
    the runtime, and let it run ``pick // 3`` checkpoints before the runtime closes."""
    how = op.pick % 3
    if how == 0:
        return None
    if how == 1:
        action = await pick_action(rt, world, op)
        if action is None:
            return None
        racer = Racer("submit", op.thread, ref=action.ref, payload=valid_payload(op.pick))
    else:
        racer = Racer("cancel_run", op.thread, reason=op.reason)
    note(world, f"close racing {racer.what}", op.thread)

    async def race() -> None:
        try:
            if racer.ref is not None:
                racer.outcome = (await rt.submit_action(racer.ref, racer.payload)).status
            else:
                await rt.cancel_run(world.run_ids[racer.thread], racer.reason)
                racer.outcome = "returned"
        except RuntimeClosed:
            racer.outcome = "closed"

    nursery.start_soon(race)
    for _ in range(op.pick // 3):
        await trio.lowlevel.checkpoint()
    return racer


async def check_racer(world: World, racer: Racer) -> None:
    """A submission that raced the close resolved its action (accepted) or left it pending
    (raised); a ``cancel_run`` that returned left its run over."""
    store = world.store.reopen()
    tid = world.tids[racer.thread]
    if racer.ref is not None:
        action_id = racer.ref.action_id
        listed = {a.ref.action_id for a in await store.list_pending_actions(tid)}
        assert racer.outcome in ("accepted", "closed"), racer
        if racer.outcome == "accepted":
            world.resolved[action_id] = (racer.ref, "submit", racer.payload)
            assert action_id not in listed, racer
        else:
            assert action_id in listed, f"{racer} raised, yet resolved its action"
    elif racer.outcome == "returned":
        [run] = await store.list_runs(tid)
        assert run.status not in ("running", "waiting"), f"{racer} returned, yet {run}"


async def run_scenario(scenario: Scenario) -> World:
    world = World(scenario)
    world.model = ScenarioModel(scenario.threads)
    world.agent = make_agent(world.probe)
    world.baseline_tasks = trio.lowlevel.current_statistics().tasks_living
    segments: list[list[Op]] = [[]]
    for op in scenario.ops:
        segments[-1].append(op)
        if op.kind == "reopen":  # the runtime closes after it, a new one opens
            segments.append([])
    with trio.fail_after(DEADLINE):
        for number, segment in enumerate(segments):
            racer = None
            async with trio.open_nursery() as outer:
                async with create_test_runtime(
                    world.agent, model=world.model, store=world.store.reopen()
                ) as rt:
                    if number == 0:
                        for i, plan in enumerate(scenario.threads):
                            tid = await rt.create_thread("tenant")
                            world.tids.append(tid)
                            world.run_ids.append(await rt.send(tid, f"thread {i}"))
                            for j, call in enumerate(plan.calls):
                                world.kinds[call_id(i, j)] = call.kind
                    for op in segment:
                        await trio.sleep(op.wait)
                        if op.settle:
                            await settled_views(rt, world)
                        if op.kind == "reopen":
                            racer = await race_the_close(rt, world, op, outer)
                        else:
                            await do_op(rt, world, op)
                    if not segment or segment[-1].kind != "reopen":
                        await settled_views(rt, world)
            await check_closed_store(world)
            if racer is not None:
                await check_racer(world, racer)
        # A last runtime: load everything, resolve what is pending until every run is over.
        async with create_test_runtime(
            world.agent, model=world.model, store=world.store.reopen()
        ) as rt:
            await check_quiescent(rt, world)
            for _ in range(10):
                pending = [a for tid in world.tids for a in await rt.pending_actions(tid)]
                if not pending:
                    break
                for action in pending:
                    await accept_submission(rt, world, action, {"approved": True})
                await check_quiescent(rt, world)
            for tid in world.tids:
                [run] = (await rt.get_state(tid)).runs
                assert run.status in ("completed", "cancelled"), run
                assert not await rt.pending_actions(tid)
        await check_closed_store(world)
    return world


async def check_final(world: World) -> None:
    """The end state against what every operation was told and what the tools saw."""
    store = world.store.reopen()
    parts_by_id: dict[str, dict[str, Any]] = {}
    for thread, tid in enumerate(world.tids):
        [run] = await store.list_runs(tid)
        messages = await store.list_messages(tid)
        parts = [
            p.to_wire() for m in messages for p in m.parts if p.type not in ("text", "step-start")
        ]
        planned = [call_id(thread, j) for j in range(len(world.scenario.threads[thread].calls))]
        called = sorted(p["toolCallId"] for p in parts)
        # Closed or cancelled during the model's first step, a run has no calls.
        assert called == sorted(planned) or (not called and run.status == "cancelled"), parts
        for part in parts:
            parts_by_id[part["toolCallId"]] = part
            assert part["state"] in TERMINAL, part
        if run.status == "completed":
            final = message_steps(messages[-1].to_wire()["parts"])[-1]  # type: ignore[arg-type]
            assert final == [{"type": "step-start"}, {"type": "text", "text": "done"}]
        else:
            assert run.status == "cancelled", run
    for cid, part in parts_by_id.items():
        kind = world.kinds[cid]
        where = f"{cid} ({kind}): {part}"
        if is_cancelled(part):
            continue
        if part["state"] == "output-available":
            if kind == "sleepy":
                assert part["output"] == {"slept": cid}, where
            elif kind == "ask":
                rounds = world.scenario.threads[int(cid[1])].calls[int(cid[3:])].rounds
                assert part["output"]["rounds"] == rounds, where
            else:
                assert kind == "external", where
        else:
            error = part["errorText"]
            if kind == "boom":
                assert error == f"boom {cid}", where
            else:
                assert kind in ("ask", "external"), where
                assert error.startswith("failed by the test"), where
        assert world.probe.initial[cid] <= 1, where
    for action_id, (ref, how, detail) in world.resolved.items():
        part = parts_by_id[ref.tool_call_id]
        where = f"{how} {action_id}: {part}"
        ep = episode(part, action_id)
        if world.kinds[ref.tool_call_id] == "external":
            assert ep is None, where
            if how == "submit":
                assert part["output"] == detail, where
        else:
            assert ep is not None, where
            assert ep["state"] == {"submit": "submitted", "cancel": "cancelled"}.get(
                how, "failed"
            ), where
            if how == "submit":
                assert ep["resume"] == detail, where
        if how == "cancel":
            assert part["errorText"] == cancelled_text(detail), where
        elif how == "fail":
            assert (part["errorText"], part["cancelled"]) == (detail, None), where
    assert all(n <= 1 for n in world.probe.resumed.values()), world.probe.resumed
    assert not world.probe.violations, world.probe.violations
    for execution in world.probe.executions:
        if execution.outcome != "cancelled":
            continue
        part = parts_by_id[execution.tool_call_id]
        where = f"{execution}: {part}"
        assert is_cancelled(part), where
        assert execution.aborted, where
        assert execution.reason == part["cancelled"]["reason"], where
    # The model saw results only once every call of its step had one.
    for thread, request in world.model.requests:
        results = [
            result.to_wire()
            for message in request.messages
            if isinstance(message, ModelToolMessage)
            for result in message.parts
        ]
        if not results:
            continue
        planned = [call_id(thread, j) for j in range(len(world.scenario.threads[thread].calls))]
        assert sorted(r["toolCallId"] for r in results) == sorted(planned), results
        for result in results:
            part = parts_by_id[result["toolCallId"]]
            if part["state"] == "output-error":
                assert result["output"] == {"type": "error-text", "value": part["errorText"]}
            else:
                assert result["output"] == {"type": "json", "value": part["output"]}


def play(scenario: Scenario) -> World:
    async def main() -> World:
        world = await run_scenario(scenario)
        await check_final(world)
        return world

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# Each example opens one to five runtimes and re-reads every thread at each settled moment
# (~35 ms): 100 examples take ~4 s locally (200, the ci profile's default, ~7 s), so a CI
# runner several times slower still stays well under the suite's 60 s target.
@settings(max_examples=100)
@given(scenarios())
def test_cancellation_keeps_every_call_accounted_for(scenario: Scenario) -> None:
    play(scenario)


# -- focused examples -------------------------------------------------------------------------


def test_cancel_run_during_execution_suspension_and_resumption() -> None:
    scenario = Scenario(
        threads=(
            ThreadPlan(calls=(CallPlan("sleepy", 3.0), CallPlan("ask", 0.5, rounds=2))),
            ThreadPlan(calls=(CallPlan("ask", 1.0), CallPlan("external"))),
            ThreadPlan(calls=(CallPlan("ask", 0.0, rounds=3), CallPlan("boom", 1.0))),
        ),
        ops=(
            Op("cancel_run", thread=0, wait=1.0, reason="stop"),
            Op("submit_cancel_run", thread=1, wait=1.0, reason="user left"),
            Op("submit", thread=2, wait=1.0),
            Op("reopen"),
            Op("race", thread=2, settle=False),
        ),
    )
    world = play(scenario)
    assert world.probe.executions
