"""What a runtime finds when the process before it stopped without closing (a crash).

A crash is simulated by copying the store's committed state while a runtime is still live,
then opening the next runtime on that copy: exactly what a new process finds on disk.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    Finish,
    MemoryBacking,
    MemoryStore,
    ResumeEntry,
    SuspendPoint,
    TextDelta,
    ThreadBusy,
    ToolContext,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

INTERRUPTED = (
    "The tool call was interrupted: the process running it stopped before it finished, "
    "and it was not run again."
)


class Job(BaseModel):
    job: str


class Decision(BaseModel):
    approved: bool


def crashed(store: MemoryStore) -> MemoryStore:
    """A new store on what ``store`` has committed so far (as a restarted process sees it)."""
    backing = MemoryBacking()
    backing.tables = store.backing.tables
    backing.sequence = itertools.count(1_000_000)
    return MemoryStore(backing)


def parts_of(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]


def blocking_tool(runs: list[str], started: trio.Event, **registration: Any) -> Any:
    async def execute(ctx: ToolContext) -> Any:
        runs.append(ctx.input.job)
        if len(runs) == 1:
            started.set()
            await trio.sleep_forever()  # the first process dies in here
        return {"done": ctx.input.job}

    tool = define_tool(id="t.job.v1", description="Job.", input_schema=Job, execute=execute)
    return ToolRegistration(tool, **registration)


async def crash_during_the_call(registration: Any, started: trio.Event) -> Any:
    agent = define_agent(name="a", tools={"job": registration})
    store = MemoryStore()
    with trio.fail_after(10):
        model = ScriptedModel([[tool_call("job", {"job": "j1"})]])
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await started.wait()
            await trio.testing.wait_all_tasks_blocked()
            after_crash = crashed(store)  # the process dies here: nothing more is written
        model = ScriptedModel([text("recovered")])
        async with create_test_runtime(agent, model=model, store=after_crash) as rt:
            await rt.wait_idle(thread_id)
            return await rt.get_state(thread_id), model


async def test_a_call_running_when_the_process_stopped_is_recorded_interrupted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs: list[str] = []
    started = trio.Event()
    state, model = await crash_during_the_call(blocking_tool(runs, started), started)
    [part] = parts_of(state)
    assert (part.state, part.error_text) == ("output-error", INTERRUPTED)
    assert runs == ["j1"]  # never run twice without consent
    assert [r.status for r in state.runs] == ["completed"]  # the run went on to the model
    assert len(model.requests) == 1


async def test_a_registration_may_consent_to_running_an_interrupted_call_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs: list[str] = []
    started = trio.Event()
    registration = blocking_tool(runs, started, rerun_interrupted=True)
    state, _ = await crash_during_the_call(registration, started)
    [part] = parts_of(state)
    assert (part.state, part.output) == ("output-available", {"done": "j1"})
    assert runs == ["j1", "j1"]
    assert [r.status for r in state.runs] == ["completed"]


async def settled_thread(rt: Any) -> str:
    """A new thread of ``rt`` whose run was sent ``"go"`` and is idle (waiting, or done)."""
    thread_id: str = await rt.create_thread("s")
    await rt.send(thread_id, "go")
    await rt.wait_idle(thread_id)
    return thread_id


def approval_tool(resumed: list[str], block: bool) -> Any:
    async def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            resumed.append(ctx.thread.tool_call_id)
            if block and len(resumed) == 1:
                await trio.sleep_forever()
            return {"approved": ctx.entry.resume.approved}
        return ctx.suspend("approval", {"job": ctx.input.job})

    return define_tool(
        id="t.approve.v1",
        description="Approve.",
        input_schema=Job,
        suspend={"approval": SuspendPoint(suspend_schema=Job, resume_schema=Decision)},
        execute=execute,
    )


async def test_an_accepted_submission_whose_resume_never_started_is_resumed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    resumed: list[str] = []
    agent = define_agent(name="a", tools={"ask": approval_tool(resumed, block=False)})
    store = MemoryStore()
    with trio.fail_after(10):
        model = ScriptedModel([[tool_call("ask", {"job": "j"})]])
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await settled_thread(rt)
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
            after_crash = crashed(store)  # dies before the run's actor looked at it
        # The submission recorded the passivated run running in its own commit.
        assert [r.status for r in await after_crash.list_runs(thread_id)] == ["running"]
        model = ScriptedModel([text("done")])
        async with create_test_runtime(agent, model=model, store=after_crash) as rt:
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    [part] = parts_of(state)
    assert (part.state, part.output) == ("output-available", {"approved": True})
    assert resumed == ["call_1"]  # it ran once: here, from the stored intent


async def test_a_resume_running_when_the_process_stopped_is_recorded_interrupted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    resumed: list[str] = []
    agent = define_agent(name="a", tools={"ask": approval_tool(resumed, block=True)})
    store = MemoryStore()
    with trio.fail_after(10):
        model = ScriptedModel([[tool_call("ask", {"job": "j"})]])
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await settled_thread(rt)
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
            await trio.testing.wait_all_tasks_blocked()  # the resume is running
            assert resumed == ["call_1"]
            after_crash = crashed(store)
        model = ScriptedModel([text("done")])
        async with create_test_runtime(agent, model=model, store=after_crash) as rt:
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    [part] = parts_of(state)
    assert (part.state, part.error_text) == ("output-error", INTERRUPTED)
    assert resumed == ["call_1"]
    assert [s.state for s in part.suspensions] == ["submitted"]


async def test_a_submission_after_a_restart_first_records_what_the_stopped_process_left(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two approvals; the first one's resume runs when the process stops. The second
    approval, submitted to the next process before anything loaded the thread, wakes the
    run only once the first call is recorded interrupted (else the run would wake with a
    call it can neither resume nor wait for)."""
    resumed: list[str] = []
    agent = define_agent(name="a", tools={"ask": approval_tool(resumed, block=True)})
    store = MemoryStore()
    with trio.fail_after(10):
        two = [tool_call("ask", {"job": "j1"}), tool_call("ask", {"job": "j2"})]
        async with create_test_runtime(agent, model=ScriptedModel([two]), store=store) as rt:
            thread_id = await settled_thread(rt)
            first, _ = await rt.pending_actions(thread_id)
            assert (await first.submit({"approved": True})).status == "accepted"
            await trio.testing.wait_all_tasks_blocked()  # the first resume is running
            after_crash = crashed(store)
        model = ScriptedModel([text("done")])
        async with create_test_runtime(agent, model=model, store=after_crash) as rt:
            [second] = await after_crash.list_pending_actions(thread_id)
            assert (await rt.submit_action(second.ref, {"approved": True})).status == "accepted"
            call_1 = await after_crash.get_call(thread_id, "call_1")
            assert call_1 is not None
            assert (call_1.record.phase, call_1.record.error_text) == ("done", INTERRUPTED)
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert resumed == ["call_1", "call_2"]  # each once: call_1 by the stopped process
    assert [r.status for r in state.runs] == ["completed"]
    assert [p.state for p in parts_of(state)] == ["output-error", "output-available"]


