"""A group commit written in one libpq pipeline (``_store.postgres_group``): the pipeline
itself on a connection, the fast way taken when nothing is refused, the careful way when
something is (nothing of the fast attempt left), groups larger than a pipeline's chunk, and
the leases a node's group takes, renews and gives up in it.

Each test gets a database of its own (``postgres_support``), with the real clock.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

import pytest
import trio

from pai_actors import (
    Message,
    PostgresStore,
    RunRecord,
    StoreConflict,
    TextPart,
    ThreadOwnedElsewhere,
    ThreadRecord,
)
from pai_actors._store import postgres, postgres_group
from pai_actors._store.postgres_connection import Connection, ServerError, parse_conninfo

from .postgres_support import connect

T0 = datetime(2025, 1, 1, tzinfo=UTC)
RunStatus: TypeAlias = Literal["running", "waiting"]


def thread(thread_id: str) -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, scope_key="a", created_at=T0)


def message(text: str) -> Message:
    return Message(id="m1", role="user", parts=(TextPart(text=text),))


def run(thread_id: str, status: RunStatus = "running") -> RunRecord:
    return RunRecord(thread_id=thread_id, run_id=f"r-{thread_id}", status=status, created_at=T0)


def status_name(result: Any) -> str:
    from psycopg import pq  # (installed: the database fixture needs it)

    return pq.ExecStatus(result.status).name


class Statements:
    """Counts what the writer's connection runs: statements one at a time, and pipelines."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.one_at_a_time: list[str] = []
        self.pipelines: list[int] = []
        execute, pipeline = Connection.execute, Connection.pipeline

        async def counted_execute(conn: Connection, sql: str, *params: Any) -> int:
            self.one_at_a_time.append(sql.split()[0])
            return await execute(conn, sql, *params)

        async def counted_pipeline(conn: Connection, statements: Any) -> Any:
            self.pipelines.append(len(statements))
            return await pipeline(conn, statements)

        monkeypatch.setattr(Connection, "execute", counted_execute)
        monkeypatch.setattr(Connection, "pipeline", counted_pipeline)


async def test_a_pipeline_runs_its_statements_in_order_and_stops_at_a_failure(
    database: str,
) -> None:
    with trio.fail_after(30):
        db = await Connection.open(parse_conninfo(database, 10)[1])
        try:
            await db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
            insert = "INSERT INTO t VALUES ($1::int8::int4)"
            results = await db.pipeline(
                [
                    ("BEGIN", ()),
                    (insert, (1,)),
                    (insert, (1,)),  # the key again: fails, and aborts the rest
                    (insert, (2,)),
                    ("SELECT 1 / 0", ()),  # (never prepared: the pipeline stopped before)
                ]
            )
            statuses = [status_name(result) for result in results]
            assert statuses == [
                "COMMAND_OK",
                "COMMAND_OK",
                "FATAL_ERROR",
                "PIPELINE_ABORTED",
                "PIPELINE_ABORTED",
            ]
            assert db.in_transaction  # (aborted: the caller rolls it back)
            await db.execute("ROLLBACK")
            assert await db.fetch("SELECT count(*) FROM t") == [(0,)]
            # The connection goes on; a statement whose prepare did not run is prepared now.
            with pytest.raises(ServerError, match="division by zero"):
                await db.fetch("SELECT 1 / 0")
            results = await db.pipeline([(insert, (3,)), ("SELECT k FROM t", ())])
            assert [status_name(result) for result in results] == ["COMMAND_OK", "TUPLES_OK"]
            assert await db.fetch("SELECT k FROM t") == [(3,)]
        finally:
            db.close()


async def test_a_cancelled_pipeline_returns_at_once_and_breaks_the_connection(
    database: str,
) -> None:
    with trio.fail_after(30):
        db = await Connection.open(parse_conninfo(database, 10)[1])
        try:
            with trio.move_on_after(0.2) as scope:
                await db.pipeline([("SELECT pg_sleep(20)", ())])
            assert scope.cancelled_caught
            assert db.broken
        finally:
            db.close()


