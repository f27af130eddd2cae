"""The runtime end to end: runs, tool-call actors, suspension, pending actions, cancellation."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from pydantic import BaseModel

from pai_actors import (
    InitialEntry,
    MemoryStore,
    ModelToolMessage,
    ResumeEntry,
    SuspendPoint,
    ThreadBusy,
    ToolContext,
    ToolInputDelta,
    ToolInputStart,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Summary(BaseModel):
    summary: str


class Decision(BaseModel):
    approved: bool


class Query(BaseModel):
    n: int


def approval_tool(entries: list[Any] | None = None) -> Any:
    async def execute(ctx: ToolContext) -> Any:
        if entries is not None:
            entries.append(ctx.entry)
        if isinstance(ctx.entry, ResumeEntry):
            return {"approved": ctx.entry.resume.approved}
        return ctx.suspend("approval", {"summary": ctx.input.summary})

    return define_tool(
        id="test.request-approval.v1",
        description="Ask a human to approve.",
        input_schema=Summary,
        suspend={"approval": SuspendPoint(suspend_schema=Summary, resume_schema=Decision)},
        execute=execute,
    )


def tool_results(model: ScriptedModel, step: int) -> list[dict[str, Any]]:
    return [
        part.to_wire()
        for message in model.requests[step].messages
        if isinstance(message, ModelToolMessage)
        for part in message.parts
    ]


def tool_parts(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]


async def test_api_example(autojump_clock: trio.testing.MockClock) -> None:
    agent = define_agent(name="assistant", tools={"requestApproval": approval_tool()})
    model = ScriptedModel(
        [
            [tool_call("requestApproval", {"summary": "Send invoice"})],  # step 1: call a tool
            text("Sent."),  # step 2: answer
        ]
    )
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread(scope_key="tenant-a")
            await rt.send(thread_id, "please send")
            await rt.wait_idle(thread_id)  # run finished, or waiting only on pending actions
            [action] = await rt.pending_actions(thread_id)
            assert action.name == "requestApproval.approval"
            assert action.input == {"summary": "Send invoice"}
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [run.status for run in state.runs] == ["completed"]
    assert len(model.requests) == 2
    [part] = tool_parts(state)
    assert part.state == "output-available"
    assert part.output == {"approved": True}
    assert tool_results(model, 1)[0]["output"] == {"type": "json", "value": {"approved": True}}
    assert state.messages[-1].parts[-1].to_wire() == {"type": "text", "text": "Sent."}


async def test_plain_tool_output_reaches_the_model(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[Any] = []

    def execute(ctx: ToolContext) -> str:
        seen.append((ctx.input.n, ctx.entry, ctx.agent_id, ctx.thread.tool_name))
        return f"twice is {ctx.input.n * 2}"

    double = define_tool(
        id="test.double.v1", description="Double.", input_schema=Query, execute=execute
    )
    agent = define_agent(name="calc", tools={"double": double})
    model = ScriptedModel([[tool_call("double", {"n": 21})], text("42")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("tenant-a")
            run_id = await rt.send(thread_id, "double 21")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert seen == [(21, InitialEntry(), "calc", "double")]
    assert run_id == "run_1_1"  # deterministic ids: thread_1's first run
    assert [(r.run_id, r.status) for r in state.runs] == [("run_1_1", "completed")]
    assert tool_results(model, 1) == [
        {
            "type": "tool-result",
            "toolCallId": "call_1",
            "toolName": "double",
            "output": {"type": "text", "value": "twice is 42"},
        }
    ]


async def test_suspend_reject_resume_and_suspend_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entries: list[Any] = []
    histories: list[list[Any]] = []

    async def execute(ctx: ToolContext) -> Any:
        entries.append(ctx.entry)
        histories.append(ctx.suspend_history)
        if isinstance(ctx.entry, InitialEntry):
            return ctx.suspend("approval", {"summary": "first"})
        if ctx.entry.resume.approved and len(entries) == 2:
            return ctx.suspend("approval", {"summary": "second"})
        return "done"

    tool = define_tool(
        id="test.twice.v1",
        description="Two approvals.",
        input_schema=Summary,
        suspend={"approval": SuspendPoint(suspend_schema=Summary, resume_schema=Decision)},
        execute=execute,
    )
    agent = define_agent(name="a", tools={"twice": tool})
    model = ScriptedModel([[tool_call("twice", {"summary": "x"})], text("ok")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
            assert [r.status for r in state.runs] == ["waiting"]
            [first] = await rt.pending_actions(thread_id)
            rejected = await first.submit({"approved": "maybe"})
            assert rejected.status == "rejected"
            assert rejected.error is not None
            assert "approved" in rejected.error
            assert [a.ref for a in await rt.pending_actions(thread_id)] == [first.ref]
            assert (await first.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            [second] = await rt.pending_actions(thread_id)
            assert second.input == {"summary": "second"}
            assert second.ref.action_id != first.ref.action_id
            assert (await second.submit({"approved": False})).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert entries[0] == InitialEntry()
    assert isinstance(entries[1], ResumeEntry)
    assert entries[1].type == "resume"
    assert entries[1].name == "approval"
    assert entries[1].resume == Decision(approved=True)
    assert entries[1].action == first.ref
    assert [r.status for r in state.runs] == ["completed"]
    [part] = tool_parts(state)
    assert part.output == "done"
    assert [s.state for s in part.suspensions] == ["submitted", "submitted"]
    # ctx.suspend_history: the durable episodes so far, in their wire shape.
    assert [[(h["name"], h["state"], h.get("resume")) for h in hs] for hs in histories] == [
        [],
        [("approval", "submitted", {"approved": True})],
        [
            ("approval", "submitted", {"approved": True}),
            ("approval", "submitted", {"approved": False}),
        ],
    ]
    assert histories[2] == [s.to_wire() for s in part.suspensions]


async def test_tool_without_execute_takes_its_output_from_a_client(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ask = define_tool(
        id="test.ask-user.v1",
        description="Ask the user.",
        input_schema=Summary,
        output_schema=Decision,
    )
    agent = define_agent(name="a", tools={"askUser": ask})
    model = ScriptedModel([[tool_call("askUser", {"summary": "ok?"})], text("thanks")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            assert action.name == "askUser"
            assert action.ref.action_id == action.ref.tool_call_id
            assert action.input == {"summary": "ok?"}
            assert (await action.submit({"approved": 3})).status == "rejected"
            assert len(await rt.pending_actions(thread_id)) == 1
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            again = await action.submit({"approved": False})
            state = await rt.get_state(thread_id)
    assert again.status == "rejected"
    assert again.error is not None
    assert "already resolved" in again.error
    [part] = tool_parts(state)
    assert part.output == {"approved": True}
    assert [r.status for r in state.runs] == ["completed"]


def one_approval() -> tuple[Any, ScriptedModel]:
    """An agent whose model asks for one approval, then answers ``ok``."""
    agent = define_agent(name="a", tools={"requestApproval": approval_tool()})
    return agent, ScriptedModel([[tool_call("requestApproval", {"summary": "s"})], text("ok")])


async def suspended(rt: Any) -> str:
    """A new thread of ``rt``, sent a message and waited for: its call suspended."""
    thread_id: str = await rt.create_thread("s")
    await rt.send(thread_id, "go")
    await rt.wait_idle(thread_id)
    return thread_id


async def test_an_action_resolves_once(autojump_clock: trio.testing.MockClock) -> None:
    agent, model = one_approval()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await suspended(rt)
            [action] = await rt.pending_actions(thread_id)
            results = []

            async def attempt(payload: bool) -> None:
                results.append(await action.submit({"approved": payload}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(attempt, True)
                nursery.start_soon(attempt, False)
            assert sorted(r.status for r in results) == ["accepted", "rejected"]
            assert (await action.cancel("late")).status == "rejected"
            assert (await action.fail("late")).status == "rejected"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert len(model.requests) == 2
    [part] = tool_parts(state)
    assert part.state == "output-available"


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_each_step_of_an_approval_is_a_checkpoint(
    autojump_clock: trio.testing.MockClock, store: Any
) -> None:
    """Every call a client makes is a checkpoint (a cancel point and a schedule point), with
    the thread's record in memory too: whether it waits, commits, or finds nothing to do
    (on SQLite too, whose reads from memory are cancel points only)."""
    agent, model = one_approval()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            with trio.testing.assert_checkpoints():
                await rt.send(thread_id, "go")
            with trio.testing.assert_checkpoints():
                await rt.wait_idle(thread_id)  # waits for the suspension
            with trio.testing.assert_checkpoints():
                await rt.wait_idle(thread_id)  # idle already
            with trio.testing.assert_checkpoints():
                [action] = await rt.pending_actions(thread_id)
            unknown = action.ref.model_copy(update={"tool_call_id": "no-such-call"})
            with trio.testing.assert_checkpoints():
                assert (await rt.submit_action(unknown, {"approved": True})).status == "rejected"
            with trio.testing.assert_checkpoints():
                assert (await action.submit({"approved": True})).status == "accepted"
            with trio.testing.assert_checkpoints():
                await rt.wait_idle(thread_id)
            with trio.testing.assert_checkpoints():
                assert (await action.submit({"approved": True})).status == "rejected"
            assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["completed"]


async def test_a_cancelled_wait_for_an_idle_thread_raises(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``wait_idle`` on an idle thread, inside a cancelled scope, is cancelled, as any
    checkpoint is, rather than returning."""
    agent, model = one_approval()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await suspended(rt)
            with trio.CancelScope() as scope:
                scope.cancel()
                await rt.wait_idle(thread_id)
                raise AssertionError("wait_idle returned in a cancelled scope")
            assert scope.cancelled_caught