class _Slow:
    """A model that streams a little text, then never finishes its step."""

    async def stream(self, request: Any) -> Any:
        yield TextDelta("thinking")
        await trio.sleep_forever()
        yield Finish("stop")


async def stopped_in_first_step(agent: Any) -> tuple[str, MemoryStore]:
    """A thread whose run's process stopped in its first model step: its id, and the store
    as the stopped process left it."""
    store = MemoryStore()
    async with create_test_runtime(agent, model=_Slow(), store=store) as rt:
        thread_id = await rt.create_thread("s")
        await rt.send(thread_id, "go")
        await trio.testing.wait_all_tasks_blocked()
        return thread_id, crashed(store)


async def test_a_run_stopped_in_its_first_model_step_does_the_step_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={})
    with trio.fail_after(10):
        thread_id, after_crash = await stopped_in_first_step(agent)
        model = ScriptedModel([text("answer")])
        async with create_test_runtime(agent, model=model, store=after_crash) as rt:
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert [r.status for r in state.runs] == ["completed"]


async def test_a_send_to_a_thread_whose_run_a_stopped_process_left_recovers_that_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The send's own load of the thread finds the run orphaned and does its first step
    # again (the send holding the thread no longer hides the run from it); the send finds
    # the thread busy with it, and once it completed the thread takes the next message.
    # (The property: ``orphaned(by_starter=True)`` in ``AdmissionMachine.run_queries_agree``.)
    agent = define_agent(name="a", tools={})
    with trio.fail_after(10):
        thread_id, after_crash = await stopped_in_first_step(agent)
        model = ScriptedModel([text("answer"), text("again")])
        async with create_test_runtime(agent, model=model, store=after_crash) as rt:
            with pytest.raises(ThreadBusy):
                await rt.send(thread_id, "more")
            await rt.wait_idle(thread_id)
            await rt.send(thread_id, "more")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    assert [r.status for r in state.runs] == ["completed", "completed"]
    assert len(model.requests) == 2


