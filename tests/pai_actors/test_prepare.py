"""Tool preparation for one model step: the seed's order, no execution, clear failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
from pydantic import BaseModel

from pai_actors import (
    ChildToolInfo,
    ClientTool,
    DefinitionError,
    DescriptionContext,
    ModelTool,
    RuntimeScope,
    ToolDefinition,
    ToolPreparationError,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors._runtime.prepare import (
    PreparedTools,
    prepare_tools,
    resolve_children,
    resolve_runtime_context,
)


class Query(BaseModel):
    region: str


class Report(BaseModel):
    amount: int


def never_execute(ctx: Any) -> Any:
    raise AssertionError("preparation never executes a tool")


def tool(id: str, description: Any = "Static text.", **kwargs: Any) -> ToolDefinition:
    return define_tool(
        id=id, description=description, input_schema=Query, execute=never_execute, **kwargs
    )


async def prepare(tools: dict[str, Any], **kwargs: Any) -> PreparedTools:
    kwargs.setdefault("runtime_context", {"currency": "EUR"})
    return await prepare_tools(define_agent(name="support", tools=tools), **kwargs)


async def preparation_error(tools: dict[str, Any], **kwargs: Any) -> ToolPreparationError:
    with pytest.raises(ToolPreparationError) as caught:
        await prepare(tools, **kwargs)
    return caught.value


def boom(**kwargs: Any) -> Any:
    raise ValueError("boom")


def returns_one(**kwargs: Any) -> Any:
    return 1


def returns_none(ctx: DescriptionContext) -> Any:
    return None


async def load(ctx: DescriptionContext) -> str:
    return "never"


def returns_a_coroutine(ctx: DescriptionContext) -> Any:
    return load(ctx)


class Recorder:
    """Records every callback call, in order, as ``"<who>.<callback>"``."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def enabled(self, who: str, value: bool) -> Callable[..., Any]:
        async def enabled(*, runtime_context: Any, identity: Any, client_data: Any) -> bool:
            await trio.lowlevel.checkpoint()
            self.calls.append(f"{who}.enabled")
            return value

        return enabled

    def map_context(self, who: str, value: Any) -> Callable[..., Any]:
        async def map_context(*, runtime_context: Any, identity: Any, client_data: Any) -> Any:
            await trio.lowlevel.checkpoint()
            self.calls.append(f"{who}.map_context")
            return value

        return map_context

    def description(self, who: str) -> Callable[[DescriptionContext], str]:
        def description(ctx: DescriptionContext) -> str:
            self.calls.append(f"{who}.description")
            return f"{who} in {ctx.context}"

        return description


# --- order ---------------------------------------------------------------------------------


async def test_the_preparation_order() -> None:
    rec = Recorder()
    children = {
        "dynamic": ToolRegistration(
            tool("example.dynamic", rec.description("dynamic")),
            enabled=rec.enabled("dynamic", True),
            map_context=rec.map_context("dynamic", "USD"),
        ),
        "static": ToolRegistration(
            tool("example.static"),
            enabled=rec.enabled("static", True),
            map_context=rec.map_context("static", "never"),
        ),
        "off": ToolRegistration(
            tool("example.off", rec.description("off")),
            enabled=rec.enabled("off", False),
            map_context=rec.map_context("off", "never"),
        ),
    }
    parent = tool("example.total", rec.description("parent"), tools=children)
    await prepare(
        {
            "first": ToolRegistration(
                tool("example.first"),
                enabled=rec.enabled("first", True),
                map_context=rec.map_context("first", "x"),
            ),
            "total": ToolRegistration(
                parent,
                enabled=rec.enabled("parent", True),
                map_context=rec.map_context("parent", "EUR"),
            ),
        }
    )
    assert rec.calls == [
        "first.enabled",
        "first.map_context",
        "parent.enabled",
        "parent.map_context",
        "dynamic.enabled",
        "static.enabled",
        "off.enabled",
        "dynamic.map_context",
        "dynamic.description",
        "parent.description",
    ]


async def test_a_static_parent_skips_its_children() -> None:
    rec = Recorder()
    child = ToolRegistration(tool("example.report"), enabled=rec.enabled("child", True))
    parent = tool("example.total", tools={"report": child})
    prepared = await prepare({"total": parent})
    assert rec.calls == []
    assert prepared.children == {}


async def test_a_disabled_tool_maps_no_context_and_is_not_offered() -> None:
    rec = Recorder()
    registration = ToolRegistration(
        tool("example.report", rec.description("report")),
        enabled=rec.enabled("report", False),
        map_context=rec.map_context("report", "x"),
    )
    prepared = await prepare({"report": registration, "other": tool("example.other")})
    assert rec.calls == ["report.enabled"]
    assert list(prepared.tools) == ["other"]


