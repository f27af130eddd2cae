"""Nested tool calls (API §6): ctx.tools, BoundTool, child actors, ToolInvocationError."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    AbortController,
    BoundTool,
    ModelToolMessage,
    ToolContext,
    ToolInvocationError,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Numbers(BaseModel):
    a: int
    b: int


class Total(BaseModel):
    total: int


class Empty(BaseModel):
    pass


def adder(**options: Any) -> Any:
    def execute(ctx: ToolContext) -> Any:
        return {"total": ctx.input.a + ctx.input.b}

    options.setdefault("execute", execute)
    options.setdefault("id", "test.add.v1")
    return define_tool(
        description="Add two numbers.",
        input_schema=Numbers,
        output_schema=Total,
        **options,
    )


def parent(children: dict[str, Any], execute: Any, **options: Any) -> Any:
    return define_tool(
        id=options.pop("id", "test.parent.v1"),
        description="Use the children.",
        input_schema=Empty,
        tools=children,
        execute=execute,
        **options,
    )


async def run(tool: Any, **runtime: Any) -> Any:
    agent = define_agent(name="a", runtime_context=runtime.pop("context", "rc"), tools={"p": tool})
    model = ScriptedModel([[tool_call("p", {})], text("done")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, **runtime) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    parts = [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]
    return parts, state, model, run_id


async def test_a_parent_calls_a_child_and_gets_its_parsed_output(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []

    async def execute(ctx: ToolContext) -> Any:
        child = ctx.tools.add
        assert ctx.tools["add"] is child
        assert isinstance(child, BoundTool)
        seen.append((child.enabled, child.description, child.input_schema, child.output_schema))
        total = await child.execute({"a": 2, "b": 3})
        seen.append(total)
        return {"sum": total.total}

    parts, _, model, _ = await run(parent({"add": adder()}, execute))
    [part] = parts  # the child is not a conversation part
    assert (part.state, part.output) == ("output-available", {"sum": 5})
    enabled, description, input_schema, output_schema = seen[0]
    assert (enabled, description) == (True, "Add two numbers.")
    assert input_schema["properties"].keys() == {"a", "b"}
    assert output_schema is not None
    assert output_schema["properties"].keys() == {"total"}
    assert seen[1] == Total(total=5)  # as the child's output schema parses it
    results = [
        p.to_wire() for m in model.requests[1].messages if isinstance(m, ModelToolMessage)
        for p in m.parts
    ]  # fmt: skip
    assert [r["toolCallId"] for r in results] == [part.tool_call_id]


async def test_child_registrations_resolve_once_with_the_parents_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[tuple[str, Any]] = []

    def enabled(*, runtime_context: Any, identity: Any, client_data: Any) -> bool:
        calls.append(("enabled", runtime_context))
        return True

    def map_context(*, runtime_context: Any, identity: Any, client_data: Any) -> Any:
        calls.append(("map_context", runtime_context))
        return {"child of": runtime_context}

    def child_execute(ctx: ToolContext) -> Any:
        calls.append(("child", ctx.context))
        return {"total": 1}

    def parent_map(*, runtime_context: Any, identity: Any, client_data: Any) -> Any:
        return f"parent({runtime_context})"

    async def execute(ctx: ToolContext) -> Any:
        for _ in range(2):
            await ctx.tools.add.execute({"a": 0, "b": 1})
        return "ok"

    child = ToolRegistration(adder(execute=child_execute), enabled=enabled, map_context=map_context)
    tool = ToolRegistration(parent({"add": child}, execute), map_context=parent_map)
    parts, *_ = await run(tool)
    assert parts[0].output == "ok"
    assert calls == [
        ("enabled", "parent(rc)"),  # once, before execute: fixed for the invocation
        ("map_context", "parent(rc)"),
        ("child", {"child of": "parent(rc)"}),
        ("map_context", "parent(rc)"),
        ("child", {"child of": "parent(rc)"}),
    ]


async def test_a_disabled_child_refuses_and_its_state_is_fixed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []

    async def execute(ctx: ToolContext) -> Any:
        seen.append(ctx.tools.add.enabled)
        with pytest.raises(ToolInvocationError, match="disabled for this invocation") as info:
            await ctx.tools.add.execute({"a": 1, "b": 1})
        seen.append((info.value.tool, info.value.child))
        return "handled"

    child = ToolRegistration(adder(), enabled=False)
    parts, *_ = await run(parent({"add": child}, execute))
    assert parts[0].output == "handled"
    assert seen == [False, ("p", "add")]


async def test_a_failing_child_resolution_means_the_parent_never_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started: list[bool] = []

    def enabled(**_: Any) -> bool:
        raise RuntimeError("flags service down")

    def execute(ctx: ToolContext) -> Any:
        started.append(True)
        return "never"

    parts, *_ = await run(parent({"add": ToolRegistration(adder(), enabled=enabled)}, execute))
    assert started == []
    assert parts[0].state == "output-error"
    assert "flags service down" in (parts[0].error_text or "")
    assert (parts[0].error_text or "").endswith(
        "the tool call could not start (its children are resolved before execute)"
    )


async def test_invalid_child_input_failures_and_exceptions_raise_tool_invocation_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    errors: list[str] = []

    def refuse(ctx: ToolContext) -> Any:
        return ctx.fail("Numbers that large are not supported; split the sum.")

    def crash(ctx: ToolContext) -> Any:
        raise KeyError("internal detail")

    async def execute(ctx: ToolContext) -> Any:
        for name, raw in (("add", {"a": "x", "b": 1}), ("refuse", {"a": 1, "b": 2}),
                          ("crash", {"a": 1, "b": 2})):  # fmt: skip
            with pytest.raises(ToolInvocationError) as info:
                await ctx.tools[name].execute(raw)
            errors.append(str(info.value))
        return "ok"

    children = {
        "add": adder(),
        "refuse": adder(id="test.refuse.v1", execute=refuse),
        "crash": adder(id="test.crash.v1", execute=crash),
    }
    parts, *_ = await run(parent(children, execute))
    assert parts[0].output == "ok"
    assert errors[0].startswith("child tool 'add' of tool 'p': input does not match its schema")
    assert errors[1] == (
        "child tool 'refuse' of tool 'p': Numbers that large are not supported; split the sum."
    )
    # An unexpected exception is generic in a nested call (its detail stays private) ...
    assert errors[2] == "child tool 'crash' of tool 'p': it failed with an unexpected error"


async def test_map_error_gives_the_text_of_a_childs_exception(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def crash(ctx: ToolContext) -> Any:
        raise KeyError("internal detail")

    async def execute(ctx: ToolContext) -> Any:
        try:
            await ctx.tools.crash.execute({"a": 1, "b": 2})
        except ToolInvocationError as exc:
            return str(exc)
        return "no error"

    def map_error(exc: Exception, call: Any) -> str:
        return f"{call.tool_name} ({call.tool_call_id}) hit {type(exc).__name__}"

    children = {"crash": adder(id="test.crash.v1", execute=crash)}
    parts, *_ = await run(parent(children, execute), map_error=map_error)
    call_id = parts[0].tool_call_id
    assert (
        parts[0].output == f"child tool 'crash' of tool 'p': crash ({call_id}/crash.1) hit KeyError"
    )


async def test_an_abort_signal_cancels_that_child_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    observed: list[Any] = []

    async def slow(ctx: ToolContext) -> Any:
        try:
            await trio.sleep(10)
        finally:
            observed.append(("slow", ctx.signal.aborted, ctx.signal.reason))
        return {"total": 0}

    async def quick(ctx: ToolContext) -> Any:
        await trio.sleep(2)
        return {"total": ctx.input.a + ctx.input.b}

    async def execute(ctx: ToolContext) -> Any:
        controller = AbortController()
        outcome: dict[str, Any] = {}

        async def call_slow() -> None:
            try:
                await ctx.tools.slow.execute({"a": 0, "b": 0}, abort_signal=controller.signal)
            except ToolInvocationError as exc:
                outcome["slow"] = str(exc)
                outcome["slow aborted"] = (exc.aborted, exc.reason)

        async def call_quick() -> None:
            outcome["quick"] = await ctx.tools.quick.execute({"a": 1, "b": 2})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call_slow)
            nursery.start_soon(call_quick)
            await trio.sleep(1)
            controller.abort("no longer needed")
        return {
            "slow": outcome["slow"],
            "slow aborted": outcome["slow aborted"],
            "quick": outcome["quick"].total,
        }

    children = {
        "slow": adder(id="test.slow.v1", execute=slow),
        "quick": adder(id="test.quick.v1", execute=quick),
    }
    parts, *_ = await run(parent(children, execute))
    assert parts[0].output == {
        "slow": "child tool 'slow' of tool 'p': it was aborted: no longer needed",
        "slow aborted": [True, "no longer needed"],
        "quick": 3,
    }
    assert observed == [("slow", True, "no longer needed")]


async def test_cancelling_the_run_cancels_the_parent_and_every_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()
    exits: list[Any] = []

    async def child_execute(ctx: ToolContext) -> Any:
        try:
            if ctx.input.a == 1:
                entered.set()
            await trio.sleep_forever()
        finally:
            exits.append((ctx.input.a, ctx.signal.aborted))

    async def execute(ctx: ToolContext) -> Any:
        async with trio.open_nursery() as nursery:
            for a in (0, 1):
                nursery.start_soon(ctx.tools.wait.execute, {"a": a, "b": 0})
        return "never"

    tool = parent({"wait": adder(execute=child_execute)}, execute)
    agent = define_agent(name="a", tools={"p": tool})
    model = ScriptedModel([[tool_call("p", {})]])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await entered.wait()
            await trio.testing.wait_all_tasks_blocked()
            await rt.cancel_run(run_id, "user left")
            state = await rt.get_state(thread_id)
    [part] = [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]
    assert part.error_text == "The tool call was cancelled: user left"
    assert sorted(exits) == [(0, True), (1, True)]
    assert [r.status for r in state.runs] == ["cancelled"]


async def test_calling_a_child_after_the_parent_returned_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kept: list[BoundTool] = []

    def execute(ctx: ToolContext) -> Any:
        kept.append(ctx.tools.add)
        return "returned"

    parts, *_ = await run(parent({"add": adder()}, execute))
    assert parts[0].output == "returned"
    with pytest.raises(ToolInvocationError, match="its parent's execute has returned"):
        await kept[0].execute({"a": 1, "b": 2})


async def test_a_failing_child_hook_is_fatal_to_the_parent_even_if_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def broken_map(**_: Any) -> Any:
        raise LookupError("tenant config missing")

    async def execute(ctx: ToolContext) -> Any:
        try:
            await ctx.tools.add.execute({"a": 1, "b": 2})
        except ToolInvocationError:
            return "caught it"  # the hook's failure still fails the parent
        return "no error"

    child = ToolRegistration(adder(), map_context=broken_map)
    parts, *_ = await run(parent({"add": child}, execute))
    assert (parts[0].state, parts[0].error_text) == ("output-error", "tenant config missing")


async def test_a_childs_on_output_observes_the_output_delivered_to_the_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    observed: list[dict[str, Any]] = []

    def on_output(**kwargs: Any) -> None:
        observed.append(kwargs)

    async def execute(ctx: ToolContext) -> Any:
        return (await ctx.tools.add.execute({"a": 4, "b": 5})).total

    child = ToolRegistration(adder(), on_output=on_output)
    parts, *_ = await run(parent({"add": child}, execute), context={"db": 1})
    assert parts[0].output == 9
    [seen] = observed
    assert seen["output"] == {"total": 9}
    assert seen["input"] == {"a": 4, "b": 5}
    assert seen["tool_name"] == "add"
    assert seen["tool_call_id"] == f"{parts[0].tool_call_id}/add.1"
    assert seen["context"] == {"db": 1}


async def test_ctx_tools_is_empty_for_a_tool_without_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []

    def execute(ctx: ToolContext) -> Any:
        seen.append(dict(ctx.tools))
        return None

    tool = define_tool(id="t.alone.v1", description="d", input_schema=Empty, execute=execute)
    await run(tool)
    assert seen == [{}]


async def test_a_childs_ctx_has_files_and_empty_capabilities(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []

    async def child_execute(ctx: ToolContext) -> Any:
        file = await ctx.files.save(b"x", "text/plain", "x.txt")
        seen.append((file.thread_id, len(ctx.capabilities), dict(ctx.tools)))
        return {"total": 1}

    async def execute(ctx: ToolContext) -> Any:
        await ctx.tools.add.execute({"a": 0, "b": 1})
        return len(ctx.capabilities)

    parts, state, *_ = await run(parent({"add": adder(execute=child_execute)}, execute))
    assert parts[0].output == 0
    assert seen == [(state.thread_id, 0, {})]


def test_an_illegal_child_that_bypassed_define_tool_is_refused_at_runtime_creation() -> None:
    from dataclasses import replace

    from pai_actors import RuntimeConfigError

    external = define_tool(
        id="test.external.v1", description="A client answers.", input_schema=Empty
    )
    legal = parent({"add": adder()}, lambda ctx: None)
    smuggled = replace(legal, tools={"ask": external})  # what define_tool would refuse
    agent = define_agent(name="a", tools={"p": smuggled})
    with pytest.raises(RuntimeConfigError, match=r"tools\['p'\]\.tools\['ask'\] has no execute"):
        create_test_runtime(agent, model=ScriptedModel([]))


async def test_a_child_called_with_an_aborted_signal_never_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started: list[str] = []

    def child_execute(ctx: ToolContext) -> Any:
        started.append("child")
        return {"total": 0}

    async def execute(ctx: ToolContext) -> Any:
        controller = AbortController()
        controller.abort("too late")
        try:
            await ctx.tools.add.execute({"a": 1, "b": 2}, abort_signal=controller.signal)
        except ToolInvocationError as exc:
            return str(exc)
        return "ran"

    parts, *_ = await run(parent({"add": adder(execute=child_execute)}, execute))
    assert parts[0].output == "child tool 'add' of tool 'p': it was aborted: too late"
    assert started == []


async def test_a_child_still_running_when_its_parent_returns_is_aborted_with_the_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The parent returns while a task it started elsewhere still awaits a child: the
    child's signal aborts (with the reason) as its actor is cancelled, and the awaiting task
    gets the reason in its ToolInvocationError."""
    seen: list[Any] = []
    outcome: list[tuple[str, bool, str | None]] = []

    async def child_execute(ctx: ToolContext) -> Any:
        try:
            await trio.sleep_forever()
        finally:
            seen.append((ctx.signal.aborted, ctx.signal.reason))

    async def execute(ctx: ToolContext) -> Any:
        async def call_child() -> None:
            try:
                await ctx.tools.wait.execute({"a": 1, "b": 2})
            except ToolInvocationError as exc:
                outcome.append((str(exc), exc.aborted, exc.reason))

        ctx.context.start_soon(call_child)  # a nursery that outlives this execute
        await trio.testing.wait_all_tasks_blocked()
        return "returned"

    async with trio.open_nursery() as outer:
        parts, *_ = await run(
            parent({"wait": adder(execute=child_execute)}, execute), context=outer
        )
    assert parts[0].output == "returned"
    assert seen == [(True, "the parent call returned")]
    assert outcome == [
        (
            "child tool 'wait' of tool 'p': it was aborted: the parent call returned",
            True,
            "the parent call returned",
        )
    ]


@pytest.mark.parametrize("how", ["cancel_run", "close"])
async def test_a_parent_cancelled_aborts_its_children_with_the_same_reason(
    how: str, autojump_clock: trio.testing.MockClock
) -> None:
    entered = trio.Event()
    seen: list[Any] = []

    async def child_execute(ctx: ToolContext) -> Any:
        try:
            entered.set()
            await trio.sleep_forever()
        finally:
            seen.append(("child", ctx.signal.aborted, ctx.signal.reason))

    async def execute(ctx: ToolContext) -> Any:
        try:
            return await ctx.tools.wait.execute({"a": 1, "b": 2})
        finally:
            seen.append(("parent", ctx.signal.aborted, ctx.signal.reason))

    tool = parent({"wait": adder(execute=child_execute)}, execute)
    agent = define_agent(name="a", tools={"p": tool})
    model = ScriptedModel([[tool_call("p", {})]])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await entered.wait()
            if how == "cancel_run":
                await rt.cancel_run(run_id, "user left")
    reason = "user left" if how == "cancel_run" else "the runtime is closing"
    assert sorted(seen) == [("child", True, reason), ("parent", True, reason)]
