"""Watchers on several nodes of one PostgreSQL database (``_store.postgres_updates``,
``_runtime.elsewhere``): each is shown every update of the thread, in the order made,
whichever node made it."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from pai_actors import AgentRuntime, PostgresStore
from pai_actors._store.postgres_updates import prune
from pai_actors.testing import create_test_runtime

from .postgres_support import connect
from .watching import applied, collect, payer, statuses, streamer


@asynccontextmanager
async def two_nodes(
    database: str, make: Callable[[], tuple[Any, Any]]
) -> AsyncIterator[tuple[AgentRuntime, AgentRuntime]]:
    """Runtimes on nodes ``a`` and ``b`` of ``database``, each with ``make()``'s agent and
    model."""
    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a") as store_a,
        PostgresStore(database, node_id="b") as store_b,
    ):
        agent_a, model_a = make()
        agent_b, model_b = make()
        async with (
            create_test_runtime(agent_a, model=model_a, store=store_a) as a,
            create_test_runtime(agent_b, model=model_b, store=store_b) as b,
        ):
            yield a, b


async def test_watchers_on_two_nodes_see_the_same_updates_in_the_order_committed(
    database: str,
) -> None:
    """Node b runs the conversation up to the approval; the approval, submitted on node a,
    resumes it there. A watcher on each node is shown every update, both the same, in
    order: the tool part's and the run's states in between included, whichever node wrote
    them."""
    async with two_nodes(database, payer) as (a, b):
        thread_id = await b.create_thread("s")
        seen_a: list[Any] = []
        seen_b: list[Any] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(collect, a, thread_id, seen_a)
            await nursery.start(collect, b, thread_id, seen_b)
            await b.send(thread_id, "pay")
            await a.wait_idle(thread_id)
            [action] = await a.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
        final = await b.get_state(thread_id)
    assert seen_a == seen_b
    assert statuses(seen_a) == ["running", "waiting", "running", "completed"]
    tool_states = [u["part"]["state"] for u in seen_a if u["type"] == "tool-part-updated"]
    assert tool_states[-2:] == ["approval-responded", "output-available"]
    assert applied(seen_a) == [m.to_wire() for m in final.messages]


async def test_a_watcher_on_another_node_gets_the_live_updates_in_order(database: str) -> None:
    """The model's text fragments and transient tool data, never stored, reach a watcher on
    another node (NOTIFY), among the stored updates in the order the running node showed
    them: the two watchers see the same."""
    async with two_nodes(database, streamer) as (a, b):
        thread_id = await b.create_thread("s")
        seen_a: list[Any] = []
        seen_b: list[Any] = []
        async with trio.open_nursery() as nursery:
            for rt, seen in ((a, seen_a), (b, seen_b)):
                await nursery.start(functools.partial(collect, rt, thread_id, seen, deltas=True))
            # Until a's notice that it watches the thread reached b (a notification b
            # reads on its own connection: no event of b's to wait on).
            elsewhere = b._elsewhere
            assert elsewhere is not None
            while not elsewhere.watched(thread_id):  # noqa: ASYNC110
                await trio.sleep(0.01)
            await b.send(thread_id, "go")
    assert seen_a == seen_b
    deltas = [u["delta"] for u in seen_a if u["type"] == "message-delta"]
    assert deltas == ["let me ", "work", "all ", "done"]
    assert [u["item"]["value"] for u in seen_a if u["type"] == "tool-data"] == [{"pct": 50}]


async def test_a_watcher_behind_what_the_log_keeps_is_shown_the_difference(
    database: str,
) -> None:
    """Rows of the log that a watcher had not been shown are gone (pruned): it is shown
    the difference between what it was shown and the thread as stored, and then every
    logged change again."""
    async with two_nodes(database, payer) as (a, b):
        thread_id = await b.create_thread("s")
        seen: list[Any] = []
        async with a.watch(thread_id, snapshot=True) as updates:
            with connect(database) as db:  # b's first row follows one that was pruned
                db.execute(
                    "CREATE FUNCTION gap() RETURNS trigger LANGUAGE plpgsql AS"
                    " $$ BEGIN IF NEW.prev = 0 THEN NEW.prev := -1; END IF; RETURN NEW; END $$;"
                    " CREATE TRIGGER gap BEFORE INSERT ON pai_updates"
                    " FOR EACH ROW EXECUTE FUNCTION gap()"
                )
            await b.send(thread_id, "pay")
            async for update in updates:
                seen.append(update.to_wire())
                if update.type == "run-status" and update.run.status == "waiting":
                    break
            [action] = await b.pending_actions(thread_id)
            await action.submit({"approved": True})
            async for update in updates:
                seen.append(update.to_wire())
                if update.type == "run-status" and update.run.status == "completed":
                    break
        final = await b.get_state(thread_id)
    assert statuses(seen)[-2:] == ["running", "completed"]
    assert applied(seen) == [m.to_wire() for m in final.messages]


def chained(logged: list[Any], first_prev: int = 0) -> bool:
    """Whether each row names the one before it."""
    return [c.prev for c in logged] == [first_prev, *(c.seq for c in logged[:-1])]


async def test_pruning_keeps_each_threads_last_logged_change(database: str) -> None:
    agent, model = payer()
    with trio.fail_after(30), PostgresStore(database, node_id="a") as store:
        async with create_test_runtime(agent, model=model, store=store) as rt:
            one, two = await rt.create_thread("s"), await rt.create_thread("s")
            await rt.send(one, "pay")
            await rt.wait_idle(one)
            await rt.send(two, "pay")
            await rt.wait_idle(two)
            logged = await store.logged_since(one, 0)
            assert len(logged) > 1
            assert chained(logged)
            last = await store.last_logged(one)
            assert logged[-1].seq == last
            kept = await store.logged_since(two, 0)
            with connect(database) as db:
                db.execute("UPDATE pai_updates SET written_at = now() - interval '1 hour'")
                db.execute("UPDATE pai_updates SET written_at = now() WHERE thread_id = %s", (two,))
            await prune(store._pool)  # (what keep_leases runs once a minute)
            assert [c.seq for c in await store.logged_since(one, 0)] == [last]
            assert await store.logged_since(two, 0) == kept
            # the rows written after it name it
            [action] = await rt.pending_actions(one)
            await action.submit({"approved": True})
            await rt.wait_idle(one)
            logged = await store.logged_since(one, last)
            assert len(logged) > 1
            assert chained(logged, first_prev=last)
