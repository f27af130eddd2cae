"""``keep_warm``: a run waiting only on pending actions keeps its actor (and its slot) for a
while when recent actions were resolved that quickly, and passivates at once otherwise.

What it holds is seen through ``max_active_runs=1``: a warm run keeps the one slot, so
another thread's run starts only when the warm one resumes and ends, or when its window
closes. Every test runs under the autojump clock, whose time the model reads at each step.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing

from pai_actors import (
    Finish,
    MemoryStore,
    ModelEvent,
    ModelRequest,
    ModelToolMessage,
    PostgresStore,
    RuntimeConfigError,
    TextDelta,
    ToolCallEvent,
    ToolPart,
    create_agent_runtime,
    define_agent,
)
from pai_actors._core.call_record import Approval, CallRecord, Episode
from pai_actors._runtime.warm import DEFAULT_KEEP_WARM, KeepWarm, waited
from pai_actors._store.base import PutCall, PutRun, Write
from pai_actors.testing import create_test_runtime

from .test_runtime_admission import ask_tool

WINDOW = 0.25


agent = define_agent(name="a", tools={"ask": ask_tool})


class StepLog:
    """A model that asks for one ``ask`` call with the user's text as the job, then answers
    ``done``; it logs ``(job, step, trio time)`` at each step (step 1 asks, step 2 answers)."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, int, float]] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        job = next(m.text for m in request.messages if m.role == "user")
        answered = any(isinstance(m, ModelToolMessage) for m in request.messages)
        self.steps.append((job, 2 if answered else 1, trio.current_time()))
        if answered:
            yield TextDelta("done")
            yield Finish("stop")
            return
        yield ToolCallEvent(tool_call_id="call_1", tool_name="ask", input={"job": job})
        yield Finish("tool-calls")

    def of(self, job: str) -> list[tuple[int, float]]:
        return [(step, at) for j, step, at in self.steps if j == job]

    def order(self, *jobs: str) -> list[tuple[str, int]]:
        return [(j, step) for j, step, _ in self.steps if j in jobs]


async def _approve(rt: Any, thread_id: str) -> None:
    actions = await rt.pending_actions(thread_id)
    assert actions
    for action in actions:
        assert (await action.submit({"approved": True})).status == "accepted"


async def _conversation(rt: Any, job: str, *, answer_after: float = 0.0) -> str:
    """One thread: send ``job``, wait for its approval, approve it after ``answer_after``
    seconds, wait for the run to end."""
    thread_id = await rt.create_thread("s")
    await rt.send(thread_id, job)
    await rt.wait_idle(thread_id)
    await trio.sleep(answer_after)
    await _approve(rt, thread_id)
    await rt.wait_idle(thread_id)
    return thread_id


@asynccontextmanager
async def after_quick_approvals(model: Any, **options: Any) -> AsyncIterator[Any]:
    """A test runtime (``keep_warm=WINDOW`` unless ``options`` say otherwise) in which 32
    conversations were approved the moment they waited: recent actions are quick."""
    options.setdefault("keep_warm", WINDOW)
    async with create_test_runtime(agent, model=model, **options) as rt:
        for i in range(32):
            await _conversation(rt, f"warm-up {i}")
        yield rt


def _tool_parts(state: Any) -> list[ToolPart]:
    return [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]


async def _suspended(rt: Any, job: str) -> str:
    thread_id = await rt.create_thread("s")
    await rt.send(thread_id, job)
    await rt.wait_idle(thread_id)
    return thread_id


async def _status(rt: Any, thread_id: str) -> str:
    return (await rt.get_state(thread_id)).runs[-1].status


async def test_a_new_runtime_passivates_a_waiting_run_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Nothing was resolved yet (ten thousand approvals that never come look like this): the
    waiting run gives its slot up at once, and the next thread's run starts then."""
    model = StepLog()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, max_active_runs=1) as rt:
            await _suspended(rt, "a")
            await _suspended(rt, "b")
    assert model.of("a") == [(1, 0.0)]
    assert model.of("b") == [(1, 0.0)]


