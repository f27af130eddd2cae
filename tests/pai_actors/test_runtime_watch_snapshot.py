"""``AgentRuntime.watch(thread_id, snapshot=True)``: a snapshot exactly before the first update.

Applying a watch's updates to its ``updates.snapshot`` (numbered by an :class:`UpdateLog`,
applied by a :class:`ThreadReplica`, as the server's feeds do) gives ``get_state()`` exactly.
A watch opened while commits are in flight (held at a gate in the store, or opened from many
tasks at points Hypothesis draws) sees no update that is already in its snapshot and misses
none: its updates are exactly the tail of what a watch opened before anything happened saw,
and its snapshot is that watch's state before that tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from pai_actors import (
    AgentRuntime,
    ClientTool,
    MemoryStore,
    MessageAppended,
    ResumeEntry,
    RuntimeClosed,
    SuspendPoint,
    ThreadNotFound,
    ThreadState,
    ThreadUpdate,
    ThreadWatch,
    ToolContext,
    ToolDataUpdated,
    ToolPart,
    define_agent,
    define_tool,
)
from pai_actors._core.json import JsonValue
from pai_actors._protocol.frames import action_wire, snapshot_frame
from pai_actors._protocol.replica import ThreadReplica, UpdateLog
from pai_actors._runtime.loading import pending_action_of_part
from pai_actors._server.feeds import update_actions
from pai_actors._store.base import AppendMessage, Write
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Query(BaseModel):
    n: int


class Decision(BaseModel):
    approved: bool


def ask_tool() -> Any:
    """Reports progress (a transient item, then a durable one), then suspends for approval."""

    async def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            await ctx.data.write("progress", {"pct": 100}, id="d")
            return "approved"
        await ctx.data.write("progress", {"pct": 50}, id="p", transient=True)
        await ctx.data.write("progress", {"pct": 10}, id="d")
        return ctx.suspend("approval", {"n": ctx.input.n})

    return define_tool(
        id="test.ask.v1",
        description="Ask for approval.",
        input_schema=Query,
        data_schemas={"progress": dict[str, int]},
        suspend={"approval": SuspendPoint(suspend_schema=Query, resume_schema=Decision)},
        execute=execute,
    )


def note_tool() -> Any:
    """Writes a few data items (transient and durable) and returns."""

    async def execute(ctx: ToolContext) -> Any:
        for step in range(2):
            await ctx.data.write("log", {"step": step}, id="live", transient=True)
            await ctx.data.write("log", {"step": step}, id=f"s{step}")
        return {"noted": ctx.input.n}

    return define_tool(
        id="test.note.v1",
        description="Take a note.",
        input_schema=Query,
        data_schemas={"log": dict[str, int]},
        execute=execute,
    )


def agent() -> Any:
    return define_agent(name="a", tools={"ask": ask_tool(), "note": note_tool()})


# -- following a watch as the server does -----------------------------------------------------


def action_of(rt: AgentRuntime, message_id: str, part: ToolPart) -> dict[str, JsonValue] | None:
    view = pending_action_of_part(rt, message_id, part)
    return (
        None if view is None else action_wire(view.name, view.input, view.ref, view.resume_schema)
    )


def actions_of(rt: AgentRuntime | None, state: ThreadState) -> list[JsonValue]:
    """The pending actions the parts of ``state`` show (none asked for without ``rt``)."""
    if rt is None:
        return []
    actions: list[JsonValue] = []
    for message in state.messages:
        for part in message.parts:
            if isinstance(part, ToolPart):
                action = action_of(rt, message.id, part)
                if action is not None:
                    actions.append(action)
    return actions


@dataclass
class Follower:
    """A thread rebuilt from a watch's snapshot and its updates, numbered by an UpdateLog."""

    replica: ThreadReplica
    log: UpdateLog
    rt: AgentRuntime | None = None

    @classmethod
    def of(cls, snapshot: ThreadState | None, rt: AgentRuntime | None = None) -> Follower:
        assert snapshot is not None
        log = UpdateLog(snapshot.thread_id, "test", capacity=10_000)
        frame = snapshot_frame(
            snapshot.thread_id, log.cursor, snapshot.to_wire(), actions_of(rt, snapshot)
        )
        return cls(ThreadReplica.from_snapshot(frame), log, rt)

    def take(self, updates: Sequence[ThreadUpdate]) -> Follower:
        for update in updates:
            action, actions = (None, None) if self.rt is None else update_actions(self.rt, update)
            frame = self.log.append(update.to_wire(), action, actions)
            assert self.replica.apply(frame) == "applied"
        return self


