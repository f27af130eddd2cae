"""``AgentRuntime.watch`` and the run's stored request (identity, client data, client tools)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pytest
import trio
from pydantic import BaseModel

from pai_actors import (
    ClientTool,
    MemoryStore,
    MessageAppended,
    MessageReplaced,
    MigrationRequired,
    OutputNotJSON,
    ResumeEntry,
    RunRecord,
    RunStatusChanged,
    RuntimeClosed,
    SuspendPoint,
    ThreadNotFound,
    ThreadState,
    ThreadUpdate,
    ThreadWatch,
    ToolContext,
    ToolDataUpdated,
    ToolPartUpdated,
    ToolRegistration,
    WatchOverflow,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Query(BaseModel):
    n: int


class Decision(BaseModel):
    approved: bool


PICK = ClientTool(
    name="pickColor",
    description="Let the user pick a color.",
    input_schema={"type": "object", "properties": {"hint": {"type": "string"}}},
)


def approval_tool(*, transient: bool = False) -> Any:
    async def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            return "approved"
        if transient:
            await ctx.data.write("progress", {"pct": 50}, id="p", transient=True)
            await ctx.data.write("progress", {"pct": 10}, id="d")
        return ctx.suspend("approval", {"n": ctx.input.n})

    return define_tool(
        id="test.approval.v1",
        description="Approve.",
        input_schema=Query,
        data_schemas={"progress": dict[str, int]},
        suspend={"approval": SuspendPoint(suspend_schema=Query, resume_schema=Decision)},
        execute=execute,
    )


async def collect_until(
    watch: ThreadWatch, done: Any, into: list[ThreadUpdate]
) -> list[ThreadUpdate]:
    async for update in watch:
        into.append(update)
        if done(update):
            break
    return into


def run_is(status: str) -> Any:
    return lambda u: isinstance(u, RunStatusChanged) and u.run.status == status


class Watched(NamedTuple):
    updates: list[ThreadUpdate]
    thread_id: str
    run_id: str
    state: ThreadState


async def watched_approval() -> Watched:
    """What a watcher of one conversation receives (and the thread's state after): the
    ``ask`` call suspends, is approved and returns, and the model answers."""
    agent = define_agent(name="a", tools={"ask": approval_tool()})
    model = ScriptedModel([[tool_call("ask", {"n": 1})], text("done")])
    updates: list[ThreadUpdate] = []
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            async with rt.watch(thread_id) as watch:
                assert watch.thread_id == thread_id
                run_id = await rt.send(thread_id, "go")
                await rt.wait_idle(thread_id)
                [action] = await rt.pending_actions(thread_id)
                assert (await action.submit({"approved": True})).status == "accepted"
                await collect_until(watch, run_is("completed"), updates)
            state = await rt.get_state(thread_id)
    return Watched(updates, thread_id, run_id, state)


async def test_watch_yields_messages_parts_and_run_status_with_wire_forms(
    autojump_clock: trio.testing.MockClock,
) -> None:
    updates, thread_id, run_id, state = await watched_approval()
    appended = [u for u in updates if isinstance(u, MessageAppended)]
    assert appended[0].message.role == "user"
    assert appended[0].to_wire() == {
        "type": "message-appended",
        "threadId": thread_id,
        "message": state.messages[0].to_wire(),
    }
    statuses = [u.run.status for u in updates if isinstance(u, RunStatusChanged)]
    assert statuses[0] == "running"
    assert statuses[-1] == "completed"
    assert "waiting" in statuses
    last = [u for u in updates if isinstance(u, RunStatusChanged)][-1]
    assert last.to_wire() == {
        "type": "run-status",
        "threadId": thread_id,
        "run": {"runId": run_id, "status": "completed", "error": None},
    }
    parts = [u for u in updates if isinstance(u, ToolPartUpdated)]
    assert parts[-1].part.state == "output-available"
    assert parts[-1].to_wire()["part"] == state.messages[1].parts[1].to_wire()
    assert parts[-1].to_wire()["messageId"] == state.messages[1].id
    final = [u for u in updates if isinstance(u, MessageAppended | MessageReplaced)][-1]
    assert final.message.to_wire() == state.messages[-1].to_wire()


async def test_each_tool_part_update_shows_a_change_of_the_part(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A resume marks its start durably in the call's record before ``execute`` runs again;
    the part does not show that mark, so it is not put (nor sent to watchers) again."""
    updates = (await watched_approval()).updates
    parts = [u.part.to_wire() for u in updates if isinstance(u, ToolPartUpdated)]
    assert [p["state"] for p in parts] == ["input-available", "input-available", "output-available"]
    assert [p.get("pendingSuspension") is not None for p in parts] == [True, False, False]
    assert all(a != b for a, b in itertools.pairwise(parts))


async def test_transient_tool_data_reaches_only_connected_watchers_and_is_never_stored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    agent = define_agent(name="a", tools={"ask": approval_tool(transient=True)})
    model = ScriptedModel([[tool_call("ask", {"n": 1})], text("done")])
    early: list[ThreadUpdate] = []
    late: list[ThreadUpdate] = []
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            async with rt.watch(thread_id) as first:
                await rt.send(thread_id, "go")
                await rt.wait_idle(thread_id)
                async with rt.watch(thread_id) as second:  # connected after the write
                    [action] = await rt.pending_actions(thread_id)
                    await action.submit({"approved": True})
                    await collect_until(first, run_is("completed"), early)
                    await collect_until(second, run_is("completed"), late)
            state = await rt.get_state(thread_id)
    [data] = [u for u in early if isinstance(u, ToolDataUpdated)]
    assert data.to_wire() == {
        "type": "tool-data",
        "threadId": thread_id,
        "toolCallId": state.messages[1].parts[1].tool_call_id,
        "channel": "progress",
        "item": data.item.to_wire(),
    }
    assert (data.item.id, data.item.value) == ("p", {"pct": 50})
    assert not [u for u in late if isinstance(u, ToolDataUpdated)]
    part = state.messages[1].parts[1]
    assert [i.id for i in part.data["progress"]] == ["d"]  # the transient item is not stored
    stored = [c.record for c in await store.list_calls(thread_id)]
    assert [i.id for i in stored[0].data["progress"]] == ["d"]
    assert "pct': 50" not in str(state.to_wire())


async def test_watch_loads_the_thread_like_other_readers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    agent = define_agent(name="a", tools={"ask": approval_tool()})
    with trio.fail_after(10):
        async with create_test_runtime(
            agent, model=ScriptedModel([[tool_call("ask", {"n": 1})]]), store=store
        ) as rt:
            with pytest.raises(ThreadNotFound):
                async with rt.watch("nope"):
                    pass  # pragma: no cover
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
        other = define_agent(name="a", tools={})
        async with create_test_runtime(other, model=ScriptedModel([]), store=store.reopen()) as rt2:
            with pytest.raises(MigrationRequired):
                async with rt2.watch(thread_id):
                    pass  # pragma: no cover
            with pytest.raises(ValueError, match="capacity"):
                rt2.watch(thread_id, capacity=0)


async def test_a_slow_watcher_is_dropped_with_watch_overflow_and_never_blocks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"ask": approval_tool()})
    model = ScriptedModel([[tool_call("ask", {"n": 1})], text("done")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            async with rt.watch(thread_id, capacity=2) as slow:
                await rt.send(thread_id, "go")
                await rt.wait_idle(thread_id)  # the runtime went on without the reader
                [action] = await rt.pending_actions(thread_id)
                await action.submit({"approved": True})
                await rt.wait_idle(thread_id)
                received = [await slow.receive(), await slow.receive()]
                with pytest.raises(WatchOverflow, match="read get_state"):
                    await slow.receive()
            assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["completed"]
    assert isinstance(received[0], MessageAppended)


async def test_closing_the_runtime_ends_every_watch(autojump_clock: trio.testing.MockClock) -> None:
    agent = define_agent(name="a", tools={})
    ended: list[int] = []

    async def watcher(
        rt: Any, thread_id: str, number: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with rt.watch(thread_id) as watch:
            task_status.started()
            async for _ in watch:
                pass
        ended.append(number)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with create_test_runtime(agent, model=ScriptedModel([])) as rt:
                thread_id = await rt.create_thread("s")
                await nursery.start(watcher, rt, thread_id, 1)
                await nursery.start(watcher, rt, thread_id, 2)
        with pytest.raises(RuntimeClosed):
            async with rt.watch(thread_id):
                pass  # pragma: no cover
    assert sorted(ended) == [1, 2]


async def test_a_reactivated_run_keeps_its_identity_client_data_and_client_tools(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[tuple[str, Any, Any]] = []

    def enabled(*, runtime_context: Any, identity: Any, client_data: Any) -> bool:
        seen.append(("enabled", identity, client_data))
        return True

    def map_context(*, runtime_context: Any, identity: Any, client_data: Any) -> Any:
        seen.append(("map_context", identity, client_data))
        return None

    def on_output(*, identity: Any, client_data: Any, **_: Any) -> None:
        seen.append(("on_output", identity, client_data))

    registration = ToolRegistration(
        approval_tool(), enabled=enabled, map_context=map_context, on_output=on_output
    )
    agent = define_agent(name="a", tools={"ask": registration})
    store = MemoryStore()
    identity = {"sub": "alice"}
    with trio.fail_after(10):
        first = ScriptedModel([[tool_call("ask", {"n": 1})]])
        async with create_test_runtime(agent, model=first, store=store) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(
                thread_id, "go", identity=identity, client_data=["web"], client_tools=[PICK]
            )
            await rt.wait_idle(thread_id)
        stored = await store.get_run(run_id)
        assert stored is not None
        assert (stored.identity, stored.client_data) == (identity, ["web"])
        assert [(t.name, t.description, t.input_schema) for t in stored.client_tools] == [
            (PICK.name, PICK.description, PICK.input_schema)
        ]
        seen.clear()
        second = ScriptedModel(
            [[tool_call("pickColor", {"hint": "warm"}, id="call_pick")], text("done")]
        )
        async with create_test_runtime(agent, model=second, store=store.reopen()) as rt2:
            [action] = await rt2.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt2.wait_idle(thread_id)
            [pick] = await rt2.pending_actions(thread_id)
            assert pick.name == "pickColor"
            assert (await pick.submit({"any": ["json"]})).status == "accepted"
            await rt2.wait_idle(thread_id)
            state = await rt2.get_state(thread_id)
    assert seen
    assert all((i, c) == (identity, ["web"]) for _, i, c in seen)
    assert {kind for kind, _, _ in seen} == {"enabled", "map_context", "on_output"}
    assert sorted(second.requests[0].tools) == ["ask", "pickColor"]
    assert sorted(second.requests[1].tools) == ["ask", "pickColor"]
    assert [r.status for r in state.runs] == ["completed"]
    [picked] = [p for p in state.messages[-1].parts if getattr(p, "tool_name", "") == "pickColor"]
    assert picked.output == {"any": ["json"]}  # type: ignore[union-attr]


async def test_a_run_record_stored_without_the_request_reads_with_defaults(
    autojump_clock: trio.testing.MockClock,
) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    old = {"version": 1, "thread_id": "t", "run_id": "r", "status": "waiting"}
    record = RunRecord.model_validate({**old, "created_at": at.isoformat(), "revision": 3})
    assert (record.identity, record.client_data, record.client_tools) == (None, None, ())
    assert RunRecord.model_validate_json(record.model_dump_json()) == record


async def test_send_refuses_an_identity_that_cannot_be_stored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={})
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=ScriptedModel([text("x")])) as rt:
            thread_id = await rt.create_thread("s")
            with pytest.raises(OutputNotJSON, match="identity"):
                await rt.send(thread_id, "go", identity={1, 2})
            assert (await rt.get_state(thread_id)).messages == ()


async def test_a_call_that_was_not_streamed_is_never_shown_input_streaming(
    autojump_clock: trio.testing.MockClock,
) -> None:
    updates = (await watched_approval()).updates
    shown = [
        part.state
        for u in updates
        if isinstance(u, MessageAppended | MessageReplaced) and u.message.role == "assistant"
        for part in u.message.parts
        if part.type not in ("text", "step-start")
    ] + [u.part.state for u in updates if isinstance(u, ToolPartUpdated)]
    assert "input-streaming" not in shown
    assert shown[0] == "input-available"
    assert shown[-1] == "output-available"


async def test_receive_nowait_returns_what_is_buffered_and_never_blocks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"ask": approval_tool()})
    model = ScriptedModel([[tool_call("ask", {"n": 1})], text("done")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            async with rt.watch(thread_id) as watch:
                with pytest.raises(trio.WouldBlock):
                    watch.receive_nowait()
                await rt.send(thread_id, "go")
                await rt.wait_idle(thread_id)  # everything up to here is buffered
                got: list[ThreadUpdate] = []
                while True:
                    try:
                        got.append(watch.receive_nowait())
                    except trio.WouldBlock:
                        break
                assert isinstance(got[0], MessageAppended)
                assert got[-1] == RunStatusChanged(
                    thread_id=thread_id, run=(await rt.get_state(thread_id)).runs[0]
                )
        with pytest.raises(StopAsyncIteration):  # the runtime closed: the watch ended
            watch.receive_nowait()
