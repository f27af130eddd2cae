"""Several nodes on one in-memory database (``pai_actors.testing._cluster``), under the
autojump clock: the behaviours of ``test_postgres_nodes`` and ``test_postgres_forwarding``
(a thread's owner, fencing, giving up idle threads, a stopped node's run taken over, a
request handed to the owner, a watcher following another node), with real runtimes, and
what only virtual time shows cheaply: a lease that runs out while its node is paused or
dead, and the same stored ids and state from two runs of the same test.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
import trio
import trio.testing

from pai_actors import (
    AgentRuntime,
    Message,
    PaiError,
    StoreConflict,
    StoreError,
    TextPart,
    ThreadNotFound,
    ThreadOwnedElsewhere,
    ThreadRecord,
    ToolContext,
    ToolRegistration,
    create_pai,
    define_agent,
    define_tool,
    json_schema,
)
from pai_actors._runtime.forwarding import error_answer, raise_error
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call
from pai_actors.testing._cluster import NodeStore, SharedMemory, create_node_runtime, keep_node
from pai_actors.testing._simulation import dump_store, seeded_scheduler

from .watching import applied, collect, statuses, streamer

T = TypeVar("T")


def thread(thread_id: str) -> ThreadRecord:
    return ThreadRecord(
        thread_id=thread_id, scope_key="s", created_at=datetime(2026, 1, 1, tzinfo=UTC)
    )


async def append(store: NodeStore, thread_id: str, message_id: str) -> None:
    async with store.transaction() as tx:
        tx.append_message(
            thread_id, Message(id=message_id, role="user", parts=(TextPart(text=message_id),))
        )


async def eventually(check: Callable[[], Awaitable[T]]) -> T:
    """``check()``'s first truthy result: a condition other nodes make true in (virtual)
    time, such as a lease running out."""
    while True:
        if found := await check():
            return found
        await trio.sleep(0.5)


class Node:
    """A node's process: its runtime and :func:`keep_node` (``keep=False``: its runtime
    alone), in a cancel scope of their own, until :meth:`stop` or :meth:`kill`."""

    def __init__(
        self, shared: SharedMemory, node_id: str, agents: Any, model: Any, *, lease: float = 10.0
    ) -> None:
        self.store = NodeStore(shared, node_id, lease=lease)
        self.rt = create_node_runtime(agents, model=model, store=self.store)
        self._scope = trio.CancelScope()
        self._stopping = trio.Event()
        self._closed = trio.Event()

    async def run(self, *, keep: bool = True, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with self._scope:
            try:
                async with self.rt, trio.open_nursery() as duties:
                    if keep:
                        await duties.start(keep_node, self.rt, self.store)
                    task_status.started()
                    await self._stopping.wait()
                    duties.cancel_scope.cancel()
            except Exception:
                if not self.store.killed:
                    raise  # a runtime that fails to close is a bug
        self._closed.set()

    async def stop(self) -> None:
        self._stopping.set()
        await self._closed.wait()

    def kill(self) -> None:
        """``SIGKILL``: its store refuses everything, its tasks are cancelled."""
        self.store.kill()
        self._scope.cancel()


@asynccontextmanager
async def nodes(
    shared: SharedMemory,
    agents: Any,
    model: Callable[[], Any],
    *names: str,
    lease: float = 10.0,
    keep: bool = True,
) -> AsyncIterator[list[Node]]:
    """Nodes ``names`` on ``shared``, running; stopped (those alive) on the way out."""
    running = [Node(shared, name, agents, model(), lease=lease) for name in names]
    with trio.fail_after(600):  # (virtual seconds: a hang fails)
        async with trio.open_nursery() as nursery:
            for node in running:
                await nursery.start(functools.partial(node.run, keep=keep))
            yield running
            for node in running:
                if not node.store.killed:
                    await node.stop()


# -- the agents ---------------------------------------------------------------------------


def worker(started: trio.Event | None = None, release: trio.Event | None = None) -> Any:
    """``work`` says it started, then works until ``release`` (forever without one)."""

    async def work(ctx: ToolContext) -> str:
        if started is not None:
            started.set()
        if release is None:
            await trio.sleep_forever()
        else:
            await release.wait()
        return "worked"

    tool = define_tool(
        id="test.work.v1",
        description="Work.",
        input_schema=json_schema({"type": "object"}),
        execute=work,
    )
    return define_agent(name="worker", tools={"work": tool})


def worker_model() -> ScriptedModel:
    def step(request: Any) -> Any:
        answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
        return text("done") if answered else [tool_call("work", {})]

    return ScriptedModel([step], repeat_last=True)


def payer(release: trio.Event) -> Any:
    """``approve`` waits for an approval; ``slow`` runs until ``release``: the run stays
    running (its node holds the lease) while the approval is pending."""
    approve = define_tool(
        id="test.approve.v1",
        description="Pay once approved.",
        input_schema=json_schema({"type": "object"}),
        execute=lambda ctx: "paid",
    )

    async def slow(ctx: ToolContext) -> str:
        await release.wait()
        return "slow done"

    work = define_tool(
        id="test.slow.v1",
        description="Work until released.",
        input_schema=json_schema({"type": "object"}),
        execute=slow,
    )
    return define_agent(
        name="payer",
        tools={"approve": ToolRegistration(approve, needs_approval=True), "slow": work},
    )


def payer_model() -> ScriptedModel:
    def step(request: Any) -> Any:
        answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
        return text("done") if answered else [tool_call("approve", {}), tool_call("slow", {})]

    return ScriptedModel([step], repeat_last=True)


async def started(rt: AgentRuntime, thread_id: str) -> None:
    """Until the thread's approval is pending and its slow tool runs."""

    async def both() -> bool:
        state = await rt.get_state(thread_id)
        parts = state.messages[-1].tool_parts if state.messages else ()
        return {p.state for p in parts} == {"approval-requested", "input-available"}

    await eventually(both)


