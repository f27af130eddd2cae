"""What a :class:`PostgresStore` reads of a thread it does not hold in memory: the first read
takes the thread whole into its mirror in one round trip, and the mirror keeps as many idle
threads as the runtime remembers as loaded, so the runtime's next reads of them (pending
actions, calls, runs) are answered from memory.

Each test gets a database of its own (``postgres_support``), with the real clock.
"""

from __future__ import annotations

import gc
from typing import Any

import trio
import trio.testing

from pai_actors import PostgresStore
from pai_actors._runtime.loading import INDEX_CAPACITY
from pai_actors.testing import create_test_runtime

from .postgres_support import Statements, append, payer, payer_model, thread


async def test_a_threads_first_read_takes_it_whole_in_one_round_trip(database: str) -> None:
    with trio.fail_after(30):
        with PostgresStore(database) as writer:
            async with writer.transaction() as tx:
                tx.create_thread(thread("t1"))
            await append(writer, "t1", "m1")
        with PostgresStore(database) as store:  # (a new store: nothing in memory)
            seen = Statements(store)
            record = await store.get_thread("t1")
            assert record is not None
            assert record.thread_id == "t1"
            assert seen.round_trips == 1
            assert len(seen.sent) == 4  # the record, messages (with parts), runs, calls
            assert [m.id for m in await store.list_messages("t1")] == ["m1"]
            assert await store.list_runs("t1") == []
            assert await store.list_calls("t1") == []
            assert await store.list_pending_actions("t1") == []
            assert seen.round_trips == 1  # the rest from memory


async def test_a_missing_thread_reads_as_none_in_one_round_trip_a_read(database: str) -> None:
    with trio.fail_after(30), PostgresStore(database) as store:
        seen = Statements(store)
        assert await store.get_thread("nobody") is None
        assert seen.round_trips == 1  # the whole thread's read found nothing: no second one
        assert await store.list_messages("nobody") == []
        assert await store.list_runs("nobody") == []
        assert await store.list_calls("nobody") == []
        assert await store.get_call("nobody", "call_1") is None
        assert await store.list_pending_actions("nobody") == []
        assert seen.round_trips == 6  # (a missing thread is not kept: each read asks again)
        async with store.transaction() as tx:  # and once it exists, it is found
            tx.create_thread(thread("nobody"))
        record = await store.get_thread("nobody")
        assert record is not None
        assert record.thread_id == "nobody"


async def test_the_threads_the_runtime_remembers_as_loaded_are_answered_from_memory(
    database: str,
) -> None:
    """A runtime that loaded a thread reads its pending actions from the store without
    loading it again: the store keeps that many threads (``INDEX_CAPACITY``), waiting ones
    too, so none of those reads goes to the server."""
    count = INDEX_CAPACITY
    with trio.fail_after(120):
        with PostgresStore(database) as writer:
            async with writer.transaction() as tx:
                for i in range(count):
                    tx.create_thread(thread(f"t{i}"))
            for i in range(count):
                await append(writer, f"t{i}", "m1")
        with PostgresStore(database) as store:
            async with create_test_runtime(payer(), model=payer_model(), store=store) as rt:
                for i in range(count):
                    assert await rt.pending_actions(f"t{i}") == []
                seen = Statements(store)
                for i in range(count):
                    assert await rt.pending_actions(f"t{i}") == []
                    assert (await rt.get_thread(f"t{i}")).thread_id == f"t{i}"
                assert seen.sent == []


async def test_reads_share_the_pools_connections_first_come_first_served(database: str) -> None:
    """At most ``max_size`` reads hold a connection; the others wait, in the order they came,
    with no exception in hand (trio's Semaphore keeps its ``WouldBlock`` alive meanwhile); a
    waiting read that is cancelled gives its place up."""
    with trio.fail_after(30), PostgresStore(database, max_size=2) as store:
        pool = store._pool
        held = trio.Event()
        go_on = {1: trio.Event(), 2: trio.Event()}
        holding: list[int] = []
        served: list[int] = []
        cancelled: list[int] = []
        scopes: dict[int, trio.CancelScope] = {}

        async def hold(k: int) -> None:
            async def reader(db: Any) -> None:
                holding.append(k)
                if len(holding) == 2:
                    held.set()
                await go_on[k].wait()

            await pool._retried(reader)

        async def wait_in_line(k: int) -> None:
            async def reader(db: Any) -> Any:
                served.append(k)  # (in the order they got a connection)
                return await db.fetch("SELECT 1")

            with trio.CancelScope() as scopes[k]:
                assert await pool._retried(reader) == [(1,)]
            if scopes[k].cancelled_caught:
                cancelled.append(k)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold, 1)
            nursery.start_soon(hold, 2)
            await held.wait()
            for k in (3, 4, 5):
                nursery.start_soon(wait_in_line, k)
                await trio.testing.wait_all_tasks_blocked()
            assert served == []
            assert [o for o in gc.get_objects() if isinstance(o, trio.WouldBlock)] == []
            scopes[4].cancel()  # 4 gives its place up
            await trio.testing.wait_all_tasks_blocked()
            assert cancelled == [4]
            go_on[1].set()  # one connection free: the first in line takes it
            await trio.testing.wait_all_tasks_blocked()
            assert served == [3]
            go_on[2].set()
        assert sorted(holding) == [1, 2]
        assert served == [3, 5]
