"""A node's threads it gave up (``PostgresStore._released``): kept in memory as the node left
them, answered from there once a check finds that no other node took the thread since, and
read from the server when one did.

A node gives up a thread's lease when the thread's run waits or ends; most often it takes
it again a moment later (its client answers the action). Reading the thread back whole from
the server at each of those moments was most of what a node did beyond a lone store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio

from pai_actors import (
    PostgresStore,
)
from pai_actors.testing import create_test_runtime

from .postgres_support import Statements, append, connect, payer, payer_model, thread


@pytest.fixture
def nodes(database: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two nodes, ``a`` and ``b``, on the test's database."""
    with (
        PostgresStore(database, node_id="a") as a,
        PostgresStore(database, node_id="b") as b,
    ):
        yield a, b


async def give_up_idle(store: PostgresStore) -> None:
    """One round of the node's lease keeping: it gives up the threads with no running run."""
    async with trio.open_nursery() as nursery:
        await nursery.start(store.keep_leases)
        nursery.cancel_scope.cancel()


def lease(url: str, thread_id: str) -> tuple[str, int, bool]:
    """The lease row of ``thread_id``: its node, its epoch, and whether it is live."""
    with connect(url) as db:
        row = db.execute(
            "SELECT node_id, epoch, expires_at > now() FROM pai_thread_owners WHERE thread_id = %s",
            (thread_id,),
        ).fetchone()
    assert row is not None
    return (row[0], row[1], row[2])


async def test_a_thread_given_up_is_answered_from_memory_until_another_node_writes_it(
    database: str, nodes: tuple[PostgresStore, PostgresStore]
) -> None:
    a, b = nodes
    with trio.fail_after(30):
        async with a.transaction() as tx:
            tx.create_thread(thread("t1"))
        await append(a, "t1", "m0")
        await give_up_idle(a)
        assert lease(database, "t1") == ("a", 2, False)  # given up at epoch 2
        seen = Statements(a)

        assert [m.id for m in await a.list_messages("t1")] == ["m0"]
        assert seen.reads_of_records() == []  # from memory: only the lease was checked
        assert len(seen.checks()) == 1

        await append(b, "t1", "m1")  # b takes the thread (epoch 3) and writes it
        seen.clear()
        assert [m.id for m in await a.list_messages("t1")] == ["m0", "m1"]
        assert seen.reads_of_records() != []  # the check found it taken: read from the server
        assert a._mirror is not None
        assert "t1" not in a._mirror.threads

        await give_up_idle(b)
        await append(a, "t1", "m2")  # a takes it again (epoch 4) and writes it
        assert [m.id for m in await a.list_messages("t1")] == ["m0", "m1", "m2"]
        assert [m.id for m in await b.list_messages("t1")] == ["m0", "m1", "m2"]


async def test_a_thread_taken_again_at_the_next_epoch_stays_in_memory_and_at_a_later_one_does_not(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = nodes
    with trio.fail_after(30):
        for thread_id in ("kept", "taken"):
            async with a.transaction() as tx:
                tx.create_thread(thread(thread_id))  # given up at once (epoch 1): no run
        assert a._mirror is not None
        mirrored = a._mirror.threads["kept"]
        assert mirrored.released == 1

        await append(a, "kept", "m0")  # taken again at epoch 2: nobody wrote it meanwhile
        assert a._mirror.threads["kept"] is mirrored
        assert mirrored.released is None
        seen = Statements(a)
        assert [m.id for m in await a.list_messages("kept")] == ["m0"]
        assert seen.sent == []  # its own thread again: no statement at all

        await append(b, "taken", "b0")  # b had it at epoch 2 ...
        await give_up_idle(b)  # ... and gave it up
        await append(a, "taken", "a0")  # a takes it at epoch 3: what it held is stale
        assert "taken" not in a._mirror.threads  # forgotten: read back whole when next read
        assert [m.id for m in await a.list_messages("taken")] == ["b0", "a0"]


async def test_the_checks_of_reads_made_meanwhile_are_one_statement(database: str) -> None:
    with trio.fail_after(30), PostgresStore(database, node_id="a") as a:
        ids = [f"t{i}" for i in range(40)]
        async with a.transaction() as tx:
            for thread_id in ids:
                tx.create_thread(thread(thread_id))
        seen = Statements(a)
        found: dict[str, Any] = {}

        async def read(thread_id: str) -> None:
            found[thread_id] = await a.list_messages(thread_id)

        async with trio.open_nursery() as nursery:
            for thread_id in ids:
                nursery.start_soon(read, thread_id)
        assert found == {thread_id: [] for thread_id in ids}
        assert seen.reads_of_records() == []
        assert len(seen.checks()) <= 2  # the first reader's, and one for all who came meanwhile


async def test_a_node_never_answers_from_what_it_left_once_another_node_resumed_the_run(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    """Node a drives a conversation to its approval; node b approves it and the run ends
    there. Node a, asked next, answers with what b wrote, not with what it left."""
    store_a, store_b = nodes
    with trio.fail_after(30):
        async with (
            create_test_runtime(payer(), model=payer_model(), store=store_a) as a,
            create_test_runtime(payer(), model=payer_model(), store=store_b) as b,
        ):
            thread_id = await a.create_thread("s")
            await a.send(thread_id, "pay")
            await a.wait_idle(thread_id)
            assert len(await a.pending_actions(thread_id)) == 1  # a holds it as it left it

            [action] = await b.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
            await b.wait_idle(thread_id)

            assert await a.pending_actions(thread_id) == []
            await a.wait_idle(thread_id)
            state = await a.get_state(thread_id)
            assert [r.status for r in state.runs] == ["completed"]
            assert state.messages[-1].parts[-1].text == "done"  # type: ignore[union-attr]
            # and it resumes nothing twice: the one approval, the one payment
            [part] = [p for m in state.messages for p in m.tool_parts]
            assert part.output == "paid"
