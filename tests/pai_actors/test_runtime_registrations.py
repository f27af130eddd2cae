"""Registrations in the runtime (runtime_context, map_context, enabled, on_output) and
to_model_output as the model sees it."""

from __future__ import annotations

from typing import Any

import trio
from pydantic import BaseModel

from pai_actors import (
    MemoryStore,
    ModelToolMessage,
    RuntimeScope,
    ToolContext,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Query(BaseModel):
    n: int


def context_tool(seen: list[Any], **options: Any) -> Any:
    def execute(ctx: ToolContext) -> Any:
        seen.append(ctx.context)
        return {"n": ctx.input.n}

    return define_tool(
        id="test.context.v1", description="Ctx.", input_schema=Query, execute=execute, **options
    )


def tool_results(model: ScriptedModel, step: int) -> list[Any]:
    return [
        part.output
        for message in model.requests[step].messages
        if isinstance(message, ModelToolMessage)
        for part in message.parts
    ]


async def run_once(agent: Any, model: ScriptedModel, **send: Any) -> Any:
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("tenant-a", user_key="user-1")
            await rt.send(thread_id, "go", **send)
            await rt.wait_idle(thread_id)
            return await rt.get_state(thread_id)


async def test_runtime_context_value_is_the_tool_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []
    agent = define_agent(name="a", runtime_context={"db": "x"}, tools={"t": context_tool(seen)})
    await run_once(agent, ScriptedModel([[tool_call("t", {"n": 1})], text("ok")]))
    assert seen == [{"db": "x"}]


async def test_runtime_context_factory_receives_the_runtime_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []
    scopes: list[RuntimeScope] = []

    async def factory(scope: RuntimeScope) -> str:
        scopes.append(scope)
        return f"ctx-for-{scope.scope_key}"

    agent = define_agent(name="a", runtime_context=factory, tools={"t": context_tool(seen)})
    state = await run_once(
        agent, ScriptedModel([[tool_call("t", {"n": 1})], text("ok")]), identity={"sub": "u1"}
    )
    assert seen == ["ctx-for-tenant-a"]
    assert scopes == [RuntimeScope("tenant-a", "user-1", state.thread_id, {"sub": "u1"})]


async def test_map_context_result_is_ctx_context_and_sees_identity_and_client_data(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []
    calls: list[Any] = []

    def map_context(*, runtime_context: Any, identity: Any, client_data: Any) -> Any:
        calls.append((runtime_context, identity, client_data))
        return {"mapped": runtime_context}

    registration = ToolRegistration(context_tool(seen), map_context=map_context)
    agent = define_agent(name="a", runtime_context="base", tools={"t": registration})
    await run_once(
        agent,
        ScriptedModel([[tool_call("t", {"n": 1})], text("ok")]),
        identity="alice",
        client_data={"tz": "UTC"},
    )
    assert seen == [{"mapped": "base"}]
    assert ("base", "alice", {"tz": "UTC"}) in calls


async def test_disabled_tool_is_not_offered_but_keeps_to_model_output(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []

    def enabled(*, runtime_context: Any, identity: Any, client_data: Any) -> bool:
        return bool(client_data["on"])

    def to_model_output(*, output: Any, input: Any, tool_call_id: str) -> str:
        return f"converted {output['n']}"

    tool = context_tool(seen, to_model_output=to_model_output)
    agent = define_agent(name="a", tools={"t": ToolRegistration(tool, enabled=enabled)})
    model = ScriptedModel([[tool_call("t", {"n": 7})], text("ok"), text("later")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go", client_data={"on": True})
            await rt.wait_idle(thread_id)
            await rt.send(thread_id, "again", client_data={"on": False})
            await rt.wait_idle(thread_id)
    assert list(model.requests[0].tools) == ["t"]
    assert list(model.requests[2].tools) == []
    assert tool_results(model, 2) == [{"type": "text", "value": "converted 7"}]


async def test_on_output_observes_the_output_identity_and_client_data(
    autojump_clock: trio.testing.MockClock,
) -> None:
    observed: list[dict[str, Any]] = []

    async def on_output(**kwargs: Any) -> None:
        observed.append(kwargs)

    registration = ToolRegistration(context_tool([]), on_output=on_output)
    agent = define_agent(name="a", runtime_context="rc", tools={"t": registration})
    await run_once(
        agent,
        ScriptedModel([[tool_call("t", {"n": 3}, id="c1")], text("ok")]),
        identity="alice",
        client_data="cd",
    )
    assert observed == [
        {
            "output": {"n": 3},
            "input": {"n": 3},
            "tool_call_id": "c1",
            "tool_name": "t",
            "context": "rc",
            "identity": "alice",
            "client_data": "cd",
        }
    ]


async def test_on_output_is_not_called_for_a_failed_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    observed: list[Any] = []

    def execute(ctx: ToolContext) -> Any:
        return ctx.fail("no")

    tool = define_tool(id="test.fail.v1", description="F.", input_schema=Query, execute=execute)
    registration = ToolRegistration(tool, on_output=lambda **kw: observed.append(kw))
    agent = define_agent(name="a", tools={"t": registration})
    await run_once(agent, ScriptedModel([[tool_call("t", {"n": 3})], text("ok")]))
    assert observed == []


async def test_an_async_to_model_output_shapes_only_the_model_view(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def to_model_output(*, output: Any, input: Any, tool_call_id: str) -> Any:
        return {"type": "content", "value": [{"type": "text", "text": f"{tool_call_id}"}]}

    agent = define_agent(name="a", tools={"t": context_tool([], to_model_output=to_model_output)})
    model = ScriptedModel([[tool_call("t", {"n": 1}, id="c9")], text("ok")])
    state = await run_once(agent, model)
    assert tool_results(model, 1) == [
        {"type": "content", "value": [{"type": "text", "text": "c9"}]}
    ]
    [part] = [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]
    assert part.output == {"n": 1}


async def test_a_bare_json_value_from_to_model_output_is_json(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def to_model_output(*, output: Any, input: Any, tool_call_id: str) -> Any:
        return [output["n"], input["n"]]

    agent = define_agent(name="a", tools={"t": context_tool([], to_model_output=to_model_output)})
    model = ScriptedModel([[tool_call("t", {"n": 2})], text("ok")])
    await run_once(agent, model)
    assert tool_results(model, 1) == [{"type": "json", "value": [2, 2]}]


async def test_to_model_output_runs_again_whenever_history_is_prepared(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[str] = []

    def to_model_output(*, output: Any, input: Any, tool_call_id: str) -> str:
        calls.append(tool_call_id)
        return "seen"

    agent = define_agent(name="a", tools={"t": context_tool([], to_model_output=to_model_output)})
    model = ScriptedModel(
        [[tool_call("t", {"n": 1}, id="c1")], [tool_call("t", {"n": 2}, id="c2")], text("ok")]
    )
    await run_once(agent, model)
    assert calls == ["c1", "c1", "c2"]


async def test_a_failing_to_model_output_fails_the_run_clearly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def to_model_output(*, output: Any, input: Any, tool_call_id: str) -> Any:
        raise ValueError("cannot convert")

    agent = define_agent(name="a", tools={"t": context_tool([], to_model_output=to_model_output)})
    model = ScriptedModel([[tool_call("t", {"n": 1}, id="c1")], text("never")])
    state = await run_once(agent, model)
    [run] = state.runs
    assert run.status == "failed"
    assert run.error is not None
    assert "to_model_output of tool 't'" in run.error
    assert "cannot convert" in run.error
    assert len(model.requests) == 1


async def test_a_non_json_to_model_output_fails_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def to_model_output(*, output: Any, input: Any, tool_call_id: str) -> Any:
        return {1, 2}

    agent = define_agent(name="a", tools={"t": context_tool([], to_model_output=to_model_output)})
    state = await run_once(agent, ScriptedModel([[tool_call("t", {"n": 1})], text("never")]))
    [run] = state.runs
    assert run.status == "failed"
    assert run.error is not None
    assert "to_model_output" in run.error


async def test_error_results_bypass_to_model_output(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[Any] = []

    def execute(ctx: ToolContext) -> Any:
        return ctx.fail("it broke")

    tool = define_tool(
        id="test.fail.v1",
        description="F.",
        input_schema=Query,
        execute=execute,
        to_model_output=lambda **kw: calls.append(kw),
    )
    agent = define_agent(name="a", tools={"t": tool})
    model = ScriptedModel([[tool_call("t", {"n": 1})], text("ok")])
    await run_once(agent, model)
    assert calls == []
    assert tool_results(model, 1) == [{"type": "error-text", "value": "it broke"}]


def external_tool() -> Any:
    return define_tool(
        id="test.ask-client.v1", description="Ask.", input_schema=Query, output_schema=Query
    )


async def test_on_output_runs_once_per_output_before_the_model_sees_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[str] = []

    async def on_output(*, output: Any, tool_call_id: str, **_: Any) -> None:
        await trio.sleep(1)  # a slow observer still runs before the next model step
        events.append(f"observed {tool_call_id}")

    def answer(request: Any) -> Any:
        events.append("model")
        return text("ok")

    registration = ToolRegistration(context_tool([]), on_output=on_output)
    agent = define_agent(name="a", tools={"t": registration})
    model = ScriptedModel(
        [[tool_call("t", {"n": 1}, id="c1"), tool_call("t", {"n": 2}, id="c2")], answer]
    )
    state = await run_once(agent, model)
    assert sorted(events[:2]) == ["observed c1", "observed c2"]
    assert events[2:] == ["model"]
    assert [r.status for r in state.runs] == ["completed"]


async def test_on_output_observes_outputs_submitted_together_to_a_passivated_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    observed: list[tuple[str, Any]] = []

    def on_output(*, output: Any, tool_call_id: str, **_: Any) -> None:
        observed.append((tool_call_id, output))

    agent = define_agent(
        name="a", tools={"ask": ToolRegistration(external_tool(), on_output=on_output)}
    )
    model = ScriptedModel(
        [[tool_call("ask", {"n": 1}, id="c1"), tool_call("ask", {"n": 2}, id="c2")], text("ok")]
    )
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
        async with create_test_runtime(agent, model=model, store=store) as rt:
            first, second = await rt.pending_actions(thread_id)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first.submit, {"n": 10})
                nursery.start_soon(second.submit, {"n": 20})
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert sorted(observed) == [("c1", {"n": 10}), ("c2", {"n": 20})]
    assert [r.status for r in state.runs] == ["completed"]


async def test_an_output_accepted_just_before_closing_is_observed_by_the_next_runtime(
    autojump_clock: trio.testing.MockClock,
) -> None:
    observed: list[str] = []

    def on_output(*, tool_call_id: str, **_: Any) -> None:
        observed.append(tool_call_id)

    agent = define_agent(
        name="a", tools={"ask": ToolRegistration(external_tool(), on_output=on_output)}
    )
    model = ScriptedModel([[tool_call("ask", {"n": 1}, id="c1")], text("ok")])
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"n": 5})).status == "accepted"
            # the runtime closes here, before the run's actor looked at the output
        assert observed == []
        async with create_test_runtime(agent, model=model, store=store) as rt:
            await rt.get_state(thread_id)  # loading the thread goes on with its run
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert observed == ["c1"]
    assert [r.status for r in state.runs] == ["completed"]
    assert len(model.requests) == 2
