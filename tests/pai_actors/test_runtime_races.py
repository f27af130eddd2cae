"""Races and failures around the runtime's actors (review findings, one test each)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from pydantic import BaseModel

from pai_actors import (
    MemoryStore,
    RuntimeClosed,
    ThreadBusy,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

pytestmark = pytest.mark.usefixtures("autojump_clock")


class Query(BaseModel):
    n: int


class YieldingStore(MemoryStore):
    """A conforming store whose commit yields before applying (as any I/O store does)."""

    async def commit(self, writes: Any) -> None:
        await trio.lowlevel.checkpoint()
        await super().commit(writes)


def _tool_parts(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type != "text"]


async def test_map_context_raising_at_execution_ends_the_call_in_output_error() -> None:
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


async def test_methods_after_close_raise_runtime_closed_and_write_nothing() -> None:
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
    store_type: type[MemoryStore],
) -> None:
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
