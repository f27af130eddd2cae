"""Capabilities and scoped files in the runtime (API §3, §7)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    CapabilityRequest,
    FileNotFound,
    FileTooLarge,
    RuntimeConfigError,
    ToolContext,
    capability,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

box = capability("test.sandbox")


class Empty(BaseModel):
    pass


class Sandbox:
    def __init__(self, request: CapabilityRequest) -> None:
        self.request = request

    def run(self, command: str) -> str:
        return f"ran {command!r} for {self.request.tool_name}"


def recording_binding(log: list[Any], *, fail: bool = False) -> Any:
    @asynccontextmanager
    async def bind(request: CapabilityRequest) -> AsyncIterator[Sandbox]:
        log.append(("enter", request))
        if fail:
            raise ConnectionError("sandbox pool exhausted")
        try:
            yield Sandbox(request)
        finally:
            log.append(("exit", request.tool_call_id))

    return bind


async def run_agent(tools: dict[str, Any], binding: Any, **runtime: Any) -> Any:
    agent = define_agent(name="a", tools=tools)
    model = ScriptedModel([[tool_call(name, {}) for name in tools], text("done")])
    with trio.fail_after(10):
        async with create_test_runtime(
            agent, model=model, capabilities={box: binding}, **runtime
        ) as rt:
            thread_id = await rt.create_thread("tenant-a")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    return [
        p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")
    ], thread_id


async def test_a_facade_is_acquired_before_execute_and_released_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []

    def execute(ctx: ToolContext) -> Any:
        log.append("execute")
        assert ctx.capabilities.box is ctx.capabilities["box"]
        return ctx.capabilities.box.run("ls")

    tool = define_tool(
        id="t.sandboxed.v1",
        description="Run in the sandbox.",
        input_schema=Empty,
        capabilities={"box": box},
        execute=execute,
    )
    parts, thread_id = await run_agent({"shell": tool}, recording_binding(log))
    assert parts[0].output == "ran 'ls' for shell"
    (_, request), step, exit_ = log
    assert request == CapabilityRequest(
        capability_id="test.sandbox",
        scope_key="tenant-a",
        thread_id=thread_id,
        run_id=request.run_id,
        tool_call_id=parts[0].tool_call_id,
        tool_name="shell",
    )
    assert (step, exit_) == ("execute", ("exit", parts[0].tool_call_id))


async def test_a_facade_is_released_once_on_failure_and_on_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []

    def crash(ctx: ToolContext) -> Any:
        raise RuntimeError("command failed")

    async def hang(ctx: ToolContext) -> Any:
        await trio.sleep_forever()

    tools = {
        name: define_tool(
            id=f"t.{name}.v1",
            description=name,
            input_schema=Empty,
            capabilities={"box": box},
            execute=execute,
        )
        for name, execute in (("crash", crash), ("hang", hang))
    }
    agent = define_agent(name="a", tools=tools)
    model = ScriptedModel([[tool_call("crash", {}), tool_call("hang", {})]])
    with trio.fail_after(10):
        async with create_test_runtime(
            agent, model=model, capabilities={box: recording_binding(log)}
        ) as rt:
            thread_id = await rt.create_thread("tenant-a")
            run_id = await rt.send(thread_id, "go")
            await trio.testing.wait_all_tasks_blocked()
            await rt.cancel_run(run_id, "stop")
            state = await rt.get_state(thread_id)
    parts = {
        p.tool_name: p
        for m in state.messages
        for p in m.parts
        if p.type not in ("text", "step-start")
    }
    assert parts["crash"].error_text == "command failed"
    assert parts["hang"].error_text == "The tool call was cancelled: stop"
    exits = sorted(entry[1] for entry in log if entry[0] == "exit")
    assert exits == sorted(p.tool_call_id for p in parts.values())  # once each


async def test_a_failed_acquisition_is_the_calls_error_and_execute_never_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[str] = []

    def execute(ctx: ToolContext) -> Any:
        ran.append("execute")

    tool = define_tool(
        id="t.sandboxed.v1",
        description="d",
        input_schema=Empty,
        capabilities={"box": box},
        execute=execute,
    )
    parts, _ = await run_agent({"shell": tool}, recording_binding([], fail=True))
    assert (parts[0].state, parts[0].error_text) == ("output-error", "sandbox pool exhausted")
    assert ran == []
    mapped, _ = await run_agent(
        {"shell": tool},
        recording_binding([], fail=True),
        map_error=lambda exc, call: f"{call.tool_name}: {type(exc).__name__}",
    )
    assert mapped[0].error_text == "shell: ConnectionError"


async def test_a_childs_capabilities_are_acquired_around_the_child_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []

    def child_execute(ctx: ToolContext) -> Any:
        log.append(("child", ctx.thread.tool_call_id))
        return ctx.capabilities.box.run("make")

    child = define_tool(
        id="t.child.v1",
        description="d",
        input_schema=Empty,
        capabilities={"box": box},
        execute=child_execute,
    )

    async def execute(ctx: ToolContext) -> Any:
        return await ctx.tools.build.execute({})

    tool = define_tool(
        id="t.parent.v1", description="d", input_schema=Empty, tools={"build": child},
        execute=execute,
    )  # fmt: skip
    parts, _ = await run_agent({"p": tool}, recording_binding(log))
    child_id = f"{parts[0].tool_call_id}/build.1"
    assert parts[0].output == "ran 'make' for build"
    assert [entry[0] for entry in log] == ["enter", "child", "exit"]
    assert log[0][1].tool_call_id == log[2][1] == child_id


def test_a_missing_binding_is_refused_at_runtime_creation() -> None:
    tool = define_tool(
        id="t.sandboxed.v1",
        description="d",
        input_schema=Empty,
        capabilities={"box": box},
        execute=lambda ctx: None,
    )
    agent = define_agent(name="a", tools={"shell": tool})
    with pytest.raises(RuntimeConfigError, match="missing capability bindings"):
        create_test_runtime(agent, model=ScriptedModel([]))


async def test_files_are_saved_and_read_in_the_threads_scope_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    saved: list[Any] = []
    outcomes: list[Any] = []

    async def save(ctx: ToolContext) -> Any:
        file = await ctx.files.save(b"a,b\n1,2\n", "text/csv", "report.csv", {"rows": 1})
        saved.append(file)
        body = await ctx.files.read(file.file_id)
        return {"size": body.file.size, "same": body.body == b"a,b\n1,2\n"}

    async def read_other(ctx: ToolContext) -> Any:
        try:
            await ctx.files.read(saved[0].file_id)
        except FileNotFound as exc:
            outcomes.append(str(exc))
            return "not found"
        return "read across scopes"

    async def too_big(ctx: ToolContext) -> Any:
        try:
            await ctx.files.save(b"x" * 11, "text/plain", "big.txt")
        except FileTooLarge as exc:
            return [exc.size, exc.limit]
        return "saved"

    tools = {
        name: define_tool(id=f"t.{name}.v1", description=name, input_schema=Empty, execute=fn)
        for name, fn in (("save", save), ("other", read_other), ("big", too_big))
    }
    agent = define_agent(name="a", tools=tools)
    model = ScriptedModel(
        [[tool_call("save", {})], text("saved"), [tool_call("other", {}), tool_call("big", {})],
         text("done")]
    )  # fmt: skip
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, max_file_bytes=10) as rt:
            mine = await rt.create_thread("tenant-a", user_key="ann")
            await rt.send(mine, "save it")
            await rt.wait_idle(mine)
            theirs = await rt.create_thread("tenant-b")
            await rt.send(theirs, "read it")
            await rt.wait_idle(theirs)
            mine_state, theirs_state = await rt.get_state(mine), await rt.get_state(theirs)
    [file] = saved
    assert (file.scope_key, file.user_key, file.thread_id) == ("tenant-a", "ann", mine)
    assert (file.filename, file.media_type, file.metadata) == (
        "report.csv",
        "text/csv",
        {"rows": 1},
    )
    [save_part] = [
        p for m in mine_state.messages for p in m.parts if p.type not in ("text", "step-start")
    ]
    assert save_part.output == {"size": 8, "same": True}
    outputs = {
        p.tool_name: p.output
        for m in theirs_state.messages
        for p in m.parts
        if p.type not in ("text", "step-start")
    }
    assert outputs == {"other": "not found", "big": [11, 10]}
    assert "in this scope" in outcomes[0]


async def test_preparing_a_dynamic_description_acquires_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []
    descriptions: list[Any] = []

    def describe(ctx: Any) -> str:
        descriptions.append(sorted(ctx.tools))
        return "Run in the sandbox."

    child = define_tool(
        id="t.child.v1", description="Child.", input_schema=Empty,
        capabilities={"box": box}, execute=lambda ctx: None,
    )  # fmt: skip
    tool = define_tool(
        id="t.described.v1",
        description=describe,
        input_schema=Empty,
        capabilities={"box": box},
        tools={"child": child},
        execute=lambda ctx: None,
    )
    agent = define_agent(name="a", tools={"shell": tool})
    model = ScriptedModel([text("no calls")])
    with trio.fail_after(10):
        async with create_test_runtime(
            agent, model=model, capabilities={box: recording_binding(log)}
        ) as rt:
            thread_id = await rt.create_thread("tenant-a")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
    assert descriptions == [["child"]]  # prepared, with its child's metadata
    assert log == []  # and nothing acquired or executed
