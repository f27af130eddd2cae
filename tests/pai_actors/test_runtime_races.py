"""Races and failures around the runtime's actors (review findings, one test each).

The admission invariants several of them guarded by hand (one starter per thread, no run
being cancelled activated or started, what the close leaves to park, when a thread is idle)
are now properties of the pure admission table, checked on random event sequences by
``AdmissionMachine`` in ``test_admission.py``; each such test's docstring names the rule or
invariant. The tests stay: they check the trio shell and the store around the table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    AgentRuntime,
    MemoryStore,
    ResumeEntry,
    RuntimeClosed,
    StoreConflict,
    SuspendPoint,
    ThreadBusy,
    ToolContext,
    ToolRegistration,
    create_agent_runtime,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Query(BaseModel):
    n: int


class YieldingStore(MemoryStore):
    """A conforming store whose commit yields before applying (as any I/O store does)."""

    async def commit(self, writes: Any) -> None:
        await trio.lowlevel.checkpoint()
        await super().commit(writes)


def _tool_parts(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]


async def test_map_context_raising_at_execution_ends_the_call_in_output_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[int] = []

    def map_context(**_: Any) -> None:
        calls.append(1)
        if len(calls) == 2:  # the first call is the step's preparation
            raise RuntimeError("context unavailable")

    tool = define_tool(id="t.q.v1", description="Q.", input_schema=Query, execute=lambda ctx: "ok")
    agent = define_agent(name="a", tools={"q": ToolRegistration(tool, map_context=map_context)})
    model = ScriptedModel([[tool_call("q", {"n": 1})], text("done"), text("again")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            tid = await rt.create_thread("s")
            await rt.send(tid, "go")
            await rt.wait_idle(tid)
            state = await rt.get_state(tid)
            assert [r.status for r in state.runs] == ["completed"]
            assert [(p.state, p.error_text) for p in _tool_parts(state)] == [
                ("output-error", "context unavailable")
            ]
            assert await rt.pending_actions(tid) == []
            await rt.send(tid, "again")  # the thread is free
            await rt.wait_idle(tid)


async def test_methods_after_close_raise_runtime_closed_and_write_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={})
    store = MemoryStore()
    with trio.fail_after(10):
        rt = create_test_runtime(agent, model=ScriptedModel([text("x")]), store=store)
        async with rt:
            tid = await rt.create_thread("s")
        with pytest.raises(RuntimeClosed):
            await rt.send(tid, "late")
        with pytest.raises(RuntimeClosed):
            await rt.create_thread("s")
        with pytest.raises(RuntimeClosed):
            await rt.cancel_run("run_x")
        assert await store.list_runs(tid) == []
        assert await store.list_messages(tid) == []
        async with create_test_runtime(
            agent, model=ScriptedModel([text("y")]), store=store.reopen()
        ) as rt2:
            await rt2.send(tid, "next")
            await rt2.wait_idle(tid)


@pytest.mark.parametrize("store_type", [MemoryStore, YieldingStore])
async def test_two_concurrent_sends_one_wins_the_other_gets_thread_busy(
    store_type: type[MemoryStore], autojump_clock: trio.testing.MockClock
) -> None:
    """One starter per thread: now a property of ``AdmissionMachine`` (``send_begins``:
    ``can_send`` and a refused ``SendBegan``; ``table_agrees_with_the_shell``: the thread's
    starter)."""
    agent = define_agent(name="a", tools={})
    model = ScriptedModel([text("one"), text("two")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store_type()) as rt:
            tid = await rt.create_thread("s")
            results: list[object] = []

            async def send(message: str) -> None:
                try:
                    results.append(await rt.send(tid, message))
                except ThreadBusy as exc:
                    results.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send, "a")
                nursery.start_soon(send, "b")
            await rt.wait_idle(tid)
            state = await rt.get_state(tid)
            assert sum(isinstance(r, ThreadBusy) for r in results) == 1
            assert [r.status for r in state.runs] == ["completed"]
            assert [m.role for m in state.messages] == ["user", "assistant"]


class Summary(BaseModel):
    summary: str


class Decision(BaseModel):
    approved: bool


def _ask_tool(resumed: list[str] | None = None) -> Any:
    async def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            if resumed is not None:
                resumed.append(ctx.thread.tool_call_id)
            return {"approved": ctx.entry.resume.approved}
        return ctx.suspend("approval", {"summary": ctx.input.summary})

    return define_tool(
        id="t.ask.v1",
        description="Ask.",
        input_schema=Summary,
        suspend={"approval": SuspendPoint(suspend_schema=Summary, resume_schema=Decision)},
        execute=execute,
    )


async def _suspended_thread(agent: Any, store: MemoryStore) -> tuple[str, str]:
    """A thread whose run waits on one ``ask`` call, left by a closed runtime."""
    model = ScriptedModel([[tool_call("ask", {"summary": "s"})]])
    async with create_test_runtime(agent, model=model, store=store) as rt:
        tid = await rt.create_thread("s")
        run_id = await rt.send(tid, "go")
        await rt.wait_idle(tid)
    return tid, run_id


class _CancelAfterCallWrite(MemoryStore):
    """Cancels ``scope`` at the first read after a commit that stored an executing call."""

    scope: trio.CancelScope | None = None
    armed = False

    async def commit(self, writes: Any) -> None:
        await super().commit(writes)
        if self.scope is not None:
            self.armed = True

    async def get_run(self, run_id: str) -> Any:
        if self.armed and self.scope is not None:
            self.scope.cancel()
        return await super().get_run(run_id)

    async def get_thread(self, thread_id: str) -> Any:
        if self.armed and self.scope is not None:
            self.scope.cancel()
        return await super().get_thread(thread_id)


@pytest.mark.parametrize("cancel_before_write", [False, True])
async def test_cancelled_submitter_during_activation_still_resumes_the_call(
    cancel_before_write: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """That an activation taken is started at once or queued, never dropped, is a property of
    ``AdmissionMachine`` (``feed``); that it runs in a runtime-owned task, not the submitter's
    scope, is the shell's, and stays guarded here."""
    agent = define_agent(name="a", tools={"ask": _ask_tool()})
    store = MemoryStore()
    with trio.fail_after(10):
        tid, _ = await _suspended_thread(agent, store)
        hooked = _CancelAfterCallWrite(store.backing)
        model = ScriptedModel([text("resumed")])
        async with create_test_runtime(agent, model=model, store=hooked) as rt:
            [action] = await rt.pending_actions(tid)
            with trio.CancelScope() as scope:
                hooked.scope = scope
                hooked.armed = cancel_before_write
                await action.submit({"approved": True})
            hooked.scope = None
            await rt.wait_idle(tid)
            if await rt.pending_actions(tid):  # cancelled before its write: still pending
                assert cancel_before_write
                assert (await action.submit({"approved": True})).status == "accepted"
                await rt.wait_idle(tid)
            state = await rt.get_state(tid)
            assert [r.status for r in state.runs] == ["completed"]
            assert [p.state for p in _tool_parts(state)] == ["output-available"]
            assert await rt.pending_actions(tid) == []
            assert len(model.requests) == 1
            assert await rt.store.get_active_run(tid) is None  # the thread is free


