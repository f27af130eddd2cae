"""Streamed tool input, request-time client tools, get_pending_action and MigrationRequired."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from pydantic import BaseModel

from pai_actors import (
    ClientTool,
    DefinitionError,
    Finish,
    MemoryStore,
    MigrationRequired,
    ModelEvent,
    ModelRequest,
    ModelToolMessage,
    ResumeEntry,
    SuspendPoint,
    ThreadNotFound,
    ToolCallEvent,
    ToolContext,
    ToolInputDelta,
    ToolInputStart,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Query(BaseModel):
    n: int


class Decision(BaseModel):
    approved: bool


def echo_tool() -> Any:
    return define_tool(
        id="test.echo.v1", description="Echo.", input_schema=Query, execute=lambda ctx: ctx.input.n
    )


def approval_tool() -> Any:
    def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            return "approved"
        return ctx.suspend("approval", {"n": ctx.input.n})

    return define_tool(
        id="test.approval.v1",
        description="Approve.",
        input_schema=Query,
        suspend={"approval": SuspendPoint(suspend_schema=Query, resume_schema=Decision)},
        execute=execute,
    )


def tool_parts(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]


class PausingModel:
    """Streams a call's input in two deltas and waits for ``release`` between them."""

    def __init__(self) -> None:
        self.paused = trio.Event()
        self.release = trio.Event()
        self.steps = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.steps += 1
        if self.steps > 1:
            yield Finish("stop")
            return
        yield ToolInputStart("c1", "echo")
        yield ToolInputDelta("c1", '{"n":')
        self.paused.set()
        await self.release.wait()
        yield ToolInputDelta("c1", " 5}")
        yield ToolCallEvent("c1", "echo", {"n": 5})
        yield Finish("tool-calls")


async def test_streamed_input_is_input_streaming_until_complete(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"echo": echo_tool()})
    model = PausingModel()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await model.paused.wait()
            [streaming] = tool_parts(await rt.get_state(thread_id))
            model.release.set()
            await rt.wait_idle(thread_id)
            [done] = tool_parts(await rt.get_state(thread_id))
    assert streaming.state == "input-streaming"
    assert streaming.tool_call_id == "c1"
    assert done.state == "output-available"
    assert done.input == {"n": 5}
    assert done.output == 5


async def test_scripted_streamed_call_ends_as_usual(autojump_clock: trio.testing.MockClock) -> None:
    agent = define_agent(name="a", tools={"echo": echo_tool()})
    model = ScriptedModel([[tool_call("echo", {"n": 4}, stream=True)], text("ok")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    [part] = tool_parts(state)
    assert (part.state, part.input, part.output) == ("output-available", {"n": 4}, 4)
    assert [r.status for r in state.runs] == ["completed"]


PICK = ClientTool(
    name="pickColor",
    description="Let the user pick a color.",
    input_schema={"type": "object", "properties": {"hint": {"type": "string"}}},
)


async def test_client_tool_is_offered_for_its_run_and_takes_any_json(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"echo": echo_tool()})
    model = ScriptedModel(
        [[tool_call("pickColor", {"hint": "warm"})], text("red it is"), text("bye")]
    )
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "pick", client_tools=[PICK])
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit([1, {"color": "red"}])).status == "accepted"
            await rt.wait_idle(thread_id)
            await rt.send(thread_id, "again")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert action.name == "pickColor"
    assert action.ref.action_id == action.ref.tool_call_id
    assert action.input == {"hint": "warm"}
    assert sorted(model.requests[0].tools) == ["echo", "pickColor"]
    assert list(model.requests[2].tools) == ["echo"]
    [part] = tool_parts(state)
    assert part.to_wire()["type"] == "dynamic-tool"
    assert part.to_wire()["toolName"] == "pickColor"
    assert part.output == [1, {"color": "red"}]
    [result] = [
        p for m in model.requests[1].messages if isinstance(m, ModelToolMessage) for p in m.parts
    ]
    assert result.output == {"type": "json", "value": [1, {"color": "red"}]}