async def test_a_group_with_nothing_refused_is_one_pipeline_and_a_commit(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with trio.fail_after(30), PostgresStore(database) as store:
        seen = Statements(monkeypatch)

        async def create(thread_id: str) -> None:
            async with store.transaction() as tx:
                tx.create_thread(thread(thread_id))
                tx.append_message(thread_id, message(thread_id))
                tx.put_run(run(thread_id))

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(create, f"t{n}")
        assert seen.pipelines == [1 + 5 * 3]  # BEGIN, then three writes per commit
        assert seen.one_at_a_time == ["COMMIT"]
    with PostgresStore(database, mirror=False) as store:  # what the database holds
        for n in range(5):
            assert [m.id for m in await store.list_messages(f"t{n}")] == ["m1"]
            assert [r.status for r in await store.list_runs(f"t{n}")] == ["running"]


async def test_a_refused_commit_sends_the_group_the_careful_way_with_nothing_left_over(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with trio.fail_after(30), PostgresStore(database) as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("taken"))
        seen = Statements(monkeypatch)
        outcomes: dict[str, str] = {}

        async def create(thread_id: str, text: str) -> None:
            try:
                async with store.transaction() as tx:
                    tx.create_thread(thread(thread_id))
                    tx.append_message(thread_id, message(text))
                outcomes[text] = "committed"
            except StoreConflict as exc:
                outcomes[text] = str(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create, "t1", "first")
            nursery.start_soon(create, "taken", "again")
            nursery.start_soon(create, "t2", "last")
        assert outcomes == {
            "first": "committed",
            "again": "thread 'taken': already exists; a thread is created once",
            "last": "committed",
        }
        assert len(seen.pipelines) == 1  # tried, refused, rolled back
        assert seen.one_at_a_time[:2] == ["ROLLBACK", "BEGIN"]  # then the careful way
        assert seen.one_at_a_time.count("SAVEPOINT") == 3
    with PostgresStore(database, mirror=False) as store:
        assert [m.parts for m in await store.list_messages("taken")] == []
        for thread_id, text in (("t1", "first"), ("t2", "last")):
            [stored] = await store.list_messages(thread_id)
            assert stored.parts == (TextPart(text=text),)  # written once, not twice


async def test_a_group_larger_than_a_pipeline_chunk_is_written_whole(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More statements than a chunk, each with a large parameter: sent while the results of
    the ones before are read, the group's chunks in one transaction."""
    monkeypatch.setattr(postgres_group, "_CHUNK", 100)
    n = 400
    monkeypatch.setattr(postgres, "GROUP_LIMIT", n)  # all in one group
    with trio.fail_after(60), PostgresStore(database) as store:
        seen = Statements(monkeypatch)

        async def create(k: int) -> None:
            async with store.transaction() as tx:
                tx.create_thread(thread(f"t{k}"))
                tx.append_message(f"t{k}", message(f"{k} " + "x" * 20_000))

        async with trio.open_nursery() as nursery:
            for k in range(n):
                nursery.start_soon(create, k)
        assert len(seen.pipelines) == 9  # 1 + 800 statements, by 100
        assert seen.one_at_a_time == ["COMMIT"]
    with connect(database) as db:
        assert db.execute("SELECT count(*) FROM messages").fetchone() == (n,)


def owners(database: str) -> dict[str, tuple[str, int, bool]]:
    """Each lease row: its node, its epoch, and whether it is live."""
    with connect(database) as db:
        rows = db.execute(
            "SELECT thread_id, node_id, epoch, expires_at > now() FROM pai_thread_owners"
        ).fetchall()
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


async def test_a_nodes_group_takes_renews_and_gives_up_leases_in_its_pipeline(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with trio.fail_after(30), PostgresStore(database, node_id="a") as store:
        async with store.transaction() as tx:  # held: a running run
            tx.create_thread(thread("held"))
            tx.put_run(run("held"))
        before = owners(database)["held"]
        seen = Statements(monkeypatch)

        async def write(thread_id: str, status: RunStatus | None) -> None:
            async with store.transaction() as tx:
                if thread_id == "held":
                    tx.append_message("held", message("more"))
                else:
                    tx.create_thread(thread(thread_id))
                    if status is not None:
                        tx.put_run(run(thread_id, status))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write, "held", None)  # renewed
            nursery.start_soon(write, "running", "running")  # taken
            nursery.start_soon(write, "idle", None)  # taken, then given up: no run
            nursery.start_soon(write, "waiting", "waiting")  # taken, then given up
        assert seen.one_at_a_time == ["COMMIT"]
        rows = owners(database)
        assert rows["held"] == ("a", before[1], True)
        assert rows["running"][::2] == ("a", True)
        assert not rows["idle"][2]
        assert not rows["waiting"][2]
        assert store.holds("held")
        assert store.holds("running")
        assert not store.holds("idle")
        assert not store.holds("waiting")


async def test_a_commit_on_another_nodes_thread_is_refused_alone_in_a_pipelined_group(
    database: str,
) -> None:
    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a") as a,
        PostgresStore(database, node_id="b") as b,
    ):
        async with b.transaction() as tx:
            tx.create_thread(thread("b's"))
            tx.put_run(run("b's"))
        outcomes: dict[str, str] = {}

        async def write(thread_id: str) -> None:
            try:
                async with a.transaction() as tx:
                    if thread_id == "b's":
                        tx.append_message(thread_id, message("from a"))
                    else:
                        tx.create_thread(thread(thread_id))
                        tx.put_run(run(thread_id))
                outcomes[thread_id] = "committed"
            except ThreadOwnedElsewhere:
                outcomes[thread_id] = "owned elsewhere"

        async with trio.open_nursery() as nursery:
            for thread_id in ("t1", "b's", "t2"):
                nursery.start_soon(write, thread_id)
        assert outcomes == {"t1": "committed", "b's": "owned elsewhere", "t2": "committed"}
        rows = owners(database)
        assert rows["b's"][:2] == ("b", 1)  # untouched by the attempt
        assert rows["t1"][::2] == ("a", True)
        assert rows["t2"][::2] == ("a", True)
        assert await b.list_messages("b's") == []


def text_message(message_id: str) -> Message:
    return Message(id=message_id, role="user", parts=(TextPart(text=message_id),))


async def test_a_thread_read_into_the_mirror_while_a_group_writes_it_is_not_mirrored(
    database: str,
) -> None:
    """A thread is read into the mirror while groups are written (not in line with them).
    Here the read is answered before a group appending a message goes to the server and
    returns after that group committed: what it read lacks the message, so it is not
    mirrored (the next read goes to the server), and no read ever misses the message."""
    with trio.fail_after(30):
        with PostgresStore(database) as writer:
            async with writer.transaction() as tx:
                tx.create_thread(thread("t1"))
                tx.append_message("t1", text_message("m1"))
        with PostgresStore(database) as store:  # (a new store: nothing mirrored)
            fetch_many = store._pool.fetch_many
            read, go_on = trio.Event(), trio.Event()

            async def held(statements: Any) -> Any:
                rows = await fetch_many(statements)
                read.set()
                await go_on.wait()  # (answered: the group below goes in meanwhile)
                return rows

            store._pool.fetch_many = held  # type: ignore[method-assign]
            seen: list[list[str]] = []

            async def list_ids() -> None:
                seen.append([m.id for m in await store.list_messages("t1")])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(list_ids)
                await read.wait()
                async with store.transaction() as tx:
                    tx.append_message("t1", text_message("m2"))
                go_on.set()
            store._pool.fetch_many = fetch_many  # type: ignore[method-assign]
            # the read in flight answered from the server, as of its own read
            assert seen == [["m1", "m2"]]
            assert [m.id for m in await store.list_messages("t1")] == ["m1", "m2"]
            async with store.transaction() as tx:
                tx.append_message("t1", text_message("m3"))
            assert [m.id for m in await store.list_messages("t1")] == ["m1", "m2", "m3"]
