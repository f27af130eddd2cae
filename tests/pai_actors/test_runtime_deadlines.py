"""Deadlines on pending actions in the runtime: each kind of action (a suspension, an approval,
a registered tool's client output, a request-time client tool's) resolves at its deadline as
declared (cancelled, failed, or with a default payload) and the run goes on as after a
submission; exactly once against a racing submission; across a restart; in a call with
children; never after its run was cancelled; one timer however many actions wait.

Everything runs under the autojump clock: a test waits for what the deadline causes (its run
ending), and trio's clock jumps to the deadline because the runtime's timer sleeps until it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    DEADLINE_REASON,
    AgentRuntime,
    CancelAtDeadline,
    ClientTool,
    FailAtDeadline,
    MemoryBacking,
    MemoryStore,
    MigrationRequired,
    ModelRequest,
    ModelToolMessage,
    OnDeadline,
    ResolveAtDeadline,
    ResumeEntry,
    RunStatusChanged,
    SqliteStore,
    StoreError,
    SuspendPoint,
    ThreadState,
    ToolContext,
    ToolPart,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors._store.base import PutCall, Write
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # trio time 0 of a test runtime's clock
HOUR = timedelta(hours=1)

Kind = Literal["suspension", "approval", "output", "client_tool"]
KINDS: tuple[Kind, ...] = ("suspension", "approval", "output", "client_tool")
NAMES: dict[Kind, str] = {
    "suspension": "review",
    "approval": "pay",
    "output": "ask",
    "client_tool": "pick",
}
DEFAULTS: dict[Kind, Any] = {
    "suspension": {"approved": False},
    "approval": {"approved": False, "reason": "no answer in time"},
    "output": {"answer": "M"},
    "client_tool": ["red"],
}
ANSWERS: dict[Kind, Any] = {  # what a client would submit
    "suspension": {"approved": True},
    "approval": {"approved": True},
    "output": {"answer": "L"},
    "client_tool": ["blue"],
}
LATE = "Nobody answered in time."


class Query(BaseModel):
    q: int


class Decision(BaseModel):
    approved: bool


class Answer(BaseModel):
    answer: str


def _outcome(kind: Kind, name: str) -> OnDeadline:
    if name == "cancel":
        return CancelAtDeadline()
    if name == "fail":
        return FailAtDeadline(LATE)
    return ResolveAtDeadline(DEFAULTS[kind])


def _review_tool(seen: list[str], by_input: dict[int, Any] | None = None, **point: Any) -> Any:
    """Suspends at "review": with ``ctx.suspend(deadline=by_input[q])`` for an input ``q``
    there, else with the point's deadline (``point``)."""

    def execute(ctx: ToolContext) -> Any:
        seen.append(ctx.entry.type)
        if isinstance(ctx.entry, ResumeEntry):
            return {"approved": ctx.entry.resume.approved}
        deadline = (by_input or {}).get(ctx.input.q)
        return ctx.suspend("review", {"q": ctx.input.q}, deadline=deadline)

    return define_tool(
        id="test.review.v1",
        description="Review.",
        input_schema=Query,
        suspend={"review": SuspendPoint(suspend_schema=Query, resume_schema=Decision, **point)},
        execute=execute,
    )


_DEADLINE_BY_INPUT: dict[int, Any] = {
    2: timedelta(minutes=5),
    3: EPOCH + timedelta(minutes=10),
    4: EPOCH - HOUR,  # already past: expires at once
    5: datetime(2026, 1, 1, 1),  # naive: a bug in the tool
}


def _setup(kind: Kind, outcome: OnDeadline, seen: list[str]) -> tuple[Any, list[ClientTool]]:
    """An agent (and the request's client tools) whose one tool waits for ``kind`` of action
    with a deadline of an hour, resolved at it by ``outcome``."""
    if kind == "suspension":
        tools: dict[str, Any] = {"review": _review_tool(seen, deadline=HOUR, on_deadline=outcome)}
        return define_agent(name="a", tools=tools), []
    if kind == "approval":

        def pay(ctx: ToolContext) -> Any:
            seen.append(ctx.entry.type)
            return {"paid": ctx.input.q}

        tool = define_tool(id="test.pay.v1", description="Pay.", input_schema=Query, execute=pay)
        registration = ToolRegistration(
            tool, needs_approval=True, approval_deadline=HOUR, on_approval_deadline=outcome
        )
        return define_agent(name="a", tools={"pay": registration}), []
    if kind == "output":
        ask = define_tool(
            id="test.ask.v1", description="Ask.", input_schema=Query, output_schema=Answer
        )
        registration = ToolRegistration(ask, output_deadline=HOUR, on_output_deadline=outcome)
        return define_agent(name="a", tools={"ask": registration}), []
    pick = ClientTool(
        "pick", "Pick a colour.", {"type": "object"}, deadline=HOUR, on_deadline=outcome
    )
    return define_agent(name="a", tools={}), [pick]


