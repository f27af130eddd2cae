"""Several nodes on one PostgreSQL database (``_store.postgres_owners``): a thread's owner,
fencing of a node that lost its lease, giving up idle threads, and a stopped node's run taken
over by another.

A lease's expiry is time; the tests never wait for it: they expire a lease in the database
(``expires_at`` in the past), which is what a node paused or cut off past its lease leaves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from pai_actors import (
    PostgresStore,
    StoreConflict,
)
from pai_actors.testing import create_test_runtime

from .node_worker import agent, model
from .postgres_support import append, connect, payer, payer_model, thread

ROOT = Path(__file__).resolve().parents[2]


def expire(url: str, thread_id: str) -> None:
    """The owner of ``thread_id`` was paused past its lease."""
    with connect(url) as db:
        db.execute(
            "UPDATE pai_thread_owners SET expires_at = now() - interval '1 second'"
            " WHERE thread_id = %s",
            (thread_id,),
        )


def owner(url: str, thread_id: str) -> tuple[str, int] | None:
    with connect(url) as db:
        row = db.execute(
            "SELECT node_id, epoch FROM pai_thread_owners WHERE thread_id = %s"
            " AND expires_at > now()",
            (thread_id,),
        ).fetchone()
    return None if row is None else (row[0], row[1])


async def test_a_node_owns_the_threads_it_writes_and_the_others_are_refused(
    database: str,
) -> None:
    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a") as a,
        PostgresStore(database, node_id="b") as b,
    ):
        async with a.transaction() as tx:
            tx.create_thread(thread("t1"))
        await append(a, "t1", "m1")
        with pytest.raises(StoreConflict, match="owned by node 'a'"):
            await append(b, "t1", "m2")
        assert [m.id for m in await b.list_messages("t1")] == ["m1"]  # nothing of it written
        # (epoch 1 was given up as the thread was created with no run: the write took it at 2)
        assert owner(database, "t1") == ("a", 2)


async def test_a_node_that_lost_its_lease_writes_nothing_and_forgets_the_thread(
    database: str,
) -> None:
    lost: list[str] = []
    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a") as a,
        PostgresStore(database, node_id="b") as b,
    ):
        a.on_fenced(lost.append)
        async with a.transaction() as tx:
            tx.create_thread(thread("t1"))
        await append(a, "t1", "m1")
        assert [m.id for m in await a.list_messages("t1")] == ["m1"]  # (mirrored)
        expire(database, "t1")  # a was paused past its lease ...
        await append(b, "t1", "m2")  # ... and b took the thread over
        assert owner(database, "t1") == ("b", 3)
        with pytest.raises(StoreConflict, match="node 'a' lost its lease"):
            await append(a, "t1", "m3")  # a wakes up: fenced
        assert lost == ["t1"]
        # a caches the thread no more: it reads what b wrote
        assert [m.id for m in await a.list_messages("t1")] == ["m1", "m2"]
        # whatever a was still doing with it stays refused, even once the thread is free,
        with pytest.raises(StoreConflict, match="node 'a' lost it to another node"):
            await append(a, "t1", "m3")
        # until a takes it again on purpose (as loading it afresh does): only once b's
        # lease expired, at a new epoch
        assert not await a.take("t1")
        expire(database, "t1")
        assert await a.take("t1")
        await append(a, "t1", "m3")
        assert owner(database, "t1") == ("a", 4)
        with pytest.raises(StoreConflict, match="node 'b' lost its lease"):
            await append(b, "t1", "m4")


async def test_a_node_cut_off_from_the_database_is_fenced_after_a_takeover(
    database: str,
) -> None:
    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a") as a,
        PostgresStore(database, node_id="b") as b,
    ):
        async with a.transaction() as tx:
            tx.create_thread(thread("t1"))
        await append(a, "t1", "m0")  # a holds it
        dbname = database.rsplit("dbname=", 1)[-1].split()[0].strip("'")
        with connect(database) as admin:  # every connection of a's (and b's) is cut
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            )
        expire(database, "t1")
        await append(b, "t1", "m1")  # b reconnects and takes the thread over
        with pytest.raises(StoreConflict, match="node 'a' lost its lease"):
            await append(a, "t1", "m2")  # a reconnects too: its write is refused
        assert [m.id for m in await b.list_messages("t1")] == ["m0", "m1"]


async def test_a_commit_that_stops_a_run_gives_its_thread_up_at_once(database: str) -> None:
    with trio.fail_after(30), PostgresStore(database, node_id="a") as a:
        agent_a = create_test_runtime(agent(block=False), model=model(), store=a)
        async with agent_a as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "work")
            await rt.wait_idle(thread_id)
            assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["completed"]
            assert owner(database, thread_id) is None  # the completing commit gave it up


async def test_a_thread_without_a_running_run_is_given_up_for_any_node(database: str) -> None:
    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a", lease=3600) as a,
        PostgresStore(database, node_id="b") as b,
    ):
        async with a.transaction() as tx:
            tx.create_thread(thread("t1"))
        assert owner(database, "t1") is None  # created with no run: nobody's to drive
        await append(a, "t1", "m0")  # written without a run: held until the next round
        assert owner(database, "t1") == ("a", 2)  # (a given-up lease keeps its epoch)
        async with trio.open_nursery() as nursery:
            await nursery.start(a.keep_leases)  # its first round gives up the idle threads
            assert owner(database, "t1") is None
            nursery.cancel_scope.cancel()
        await append(b, "t1", "m1")
        assert owner(database, "t1") == ("b", 3)


def test_a_run_of_a_killed_node_is_taken_over_and_recovered_by_another(database: str) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.pai_actors.node_worker", "--db", database, "--node", "a"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert worker.stdout is not None
    try:
        thread_id = worker.stdout.readline().strip()  # its tool runs (its start is committed)
        assert thread_id, "the node printed no thread: see its stderr"
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.communicate(timeout=20)
    expire(database, thread_id)  # its lease ran out

    async def take_over() -> Any:
        with trio.fail_after(30), PostgresStore(database, node_id="b") as b:
            async with create_test_runtime(agent(block=False), model=model(), store=b) as rt:
                assert await b.orphaned_threads() == [thread_id]
                await rt.get_state(thread_id)  # loading it recovers it, as a restart does
                await rt.wait_idle(thread_id)
                state = await rt.get_state(thread_id)
                assert await b.orphaned_threads() == []
                return state

    state = trio.run(take_over)
    assert [r.status for r in state.runs] == ["completed"]
    [call] = state.messages[-1].tool_parts
    assert call.state == "output-error"  # interrupted: recorded, not run twice
    assert "interrupted" in (call.error_text or "")
    assert state.messages[-1].parts[-1].text == "done"  # type: ignore[union-attr]
    assert owner(database, thread_id) is None  # b took it over, then gave it up: run over


async def test_a_node_answers_a_thread_it_gave_up_and_owns_it_while_it_runs(
    database: str,
) -> None:
    with trio.fail_after(30), PostgresStore(database, node_id="a") as a:
        async with create_test_runtime(payer(), model=payer_model(), store=a) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "pay")
            await rt.wait_idle(thread_id)
            assert owner(database, thread_id) is None  # waiting: given up
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    assert state.messages[-1].parts[-1].text == "done"  # type: ignore[union-attr]


async def test_a_watcher_on_one_node_sees_a_run_driven_on_another(database: str) -> None:
    """Node b drives the conversation; a watcher on node a is shown each change b commits,
    as updates, in order, from the state its snapshot showed."""
    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a") as store_a,
        PostgresStore(database, node_id="b") as store_b,
    ):
        async with (
            create_test_runtime(agent(block=False), model=model(), store=store_a) as a,
            create_test_runtime(agent(block=False), model=model(), store=store_b) as b,
        ):
            thread_id = await b.create_thread("s")
            seen: list[Any] = []
            async with a.watch(thread_id, snapshot=True) as updates:
                assert updates.snapshot is not None
                assert updates.snapshot.messages == ()
                await b.send(thread_id, "work")
                async for update in updates:
                    seen.append(update)
                    if update.type == "run-status" and update.run.status == "completed":
                        break
            final = await b.get_state(thread_id)
    kinds = [u.type for u in seen]
    assert kinds[0] == "message-appended"  # the user's message
    assert kinds[-1] == "run-status"
    # applied to the snapshot, the updates give the thread as node b stored it
    messages: dict[str, Any] = {}
    for update in seen:
        if update.type in ("message-appended", "message-replaced"):
            messages[update.message.id] = update.message
    assert list(messages.values()) == list(final.messages)
    assert final.messages[-1].parts[-1].text == "done"  # type: ignore[union-attr]