@pytest.mark.parametrize("k", range(8))
async def test_closing_while_a_submission_activates_its_run_loses_nothing(
    k: int, autojump_clock: trio.testing.MockClock
) -> None:
    """What the close parks (every activation taken and not started, ``unstarted()``) is a
    property of ``AdmissionMachine`` (``table_agrees_with_the_shell``, ``closed``); the parking
    itself and the next runtime's recovery stay guarded here."""
    agent = define_agent(name="a", tools={"ask": _ask_tool()})
    store = MemoryStore()
    with trio.fail_after(10):
        tid, _ = await _suspended_thread(agent, store)
        results: list[str] = []
        async with trio.open_nursery() as outer:
            model = ScriptedModel([text("resumed")])
            async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
                [action] = await rt.pending_actions(tid)

                async def submit() -> None:
                    try:
                        results.append((await action.submit({"approved": True})).status)
                    except RuntimeClosed:
                        results.append("closed")

                outer.start_soon(submit)
                for _ in range(k):
                    await trio.lowlevel.checkpoint()
        # A closed runtime leaves no run recorded running (a submission records a
        # passivated run running; its activation was cut off here).
        assert [r.status for r in await store.list_runs(tid)] != ["running"]
        # A later runtime loading the thread activates the run and resumes the call.
        model = ScriptedModel([text("resumed")])
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            pending = await rt.pending_actions(tid)
            await rt.wait_idle(tid)
            if results == ["closed"] or pending:
                assert results == ["closed"]
                [action] = pending
                assert (await action.submit({"approved": True})).status == "accepted"
                await rt.wait_idle(tid)
            state = await rt.get_state(tid)
            assert results in (["closed"], ["accepted"])
            runs = [r.status for r in state.runs]
            parts = [(p.state, p.error_text) for p in _tool_parts(state)]
            # Either the closing runtime recorded the started resume as cancelled, or the
            # stored intent was resumed here; never left executing.
            assert (runs, parts) in (
                (["completed"], [("output-available", None)]),
                (
                    ["cancelled"],
                    [("output-error", "The tool call was cancelled: the runtime is closing")],
                ),
            ), (runs, parts)
            assert await rt.pending_actions(tid) == []
            assert all(c.record.phase == "done" for c in await store.list_calls(tid))