async def test_after_quick_resolutions_a_waiting_run_keeps_its_slot_until_its_window_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = StepLog()
    with trio.fail_after(10):
        async with after_quick_approvals(model, max_active_runs=1) as rt:
            began = trio.current_time()
            a = await _suspended(rt, "a")  # wait_idle returns: a warm run is idle
            assert trio.current_time() == began
            b = await _suspended(rt, "b")  # its run waits for the slot a keeps
            assert await _status(rt, a) == "waiting"
            assert await _status(rt, b) == "waiting"
    assert model.of("a") == [(1, began)]
    assert model.of("b") == [(1, began + WINDOW)]  # a passivated when its window closed


async def test_a_submission_within_the_window_resumes_the_warm_run_in_its_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The warm run resumes and ends before the run queued behind it starts; passivated, it
    would have let that run go first and queued its own resume behind it."""
    model = StepLog()
    with trio.fail_after(10):
        async with after_quick_approvals(model, max_active_runs=1) as rt:
            a = await _suspended(rt, "a")
            b = await rt.create_thread("s")
            await rt.send(b, "b")  # queued behind a's warm run
            await trio.sleep(WINDOW / 2)
            await _approve(rt, a)
            await rt.wait_idle(a)
            await rt.wait_idle(b)
            assert await _status(rt, a) == "completed"
            [part] = _tool_parts(await rt.get_state(a))
            assert part.output == {"approved": True}
    assert model.order("a", "b") == [("a", 1), ("a", 2), ("b", 1)]


async def test_with_keep_warm_0_a_waiting_run_always_passivates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = StepLog()
    with trio.fail_after(10):
        async with after_quick_approvals(model, max_active_runs=1, keep_warm=0) as rt:
            a = await _suspended(rt, "a")
            b = await rt.create_thread("s")
            await rt.send(b, "b")
            await rt.wait_idle(b)
            await _approve(rt, a)
            await rt.wait_idle(a)
    began = model.of("a")[0][1]
    assert model.of("b") == [(1, began)]
    assert model.order("a", "b") == [("a", 1), ("b", 1), ("a", 2)]


async def test_slow_resolutions_turn_keeping_warm_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Runs kept warm that passivate with nothing, then actions resolved after longer than
    the window: soon no run is kept warm."""
    model = StepLog()
    with trio.fail_after(100):
        async with after_quick_approvals(model, max_active_runs=1) as rt:
            for i in range(32):
                await _conversation(rt, f"slow {i}", answer_after=1.0)
            began = trio.current_time()
            await _suspended(rt, "a")
            await _suspended(rt, "b")
    assert model.of("b") == [(1, began)]