async def test_preparation_never_calls_execute() -> None:
    calls: list[str] = []

    def execute(ctx: Any) -> Any:
        calls.append("execute")

    child = define_tool(
        id="example.report", description="Report.", input_schema=Query, execute=execute
    )
    parent = define_tool(
        id="example.total",
        description=lambda ctx: f"Total. {ctx.tools['report'].description}",
        input_schema=Query,
        execute=execute,
        tools={"report": child},
    )
    prepared = await prepare({"total": parent, "report": child})
    assert calls == []
    assert prepared.tools["total"].description == "Total. Report."


# --- what the model is offered ------------------------------------------------------------


async def test_the_model_tools() -> None:
    report = tool("example.report", lambda ctx: f"Report in {ctx.context['currency']}.")
    prepared = await prepare({"report": report, "static": tool("example.static")})
    schema = report.wire_spec().input_schema
    assert prepared.tools == {
        "report": ModelTool("Report in EUR.", schema),
        "static": ModelTool("Static text.", schema),
    }


async def test_the_description_gets_the_mapped_context() -> None:
    registration = ToolRegistration(
        tool("example.report", lambda ctx: f"In {ctx.context}."),
        map_context=lambda *, runtime_context, identity, client_data: (
            f"{runtime_context['currency']}/{identity}/{client_data}"
        ),
    )
    prepared = await prepare({"report": registration}, identity="alice", client_data="web")
    assert prepared.tools["report"].description == "In EUR/alice/web."


async def test_the_description_sees_only_enabled_children() -> None:
    seen: list[DescriptionContext] = []

    def describe(ctx: DescriptionContext) -> str:
        seen.append(ctx)
        return "Total."

    children = {
        "report": tool("example.report", output_schema=Report),
        "off": ToolRegistration(tool("example.off"), enabled=False),
    }
    await prepare({"total": tool("example.total", describe, tools=children)})
    [ctx] = seen
    report = children["report"]
    assert isinstance(report, ToolDefinition)
    assert dict(ctx.tools) == {
        "report": ChildToolInfo(
            "Static text.",
            report.wire_spec().input_schema,
            report.wire_spec().output_schema,
        )
    }


async def test_a_child_is_resolved_with_the_parent_context() -> None:
    received: list[tuple[Any, Any, Any]] = []

    def enabled(*, runtime_context: Any, identity: Any, client_data: Any) -> bool:
        received.append((runtime_context, identity, client_data))
        return True

    def child_description(ctx: DescriptionContext) -> str:
        return f"Report in {ctx.context}."

    child = ToolRegistration(tool("example.report", child_description), enabled=enabled)
    parent = ToolRegistration(
        tool("example.total", lambda ctx: ctx.tools["report"].description, tools={"report": child}),
        map_context=lambda **kwargs: "parent-context",
    )
    prepared = await prepare({"total": parent}, identity="alice", client_data="web")
    assert received == [("parent-context", "alice", "web")]
    assert prepared.tools["total"].description == "Report in parent-context."


async def test_the_children_record() -> None:
    children = {
        "on": tool("example.on"),
        "off": ToolRegistration(tool("example.off"), enabled=lambda **kwargs: False),
    }
    parent = tool("example.total", lambda ctx: "Total.", tools=children)
    prepared = await prepare({"total": parent, "plain": tool("example.plain", lambda c: "P.")})
    assert prepared.children == {"total": {"on": True, "off": False}}


async def test_client_tools_are_offered_after_the_registered_tools() -> None:
    client_tool = ClientTool("openUrl", "Open a page.", {"type": "object"})
    prepared = await prepare({"report": tool("example.report")}, client_tools=[client_tool])
    assert list(prepared.tools) == ["report", "openUrl"]
    assert prepared.tools["openUrl"] == ModelTool("Open a page.", {"type": "object"})
    assert prepared.client_tools == {"openUrl": client_tool}


async def test_a_client_tool_cannot_take_a_registered_name() -> None:
    with pytest.raises(DefinitionError) as caught:
        await prepare(
            {"report": tool("example.report")},
            client_tools=[ClientTool("report", "Report.", {})],
        )
    assert str(caught.value) == (
        "client tool 'report' has the name of a tool registered on agent 'support'; give the "
        "client tool another name"
    )


async def test_client_tool_names_are_unique() -> None:
    twice = [ClientTool("openUrl", "Open.", {}), ClientTool("openUrl", "Open again.", {})]
    with pytest.raises(DefinitionError) as caught:
        await prepare({}, client_tools=twice)
    assert str(caught.value) == (
        "client tool 'openUrl' is given twice; give each client tool its own name"
    )


# --- failures ------------------------------------------------------------------------------


async def test_a_failing_enabled_callback() -> None:
    error = await preparation_error(
        {"report": ToolRegistration(tool("example.report"), enabled=boom)}
    )
    assert str(error) == (
        "tool 'report': the enabled callback boom raised ValueError: boom; the tools for this "
        "model step could not be prepared"
    )
    assert (error.tool, error.child, error.callback) == ("report", None, "enabled")
    assert isinstance(error.__cause__, ValueError)