def tool_parts(state: ThreadState) -> list[ToolPart]:
    return [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]


def _ended(state: ThreadState | None) -> bool:
    return state is not None and state.runs[-1].status in ("completed", "failed", "cancelled")


async def until_the_run_ends(rt: AgentRuntime, thread_id: str) -> ThreadState:
    """Wait, without sleeping, until the thread's last run ended; its state then."""
    async with rt.watch(thread_id, snapshot=True) as updates:
        if not _ended(updates.snapshot):
            async for update in updates:
                if isinstance(update, RunStatusChanged) and update.run.status in (
                    "completed",
                    "failed",
                    "cancelled",
                ):
                    break
    return await rt.get_state(thread_id)


def _tool_results(request: ModelRequest) -> list[Any]:
    return [
        part.to_wire()["output"]
        for message in request.messages
        if isinstance(message, ModelToolMessage)
        for part in message.parts
    ]


@pytest.mark.parametrize("outcome", ["cancel", "fail", "resolve"])
@pytest.mark.parametrize("kind", KINDS)
async def test_each_kind_of_action_resolves_at_its_deadline_as_declared(
    kind: Kind, outcome: str, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[str] = []
    agent, client_tools = _setup(kind, _outcome(kind, outcome), seen)
    model = ScriptedModel([[tool_call(NAMES[kind], {"q": 1})], text("Done.")])
    with trio.fail_after(2 * 3600):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go", client_tools=client_tools)
            await rt.wait_idle(thread_id)
            # The pending action, its part and the part's action all show the deadline.
            [action] = await rt.pending_actions(thread_id)
            assert action.expires_at == EPOCH + HOUR
            state = await rt.get_state(thread_id)
            [part] = tool_parts(state)
            wire = state.to_wire()["messages"][1]
            assert wire["parts"][1]["expiresAt"] == "2026-01-01T01:00:00Z"  # type: ignore[index,call-overload]
            from_part = rt.get_pending_action(wire, wire["parts"][1])  # type: ignore[arg-type,index,call-overload]
            assert from_part is not None
            assert (from_part.ref, from_part.expires_at) == (action.ref, EPOCH + HOUR)

            state = await until_the_run_ends(rt, thread_id)
            assert trio.current_time() == 3600.0  # at the deadline, not before, not later
            late = await action.submit(ANSWERS[kind])
    assert late.status == "rejected"
    assert "already resolved" in (late.error or "")
    assert [run.status for run in state.runs] == ["completed"]
    [part] = tool_parts(state)
    assert part.expires_at is None  # nothing is pending any more
    # The run went on as after a submission: the model read the call's result.
    assert len(model.requests) == 2
    assert len(_tool_results(model.requests[1])) == 1
    at = EPOCH + HOUR
    if outcome == "cancel":
        assert (part.state, part.error_text) == (
            "output-error",
            "The tool call was cancelled: the deadline passed",
        )
        assert part.cancelled is not None
        assert (part.cancelled.reason, part.cancelled.at) == (DEADLINE_REASON, at)
    elif outcome == "fail":
        assert (part.state, part.error_text, part.cancelled) == ("output-error", LATE, None)
    elif kind == "suspension":
        assert (part.state, part.output) == ("output-available", {"approved": False})
    elif kind == "approval":
        assert part.state == "output-denied"
        assert part.approval is not None
        assert (part.approval.approved, part.approval.reason) == (False, "no answer in time")
    else:
        assert (part.state, part.output) == ("output-available", DEFAULTS[kind])
    if kind == "suspension":
        [episode] = part.suspensions
        state_of = {"cancel": "cancelled", "fail": "failed", "resolve": "submitted"}
        assert (episode.state, episode.resolved_at, episode.expires_at) == (
            state_of[outcome],
            at,
            at,
        )
        assert seen == (["initial", "resume"] if outcome == "resolve" else ["initial"])
    elif kind == "approval":
        assert seen == []  # never approved: never ran


async def test_an_approval_granted_at_its_deadline_runs_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    agent, _ = _setup("approval", ResolveAtDeadline({"approved": True}), seen)
    model = ScriptedModel([[tool_call("pay", {"q": 7})], text("Paid.")])
    async with create_test_runtime(agent, model=model) as rt:
        thread_id = await rt.create_thread("s")
        await rt.send(thread_id, "pay")
        state = await until_the_run_ends(rt, thread_id)
    [part] = tool_parts(state)
    assert (part.state, part.output, seen) == ("output-available", {"paid": 7}, ["initial"])
    assert _tool_results(model.requests[1]) == [{"type": "json", "value": {"paid": 7}}]


async def test_ctx_suspend_gives_one_wait_its_own_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    review = _review_tool(seen, _DEADLINE_BY_INPUT, deadline=HOUR)
    agent = define_agent(name="a", tools={"review": review})
    calls = [tool_call("review", {"q": q}) for q in (1, 2, 3, 4, 5)]
    model = ScriptedModel([calls, text("Done.")])
    async with create_test_runtime(agent, model=model) as rt:
        thread_id = await rt.create_thread("s")
        await rt.send(thread_id, "go")
        await rt.wait_idle(thread_id)
        pending = {a.input["q"]: a.expires_at for a in await rt.pending_actions(thread_id)}  # type: ignore[index,call-overload]
        assert pending == {
            1: EPOCH + HOUR,
            2: EPOCH + timedelta(minutes=5),
            3: EPOCH + timedelta(minutes=10),
        }
        state = await until_the_run_ends(rt, thread_id)
    one, two, three, four, five = tool_parts(state)
    assert [p.cancelled.at for p in (one, two, three, four) if p.cancelled] == [
        EPOCH + HOUR,  # the point's deadline
        EPOCH + timedelta(minutes=5),  # a timedelta from when it suspended
        EPOCH + timedelta(minutes=10),  # an instant
        EPOCH,  # an instant already past: at once
    ]
    assert five.state == "output-error"
    assert "a datetime deadline must be timezone-aware" in (five.error_text or "")


class RacingStore(MemoryStore):
    """Holds the two commits that resolve the action (the deadline's and a submission's)
    until both were judged against the same revision, then lets ``winner`` commit first."""

    def __init__(self, winner: str) -> None:
        super().__init__()
        self.winner = winner
        self.arrived: list[str] = []
        self.both = trio.Event()
        self.first_done = trio.Event()

    async def commit(self, writes: Any) -> None:
        racer = _racer(writes)
        if racer is None:
            await super().commit(writes)
            return
        self.arrived.append(racer)
        if len(self.arrived) == 2:
            self.both.set()
        await self.both.wait()
        if racer != self.winner:
            await self.first_done.wait()
        try:
            await super().commit(writes)
        finally:
            if racer == self.winner:
                self.first_done.set()


def _racer(writes: list[Write]) -> str | None:
    """Which resolution ``writes`` commit: a submission's or the deadline's (or neither)."""
    for write in writes:
        if isinstance(write, PutCall) and write.call.record.expires_at is not None:
            if write.stored.record.expires_at is None:
                resolved = write.stored.record.episodes[-1].state
                return "submission" if resolved == "submitted" else "deadline"
    return None


@pytest.mark.parametrize("winner", ["submission", "deadline"])
async def test_a_deadline_racing_a_submission_resolves_the_action_exactly_once(
    winner: str, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[str] = []
    agent, _ = _setup("suspension", CancelAtDeadline(), seen)
    model = ScriptedModel([[tool_call("review", {"q": 1})], text("Done.")])
    store = RacingStore(winner)
    with trio.fail_after(2 * 3600):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            # Judged now, committed once the deadline's resolution was judged too (at 1 h).
            result = await action.submit({"approved": True})
            assert trio.current_time() == 3600.0
            state = await until_the_run_ends(rt, thread_id)
            call = await store.get_call(thread_id, "call_1")
    assert sorted(store.arrived) == ["deadline", "submission"]  # both raced
    assert call is not None
    # The step, the suspension, one resolution, and for a submission the resume's start and
    # its output: no write of the loser.
    assert call.revision == (5 if winner == "submission" else 3)
    [part] = tool_parts(state)
    [episode] = part.suspensions
    if winner == "submission":
        assert result.status == "accepted"
        assert (episode.state, part.output, seen) == (
            "submitted",
            {"approved": True},
            ["initial", "resume"],
        )
    else:
        assert result.status == "rejected"
        assert (
            result.error
            == "action 'call_1.1' is already resolved (cancelled); an action resolves once"
        )
        assert (episode.state, seen) == ("cancelled", ["initial"])
        assert part.cancelled is not None
        assert part.cancelled.reason == DEADLINE_REASON
    assert [run.status for run in state.runs] == ["completed"]
    assert len(model.requests) == 2  # the run went on once


async def test_a_submission_before_the_deadline_leaves_nothing_to_fire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    agent, _ = _setup("suspension", CancelAtDeadline(), seen)
    model = ScriptedModel([[tool_call("review", {"q": 1})], text("Done.")])
    async with create_test_runtime(agent, model=model) as rt:
        thread_id = await rt.create_thread("s")
        await rt.send(thread_id, "go")
        await rt.wait_idle(thread_id)
        [action] = await rt.pending_actions(thread_id)
        assert (await action.submit({"approved": True})).status == "accepted"
        await rt.wait_idle(thread_id)
        before = await rt.store.get_call(thread_id, "call_1")
        await trio.sleep(2 * 3600)  # past the deadline it had: nothing happens
        after = await rt.store.get_call(thread_id, "call_1")
        assert await rt.store.list_expiring_actions() == []
    assert before == after
    assert seen == ["initial", "resume"]
    assert len(model.requests) == 2


@pytest.mark.parametrize("kind", ["suspension", "client_tool"])
async def test_a_deadline_that_passed_while_no_runtime_ran_fires_when_one_opens(
    kind: Kind, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[str] = []
    agent, client_tools = _setup(kind, ResolveAtDeadline(DEFAULTS[kind]), seen)
    model = ScriptedModel([[tool_call(NAMES[kind], {"q": 1})], text("Done.")])
    path = tmp_path / "app.db"
    with SqliteStore(path) as store:
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go", client_tools=client_tools)
            await rt.wait_idle(thread_id)
    await trio.sleep(2 * 3600)  # no runtime runs for two hours: the deadline passes
    with SqliteStore(path) as store:
        async with create_test_runtime(agent, model=model, store=store) as rt:
            # Nothing loads the thread: the timer finds the deadline in the store, resolves the
            # action, and the run it activates completes.
            await trio.testing.wait_all_tasks_blocked()
            run = await store.get_run(run_id)
            call = await store.get_call(thread_id, "call_1")
    assert trio.current_time() == 2 * 3600.0
    assert run is not None
    assert run.status == "completed"
    assert call is not None
    record = call.record
    assert (record.finish, record.output) == ("output-available", DEFAULTS[kind])
    if kind == "suspension":
        assert seen == ["initial", "resume"]
        assert record.episodes[0].resolved_at == EPOCH + 2 * HOUR  # when a runtime could
    assert len(model.requests) == 2


async def test_a_deadline_in_a_call_with_children_resumes_it_and_its_children_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def lookup(ctx: ToolContext) -> Any:
        return {"found": ctx.input.q * 10}

    child = define_tool(
        id="test.lookup.v1", description="Look up.", input_schema=Query, execute=lookup
    )

    async def plan(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            found = await ctx.tools.lookup.execute({"q": ctx.input.q})
            return {"approved": ctx.entry.resume.approved, **found}
        return ctx.suspend("confirm", {"q": ctx.input.q})

    parent = define_tool(
        id="test.plan.v1",
        description="Plan, once confirmed.",
        input_schema=Query,
        suspend={
            "confirm": SuspendPoint(
                suspend_schema=Query,
                resume_schema=Decision,
                deadline=HOUR,
                on_deadline=ResolveAtDeadline({"approved": True}),
            )
        },
        tools={"lookup": child},
        execute=plan,
    )
    agent = define_agent(name="a", tools={"plan": parent})
    model = ScriptedModel([[tool_call("plan", {"q": 4})], text("Planned.")])
    async with create_test_runtime(agent, model=model) as rt:
        thread_id = await rt.create_thread("s")
        await rt.send(thread_id, "plan")
        state = await until_the_run_ends(rt, thread_id)
    [part] = tool_parts(state)
    assert (part.state, part.output) == ("output-available", {"approved": True, "found": 40})
    assert trio.current_time() == 3600.0


async def test_cancelling_the_run_cancels_its_deadlines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    agent, _ = _setup("suspension", ResolveAtDeadline({"approved": True}), seen)
    model = ScriptedModel([[tool_call("review", {"q": 1})], text("Done.")])
    async with create_test_runtime(agent, model=model) as rt:
        thread_id = await rt.create_thread("s")
        run_id = await rt.send(thread_id, "go")
        await rt.wait_idle(thread_id)
        assert (await rt.cancel_run(run_id, "the user left")).status == "cancelled"
        cancelled = await rt.store.get_call(thread_id, "call_1")
        assert await rt.store.list_expiring_actions() == []
        await trio.sleep(2 * 3600)  # past the deadline: it does not fire late
        after = await rt.store.get_call(thread_id, "call_1")
        state = await rt.get_state(thread_id)
    assert after == cancelled
    [part] = tool_parts(state)
    assert part.cancelled is not None
    assert (part.cancelled.reason, part.cancelled.at) == ("the user left", EPOCH)
    assert [run.status for run in state.runs] == ["cancelled"]
    assert seen == ["initial"]
    assert len(model.requests) == 1


def _task_count() -> int:
    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(child) for n in task.child_nurseries for child in n.child_tasks)

    return count(trio.lowlevel.current_root_task())


async def test_many_waiting_actions_cost_one_timer_which_fires_each_at_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each thread's action is nearer than the last one's: every new deadline must wake the
    one timer early (it was asleep until the previous nearest)."""
    seen: list[str] = []
    count = 20
    by_input = {100 + m: timedelta(minutes=m) for m in range(60 - count + 1, 61)}
    agent = define_agent(name="a", tools={"review": _review_tool(seen, by_input)})

    def step(request: ModelRequest) -> Any:
        if _tool_results(request):
            return text("Done.")
        minutes = 60 - int(request.messages[-1].text)  # type: ignore[union-attr]
        return [tool_call("review", {"q": 100 + minutes})]

    model = ScriptedModel([step] * (2 * count))
    async with create_test_runtime(agent, model=model) as rt:
        threads = []
        for n in range(count):
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, str(n))
            await rt.wait_idle(thread_id)
            threads.append(thread_id)
            if n == 0:
                tasks_with_one = _task_count()
        assert _task_count() == tasks_with_one  # waiting actions hold no task, nor timers
        expiring = await rt.store.list_expiring_actions()
        assert [a.ref.thread_id for a in expiring] == threads[::-1]  # the last one first
        states = [await until_the_run_ends(rt, thread_id) for thread_id in threads]
    for n, state in enumerate(states):
        [part] = tool_parts(state)
        assert part.cancelled is not None
        assert part.cancelled.at == EPOCH + timedelta(minutes=60 - n)  # each at its own
    assert trio.current_time() == 3600.0


async def test_an_action_this_runtime_cannot_resolve_does_not_hold_up_the_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first thread's tool is no longer registered in the second runtime: its thread needs
    a migration (it is left pending, and never raises at open), and the other's deadline
    fires on time all the same."""
    seen: list[str] = []
    backing = MemoryBacking()
    old_tools = {"review": _review_tool(seen, deadline=HOUR), "other": _review_tool(seen)}
    model = ScriptedModel([[tool_call("review", {"q": 1})], [tool_call("other", {"q": 2})]])
    by_input = {2: 2 * HOUR}
    async with create_test_runtime(
        define_agent(name="a", tools=old_tools), model=model, store=MemoryStore(backing)
    ) as rt:
        first = await rt.create_thread("s")
        await rt.send(first, "go")
        await rt.wait_idle(first)
    new_tools = {"other": _review_tool(seen, by_input)}
    model = ScriptedModel([[tool_call("other", {"q": 2})], text("Done.")])
    async with create_test_runtime(
        define_agent(name="a", tools=new_tools), model=model, store=MemoryStore(backing)
    ) as rt:
        second = await rt.create_thread("s")
        await rt.send(second, "go")
        state = await until_the_run_ends(rt, second)  # at its deadline, after the first's
        stuck = await rt.store.get_call(first, "call_1")
        with pytest.raises(MigrationRequired):
            await rt.get_state(first)
    assert trio.current_time() == 2 * 3600.0
    [part] = tool_parts(state)
    assert part.cancelled is not None
    assert part.cancelled.at == EPOCH + 2 * HOUR
    assert stuck is not None
    assert stuck.record.phase == "suspended"  # still pending, for a runtime that has the tool


class FailingOnce(MemoryStore):
    """Fails the first read of the deadlines at or after the first deadline, and the first
    read of one thread's call after that."""

    def __init__(self, thread_id: str) -> None:
        super().__init__()
        self.thread_id = thread_id
        self.failed: list[str] = []

    async def list_expiring_actions(self, **kwargs: Any) -> Any:
        found = await super().list_expiring_actions(**kwargs)
        if trio.current_time() >= 3600 and "list" not in self.failed:
            self.failed.append("list")
            raise StoreError("the disk is busy")
        return found

    async def get_call(self, thread_id: str, tool_call_id: str) -> Any:
        call = await super().get_call(thread_id, tool_call_id)
        if thread_id == self.thread_id and self.failed == ["list"]:
            self.failed.append("call")
            raise StoreError("the disk is busy")
        return call


async def test_a_store_that_fails_delays_a_deadline_and_loses_none(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []
    agent = define_agent(name="a", tools={"review": _review_tool(seen, deadline=HOUR)})
    call = [tool_call("review", {"q": 1})]
    model = ScriptedModel([call, call, text("Done."), text("Done.")])
    store = FailingOnce("thread_1")
    async with create_test_runtime(agent, model=model, store=store) as rt:
        threads = [await rt.create_thread("s"), await rt.create_thread("s")]
        for thread_id in threads:
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
        first, second = [await until_the_run_ends(rt, t) for t in threads]
    assert store.failed == ["list", "call"]
    # The failed read is retried a second later; the call that failed to resolve a minute
    # after that, and the other thread's is resolved meanwhile.
    [part] = tool_parts(second)
    assert part.cancelled is not None
    assert part.cancelled.at == EPOCH + HOUR + timedelta(seconds=1)
    [part] = tool_parts(first)
    assert part.cancelled is not None
    assert part.cancelled.at == EPOCH + HOUR + timedelta(seconds=61)
    assert "reading the deadlines of pending actions failed" in caplog.text


class LoadFailsOnce(MemoryStore):
    """Fails the first read of a thread at or after the first deadline, once ``failing``."""

    failing = False

    async def get_thread(self, thread_id: str) -> Any:
        if self.failing and trio.current_time() >= 3600:
            self.failing = False
            raise StoreError("the disk is busy")
        return await super().get_thread(thread_id)


async def test_a_thread_that_fails_to_load_at_its_deadline_is_tried_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    agent = define_agent(name="a", tools={"review": _review_tool(seen, deadline=HOUR)})
    model = ScriptedModel([[tool_call("review", {"q": 1})], text("Done.")])
    store = LoadFailsOnce()
    async with create_test_runtime(agent, model=model, store=store) as rt:
        thread_id = await rt.create_thread("s")
        await rt.send(thread_id, "go")
        await rt.wait_idle(thread_id)
    store.failing = True  # the next runtime's read of the thread at the deadline fails
    async with create_test_runtime(agent, model=model, store=store) as rt:
        # Nothing loads the thread here but the deadline: the mock clock's hours pass.
        await trio.sleep(2 * 3600)
        state = await rt.get_state(thread_id)
    assert not store.failing  # the load did fail once
    [part] = tool_parts(state)
    assert part.cancelled is not None  # a minute later, it fired
    assert part.cancelled.at == EPOCH + HOUR + timedelta(seconds=60)