# -- leases and fencing (the store alone) --------------------------------------------------


async def test_a_node_owns_the_threads_it_writes_and_the_others_are_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    a, b = NodeStore(shared, "a"), NodeStore(shared, "b")
    async with a.transaction() as tx:
        tx.create_thread(thread("t1"))
    assert shared.owner("t1") is None  # created with no run: nobody's to drive
    await append(a, "t1", "m1")
    with pytest.raises(ThreadOwnedElsewhere, match="owned by node 'a'"):
        await append(b, "t1", "m2")
    assert [m.id for m in await b.list_messages("t1")] == ["m1"]  # nothing of it written
    # (epoch 1 was given up as the thread was created with no run: the write took it at 2)
    assert shared.owner("t1") == ("a", 2)
    assert a.holds("t1")
    assert not b.holds("t1")


async def test_a_node_that_lost_its_lease_writes_nothing_until_it_takes_the_thread_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    a, b = NodeStore(shared, "a"), NodeStore(shared, "b")
    lost: list[str] = []
    a.on_fenced(lost.append)
    async with a.transaction() as tx:
        tx.create_thread(thread("t1"))
    await append(a, "t1", "m1")
    shared.expire("t1")  # a was paused past its lease ...
    await append(b, "t1", "m2")  # ... and b took the thread over
    assert shared.owner("t1") == ("b", 3)
    with pytest.raises(ThreadOwnedElsewhere, match="node 'a' lost its lease"):
        await append(a, "t1", "m3")  # a wakes up: fenced
    assert lost == ["t1"]
    # whatever a was still doing with it stays refused, even once the thread is free,
    with pytest.raises(ThreadOwnedElsewhere, match="node 'a' lost it to another node"):
        await append(a, "t1", "m3")
    # until a takes it again on purpose: only once b's lease expired, at a new epoch
    assert not await a.take("t1")
    shared.expire("t1")
    assert await a.take("t1")
    await append(a, "t1", "m3")
    assert shared.owner("t1") == ("a", 4)
    with pytest.raises(ThreadOwnedElsewhere, match="node 'b' lost its lease"):
        await append(b, "t1", "m4")
    assert [m.id for m in await b.list_messages("t1")] == ["m1", "m2", "m3"]