async def test_a_failing_map_context_callback() -> None:
    error = await preparation_error(
        {"report": ToolRegistration(tool("example.report"), map_context=boom)}
    )
    assert (error.tool, error.callback) == ("report", "map_context")
    assert str(error).startswith("tool 'report': the map_context callback boom raised")


async def test_a_failing_description_callback() -> None:
    def describe(ctx: DescriptionContext) -> str:
        raise KeyError("currency")

    error = await preparation_error({"report": tool("example.report", describe)})
    assert str(error) == (
        "tool 'report': the description callback "
        "test_a_failing_description_callback.<locals>.describe raised KeyError: 'currency'; "
        "the tools for this model step could not be prepared"
    )
    assert error.callback == "description"


async def test_a_failing_child_is_not_read_as_disabled() -> None:
    child = ToolRegistration(tool("example.report"), enabled=boom)
    parent = tool("example.total", lambda ctx: "Total.", tools={"report": child})
    error = await preparation_error({"total": parent})
    assert str(error) == (
        "child 'report' of tool 'total': the enabled callback boom raised ValueError: boom; "
        "the tools for this model step could not be prepared"
    )
    assert (error.tool, error.child, error.callback) == ("total", "report", "enabled")


async def test_a_failing_child_description() -> None:
    child = tool("example.report", lambda ctx: boom())
    parent = tool("example.total", lambda ctx: "Total.", tools={"report": child})
    error = await preparation_error({"total": parent})
    assert (error.tool, error.child, error.callback) == ("total", "report", "description")


async def test_enabled_must_return_a_bool() -> None:
    registration = ToolRegistration(tool("example.report"), enabled=returns_one)
    error = await preparation_error({"report": registration})
    assert str(error) == (
        "tool 'report': the enabled callback returns_one returned 1 (int); it must return True "
        "or False; the tools for this model step could not be prepared"
    )


async def test_a_description_must_return_a_str() -> None:
    error = await preparation_error({"report": tool("example.report", returns_none)})
    assert str(error) == (
        "tool 'report': the description callback returns_none returned None (NoneType); it must "
        "return a str; the tools for this model step could not be prepared"
    )


async def test_a_description_must_not_return_a_coroutine() -> None:
    error = await preparation_error({"report": tool("example.report", returns_a_coroutine)})
    assert str(error) == (
        "tool 'report': the description callback returns_a_coroutine returned a coroutine; "
        "descriptions are synchronous: return a str, and load what it needs in map_context, "
        "which may be async; the tools for this model step could not be prepared"
    )


async def test_cancellation_passes_through() -> None:
    async def wait(**kwargs: Any) -> bool:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    registration = ToolRegistration(tool("example.report"), enabled=wait)
    with trio.CancelScope() as scope:
        scope.cancel()
        await prepare({"report": registration})
    assert scope.cancelled_caught


# --- per-invocation child resolution --------------------------------------------------------


async def test_resolve_children_for_an_invocation() -> None:
    children = {
        "on": tool("example.on"),
        "maybe": ToolRegistration(
            tool("example.maybe"), enabled=lambda *, runtime_context, **kwargs: runtime_context
        ),
    }
    registration = ToolRegistration(tool("example.total", tools=children))
    assert await resolve_children("total", registration, context=False) == {
        "on": True,
        "maybe": False,
    }


# --- runtime context ----------------------------------------------------------------------

SCOPE = RuntimeScope(scope_key="tenant-a", user_key="alice", thread_id="t1", identity="id")


async def test_a_runtime_context_value() -> None:
    agent = define_agent(name="support", runtime_context={"currency": "EUR"}, tools={})
    assert await resolve_runtime_context(agent, SCOPE) == {"currency": "EUR"}


async def test_a_runtime_context_callable_receives_the_scope() -> None:
    async def load(scope: RuntimeScope) -> str:
        return f"{scope.scope_key}/{scope.user_key}/{scope.thread_id}/{scope.identity}"

    agent = define_agent(name="support", runtime_context=load, tools={})
    assert await resolve_runtime_context(agent, SCOPE) == "tenant-a/alice/t1/id"


async def test_a_failing_runtime_context() -> None:
    def load(scope: RuntimeScope) -> Any:
        raise LookupError("no workspace")

    agent = define_agent(name="support", runtime_context=load, tools={})
    with pytest.raises(ToolPreparationError) as caught:
        await resolve_runtime_context(agent, SCOPE)
    assert str(caught.value) == (
        "agent 'support': the runtime_context callback "
        "test_a_failing_runtime_context.<locals>.load raised LookupError: no workspace; no run "
        "can start without its runtime context"
    )
    assert (caught.value.tool, caught.value.callback) == (None, "runtime_context")