async def test_a_call_still_streaming_when_the_process_stopped_is_interrupted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from pai_actors import ToolInputDelta, ToolInputStart

    class Streaming:
        async def stream(self, request: Any) -> Any:
            yield ToolInputStart("c1", "job")
            yield ToolInputDelta("c1", '{"job": "j')
            await trio.sleep_forever()
            yield Finish("tool-calls")

    runs: list[str] = []
    agent = define_agent(name="a", tools={"job": blocking_tool(runs, trio.Event())})
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=Streaming(), store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await trio.testing.wait_all_tasks_blocked()
            after_crash = crashed(store)
        model = ScriptedModel([text("answer")])
        async with create_test_runtime(agent, model=model, store=after_crash) as rt:
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    [part] = parts_of(state)
    assert (part.state, part.error_text) == ("output-error", INTERRUPTED)
    assert runs == []
    assert [r.status for r in state.runs] == ["completed"]


async def test_a_run_whose_final_answer_was_stored_is_not_asked_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={})
    snapshots: list[MemoryStore] = []

    class Recording(MemoryStore):  # take the state right after the final answer's commit
        async def commit(self, writes: Any) -> None:
            await super().commit(writes)
            if any(getattr(getattr(w, "message", None), "role", None) == "assistant"
                   for w in writes):  # fmt: skip
                snapshots.append(crashed(self))

    store = Recording()
    with trio.fail_after(10):
        async with create_test_runtime(
            agent, model=ScriptedModel([text("hello")]), store=store
        ) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "hi")
            await rt.wait_idle(thread_id)
        model = ScriptedModel([])  # asking the model again would fail: no step left
        async with create_test_runtime(agent, model=model, store=snapshots[-1]) as rt:
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert [r.status for r in state.runs] == ["completed"]
    assert model.requests == []


async def test_the_last_suspension_and_the_run_waiting_are_one_commit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    resumed: list[str] = []
    agent = define_agent(name="a", tools={"ask": approval_tool(resumed, block=False)})
    commits: list[list[str]] = []

    class Recording(MemoryStore):
        async def commit(self, writes: Any) -> None:
            await super().commit(writes)
            commits.append([type(w).__name__ for w in writes])

    store = Recording()
    with trio.fail_after(10):
        model = ScriptedModel([[tool_call("ask", {"job": "j"})]])
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await settled_thread(rt)
            # No process can stop between the two: the call is never stored suspended
            # under a running run.
            assert commits[-1] == ["PutCall", "PutToolPart", "PutRun"]
            [run] = await store.list_runs(thread_id)
            [call] = await store.list_calls(thread_id)
            assert (run.status, call.record.phase) == ("waiting", "suspended")


async def test_closing_before_the_run_wrote_the_last_suspension_keeps_it_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    resumed: list[str] = []
    agent = define_agent(name="a", tools={"ask": approval_tool(resumed, block=False)})
    looks: list[str] = []
    stalled = trio.Event()

    class Stalling(MemoryStore):  # the run's second look never returns: the close cuts it
        async def list_calls(self, thread_id: str) -> Any:
            looks.append(thread_id)
            if len(looks) == 2:  # after the call suspended, before the run wrote it
                stalled.set()
                await trio.sleep_forever()
            return await super().list_calls(thread_id)

    store = Stalling()
    with trio.fail_after(10):
        model = ScriptedModel([[tool_call("ask", {"job": "j"})]])
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await stalled.wait()
            assert [c.record.phase for c in await store.list_calls(thread_id)] == ["executing"]
        # The closing run wrote the suspension it held before recording anything else.
        [run] = await store.list_runs(thread_id)
        [call] = await MemoryStore.list_calls(store, thread_id)
        assert (run.status, call.record.phase) == ("waiting", "suspended")
        model = ScriptedModel([text("done")])
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    [part] = parts_of(state)
    assert (part.state, part.output) == ("output-available", {"approved": True})
    assert resumed == ["call_1"]


async def test_a_run_left_running_while_it_only_waits_is_settled_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    resumed: list[str] = []
    agent = define_agent(name="a", tools={"ask": approval_tool(resumed, block=False)})
    store = MemoryStore()
    with trio.fail_after(10):
        model = ScriptedModel([[tool_call("ask", {"job": "j"})]])
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await settled_thread(rt)
        # The state a process leaves when it stops after a call suspended but before its run
        # was recorded waiting: a run of several calls, each suspension its own commit, or
        # an older release, which wrote every suspension apart from the run's status.
        after_crash = crashed(store)
        [run] = await after_crash.list_runs(thread_id)
        async with after_crash.transaction() as tx:
            tx.put_run(run.model_copy(update={"status": "running"}))
        model = ScriptedModel([text("done")])
        async with create_test_runtime(agent, model=model, store=after_crash) as rt:
            assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["waiting"]
            [action] = await rt.pending_actions(thread_id)
            await action.submit({"approved": True})
            await rt.wait_idle(thread_id)
            assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["completed"]