async def test_each_view_gives_the_resume_schema_as_a_copy_of_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent, model = one_approval()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await suspended(rt)
            [first] = await rt.pending_actions(thread_id)
            [second] = await rt.pending_actions(thread_id)
            schema = first.resume_schema
            assert schema == Decision.model_json_schema() == second.resume_schema
            assert first.resume_schema is schema  # (read twice: the same copy)
            schema["required"] = []  # a reader's change stays in its view
            assert second.resume_schema == Decision.model_json_schema()
            [third] = await rt.pending_actions(thread_id)
            assert third.resume_schema == Decision.model_json_schema()
            rejected = await third.submit({})
            assert rejected.status == "rejected"


async def test_cancel_and_fail_actions_resolve_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"one": approval_tool(), "two": approval_tool()})
    model = ScriptedModel(
        [[tool_call("one", {"summary": "1"}), tool_call("two", {"summary": "2"})], text("ok")]
    )
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            one, two = await rt.pending_actions(thread_id)
            assert (await one.cancel("not now")).status == "accepted"
            await rt.wait_idle(thread_id)
            assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["waiting"]
            assert (await two.fail(RuntimeError("boom"))).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    first, second = tool_parts(state)
    assert first.error_text == "The tool call was cancelled: not now"
    assert second.error_text == "boom"
    assert [r.status for r in state.runs] == ["completed"]
    assert [r["output"]["type"] for r in tool_results(model, 1)] == ["error-text"] * 2