@pytest.mark.parametrize("store_type", [MemoryStore, YieldingStore])
@pytest.mark.parametrize("k", range(12))
async def test_submit_racing_cancel_run_of_a_live_run_leaves_nothing_running(
    store_type: type[MemoryStore], k: int, autojump_clock: trio.testing.MockClock
) -> None:
    """``is_cancelling`` of a live run ``cancel_run`` is at, until its actor ends: a property of
    ``AdmissionMachine`` (``run_queries_agree``); the store's part (revisions, the calls
    recorded) stays here."""
    resumed: list[str] = []
    tool = _ask_tool(resumed)
    agent = define_agent(name="a", tools={"ask1": tool, "ask2": tool})
    model = ScriptedModel(
        [[tool_call("ask1", {"summary": "1"}), tool_call("ask2", {"summary": "2"})], text("after")]
    )
    store = store_type()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            tid = await rt.create_thread("s")
            run_id = await rt.send(tid, "go")
            await rt.wait_idle(tid)
            [action] = [a for a in await rt.pending_actions(tid) if a.ref.tool_name == "ask2"]
            results: list[str] = []

            async def submit() -> None:
                for _ in range(k):
                    await trio.lowlevel.checkpoint()
                results.append((await action.submit({"approved": True})).status)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.cancel_run, run_id, "stop")
                nursery.start_soon(submit)
            await trio.testing.wait_all_tasks_blocked()
            await rt.wait_idle(tid)
            state = await rt.get_state(tid)
            assert [r.status for r in state.runs] == ["cancelled"]
            assert [p.state for p in _tool_parts(state)] == ["output-error", "output-error"]
            assert resumed == []
            assert len(model.requests) == 1
            assert await rt.pending_actions(tid) == []
        assert all(c.record.phase == "done" for c in await store.list_calls(tid))
        assert [r.status for r in await store.list_runs(tid)] == ["cancelled"]


@pytest.mark.parametrize("k", range(8))
async def test_submit_racing_cancel_run_of_a_passivated_run_never_revives_it(
    k: int, autojump_clock: trio.testing.MockClock
) -> None:
    """A run ``cancel_run`` is at is not passivated, takes no activation and never starts:
    properties of ``AdmissionMachine`` (``run_queries_agree``, ``request_activation``,
    ``started``)."""
    resumed: list[str] = []
    agent = define_agent(name="a", tools={"ask": _ask_tool(resumed)})
    store = MemoryStore()
    with trio.fail_after(10):
        tid, run_id = await _suspended_thread(agent, store)
        model = ScriptedModel([text("resumed")])
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            [action] = await rt.pending_actions(tid)
            results: list[str] = []

            async def submit() -> None:
                for _ in range(k):
                    await trio.lowlevel.checkpoint()
                results.append((await action.submit({"approved": True})).status)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.cancel_run, run_id, "stop")
                nursery.start_soon(submit)
            await rt.wait_idle(tid)
            state = await rt.get_state(tid)
            assert [r.status for r in state.runs] == ["cancelled"]
            assert [(p.state, p.error_text) for p in _tool_parts(state)] == [
                ("output-error", "The tool call was cancelled: stop")
            ]
            assert resumed == []
            assert model.requests == []