def drain(watch: ThreadWatch) -> list[ThreadUpdate]:
    """Every update buffered now (after ``wait_idle``: every update so far)."""
    got: list[ThreadUpdate] = []
    while True:
        try:
            got.append(watch.receive_nowait())
        except trio.WouldBlock:
            return got


def wires(updates: Sequence[ThreadUpdate]) -> list[dict[str, JsonValue]]:
    return [update.to_wire() for update in updates]


def check_tail(
    reference: tuple[ThreadState | None, list[ThreadUpdate]],
    watch: tuple[ThreadState | None, list[ThreadUpdate]],
) -> None:
    """``watch`` saw exactly the tail of what the ``reference`` watch saw, and its snapshot
    is the reference's state before that tail: no update twice, none missing."""
    (first, everything), (snapshot, updates) = reference, watch
    assert snapshot is not None
    before = len(everything) - len(updates)
    assert before >= 0
    assert wires(updates) == wires(everything[before:])
    assert Follower.of(first).take(everything[:before]).replica.state_wire() == snapshot.to_wire()


# -- at idle --------------------------------------------------------------------------------


async def test_snapshot_and_updates_rebuild_get_state_at_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [text("hello"), [tool_call("ask", {"n": 1}), tool_call("note", {"n": 2})], text("done")]
    )
    with trio.fail_after(10):
        async with create_test_runtime(agent(), model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "first")
            await rt.wait_idle(thread_id)
            async with rt.watch(thread_id, snapshot=True) as watch:
                assert watch.snapshot == await rt.get_state(thread_id)  # at idle: the state
                follower = Follower.of(watch.snapshot, rt)
                await rt.send(thread_id, "second")
                await rt.wait_idle(thread_id)
                updates = drain(watch)
                follower.take(updates)
                state = await rt.get_state(thread_id)
                assert follower.replica.state_wire() == state.to_wire()
                [action] = await rt.pending_actions(thread_id)
                assert follower.replica.pending_actions() == [
                    action_wire(action.name, action.input, action.ref, action.resume_schema)
                ]
                # The transient item shows live only.
                transient = [u for u in updates if isinstance(u, ToolDataUpdated)]
                assert {(u.channel, u.item.id) for u in transient} == {
                    ("progress", "p"),
                    ("log", "live"),
                }
                live = follower.replica.state_wire(live=True)
                assert "'pct': 50" in str(live)
                assert "'pct': 50" not in str(follower.replica.state_wire())

                assert (await action.submit({"approved": True})).status == "accepted"
                await rt.wait_idle(thread_id)
                follower.take(drain(watch))
                state = await rt.get_state(thread_id)
                assert follower.replica.state_wire() == state.to_wire()
                assert follower.replica.pending_actions() == []
                assert [run.status for run in state.runs] == ["completed", "completed"]