async def test_get_pending_action_reads_the_part(autojump_clock: trio.testing.MockClock) -> None:
    agent = define_agent(name="a", tools={"ask": approval_tool(), "echo": echo_tool()})
    model = ScriptedModel([[tool_call("ask", {"n": 1}), tool_call("echo", {"n": 2})], text("ok")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [expected] = await rt.pending_actions(thread_id)
            state = await rt.get_state(thread_id)
            message = state.messages[-1]
            ask, echo = tool_parts(state)
            view = rt.get_pending_action(message, ask)
            from_wire = rt.get_pending_action(message.to_wire(), ask.to_wire())
            assert rt.get_pending_action(message, echo) is None
            assert view is not None
            assert (await view.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
    assert view.ref == expected.ref
    assert view.input == {"n": 1}
    assert from_wire is not None
    assert from_wire.ref == expected.ref


async def test_get_pending_action_of_a_client_output_action(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={})
    model = ScriptedModel([[tool_call("pickColor", {})]])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go", client_tools=[PICK])
            await rt.wait_idle(thread_id)
            [expected] = await rt.pending_actions(thread_id)
            state = await rt.get_state(thread_id)
            [part] = tool_parts(state)
            view = rt.get_pending_action(state.messages[-1], part)
    assert view is not None
    assert (view.ref, view.name) == (expected.ref, "pickColor")


async def two_threads(store: MemoryStore) -> tuple[str, str]:
    """A thread waiting on an ``ask`` call, and one whose ``echo`` call finished."""
    agent = define_agent(name="a", tools={"ask": approval_tool(), "echo": echo_tool()})
    model = ScriptedModel([[tool_call("ask", {"n": 1})], [tool_call("echo", {"n": 1})], text("ok")])
    async with create_test_runtime(agent, model=model, store=store) as rt:
        stuck = await rt.create_thread("s")
        await rt.send(stuck, "go")
        await rt.wait_idle(stuck)
        done = await rt.create_thread("s")
        await rt.send(done, "go")
        await rt.wait_idle(done)
    return stuck, done


async def test_an_unfinished_call_of_an_unregistered_tool_requires_migration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    with trio.fail_after(10):
        stuck, fine = await two_threads(store)
        renamed = define_agent(name="a", tools={"echo": echo_tool()})
        async with create_test_runtime(
            renamed, model=ScriptedModel([]), store=store.reopen()
        ) as rt:
            for load in (rt.get_state, rt.pending_actions):
                with pytest.raises(MigrationRequired, match="'ask'") as info:
                    await load(stuck)
                assert info.value.tool_name == "ask"
            with pytest.raises(MigrationRequired):
                await rt.send(stuck, "again")
            state = await rt.get_state(fine)
            assert await rt.pending_actions(fine) == []
    assert [r.status for r in state.runs] == ["completed"]


async def test_terminal_calls_of_an_unregistered_tool_load_unchanged(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    with trio.fail_after(10):
        _, thread_id = await two_threads(store)
        before = await store.list_messages(thread_id)
        other = define_agent(name="a", tools={"ask": approval_tool()})
        async with create_test_runtime(other, model=ScriptedModel([]), store=store.reopen()) as rt:
            state = await rt.get_state(thread_id)
            assert await rt.pending_actions(thread_id) == []
    assert list(state.messages) == before


async def test_pending_actions_follow_the_order_of_the_parts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"echo": echo_tool()})
    # The streamed call is stored when it starts, before the calls the step ends with.
    model = ScriptedModel(
        [
            [
                tool_call("pick", {"n": 1}, id="first"),
                tool_call("pick", {"n": 2}, id="second", stream=True),
                tool_call("pick", {"n": 3}, id="third"),
            ]
        ]
    )
    pick = ClientTool("pick", "Pick.", {"type": "object"})
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go", client_tools=[pick])
            await rt.wait_idle(thread_id)
            actions = await rt.pending_actions(thread_id)
    assert [a.ref.action_id for a in actions] == ["first", "second", "third"]


async def test_send_refuses_bad_client_tools_before_writing_anything(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"echo": echo_tool()})
    pick = ClientTool("pick", "Pick.", {"type": "object"})
    clash = ClientTool("echo", "Echo again.", {"type": "object"})
    async with create_test_runtime(agent, model=ScriptedModel([])) as rt:
        thread_id = await rt.create_thread("s")
        for bad, match in (
            ([pick, pick], "'pick' is given twice"),
            ([clash], "'echo' has the name of a tool registered on agent 'a'"),
            (["pick"], "must hold ClientTool"),
            (pick, "must be a list of ClientTool"),
        ):
            with pytest.raises(DefinitionError, match=match):
                await rt.send(thread_id, "go", client_tools=bad)  # type: ignore[arg-type]
        state = await rt.get_state(thread_id)
    assert (state.messages, state.runs) == ((), ())


async def test_wait_idle_loads_the_thread(autojump_clock: trio.testing.MockClock) -> None:
    agent = define_agent(name="a", tools={"echo": echo_tool()})
    async with create_test_runtime(agent, model=ScriptedModel([])) as rt:
        with pytest.raises(ThreadNotFound):
            await rt.wait_idle("thread_404")


def test_a_bounded_index_keeps_the_most_recent_entries() -> None:
    from pai_actors._runtime.loading import BoundedIndex

    index: BoundedIndex[str, int] = BoundedIndex(2)
    index["a"] = 1
    index["b"] = 2
    assert index.get("a") == 1  # read: now the most recent
    index["c"] = 3  # evicts the least recent, "b"
    assert (index.get("a"), index.get("b"), index.get("c"), len(index)) == (1, None, 3, 2)


class ReadCountingStore(MemoryStore):
    """A memory store that counts ``list_calls``: the read a load settles a thread with."""

    def __init__(self) -> None:
        super().__init__()
        self.calls_listed: list[str] = []

    async def list_calls(self, thread_id: str) -> Any:
        self.calls_listed.append(thread_id)
        return await super().list_calls(thread_id)


async def test_a_runtime_settles_again_a_thread_its_bounded_index_forgot(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A thread the runtime created needs no settling; once its mark left the bounded index
    # (the least recently used goes), its next load reads it back and settles it, once.
    import pai_actors._runtime.runtime as runtime_module

    monkeypatch.setattr(runtime_module, "INDEX_CAPACITY", 2)
    store = ReadCountingStore()
    agent = define_agent(name="a", tools={"echo": echo_tool()})
    async with create_test_runtime(agent, model=ScriptedModel([]), store=store) as rt:
        first, second, third = [await rt.create_thread("s") for _ in range(3)]
        for thread_id in (third, second, first, first):
            assert await rt.pending_actions(thread_id) == []
    assert store.calls_listed == [first]