async def test_cancel_run_while_an_activation_runs_on_output_keeps_the_run_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No activation starts a run a ``cancel_run`` is at, and a live one stays cancelling until
    its actor ends: properties of ``AdmissionMachine`` (``activation_ends``,
    ``run_queries_agree``); the actor recording it cancelled stays guarded here."""

    async def on_output(**_: Any) -> None:
        await trio.sleep(1)

    out = define_tool(id="t.out.v1", description="Out.", input_schema=Query, output_schema=Query)
    agent = define_agent(name="a", tools={"ask": ToolRegistration(out, on_output=on_output)})
    model = ScriptedModel([[tool_call("ask", {"n": 1})], text("ok")])
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            tid = await rt.create_thread("s")
            run_id = await rt.send(tid, "go")
            await rt.wait_idle(tid)
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            [action] = await rt.pending_actions(tid)
            assert (await action.submit({"n": 5})).status == "accepted"
            await trio.sleep(0.1)  # the activation is inside on_output
            await rt.cancel_run(run_id, "stop")
            await rt.wait_idle(tid)
            await trio.sleep(2)
            state = await rt.get_state(tid)
            assert [(r.status, r.error) for r in state.runs] == [("cancelled", None)]
            assert len(model.requests) == 1


async def test_reopened_store_gets_new_test_ids_and_send_starts_a_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"ask": _ask_tool()})
    model = ScriptedModel(
        [[tool_call("ask", {"summary": "s"})], text("ok"), [tool_call("ask", {"summary": "t"})]]
    )
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            tid = await rt.create_thread("s")
            first = await rt.send(tid, "go")
            await rt.wait_idle(tid)
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            [action] = await rt.pending_actions(tid)
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(tid)
            second = await rt.send(tid, "again")
            await rt.wait_idle(tid)
            state = await rt.get_state(tid)
    assert (first, second) == ("run_1_1", "run_1_g2_1")
    assert [(r.run_id, r.status) for r in state.runs] == [
        ("run_1_1", "completed"),
        ("run_1_g2_1", "waiting"),
    ]
    ids = [m.id for m in state.messages]
    assert len(ids) == len(set(ids))


async def test_send_reraises_a_store_conflict_when_the_thread_has_no_active_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = define_tool(id="t.q.v1", description="Q.", input_schema=Query, execute=lambda ctx: 1)
    agent = define_agent(name="a", tools={"q": tool})
    store = MemoryStore()
    with trio.fail_after(10):
        async with _fixed_id_runtime(agent, store) as rt:
            tid = await rt.create_thread("s")
            await rt.send(tid, "go")
            await rt.wait_idle(tid)
            with pytest.raises(StoreConflict):  # the reused run id conflicts; nothing is busy
                await rt.send(tid, "again")


def _fixed_id_runtime(agent: Any, store: MemoryStore) -> Any:
    return create_agent_runtime(
        agent, store=store, model=ScriptedModel([text("a"), text("b")]), new_id=lambda p: f"{p}_x"
    )


@pytest.mark.parametrize("how", ["cancel", "fail", "output"])
async def test_a_run_whose_last_call_ended_before_a_close_goes_on_when_loaded(
    how: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Which active run a load finds orphaned is a property of ``AdmissionMachine``
    (``run_queries_agree``: ``orphaned``); what recovery does with it stays guarded here."""
    if how == "output":
        out = define_tool(
            id="t.out.v1", description="Out.", input_schema=Query, output_schema=Query
        )
        agent = define_agent(name="a", tools={"ask": ToolRegistration(out)})
        first = [tool_call("ask", {"n": 1})]
    else:
        agent = define_agent(name="a", tools={"ask": _ask_tool()})
        first = [tool_call("ask", {"summary": "s"})]
    model = ScriptedModel([first, text("ok"), text("second")])
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            tid = await rt.create_thread("s")
            await rt.send(tid, "go")
            await rt.wait_idle(tid)
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            [action] = await rt.pending_actions(tid)
            if how == "cancel":
                result = await action.cancel("nope")
            elif how == "fail":
                result = await action.fail("bad")
            else:
                result = await action.submit({"n": 5})
            assert result.status == "accepted"  # and the runtime closes at once
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            await rt.wait_idle(tid)  # loads the thread, which activates the run
            state = await rt.get_state(tid)
            assert [r.status for r in state.runs] == ["completed"]
            assert len(model.requests) == 2
            await rt.send(tid, "again")
            await rt.wait_idle(tid)


