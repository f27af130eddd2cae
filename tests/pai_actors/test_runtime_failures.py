"""What the runtime does when something fails around a call: a model calling a tool it was
not offered, map_error (sync, async, misbehaving), an actor failing unexpectedly, a run
failing while calls wait."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
import trio
import trio.lowlevel
from pydantic import BaseModel, BeforeValidator

from pai_actors import (
    MemoryStore,
    SuspendPoint,
    ToolCallEvent,
    ToolContext,
    ToolFailResult,
    ToolRegistration,
    ToolThread,
    define_agent,
    define_tool,
    tool_failure_details,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Query(BaseModel):
    n: int = 0


def parts(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]


def raising(ctx: ToolContext) -> Any:
    raise RuntimeError("boom")


def raising_tool() -> Any:
    return define_tool(id="t.b.v1", description="B.", input_schema=Query, execute=raising)


async def run_to_idle(agent: Any, model: ScriptedModel, **options: Any) -> Any:
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, **options) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            return await rt.get_state(thread_id)


async def test_a_call_to_a_tool_not_offered_in_this_step_never_executes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[Any] = []

    def execute(ctx: ToolContext) -> str:
        ran.append(ctx.input)
        return "ran"

    tool = define_tool(id="t.off.v1", description="Off.", input_schema=Query, execute=execute)
    agent = define_agent(
        name="a",
        tools={"off": ToolRegistration(tool, enabled=False), "on": tool},
    )
    # A real model may call anything; ScriptedModel's tool_call would refuse, so use the event.
    model = ScriptedModel(
        [
            [
                ToolCallEvent(tool_call_id="c1", tool_name="off", input={"n": 1}),
                ToolCallEvent(tool_call_id="c2", tool_name="nope", input={}),
            ],
            text("done"),
        ]
    )
    state = await run_to_idle(agent, model)
    assert ran == []
    assert [(p.tool_name, p.state) for p in parts(state)] == [
        ("off", "output-error"),
        ("nope", "output-error"),
    ]
    assert parts(state)[0].error_text == (
        "the model called the tool 'off', which is not offered to it here (offered: 'on')"
    )
    assert [r.status for r in state.runs] == ["completed"]


async def test_map_error_may_be_async(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[str] = []

    async def map_error(exc: Exception, call: ToolThread) -> str:
        await trio.lowlevel.checkpoint()
        seen.append(call.tool_name)
        return f"mapped: {exc}"

    agent = define_agent(
        name="a",
        tools={
            "b": define_tool(id="t.b.v1", description="B.", input_schema=Query, execute=raising)
        },
    )
    model = ScriptedModel([[tool_call("b", {})], text("done")])
    state = await run_to_idle(agent, model, map_error=map_error)
    assert [(p.state, p.error_text) for p in parts(state)] == [("output-error", "mapped: boom")]
    assert seen == ["b"]


async def test_a_map_error_that_fails_or_returns_no_str_leaves_the_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def not_a_str(exc: Exception, call: ToolThread) -> Any:
        return 42

    def failing(exc: Exception, call: ToolThread) -> str:
        raise ValueError("map_error broke")

    agent = define_agent(
        name="a",
        tools={
            "b": define_tool(id="t.b.v1", description="B.", input_schema=Query, execute=raising)
        },
    )
    for map_error in (not_a_str, failing):
        model = ScriptedModel([[tool_call("b", {})], text("done")])
        state = await run_to_idle(agent, model, map_error=map_error)
        assert [(p.state, p.error_text) for p in parts(state)] == [("output-error", "boom")]
        assert [r.status for r in state.runs] == ["completed"]


async def test_a_validator_raising_an_unexpected_error_ends_the_call_and_the_run_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def explode(value: Any) -> Any:
        raise KeyError("not a validation error")  # pydantic lets this through unwrapped

    class Odd(BaseModel):
        n: Annotated[int, BeforeValidator(explode)]

    tool = define_tool(id="t.odd.v1", description="Odd.", input_schema=Odd, execute=lambda ctx: 1)
    agent = define_agent(name="a", tools={"odd": tool})
    model = ScriptedModel([[tool_call("odd", {"n": 1})], text("done")])
    state = await run_to_idle(agent, model)
    [part] = parts(state)
    assert part.state == "output-error"
    assert part.error_text is not None
    assert (
        part.error_text == "validating the tool's input failed: KeyError('not a validation error')"
    )
    assert [r.status for r in state.runs] == ["completed"]
    assert len(model.requests) == 2


class FailingOnceStore(MemoryStore):
    """Fails the first commit that finishes a call with an output."""

    failed = False

    async def commit(self, writes: Any) -> None:
        finishing = any(
            getattr(getattr(getattr(w, "stored", None), "record", None), "finish", None)
            == "output-available"
            for w in writes
        )
        if finishing and not self.failed:
            self.failed = True
            raise OSError("disk full")
        await super().commit(writes)


async def test_a_call_actor_failing_unexpectedly_ends_its_call_and_the_run_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = define_tool(id="t.one.v1", description="One.", input_schema=Query, execute=lambda c: 1)
    agent = define_agent(name="a", tools={"one": tool})
    model = ScriptedModel([[tool_call("one", {})], text("done")])
    state = await run_to_idle(agent, model, store=FailingOnceStore())
    [part] = parts(state)
    assert (part.state, part.error_text) == (
        "output-error",
        "the tool call failed inside the runtime: OSError('disk full')",
    )
    assert [r.status for r in state.runs] == ["completed"]
    assert len(model.requests) == 2


async def test_a_failed_run_records_its_waiting_calls_and_leaves_no_action_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    down = False

    def runtime_context(scope: Any) -> Any:
        if down:
            raise RuntimeError("context service down")
        return {}

    def execute(ctx: ToolContext) -> Any:
        if ctx.entry.type == "resume":
            return "done"
        return ctx.suspend("confirm", {})

    tool = define_tool(
        id="t.confirm.v1",
        description="Confirm.",
        input_schema=Query,
        suspend={"confirm": SuspendPoint(suspend_schema=Query, resume_schema=Query)},
        execute=execute,
    )
    agent = define_agent(
        name="a", runtime_context=runtime_context, tools={"one": tool, "two": tool}
    )
    store = MemoryStore()
    model = ScriptedModel([[tool_call("one", {}), tool_call("two", {})], text("done")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
        down = True
        async with create_test_runtime(agent, model=model, store=store) as rt:
            first, _ = await rt.pending_actions(thread_id)
            assert (await first.submit({"n": 1})).status == "accepted"
            await rt.wait_idle(thread_id)  # the run's actor starts and fails at once
            state = await rt.get_state(thread_id)
            assert await rt.pending_actions(thread_id) == []
    [run] = state.runs
    assert run.status == "failed"
    assert run.error is not None
    assert "context service down" in run.error
    expected = "The tool call was cancelled: the run failed"
    assert [(p.state, p.error_text) for p in parts(state)] == [("output-error", expected)] * 2
    assert [[s.state for s in p.suspensions] for p in parts(state)] == [
        ["submitted"],
        ["cancelled"],
    ]


async def test_two_threads_may_hold_calls_with_the_same_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ask = define_tool(id="t.ask.v1", description="Ask.", input_schema=Query, output_schema=Query)
    agent = define_agent(name="a", tools={"ask": ask})
    model = ScriptedModel(
        [
            [tool_call("ask", {"n": 1}, id="same")],
            [tool_call("ask", {"n": 2}, id="same")],
            text("one"),
            text("two"),
        ]
    )
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            one, two = await rt.create_thread("s"), await rt.create_thread("s")
            for thread_id in (one, two):
                await rt.send(thread_id, "go")
                await rt.wait_idle(thread_id)
            [action_two] = await rt.pending_actions(two)
            assert (await action_two.submit({"n": 20})).status == "accepted"
            await rt.wait_idle(two)
            [action_one] = await rt.pending_actions(one)
            assert (await action_one.submit({"n": 10})).status == "accepted"
            await rt.wait_idle(one)
            outputs = [[p.output for p in parts(await rt.get_state(t))] for t in (one, two)]
    assert outputs == [[{"n": 10}], [{"n": 20}]]


async def test_a_new_scripted_model_after_a_restart_goes_on_numbering_the_thread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"b": raising_tool()})
    store = MemoryStore()
    thread_id: str | None = None
    with trio.fail_after(10):
        for _ in range(2):
            model = ScriptedModel([[tool_call("b", {}), tool_call("b", {})], text("done")])
            async with create_test_runtime(agent, model=model, store=store) as rt:
                if thread_id is None:
                    thread_id = await rt.create_thread("s")
                await rt.send(thread_id, "go")
                await rt.wait_idle(thread_id)
                state = await rt.get_state(thread_id)
    ids = [p.tool_call_id for p in parts(state)]
    assert ids == ["call_1", "call_2", "call_3", "call_4"]
    assert [r.status for r in state.runs] == ["completed", "completed"]


async def test_a_model_reusing_a_call_id_of_its_thread_fails_the_run_clearly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"b": raising_tool()})
    model = ScriptedModel(
        [[tool_call("b", {}, id="x")], [tool_call("b", {}, id="x")], text("never")]
    )
    state = await run_to_idle(agent, model)
    [run] = state.runs
    assert run.status == "failed"
    assert run.error is not None
    assert "tool call the id 'x', which an earlier call of this thread already has" in run.error
    assert len(parts(state)) == 1


async def test_outputs_that_are_not_lossless_json_fail_the_call_and_none_is_null(
    autojump_clock: trio.testing.MockClock,
) -> None:
    returned = {
        "nan": float("nan"),
        "bytes": b"x",
        "set": {1},
        "key": {1: "a"},
        "object": object(),
        "none": None,
    }
    tools = {
        name: define_tool(
            id=f"t.out-{name}.v1",
            description="Returns a value.",
            input_schema=Query,
            execute=lambda ctx, value=value: value,
        )
        for name, value in returned.items()
    }
    agent = define_agent(name="a", tools=tools)
    model = ScriptedModel([[tool_call(name, {}) for name in returned], text("done")])
    state = await run_to_idle(agent, model)
    shown = {p.tool_name: (p.state, p.error_text) for p in parts(state)}
    assert shown.pop("none") == ("output-available", None)
    assert parts(state)[-1].to_wire()["output"] is None  # a successful null is on the wire
    for name, (state_name, error_text) in shown.items():
        assert state_name == "output-error", name
        assert error_text is not None
        assert error_text.startswith("output"), (name, error_text)
    assert [r.status for r in state.runs] == ["completed"]


async def test_ctx_fail_is_the_error_text_verbatim_as_tool_failure_details_normalises_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sentence = "No job brief 7. List them with searchJobBriefs first."

    def execute(ctx: ToolContext) -> Any:
        return ctx.fail(sentence)

    tool = define_tool(id="t.refuse.v1", description="Refuse.", input_schema=Query, execute=execute)
    agent = define_agent(name="a", tools={"refuse": tool})
    model = ScriptedModel([[tool_call("refuse", {})], text("done")])
    state = await run_to_idle(agent, model)
    [part] = parts(state)
    assert (part.state, part.error_text) == ("output-error", sentence)
    details = tool_failure_details(sentence)
    assert details == {"code": "tool_failed", "message": part.error_text}
    assert tool_failure_details(ToolFailResult(sentence)) == details


def test_tool_failure_details_refuses_what_is_not_a_sentence() -> None:
    with pytest.raises(TypeError, match=r"a tool failure is a sentence .* got 42"):
        tool_failure_details(42)  # type: ignore[arg-type]