async def test_cancel_run_records_every_call_as_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.Event()
    aborted: list[Any] = []

    async def execute(ctx: ToolContext) -> str:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            aborted.append((ctx.signal.aborted, ctx.signal.reason))
        return "never"

    slow = define_tool(id="test.slow.v1", description="Slow.", input_schema=Query, execute=execute)
    agent = define_agent(name="a", tools={"slow": slow, "ask": approval_tool()})
    model = ScriptedModel([[tool_call("slow", {"n": 1}), tool_call("ask", {"summary": "s"})]])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await started.wait()
            await rt.cancel_run(run_id, "user stopped")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
            assert await rt.pending_actions(thread_id) == []
    assert aborted == [(True, "user stopped")]
    assert [r.status for r in state.runs] == ["cancelled"]
    parts = tool_parts(state)
    assert [p.error_text for p in parts] == ["The tool call was cancelled: user stopped"] * 2
    assert all(p.cancelled is not None and p.cancelled.reason == "user stopped" for p in parts)


async def test_exceptions_become_output_errors(autojump_clock: trio.testing.MockClock) -> None:
    def boom(ctx: ToolContext) -> None:
        raise ValueError(f"bad n {ctx.input.n}")

    tool = define_tool(id="test.boom.v1", description="Boom.", input_schema=Query, execute=boom)
    agent = define_agent(name="a", tools={"boom": tool, "boom2": tool})
    model = ScriptedModel(
        [[tool_call("boom", {"n": 1}), tool_call("boom2", {"n": 2})], text("sorry")]
    )
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [p.error_text for p in tool_parts(state)] == ["bad n 1", "bad n 2"]
    assert [r.status for r in state.runs] == ["completed"]

    model = ScriptedModel([[tool_call("boom", {"n": 3})], text("sorry")])
    with trio.fail_after(10):
        async with create_test_runtime(
            agent, model=model, map_error=lambda exc, call: f"{call.tool_name} failed"
        ) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [p.error_text for p in tool_parts(state)] == ["boom failed"]