async def test_a_run_warm_when_the_runtime_closes_stays_waiting_for_the_next(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    model = StepLog()
    with trio.fail_after(10):
        async with after_quick_approvals(model, store=store) as rt:
            a = await _suspended(rt, "a")
            began = trio.current_time()
        assert trio.current_time() == began  # the close did not wait for the window
        assert [r.status for r in await store.list_runs(a)] == ["waiting"]
        async with create_test_runtime(
            agent, model=model, store=store.reopen(), keep_warm=WINDOW
        ) as rt:
            await _approve(rt, a)
            await rt.wait_idle(a)
            assert await _status(rt, a) == "completed"
    assert model.of("a") == [(1, began), (2, began)]


async def test_cancelling_a_warm_run_records_it_and_its_call_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = StepLog()
    with trio.fail_after(10):
        async with after_quick_approvals(model) as rt:
            a = await _suspended(rt, "a")
            run_id = (await rt.get_state(a)).runs[-1].run_id
            state = await rt.cancel_run(run_id, "changed my mind")
            assert state.status == "cancelled"
            await rt.wait_idle(a)
            assert await rt.pending_actions(a) == []
            [part] = _tool_parts(await rt.get_state(a))
            assert part.state == "output-error"
    assert model.of("a")[1:] == []  # never resumed


class TwoCalls:
    """Asks for two ``ask`` calls at once (jobs ``<text>-1`` and ``<text>-2``), then answers."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            yield TextDelta("done")
            yield Finish("stop")
            return
        text = next(m.text for m in request.messages if m.role == "user")
        for k in (1, 2):
            yield ToolCallEvent(
                tool_call_id=f"call_{k}", tool_name="ask", input={"job": f"{text}-{k}"}
            )
        yield Finish("tool-calls")


@pytest.mark.parametrize("seed", range(8))
async def test_two_submissions_at_once_to_a_warm_run_resume_both_calls_once(
    seed: int, autojump_clock: trio.testing.MockClock
) -> None:
    """The first submission records the warm run ``running`` in its own commit; the second,
    reading it so, writes only its call. Whichever order trio runs them in (the sleeps
    before them vary it), both calls resume once and the run completes."""
    with trio.fail_after(10):
        async with after_quick_approvals(TwoCalls()) as rt:
            thread_id = await _suspended(rt, "a")
            actions = await rt.pending_actions(thread_id)
            assert len(actions) == 2
            results: list[str] = []

            async def submit(action: Any, pause: int) -> None:
                for _ in range(pause):
                    await trio.lowlevel.checkpoint()
                results.append((await action.submit({"approved": True})).status)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(submit, actions[0], seed % 3)
                nursery.start_soon(submit, actions[1], seed // 3)
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert results == ["accepted", "accepted"]
    assert [r.status for r in state.runs] == ["completed"]
    parts = _tool_parts(state)
    assert [p.output for p in parts] == [{"approved": True}, {"approved": True}]


class HoldingStore(MemoryStore):
    """Once ``armed``, holds the task of the first commit that records a run ``running``
    together with a call (a submission to a passivated or warm run) after the commit
    landed, until ``release`` is set: what others do meanwhile sees it committed."""

    armed = False
    held = False
    release: trio.Event | None = None

    async def commit(self, writes: Sequence[Write]) -> None:
        await super().commit(writes)
        runs = [w.stored.status for w in writes if isinstance(w, PutRun)]
        if self.armed and not self.held and runs == ["running"]:
            if any(isinstance(w, PutCall) for w in writes):
                self.held = True
                assert self.release is not None
                await self.release.wait()


async def test_a_warm_run_woken_before_its_first_submitter_returns_takes_its_status_as_stored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first submission's commit (the call, and the run ``running``) landed; before its
    task takes the run's new revision to the run, the second submission wakes the run,
    which resumes both calls and would write ``running`` over the revision it holds: it finds
    the run stored ``running`` already and goes on from that revision."""
    store = HoldingStore()
    store.release = trio.Event()
    with trio.fail_after(10):
        async with after_quick_approvals(TwoCalls(), store=store) as rt:
            thread_id = await _suspended(rt, "a")
            first, second = await rt.pending_actions(thread_id)
            store.armed = True
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first.submit, {"approved": True})
                await trio.testing.wait_all_tasks_blocked()
                assert store.held  # its commit landed; its task waits
                assert (await second.submit({"approved": True})).status == "accepted"
                await trio.testing.wait_all_tasks_blocked()
                store.release.set()
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    parts = _tool_parts(state)
    assert [p.output for p in parts] == [{"approved": True}, {"approved": True}]