async def test_without_snapshot_the_watch_has_none_and_still_gets_every_update(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([[tool_call("note", {"n": 1})], text("done")])
    with trio.fail_after(10):
        async with create_test_runtime(agent(), model=model) as rt:
            thread_id = await rt.create_thread("s")
            async with (
                rt.watch(thread_id) as plain,
                rt.watch(thread_id, snapshot=True) as exact,
            ):
                assert plain.snapshot is None
                assert exact.snapshot == await rt.get_state(thread_id)
                await rt.send(thread_id, "go")
                await rt.wait_idle(thread_id)
                updates = drain(plain)
                assert wires(updates) == wires(drain(exact))
                follower = Follower.of(exact.snapshot).take(updates)
                state = await rt.get_state(thread_id)
                assert follower.replica.state_wire() == state.to_wire()


async def test_a_snapshot_watch_loads_the_thread_like_other_readers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(10):
        async with create_test_runtime(agent(), model=ScriptedModel([])) as rt:
            with pytest.raises(ThreadNotFound):
                async with rt.watch("nope", snapshot=True):
                    pass  # pragma: no cover
            with pytest.raises(ValueError, match="capacity"):
                rt.watch("nope", snapshot=True, capacity=0)
            thread_id = await rt.create_thread("s")
        with pytest.raises(RuntimeClosed):
            async with rt.watch(thread_id, snapshot=True):
                pass  # pragma: no cover


# -- commits in flight ------------------------------------------------------------------------


@dataclass
class Gate:
    reached: trio.Event = field(default_factory=trio.Event)
    release: trio.Event = field(default_factory=trio.Event)

    async def hold(self) -> None:
        self.reached.set()
        await self.release.wait()


class GatedStore(MemoryStore):
    """A MemoryStore that can hold the next commit that appends a message after applying it
    (before the runtime publishes it), or the next ``list_messages`` before reading."""

    def __init__(self) -> None:
        super().__init__()
        self.commit_gate: Gate | None = None
        self.read_gate: Gate | None = None
        self.readers: list[trio.lowlevel.Task] = []  # the task of each list_messages

    async def commit(self, writes: Sequence[Write]) -> None:
        await super().commit(writes)
        gate = self.commit_gate
        if gate is not None and any(isinstance(w, AppendMessage) for w in writes):
            self.commit_gate = None
            await gate.hold()

    async def list_messages(self, thread_id: str) -> Any:
        self.readers.append(trio.lowlevel.current_task())
        gate, self.read_gate = self.read_gate, None
        if gate is not None:
            await gate.hold()
        return await super().list_messages(thread_id)


async def test_a_watch_opened_during_a_commit_waits_for_it_and_gets_it_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = GatedStore()
    model = ScriptedModel([[tool_call("note", {"n": 1})], text("done")])
    opened = trio.Event()
    seen: list[tuple[ThreadState | None, list[ThreadUpdate]]] = []
    with trio.fail_after(10):
        async with create_test_runtime(agent(), model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            async with rt.watch(thread_id, snapshot=True) as reference:

                async def late_watch() -> None:
                    async with rt.watch(thread_id, snapshot=True) as watch:
                        opened.set()
                        await rt.wait_idle(thread_id)
                        seen.append((watch.snapshot, drain(watch)))

                async with trio.open_nursery() as nursery:
                    store.commit_gate = gate = Gate()
                    nursery.start_soon(rt.send, thread_id, "go")
                    await gate.reached.wait()  # the user's message is stored, not published
                    nursery.start_soon(late_watch)
                    await trio.testing.wait_all_tasks_blocked()
                    assert not opened.is_set()  # it waits for the commit in flight
                    gate.release.set()
                await rt.wait_idle(thread_id)
                everything = drain(reference)
                state = await rt.get_state(thread_id)
    [(snapshot, updates)] = seen
    assert snapshot is not None
    assert snapshot.messages[0].parts[0].to_wire() == {"type": "text", "text": "go"}
    assert not any(isinstance(u, MessageAppended) and u.message.role == "user" for u in updates)
    check_tail((reference.snapshot, everything), (snapshot, updates))
    assert Follower.of(snapshot).take(updates).replica.state_wire() == state.to_wire()


async def test_a_commit_that_begins_while_the_snapshot_is_read_makes_the_watch_read_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = GatedStore()
    model = ScriptedModel([text("done")])
    seen: list[tuple[ThreadState | None, list[ThreadUpdate]]] = []
    with trio.fail_after(10):
        async with create_test_runtime(agent(), model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            async with rt.watch(thread_id, snapshot=True) as reference:

                async def late_watch() -> None:
                    async with rt.watch(thread_id, snapshot=True) as watch:
                        await rt.wait_idle(thread_id)
                        seen.append((watch.snapshot, drain(watch)))

                async with trio.open_nursery() as nursery:
                    store.read_gate = gate = Gate()
                    nursery.start_soon(late_watch)
                    await gate.reached.wait()  # the watcher is connected, its read is held
                    watcher = store.readers[-1]
                    await rt.send(thread_id, "go")  # commits (and publishes) meanwhile
                    gate.release.set()
                await rt.wait_idle(thread_id)
                everything = drain(reference)
                state = await rt.get_state(thread_id)
    # The first read may hold the commit or not: the watch read again (and again if the run's
    # next commits began while it did, as trio's scheduler may order them).
    assert store.readers.count(watcher) >= 2
    [(snapshot, updates)] = seen
    assert snapshot is not None
    check_tail((reference.snapshot, everything), (snapshot, updates))
    assert Follower.of(snapshot).take(updates).replica.state_wire() == state.to_wire()
    user = [m for m in state.messages if m.role == "user"]
    assert len(user) == 1


# -- watches opened at any moment -------------------------------------------------------------

# The scenario below lasts ~90 checkpoints of a task that does nothing else; watchers open
# within a little more than that, so a few open after everything happened.
MAX_DELAY = 100


async def watch_scenario(data: st.DataObject) -> None:
    model = ScriptedModel(
        [
            [tool_call("ask", {"n": 1}), tool_call("note", {"n": 2})],
            text("one"),
            [tool_call("note", {"n": 3}, stream=True)],
            text("two"),
        ]
    )
    delays = data.draw(st.lists(st.integers(0, MAX_DELAY), min_size=1, max_size=6), "delays")
    seen: list[tuple[ThreadState | None, list[ThreadUpdate]]] = []
    done = trio.Event()

    async def late_watch(rt: AgentRuntime, thread_id: str, delay: int) -> None:
        for _ in range(delay):
            await trio.lowlevel.checkpoint()
        async with rt.watch(thread_id, snapshot=True) as watch:
            await done.wait()
            seen.append((watch.snapshot, drain(watch)))

    with trio.fail_after(30):
        async with create_test_runtime(agent(), model=model) as rt:
            thread_id = await rt.create_thread("s")
            async with rt.watch(thread_id, snapshot=True) as reference:
                async with trio.open_nursery() as nursery:
                    for delay in delays:
                        nursery.start_soon(late_watch, rt, thread_id, delay)
                    await rt.send(thread_id, "go")
                    await rt.wait_idle(thread_id)
                    [action] = await rt.pending_actions(thread_id)
                    assert (await action.submit({"approved": True})).status == "accepted"
                    await rt.wait_idle(thread_id)
                    await rt.send(thread_id, "again")
                    await rt.wait_idle(thread_id)
                    done.set()
                everything = drain(reference)
            state = await rt.get_state(thread_id)
    assert [run.status for run in state.runs] == ["completed", "completed"]
    final = Follower.of(reference.snapshot).take(everything).replica
    assert final.state_wire() == state.to_wire()
    assert len(seen) == len(delays)
    for snapshot, updates in seen:
        check_tail((reference.snapshot, everything), (snapshot, updates))
        assert Follower.of(snapshot).take(updates).replica.state_wire() == state.to_wire()


@given(st.data())
def test_watches_opened_at_any_moment_see_each_update_exactly_once(data: st.DataObject) -> None:
    trio.run(watch_scenario, data, clock=trio.testing.MockClock(autojump_threshold=0))


# -- pending actions a message shows --------------------------------------------------------

PICK = ClientTool(name="pickColor", description="Pick a color.", input_schema={"type": "object"})


async def test_a_pending_action_shown_by_an_appended_message_reaches_the_replica(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([[tool_call("pickColor", {"hint": "warm"})], text("done")])
    with trio.fail_after(10):
        async with create_test_runtime(agent(), model=model) as rt:
            thread_id = await rt.create_thread("s")
            async with rt.watch(thread_id, snapshot=True) as watch:
                follower = Follower.of(watch.snapshot, rt)
                await rt.send(thread_id, "go", client_tools=[PICK])
                await rt.wait_idle(thread_id)
                follower.take(drain(watch))
                state = await rt.get_state(thread_id)
                assert follower.replica.state_wire() == state.to_wire()
                [action] = await rt.pending_actions(thread_id)
                assert action.name == "pickColor"
                assert follower.replica.pending_actions() == actions_of(rt, state)