async def test_a_node_paused_past_its_lease_finds_its_thread_taken_and_its_writes_fenced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    a, b = NodeStore(shared, "a", lease=3), NodeStore(shared, "b", lease=3)
    fenced: list[str] = []
    a.on_fenced(fenced.append)
    async with a.transaction() as tx:
        tx.create_thread(thread("t1"))
    await append(a, "t1", "m0")  # a holds it ...
    a.pause()  # ... and stops
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            written = trio.Event()

            async def write_on_a() -> None:
                with pytest.raises(ThreadOwnedElsewhere, match="node 'a' lost its lease"):
                    await append(a, "t1", "m2")  # asked while paused: it waits ...
                written.set()

            nursery.start_soon(write_on_a)
            await trio.sleep(2)
            with pytest.raises(ThreadOwnedElsewhere, match="owned by node 'a'"):
                await append(b, "t1", "m1")  # the lease lives on a while
            await trio.sleep(2)
            await append(b, "t1", "m1")  # past it: b takes the thread over
            assert shared.owner("t1") == ("b", 3)
            assert not written.is_set()
            a.resume()  # ... and is refused once a goes on
    assert fenced == ["t1"]
    assert [m.id for m in await shared.store.list_messages("t1")] == ["m0", "m1"]


async def test_a_thread_without_a_running_run_is_given_up_for_any_node(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    a, b = NodeStore(shared, "a", lease=3600), NodeStore(shared, "b")
    async with a.transaction() as tx:
        tx.create_thread(thread("t1"))
    await append(a, "t1", "m0")  # written without a run: held until the next round
    assert shared.owner("t1") == ("a", 2)
    async with trio.open_nursery() as nursery:
        await nursery.start(a.keep_leases)  # its first round gives up the idle threads
        assert shared.owner("t1") is None
        nursery.cancel_scope.cancel()
    await append(b, "t1", "m1")
    assert shared.owner("t1") == ("b", 3)  # (a given-up lease keeps its epoch)


async def test_a_killed_node_asks_nothing_and_its_lease_runs_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    a, b = NodeStore(shared, "a", lease=5), NodeStore(shared, "b", lease=5)
    async with a.transaction() as tx:
        tx.create_thread(thread("t1"))
    await append(a, "t1", "m0")
    a.kill()
    with pytest.raises(StoreError, match="node 'a' was killed"):
        await a.get_thread("t1")
    with pytest.raises(StoreError, match="node 'a' was killed"):
        await append(a, "t1", "m1")
    with pytest.raises(ThreadOwnedElsewhere, match="owned by node 'a'"):
        await append(b, "t1", "m1")  # its lease lives on ...
    await trio.sleep(5.5)
    await append(b, "t1", "m1")  # ... until it runs out
    assert shared.owner("t1") == ("b", 3)


async def test_a_node_hears_the_others_commits_requests_and_answers_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    a, b = NodeStore(shared, "a"), NodeStore(shared, "b")
    heard: list[tuple[str, object]] = []
    follow = functools.partial(
        a.follow_other_nodes,
        lambda thread_id, logged: heard.append(("changed", thread_id)),
        requested=lambda thread_id: heard.append(("requested", thread_id)),
        answered=lambda request_id: heard.append(("answered", request_id)),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(follow)
        async with a.transaction() as tx:
            tx.create_thread(thread("t1"))  # (its own: not heard)
        async with b.transaction() as tx:
            tx.create_thread(thread("t2"))
        request_id = await b.forward("t1", {"op": "x"})
        assert await a.open_requests("t1") == [(request_id, {"op": "x"})]
        await a.answer(request_id, {"ok": 1})
        await a.answer(request_id, {"ok": 2})  # the first answer stands
        assert await a.open_requests("t1") == []
        await trio.testing.wait_all_tasks_blocked()
        assert heard == [("changed", "t2"), ("requested", "t1"), ("answered", request_id)]
        assert await b.take_answer(request_id) == {"ok": 1}
        assert await b.take_answer(request_id) is None  # (read once: deleted)
        await b.withdraw(await b.forward("t1", {"op": "y"}))
        assert shared.requests_left() == 0
        await trio.testing.wait_all_tasks_blocked()
        assert heard[-1] == ("requested", "t1")

        a.pause()  # what a node paused is told reaches it once it goes on
        heard.clear()
        async with b.transaction() as tx:
            tx.create_thread(thread("t3"))
        await trio.testing.wait_all_tasks_blocked()
        assert heard == []
        a.resume()
        await trio.testing.wait_all_tasks_blocked()
        assert heard == [("changed", "t3")]
        a.kill()  # a killed one hears nothing more
        async with b.transaction() as tx:
            tx.create_thread(thread("t4"))
        await trio.testing.wait_all_tasks_blocked()
        assert heard[-1] == ("changed", "t3")
        nursery.cancel_scope.cancel()


# -- runtimes on several nodes ---------------------------------------------------------------


async def test_a_commit_that_stops_a_run_gives_its_thread_up_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    async with nodes(shared, worker(release=trio.Event()), worker_model, "a") as [a]:
        thread_id = await a.rt.create_thread("s")
        run_id = await a.rt.send(thread_id, "work")
        await eventually(lambda: a.store.get_active_run(thread_id))
        assert shared.owner(thread_id) == ("a", 2)  # its run runs there
        assert (await a.rt.cancel_run(run_id, "stop")).status == "cancelled"
        assert shared.owner(thread_id) is None  # the cancelling commit gave it up


async def test_a_run_of_a_killed_node_is_taken_over_and_recovered_by_another(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    running = trio.Event()
    async with nodes(shared, worker(running), worker_model, "a", "b") as [a, b]:
        thread_id = await a.rt.create_thread("s")
        await a.rt.send(thread_id, "work")
        await running.wait()  # its tool runs on a (its start is committed)
        a.kill()
        killed_at = trio.current_time()
        assert shared.owner(thread_id) == ("a", 2)  # its lease lives on for a while

        async def over() -> bool:
            return await shared.store.get_active_run(thread_id) is None

        await eventually(over)  # b's look for orphaned runs found it once the lease ran out
        assert trio.current_time() - killed_at >= a.store.lease
        assert await b.store.orphaned_threads() == []
        state = await b.rt.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    [call] = state.messages[-1].tool_parts
    assert call.state == "output-error"  # interrupted: recorded, not run twice
    assert "interrupted" in (call.error_text or "")
    assert state.messages[-1].parts[-1].text == "done"  # type: ignore[union-attr]
    assert shared.owner(thread_id) is None  # b took it over, then gave it up: run over


async def test_a_node_paused_past_its_lease_has_its_run_recovered_elsewhere_and_is_fenced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Node a stops (paused) while its tool works; b takes the run over and recovers it
    once a's lease ran out. a resumes: its tool's result and whatever else it still had to
    write about the run are refused, and its runtime lets the thread go."""
    shared = SharedMemory()
    running, release = trio.Event(), trio.Event()
    async with nodes(shared, worker(running, release), worker_model, "a", "b") as [a, _]:
        thread_id = await a.rt.create_thread("s")
        await a.rt.send(thread_id, "work")
        await running.wait()
        a.store.pause()

        async def over() -> bool:
            return await shared.store.get_active_run(thread_id) is None

        await eventually(over)  # recovered by b
        recovered = await shared.store.list_messages(thread_id)
        release.set()  # a's tool ends ...
        a.store.resume()  # ... and a goes on
        await trio.sleep(a.store.lease)
        await trio.testing.wait_all_tasks_blocked()
        assert not a.store.holds(thread_id)
        assert await shared.store.list_messages(thread_id) == recovered  # a wrote nothing
        state = await a.rt.get_state(thread_id)  # a reads what b wrote
    assert [r.status for r in state.runs] == ["completed"]
    [call] = state.messages[-1].tool_parts
    assert call.state == "output-error"
    assert "interrupted" in (call.error_text or "")
    assert shared.owner(thread_id) is None


async def test_a_node_that_lost_a_thread_sends_to_it_again_once_its_run_ended_elsewhere(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    running, release = trio.Event(), trio.Event()
    refused: ThreadOwnedElsewhere | None = None
    async with nodes(shared, worker(running, release), worker_model, "a", "b") as [a, _]:
        thread_id = await a.rt.create_thread("s")
        await a.rt.send(thread_id, "work")
        await running.wait()
        a.store.pause()  # b takes the run over and completes it ...

        async def over() -> bool:
            return await shared.store.get_active_run(thread_id) is None

        await eventually(over)
        release.set()
        a.store.resume()  # ... a goes on: its tool's result is refused, it lets the run go
        await trio.sleep(a.store.lease)
        state = await a.rt.get_state(thread_id)  # a loads the thread afresh: nobody owns it
        assert [r.status for r in state.runs] == ["completed"]
        assert shared.owner(thread_id) is None
        try:
            await a.rt.send(thread_id, "again")
        except ThreadOwnedElsewhere as exc:  # "node 'a' lost it to another node: ..."
            refused = exc
        else:
            await a.rt.wait_idle(thread_id)
    assert refused is None, refused


async def test_wait_idle_on_a_node_that_does_not_drive_the_thread_waits_for_its_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    running, release = trio.Event(), trio.Event()
    async with nodes(shared, worker(running, release), worker_model, "a", "b") as [a, b]:
        thread_id = await a.rt.create_thread("s")
        await a.rt.send(thread_id, "work")
        await running.wait()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_set_after, 50, release)  # a's tool works for 50 s
            await b.rt.wait_idle(thread_id)
            returned_at = trio.current_time()
            active = await shared.store.get_active_run(thread_id)
    assert active is None, f"wait_idle returned at {returned_at:g} s, its run {active.status}"


async def _set_after(seconds: float, event: trio.Event) -> None:
    await trio.sleep(seconds)
    event.set()


async def test_reading_a_waiting_thread_on_another_node_leaves_its_lease_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A run that waits on an approval has no owner: another node reading it (its pending
    actions, its state) takes nothing over; the submission's own commit takes the lease."""
    shared = SharedMemory()
    release = trio.Event()
    release.set()  # (the slow tool returns at once: only the approval keeps the run)
    async with nodes(shared, payer(release), payer_model, "a", "b") as [a, b]:
        thread_id = await a.rt.create_thread("s")
        await a.rt.send(thread_id, "pay")
        await a.rt.wait_idle(thread_id)
        given_up = shared.tables.leases[thread_id]
        assert shared.owner(thread_id) is None
        [action] = await b.rt.pending_actions(thread_id)
        await b.rt.get_state(thread_id)
        assert shared.tables.leases[thread_id] == given_up  # no epoch taken by reading
        accepted = await b.rt.submit_action(action.ref, {"approved": True})
        assert accepted.status == "accepted"
        await b.rt.wait_idle(thread_id)
        state = await b.rt.get_state(thread_id)
    assert [run.status for run in state.runs] == ["completed"]
    assert shared.tables.leases[thread_id].epoch == given_up.epoch + 1  # taken by b's write


async def test_a_submission_on_another_node_is_applied_by_the_owner(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    release = trio.Event()
    async with nodes(shared, payer(release), payer_model, "a", "b") as [a, b]:
        thread_id = await a.rt.create_thread("s")
        await a.rt.send(thread_id, "pay")
        await started(a.rt, thread_id)
        assert shared.owner(thread_id) == ("a", 2)  # its run is running there
        [action] = await b.rt.pending_actions(thread_id)

        # An invalid answer is rejected by the owner, and the action stays pending.
        rejected = await b.rt.submit_action(action.ref, {"approved": "yes"})
        assert rejected.status == "rejected"
        assert "approved" in (rejected.error or "")
        assert [v.ref for v in await a.rt.pending_actions(thread_id)] == [action.ref]

        accepted = await b.rt.submit_action(action.ref, {"approved": True})
        assert accepted.status == "accepted"
        again = await b.rt.submit_action(action.ref, {"approved": True})
        assert again.status == "rejected"  # an action resolves once
        assert shared.owner(thread_id) == ("a", 2)  # a applied them all
        release.set()
        await a.rt.wait_idle(thread_id)
        state = await a.rt.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    parts = {p.tool_name: p for p in state.messages[-1].tool_parts}
    assert parts["approve"].output == "paid"
    assert parts["slow"].output == "slow done"
    assert shared.requests_left() == 0  # each answer was read and its request deleted


async def test_a_run_cancelled_on_another_node_is_cancelled_by_the_owner(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = SharedMemory()
    async with nodes(shared, payer(trio.Event()), payer_model, "a", "b") as [a, b]:
        thread_id = await a.rt.create_thread("s")
        run_id = await a.rt.send(thread_id, "pay")
        await started(a.rt, thread_id)
        cancelled = await b.rt.cancel_run(run_id, "stop")
        assert cancelled.status == "cancelled"
        state = await a.rt.get_state(thread_id)  # recorded before the answer came back
        with pytest.raises(PaiError, match="no run 'nope'"):
            await b.rt.cancel_run("nope")
    assert [r.status for r in state.runs] == ["cancelled"]
    for part in state.messages[-1].tool_parts:
        assert part.state == "output-error"
        assert "stop" in (part.error_text or "")
    assert shared.owner(thread_id) is None  # its run is over: a gave the thread up
    assert shared.requests_left() == 0


async def test_a_request_for_a_killed_owner_is_applied_by_the_node_that_takes_over(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Node a is killed while its run runs. b (which does not look for orphaned runs) is
    asked to cancel the run: the request waits for a, which cannot answer; once a's lease
    ran out b takes the thread over and applies the request itself."""
    shared = SharedMemory()
    running = trio.Event()
    async with nodes(shared, worker(running), worker_model, "a", "b", keep=False) as [a, b]:
        thread_id = await a.rt.create_thread("s")
        run_id = await a.rt.send(thread_id, "work")
        await running.wait()
        a.kill()
        killed_at = trio.current_time()
        state = await b.rt.get_state(thread_id)  # a owns it: nothing is recovered yet
        assert [r.status for r in state.runs] == ["running"]
        cancelled = await b.rt.cancel_run(run_id, "stop")
        assert trio.current_time() - killed_at >= a.store.lease
        state = await b.rt.get_state(thread_id)
    assert cancelled.status == "cancelled"
    [part] = state.messages[-1].tool_parts
    assert part.state == "output-error"
    assert (part.error_text or "").endswith("cancelled: stop")
    assert shared.requests_left() == 0


async def test_a_watcher_on_one_node_sees_a_run_driven_on_another(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Node b drives the conversation; a watcher on node a is shown each change b commits,
    as updates, in order, from the state its snapshot showed."""
    shared = SharedMemory()
    release = trio.Event()
    release.set()
    async with nodes(shared, worker(release=release), worker_model, "a", "b") as [a, b]:
        thread_id = await b.rt.create_thread("s")
        seen: list[Any] = []
        async with a.rt.watch(thread_id, snapshot=True) as updates:
            assert updates.snapshot is not None
            assert updates.snapshot.messages == ()
            await b.rt.send(thread_id, "work")
            async for update in updates:
                seen.append(update)
                if update.type == "run-status" and update.run.status == "completed":
                    break
        final = await b.rt.get_state(thread_id)
    assert seen[0].type == "message-appended"  # the user's message
    messages: dict[str, Any] = {}
    for update in seen:
        if update.type in ("message-appended", "message-replaced"):
            messages[update.message.id] = update.message
    assert list(messages.values()) == list(final.messages)
    assert final.messages[-1].parts[-1].text == "done"  # type: ignore[union-attr]


async def test_watchers_on_two_nodes_see_the_same_updates_in_the_order_committed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Node b runs the conversation up to the approval; submitted on node a, the approval
    resumes it there. A watcher on each node is shown the same updates, every one, in the
    order committed, whichever node committed them (the update log)."""
    shared = SharedMemory()
    release = trio.Event()
    release.set()  # the run waits on the approval alone: b gives the thread up
    async with nodes(shared, payer(release), payer_model, "a", "b") as [a, b]:
        thread_id = await b.rt.create_thread("s")
        seen_a: list[Any] = []
        seen_b: list[Any] = []
        async with trio.open_nursery() as nursery:
            for node, seen in ((a, seen_a), (b, seen_b)):
                await nursery.start(collect, node.rt, thread_id, seen)
            await b.rt.send(thread_id, "pay")
            await a.rt.wait_idle(thread_id)
            [action] = await a.rt.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
        final = await a.rt.get_state(thread_id)
    assert seen_a == seen_b
    assert statuses(seen_a) == ["running", "waiting", "running", "completed"]
    assert applied(seen_a) == [m.to_wire() for m in final.messages]


async def test_a_watcher_on_another_node_gets_the_live_updates_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """What is never stored (the model's text fragments, transient tool data) reaches a
    watcher on another node too, among the stored updates in the order the running node
    showed them: the two watchers see the same."""
    shared = SharedMemory()
    async with nodes(shared, streamer()[0], lambda: streamer()[1], "a", "b") as [a, b]:
        thread_id = await b.rt.create_thread("s")
        seen_a: list[Any] = []
        seen_b: list[Any] = []
        async with trio.open_nursery() as nursery:
            for node, seen in ((a, seen_a), (b, seen_b)):
                await nursery.start(
                    functools.partial(collect, node.rt, thread_id, seen, deltas=True)
                )
            await trio.testing.wait_all_tasks_blocked()  # b heard that a watches the thread
            await b.rt.send(thread_id, "go")
    assert seen_a == seen_b
    deltas = [u["delta"] for u in seen_a if u["type"] == "message-delta"]
    assert deltas == ["let me ", "work", "all ", "done"]
    [data] = [u for u in seen_a if u["type"] == "tool-data"]
    assert data["item"]["value"] == {"pct": 50}
    # each step's fragments come before the message that stores the step
    stored = next(
        i
        for i, u in enumerate(seen_a)
        if u["type"] in ("message-appended", "message-replaced")
        and any(p.get("text") == "let me work" for p in u["message"]["parts"])
    )
    assert [u["type"] for u in seen_a].index("message-delta") < stored


async def test_a_sub_agent_ending_on_another_node_has_its_caller_settled_by_the_owner(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The front agent's step calls ``ask`` (the payer agent as a sub-agent) and ``slow``:
    its run keeps running on node a while the payer waits for an approval. The approval
    submitted on node b resumes the payer there; its end settles ``ask`` on a's thread,
    which b cannot write: a does it, asked by b."""
    release = trio.Event()
    paid: list[str] = []

    async def ask(ctx: ToolContext) -> str:
        return (await ctx.agents.run("payer", "Pay the invoice.")).text

    def pay(ctx: ToolContext) -> str:
        paid.append(ctx.thread.thread_id)
        return "paid"

    async def slow(ctx: ToolContext) -> str:
        await release.wait()
        return "slow done"

    def tool(id: str, execute: Any) -> Any:
        return define_tool(
            id=id, description=id, input_schema=json_schema({"type": "object"}), execute=execute
        )

    pai = create_pai(
        {
            "front": define_agent(
                name="Front", tools={"ask": tool("t.ask", ask), "slow": tool("t.slow", slow)}
            ),
            "payer": define_agent(
                name="Payer",
                tools={"pay": ToolRegistration(tool("t.pay", pay), needs_approval=True)},
            ),
        }
    )

    def models() -> dict[str, ScriptedModel]:
        def front(request: Any) -> Any:
            answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
            return text("done") if answered else [tool_call("ask", {}), tool_call("slow", {})]

        def payer(request: Any) -> Any:
            answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
            return text("invoice paid") if answered else [tool_call("pay", {})]

        return {
            "front": ScriptedModel([front], repeat_last=True),
            "payer": ScriptedModel([payer], repeat_last=True),
        }

    shared = SharedMemory()
    async with nodes(shared, pai, models, "a", "b") as [a, b]:
        thread_id = await a.rt.create_thread("s")
        await a.rt.send(thread_id, "pay")
        [action] = await eventually(lambda: b.rt.pending_actions(thread_id))
        assert shared.owner(thread_id) == ("a", 2)  # slow runs there
        assert (await b.rt.submit_action(action.ref, {"approved": True})).status == "accepted"
        sub_thread_id = action.ref.thread_id
        assert sub_thread_id != thread_id
        await b.rt.wait_idle(sub_thread_id)  # the payer completed on b ...

        async def ask_settled() -> bool:
            state = await a.rt.get_state(thread_id)
            return state.messages[-1].tool_parts[0].state == "output-available"

        await eventually(ask_settled)  # ... and a settled ask, asked by b
        release.set()
        await a.rt.wait_idle(thread_id)
        state = await a.rt.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    ask_part, slow_part = state.messages[-1].tool_parts
    assert (ask_part.output, slow_part.output) == ("invoice paid", "slow done")
    assert paid == [sub_thread_id]  # the approved payment ran once
    assert shared.requests_left() == 0


async def test_a_test_runtime_opened_on_a_node_later_continues_the_generations_of_the_data(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``create_test_runtime`` on a node store numbers its ids after the shared data, as on
    a PostgreSQL database: a node opened once another wrote makes no id again."""
    shared = SharedMemory()
    release = trio.Event()
    release.set()
    async with create_test_runtime(
        worker(release=release), model=worker_model(), store=NodeStore(shared, "a")
    ) as a:
        thread_id = await a.create_thread("s")
        await a.send(thread_id, "work")
        await a.wait_idle(thread_id)
    async with create_test_runtime(
        worker(release=release), model=worker_model(), store=NodeStore(shared, "b")
    ) as b:
        await b.send(thread_id, "again")
        await b.wait_idle(thread_id)
        state = await b.get_state(thread_id)
    assert [r.run_id for r in state.runs] == ["run_1_1", "run_1_g2_1"]
    assert [r.status for r in state.runs] == ["completed", "completed"]


# -- determinism ---------------------------------------------------------------------------------


def test_the_same_cluster_run_twice_stores_the_same_ids_and_state() -> None:
    """A takeover and a forwarded submission on three nodes, twice, each in a trio run of
    its own under the autojump clock with trio's scheduler seeded: the same bytes stored."""

    async def scenario() -> tuple[bytes, list[tuple[str, str, int]]]:
        shared = SharedMemory()
        running, release = trio.Event(), trio.Event()
        agents = create_pai({"worker": worker(running), "payer": payer(release)})

        def models() -> dict[str, ScriptedModel]:
            return {"worker": worker_model(), "payer": payer_model()}

        async with nodes(shared, agents, models, "a", "b", "c") as [a, b, c]:
            first = await a.rt.create_thread("s", agent_id="worker")
            await a.rt.send(first, "work")
            await running.wait()
            a.kill()  # b or c takes its run over once its lease ran out
            second = await b.rt.create_thread("s", agent_id="payer")
            await b.rt.send(second, "pay")
            await started(b.rt, second)
            [action] = await c.rt.pending_actions(second)
            assert (await c.rt.submit_action(action.ref, {"approved": True})).status == "accepted"
            release.set()
            await b.rt.wait_idle(second)
            await eventually(lambda: _idle(shared, first))
        # (who took the first thread over, at which epoch: in the leases given up since)
        leases = sorted(
            (t, lease.node_id, lease.epoch) for t, lease in shared.tables.leases.items()
        )
        return await dump_store(shared.store, [first, second]), leases

    runs = []
    for _ in range(2):
        with seeded_scheduler(7):
            runs.append(trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0)))
    assert runs[0] == runs[1]
    assert b'"status":"completed"' in runs[0][0]


async def _idle(shared: SharedMemory, thread_id: str) -> bool:
    return await shared.store.get_active_run(thread_id) is None


@pytest.mark.parametrize(
    ("raised", "seen"),
    [
        (StoreError("commit 3 failed"), StoreError),
        (ThreadNotFound("no thread 't'"), ThreadNotFound),
        (StoreConflict("call 'c'", "exists"), PaiError),  # (built from more than a message)
    ],
)
def test_an_error_the_owner_answers_is_raised_by_the_asker_as_its_own_type(
    raised: PaiError, seen: type[PaiError]
) -> None:
    """A request handed to the owner that failed there fails on the asking node with the
    same type where it can be made from a message: a failed commit is a StoreError either
    way (a client retries it as it would a local one)."""
    with pytest.raises(PaiError) as info:
        raise_error(error_answer(raised))
    assert type(info.value) is seen
    assert (
        str(info.value)
        == f"{raised} ({type(raised).__name__} raised by the node that owns the thread)"
    )