async def test_cancel_run_of_a_warm_run_whose_submission_just_committed_cancels_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The submission's commit (the call, the run ``running``) landed; before its task hands
    the run the new revision, ``cancel_run`` stops the run, which records itself cancelled
    over that revision: the run ends cancelled and is not resumed."""
    store = HoldingStore()
    store.release = trio.Event()
    model = StepLog()
    outcome: dict[str, str] = {}
    with trio.fail_after(30):
        async with after_quick_approvals(model, store=store) as rt:
            a = await _suspended(rt, "a")
            run_id = (await rt.get_state(a)).runs[-1].run_id
            [action] = await rt.pending_actions(a)
            store.armed = True

            async def submit() -> None:
                outcome["submit"] = (await action.submit({"approved": True})).status

            async def cancel() -> None:
                outcome["cancel"] = (await rt.cancel_run(run_id, "stop")).status

            async with trio.open_nursery() as nursery:
                nursery.start_soon(submit)
                await trio.testing.wait_all_tasks_blocked()
                assert store.held
                nursery.start_soon(cancel)
                await trio.testing.wait_all_tasks_blocked()
                store.release.set()
            await trio.sleep(1)
            await rt.wait_idle(a)
            state = await rt.get_state(a)
    assert outcome == {"submit": "accepted", "cancel": "cancelled"}
    assert [r.status for r in state.runs] == ["cancelled"]
    assert model.of("a")[1:] == []  # never resumed


async def test_a_runtime_on_a_store_shared_with_other_nodes_keeps_no_run_warm(
    database: str,
) -> None:
    """A waiting run gives its thread's lease up in the commit that records it waiting, so a
    node does not keep it warm: after quick approvals, the waiting run still gives its slot
    to the next thread's run at once, and its own resume waits for it (on one node's store
    it would keep the slot and resume first)."""
    model = StepLog()
    with trio.fail_after(60), PostgresStore(database, node_id="n1") as store:
        async with after_quick_approvals(model, store=store, max_active_runs=1) as rt:
            a = await _suspended(rt, "a")
            b = await rt.create_thread("s")
            await rt.send(b, "b")
            await _approve(rt, a)
            await rt.wait_idle(a)
            await rt.wait_idle(b)
    assert model.order("a", "b") == [("a", 1), ("b", 1), ("a", 2)]


@pytest.mark.parametrize("value", [-0.1, math.inf, math.nan, True, "0.25", None])
def test_a_bad_keep_warm_is_refused_at_creation(value: Any) -> None:
    with pytest.raises(RuntimeConfigError, match="keep_warm must be a finite number"):
        create_agent_runtime(agent, model=StepLog(), keep_warm=value)


def test_the_default_keep_warm() -> None:
    assert DEFAULT_KEEP_WARM == 0.25
    assert KeepWarm(DEFAULT_KEEP_WARM).seconds == 0.25


# -- the policy, alone ----------------------------------------------------------------------


def test_the_policy_keeps_runs_warm_only_once_most_recent_waits_were_quick() -> None:
    policy = KeepWarm(0.5)
    assert policy.window() == 0.0  # nothing seen yet
    quick = 0
    while policy.window() == 0.0:
        policy.resolved(0.1)
        quick += 1
    assert quick == 22  # 1 - (31/32)**22 >= 0.5: about half of the last 32 waits
    assert policy.window() == 0.5
    policy.went_cold()
    assert policy.window() == 0.0  # just below half again
    policy.resolved(0.5)  # within the window counts as quick
    assert policy.window() == 0.5
    for _ in range(32):
        policy.resolved(0.6)
    assert policy.window() == 0.0
    assert policy.quick_share < 0.5


def test_unknown_waits_and_a_zero_window_count_nothing() -> None:
    policy = KeepWarm(0.5)
    for _ in range(100):
        policy.resolved(None)
    assert policy.quick_share == 0.0
    off = KeepWarm(0)
    for _ in range(100):
        off.resolved(0.0)
    assert off.window() == 0.0


def test_a_record_says_how_long_its_latest_action_waited() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    record = CallRecord(name="ask", tool_call_id="c")
    assert waited(record) is None
    pending = Episode("act_1", "approval", None, suspended_at=at)
    assert waited(CallRecord(name="ask", tool_call_id="c", episodes=(pending,))) is None
    first = Episode(
        "act_1",
        "approval",
        None,
        suspended_at=at,
        state="submitted",
        resolved_at=at + timedelta(seconds=3),
    )
    second = Episode(
        "act_2",
        "approval",
        None,
        suspended_at=at + timedelta(seconds=5),
        state="submitted",
        resolved_at=at + timedelta(seconds=5, milliseconds=20),
    )
    both = CallRecord(name="ask", tool_call_id="c", episodes=(first, second))
    assert waited(both) == pytest.approx(0.02)
    approval = Approval(
        "c",
        requested_at=at,
        state="submitted",
        approved=True,
        resolved_at=at + timedelta(seconds=1.5),
    )
    assert waited(CallRecord(name="ask", tool_call_id="c", approval=approval)) == 1.5