async def test_ctx_fail_is_verbatim(autojump_clock: trio.testing.MockClock) -> None:
    tool = define_tool(
        id="test.fail.v1",
        description="Fail.",
        input_schema=Query,
        execute=lambda ctx: ctx.fail("No such customer."),
    )
    agent = define_agent(name="a", tools={"lookup": tool})
    model = ScriptedModel([[tool_call("lookup", {"n": 1})], text("sorry")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    [part] = tool_parts(state)
    assert part.error_text == "No such customer."


async def test_invalid_model_input_never_reaches_execute(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[Any] = []
    tool = define_tool(
        id="test.strict.v1", description="Strict.", input_schema=Query, execute=calls.append
    )
    agent = define_agent(name="a", tools={"strict": tool})
    model = ScriptedModel([[tool_call("strict", {"n": "many"})], text("oops")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert calls == []
    [part] = tool_parts(state)
    assert part.state == "output-error"
    assert part.error_text is not None
    assert "n" in part.error_text
    [result] = tool_results(model, 1)
    assert result["output"] == {"type": "error-text", "value": part.error_text}


async def test_a_failing_model_fails_the_run(autojump_clock: trio.testing.MockClock) -> None:
    agent = define_agent(name="a", tools={})
    model = ScriptedModel([])  # no step left: the model raises
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)  # a failed run does not raise here
            state = await rt.get_state(thread_id)
    [run] = state.runs
    assert run.status == "failed"
    assert run.error


async def test_one_run_per_thread_and_tool_data(autojump_clock: trio.testing.MockClock) -> None:
    async def execute(ctx: ToolContext) -> Any:
        await ctx.data.write("progress", {"pct": 50}, id="p")
        await ctx.data.write("progress", {"pct": 100}, id="p")
        items = await ctx.data.list("progress")
        return ctx.suspend("approval", {"summary": str(items[0].value)})

    tool = define_tool(
        id="test.data.v1",
        description="Data.",
        input_schema=Query,
        data_schemas={"progress": dict[str, int]},
        suspend={"approval": SuspendPoint(suspend_schema=Summary, resume_schema=Decision)},
        execute=execute,
    )
    agent = define_agent(name="a", tools={"data": tool})
    model = ScriptedModel([[tool_call("data", {"n": 1})]])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            before = await rt.get_state(thread_id)
            with pytest.raises(ThreadBusy, match="already has the active run"):
                await rt.send(thread_id, "again")
            [action] = await rt.pending_actions(thread_id)
            state = await rt.get_state(thread_id)
    assert state == before  # the refused send wrote nothing
    assert action.input == {"summary": "{'pct': 100}"}
    [part] = tool_parts(state)
    assert [i.value for i in part.data["progress"]] == [{"pct": 100}]


async def test_closing_leaves_suspended_calls_pending_and_a_new_runtime_resumes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    agent = define_agent(name="a", tools={"requestApproval": approval_tool()})
    model = ScriptedModel([[tool_call("requestApproval", {"summary": "s"})]])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
        reopened = store.reopen()
        model = ScriptedModel([text("resumed")])
        async with create_test_runtime(agent, model=model, store=reopened) as rt:
            [action] = await rt.pending_actions(thread_id)
            assert action.name == "requestApproval.approval"
            assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["waiting"]
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    assert state.messages[-1].parts[-1].to_wire() == {"type": "text", "text": "resumed"}


async def test_closing_records_running_calls_as_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.Event()

    async def execute(ctx: ToolContext) -> None:
        started.set()
        await trio.sleep_forever()

    slow = define_tool(id="test.slow.v1", description="Slow.", input_schema=Query, execute=execute)
    agent = define_agent(name="a", tools={"slow": slow, "ask": approval_tool()})
    model = ScriptedModel([[tool_call("slow", {"n": 1}), tool_call("ask", {"summary": "s"})]])
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await started.wait()
            await trio.testing.wait_all_tasks_blocked()
    parts = [
        p
        for m in await store.list_messages(thread_id)
        for p in m.parts
        if p.type not in ("text", "step-start")
    ]
    assert [p.state for p in parts] == ["output-error", "input-available"]
    assert parts[0].error_text == "The tool call was cancelled: the runtime is closing"
    assert [a.ref.name for a in await store.list_pending_actions(thread_id)] == ["ask.approval"]


@pytest.mark.parametrize("how", ["cancel_run", "close"])
async def test_a_call_still_streaming_is_recorded_cancelled_with_the_reason(
    how: str, autojump_clock: trio.testing.MockClock
) -> None:
    streaming = trio.Event()

    class Streaming:
        async def stream(self, request: Any) -> Any:
            yield ToolInputStart("c1", "q")
            yield ToolInputDelta("c1", '{"n": ')
            streaming.set()
            await trio.sleep_forever()

    tool = define_tool(id="t.q.v1", description="Q.", input_schema=Query, execute=lambda ctx: 1)
    agent = define_agent(name="a", tools={"q": tool})
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=Streaming(), store=store) as rt:
            tid = await rt.create_thread("s")
            run_id = await rt.send(tid, "go")
            await streaming.wait()
            if how == "cancel_run":
                await rt.cancel_run(run_id, "stop")
    reason = "stop" if how == "cancel_run" else "the runtime is closing"
    async with create_test_runtime(agent, model=ScriptedModel([]), store=store.reopen()) as rt:
        state = await rt.get_state(tid)
    [part] = [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]
    assert (part.state, part.error_text) == (
        "output-error",
        f"The tool call was cancelled: {reason}",
    )
    assert part.cancelled is not None
    assert part.cancelled.reason == reason