@pytest.mark.parametrize("k", range(8))
async def test_closing_right_after_a_submission_to_a_live_run_keeps_the_resume(
    k: int, autojump_clock: trio.testing.MockClock
) -> None:
    resumed: list[str] = []
    agent = define_agent(name="a", tools={"ask": _ask_tool(resumed)})
    store = MemoryStore()
    with trio.fail_after(10):
        model = ScriptedModel([[tool_call("ask", {"summary": "s"})], text("after")])
        async with create_test_runtime(agent, model=model, store=store) as rt:
            tid = await rt.create_thread("s")
            await rt.send(tid, "go")
            await rt.wait_idle(tid)
            [action] = await rt.pending_actions(tid)
            assert (await action.submit({"approved": True})).status == "accepted"
            for _ in range(k):
                await trio.lowlevel.checkpoint()
        resumed_before_close = bool(resumed)
        model = ScriptedModel([text("resumed")])
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            await rt.get_state(tid)
            await rt.wait_idle(tid)
            state = await rt.get_state(tid)
            parts = [(p.state, p.output) for p in _tool_parts(state)]
            assert len(resumed) == 1  # the resume ran exactly once, in one of the runtimes
            runs = [r.status for r in state.runs]
            if resumed_before_close:
                # The close came after execute began: its result was recorded, or the call
                # was recorded cancelled (the close came before its last write); either way
                # it never runs again.
                assert parts in (
                    [("output-available", {"approved": True})],
                    [("output-error", None)],
                )
                assert runs in (["completed"], ["cancelled"])
            else:  # kept as stored intent and resumed here
                assert parts == [("output-available", {"approved": True})]
                assert runs == ["completed"]
                assert len(model.requests) == 1
            assert await rt.pending_actions(tid) == []


async def test_closing_while_a_resume_executes_records_the_call_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.Event()
    resumed: list[str] = []

    async def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            resumed.append(ctx.thread.tool_call_id)
            started.set()
            await trio.sleep_forever()
        return ctx.suspend("approval", {"summary": ctx.input.summary})

    tool = define_tool(
        id="t.ask.v1",
        description="Ask.",
        input_schema=Summary,
        suspend={"approval": SuspendPoint(suspend_schema=Summary, resume_schema=Decision)},
        execute=execute,
    )
    agent = define_agent(name="a", tools={"ask": tool})
    store = MemoryStore()
    with trio.fail_after(10):
        model = ScriptedModel([[tool_call("ask", {"summary": "s"})], text("after")])
        async with create_test_runtime(agent, model=model, store=store) as rt:
            tid = await rt.create_thread("s")
            await rt.send(tid, "go")
            await rt.wait_idle(tid)
            [action] = await rt.pending_actions(tid)
            assert (await action.submit({"approved": True})).status == "accepted"
            await started.wait()
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            await rt.get_state(tid)
            await rt.wait_idle(tid)
            state = await rt.get_state(tid)
            parts = [(p.state, p.error_text) for p in _tool_parts(state)]
            assert parts == [
                ("output-error", "The tool call was cancelled: the runtime is closing")
            ]
            # The run was waiting on its call, so it stayed active: the next runtime goes on
            # with it, and the model sees the cancelled result.
            assert [r.status for r in state.runs] == ["completed"]
            assert len(model.requests) == 2
            assert len(resumed) == 1
            assert await rt.pending_actions(tid) == []


@pytest.mark.parametrize("k", range(4))
async def test_cancel_run_racing_the_close_either_cancels_or_raises_runtime_closed(
    k: int, autojump_clock: trio.testing.MockClock
) -> None:
    agent = define_agent(name="a", tools={"ask": _ask_tool()})
    store = MemoryStore()
    outcome: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            model = ScriptedModel([[tool_call("ask", {"summary": "s"})], text("done")])
            async with create_test_runtime(agent, model=model, store=store) as rt:
                tid = await rt.create_thread("s")
                run_id = await rt.send(tid, "go")
                await rt.wait_idle(tid)  # the run waits on ask.approval, its actor alive

                async def cancel() -> None:
                    try:
                        await rt.cancel_run(run_id, "stop")
                        outcome.append("returned")
                    except RuntimeClosed:
                        outcome.append("RuntimeClosed")

                outer.start_soon(cancel)
                for _ in range(k):
                    await trio.lowlevel.checkpoint()
            # leaving the block closes the runtime while cancel_run may wait on the run
    [run] = await store.list_runs(tid)
    if outcome == ["returned"]:  # it promised the run is cancelled, and recorded
        assert run.status == "cancelled"
        assert await store.list_pending_actions(tid) == []
        [call] = await store.list_calls(tid)
        assert call.record.error_text == "The tool call was cancelled: stop"
    else:
        assert outcome == ["RuntimeClosed"]
        assert run.status == "waiting"


def _slow_resume_tool(entered: trio.Event, release: trio.Event) -> Any:
    """A tool that suspends, and on resume signals ``entered`` and waits for ``release``."""

    async def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            entered.set()
            await release.wait()
            return "ok"
        return ctx.suspend("approval", {"summary": "s"})

    return define_tool(
        id="t.slow-resume.v1",
        description="Ask, then work.",
        input_schema=Summary,
        suspend={"approval": SuspendPoint(suspend_schema=Summary, resume_schema=Decision)},
        execute=execute,
    )


async def test_a_run_shows_running_while_a_resume_executes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()
    release = trio.Event()

    agent = define_agent(name="a", tools={"ask": _slow_resume_tool(entered, release)})
    model = ScriptedModel([[tool_call("ask", {"summary": "s"})], text("done")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            tid = await rt.create_thread("s")
            await rt.send(tid, "go")
            await rt.wait_idle(tid)
            assert [r.status for r in (await rt.get_state(tid)).runs] == ["waiting"]
            [action] = await rt.pending_actions(tid)
            assert (await action.submit({"approved": True})).status == "accepted"
            await entered.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert [r.status for r in (await rt.get_state(tid)).runs] == ["running"]
            release.set()
            await rt.wait_idle(tid)
            assert [r.status for r in (await rt.get_state(tid)).runs] == ["completed"]


async def test_a_run_a_new_runtime_resumes_shows_running_while_the_resume_executes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()
    release = trio.Event()

    agent = define_agent(name="a", tools={"ask": _slow_resume_tool(entered, release)})
    model = ScriptedModel([[tool_call("ask", {"summary": "s"})], text("done")])
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            tid = await rt.create_thread("s")
            await rt.send(tid, "go")
            await rt.wait_idle(tid)
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            [action] = await rt.pending_actions(tid)
            assert (await action.submit({"approved": True})).status == "accepted"
            await entered.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert [r.status for r in (await rt.get_state(tid)).runs] == ["running"]
            release.set()
            await rt.wait_idle(tid)
            assert [r.status for r in (await rt.get_state(tid)).runs] == ["completed"]


@pytest.mark.parametrize("k", range(8))
async def test_cancel_run_while_the_run_passivates_records_it_cancelled(
    k: int, autojump_clock: trio.testing.MockClock
) -> None:
    """A live run stays cancelling until its actor ends, passivating or not (``run_ends``,
    ``run_queries_agree`` of ``AdmissionMachine``); the run actor recording it stays guarded
    here."""
    # Two calls wait for approval; cancelling one action wakes the run, which then has
    # nothing to do but wait, so it passivates; cancel_run lands while it does.
    agent = define_agent(name="a", tools={"ask": _ask_tool()})
    model = ScriptedModel(
        [[tool_call("ask", {"summary": "1"}), tool_call("ask", {"summary": "2"})]]
    )
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            tid = await rt.create_thread("s")
            run_id = await rt.send(tid, "go")
            await rt.wait_idle(tid)
            first, _ = await rt.pending_actions(tid)
            assert (await first.cancel("no")).status == "accepted"
            for _ in range(k):  # the interleavings of the passivation with the cancel
                await trio.lowlevel.checkpoint()
            await rt.cancel_run(run_id, "stop")
            state = await rt.get_state(tid)
    assert [r.status for r in state.runs] == ["cancelled"]
    assert [p.state for p in _tool_parts(state)] == ["output-error", "output-error"]


@asynccontextmanager
async def _busy_thread(gate: trio.Event) -> AsyncIterator[tuple[AgentRuntime, str]]:
    """A runtime and a thread whose run stays busy: its one tool call waits at ``gate``."""

    async def execute(ctx: ToolContext) -> Any:
        await gate.wait()
        return "ok"

    tool = define_tool(id="t.q.v1", description="Q.", input_schema=Query, execute=execute)
    agent = define_agent(name="a", tools={"q": tool})
    model = ScriptedModel([[tool_call("q", {"n": 1})], text("done")])
    async with create_test_runtime(agent, model=model) as rt:
        tid = await rt.create_thread("s")
        await rt.send(tid, "go")
        yield rt, tid


async def test_a_cancelled_wait_idle_leaves_nothing_waited_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """When a thread is idle is a property of ``AdmissionMachine``
    (``idle_means_nothing_in_flight``); the shell's events for ``wait_idle`` stay guarded
    here."""
    gate = trio.Event()
    with trio.fail_after(10):
        async with _busy_thread(gate) as (rt, tid):
            with trio.move_on_after(1):  # the tool never returns in that time
                await rt.wait_idle(tid)
            assert rt._idle_waits == {}  # no event left for a wait nobody makes any more
            gate.set()
            await rt.wait_idle(tid)
            assert [r.status for r in (await rt.get_state(tid)).runs] == ["completed"]


async def test_wait_idle_is_woken_when_the_thread_is_idle_not_at_every_change(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every event that can make a thread idle ends with ``WakeIdle`` of it (checked by
    ``AdmissionMachine``'s rules), and ``idle`` says when it is
    (``idle_means_nothing_in_flight``); waking only then is the shell's ``_notify``, guarded
    here."""
    gate = trio.Event()
    returned = trio.Event()
    with trio.fail_after(10):
        async with _busy_thread(gate) as (rt, tid):

            async def wait() -> None:
                await rt.wait_idle(tid)
                returned.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked()  # the tool waits at its gate
                event = rt._idle_waits[tid]
                rt._notify(tid)  # a change that leaves the thread busy wakes nobody
                assert rt._idle_waits.get(tid) is event
                assert not event.is_set()
                gate.set()
                await returned.wait()
            assert [r.status for r in (await rt.get_state(tid)).runs] == ["completed"]


class _HeldRunReads(MemoryStore):
    """Holds ``get_run`` in each task given an event in ``held`` until that event is set."""

    def __init__(self, backing: Any) -> None:
        super().__init__(backing)
        self.held: dict[trio.lowlevel.Task, trio.Event] = {}

    def hold(self, event: trio.Event) -> None:
        self.held[trio.lowlevel.current_task()] = event

    async def get_run(self, run_id: str) -> Any:
        event = self.held.get(trio.lowlevel.current_task())
        if event is not None:
            await event.wait()
        return await super().get_run(run_id)


async def test_a_cancel_run_given_up_leaves_a_concurrent_one_cancelling_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The runtime-level regression test; the property is ``AdmissionMachine``'s ``cancel_ends``
    (one of two cancellations ending leaves the run cancelling, not passivated) and
    ``run_queries_agree``."""
    # Two cancel_run at a passivated run; the first one's caller gives up (its scope is
    # cancelled) while the second is still at the store. The run is still being cancelled:
    # a submission meanwhile is rejected, and nothing activates the run. (The runtime kept
    # one flag per run, which the first cancel_run cleared for both.)
    resumed: list[str] = []
    agent = define_agent(name="a", tools={"ask": _ask_tool(resumed)})
    store = MemoryStore()
    with trio.fail_after(10):
        tid, run_id = await _suspended_thread(agent, store)
        held = _HeldRunReads(store.backing)
        model = ScriptedModel([text("resumed")])
        async with create_test_runtime(agent, model=model, store=held) as rt:
            [action] = await rt.pending_actions(tid)
            results: dict[str, Any] = {}
            given_up = trio.CancelScope()
            release = trio.Event()

            async def give_up() -> None:
                held.hold(trio.Event())  # never answered: its caller gives up first
                with given_up:
                    await rt.cancel_run(run_id, "first")

            async def cancel() -> None:
                held.hold(release)
                results["cancel"] = await rt.cancel_run(run_id, "stop")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(give_up)
                nursery.start_soon(cancel)
                await trio.testing.wait_all_tasks_blocked()  # both read the run, held
                given_up.cancel()
                await trio.testing.wait_all_tasks_blocked()
                results["submit"] = (await action.submit({"approved": True})).status
                await trio.testing.wait_all_tasks_blocked()
                release.set()
            await rt.wait_idle(tid)
            state = await rt.get_state(tid)
    assert results["submit"] == "rejected"
    assert results["cancel"].status == "cancelled"
    assert [r.status for r in state.runs] == ["cancelled"]
    assert [(p.state, p.error_text) for p in _tool_parts(state)] == [
        ("output-error", "The tool call was cancelled: stop")
    ]
    assert resumed == []
    assert model.requests == []
