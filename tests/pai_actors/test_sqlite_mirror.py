"""SqliteStore's mirror of the threads it touched: reads of its own writes run no query, and
they never disagree with the file (another connection's writes, refused commits, eviction)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio

from pai_actors import (
    Message,
    RunRecord,
    SqliteStore,
    StoreConflict,
    TextPart,
    ThreadRecord,
    ToolPart,
)
from pai_actors._store.sqlite_mirror import FRESH_THREADS, MIRRORED_THREADS

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def thread(thread_id: str) -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, scope_key="a", created_at=T0)


def user(message_id: str, text: str = "x") -> Message:
    return Message(id=message_id, role="user", parts=(TextPart(text=text),))


def run(run_id: str, thread_id: str, status: Any = "running") -> RunRecord:
    return RunRecord(thread_id=thread_id, run_id=run_id, status=status, created_at=T0)


def traced(store: SqliteStore) -> list[str]:
    """The statements the store runs on its connection from now on, as they run."""
    statements: list[str] = []
    db = store._db
    assert db is not None
    db.set_trace_callback(statements.append)
    return statements


async def everything(store: SqliteStore, thread_id: str) -> tuple[Any, ...]:
    """What the store answers about a thread, every per-thread read."""
    return (
        await store.list_messages(thread_id),
        await store.list_runs(thread_id),
        await store.get_active_run(thread_id),
        await store.list_calls(thread_id),
        await store.list_pending_actions(thread_id),
    )


async def test_a_mirrored_thread_is_read_without_a_query(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "x.db") as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
            tx.append_message("t1", user("m1"))
            tx.put_run(run("r1", "t1"))
        statements = traced(store)
        assert [m.id for m in await store.list_messages("t1")] == ["m1"]
        assert [r.run_id for r in await store.list_runs("t1")] == ["r1"]
        assert (await store.get_run("r1")) == (await store.get_active_run("t1"))
        assert await store.list_calls("t1") == []
        store._db.set_trace_callback(None)  # type: ignore[union-attr]
        assert set(statements) == {"PRAGMA data_version"}


async def test_writes_of_another_connection_are_seen(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with SqliteStore(path) as mine, SqliteStore(path) as other:
        async with mine.transaction() as tx:
            tx.create_thread(thread("t1"))
            tx.append_message("t1", user("m1"))
            tx.put_run(run("r1", "t1"))
        assert [m.id for m in await mine.list_messages("t1")] == ["m1"]  # mirrored now
        [stored] = await other.list_runs("t1")
        async with other.transaction() as tx:
            tx.append_message("t1", user("m2"))
            tx.put_run(stored.model_copy(update={"status": "completed"}))
        assert [m.id for m in await mine.list_messages("t1")] == ["m1", "m2"]
        assert (await mine.get_run("r1")) == (await other.get_run("r1"))
        assert (await mine.get_run("r1")).status == "completed"  # type: ignore[union-attr]
        # A write of mine after theirs is checked against the file, not a stale mirror.
        with pytest.raises(StoreConflict, match="run 'r1'"):
            async with mine.transaction() as tx:
                tx.put_run(stored.model_copy(update={"status": "failed"}))
        async with mine.transaction() as tx:
            tx.append_message("t1", user("m3"))
        assert await everything(mine, "t1") == await everything(other, "t1")


async def test_a_commit_refused_in_a_group_leaves_the_mirror_as_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with SqliteStore(path) as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
            tx.append_message("t1", user("m1"))
        await store.list_messages("t1")
        outcomes: list[str] = []

        async def append(message_id: str) -> None:
            try:
                async with store.transaction() as tx:
                    tx.append_message("t1", user(message_id))
                    tx.put_run(run("r1", "t1"))
                outcomes.append("committed")
            except StoreConflict:
                outcomes.append("conflict")

        async with trio.open_nursery() as nursery:  # one group: the second run r1 is refused
            nursery.start_soon(append, "m2")
            nursery.start_soon(append, "m3")
        assert sorted(outcomes) == ["committed", "conflict"]
        with SqliteStore(path) as fresh:
            assert await everything(store, "t1") == await everything(fresh, "t1")
        assert len(await store.list_messages("t1")) == 2


async def test_tool_parts_put_in_place_read_as_the_file_holds_them(tmp_path: Path) -> None:
    def part(n: int) -> ToolPart:
        return ToolPart(
            type="tool-t",
            tool_name="t",
            tool_call_id=f"c{n}",
            state="input-available",
            input={"n": n},
        )

    path = tmp_path / "x.db"
    with SqliteStore(path) as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
            tx.append_message("t1", Message(id="m1", role="assistant", parts=(part(0), part(1))))
        async with store.transaction() as tx:
            tx.put_tool_part("t1", "m1", part(0).model_copy(update={"input": {"n": "again"}}))
            tx.put_tool_part("t1", "m1", part(2))
        async with store.transaction() as tx:
            tx.replace_message("t1", user("m1", "replaced"))
            tx.put_tool_part("t1", "m1", part(3))
        with SqliteStore(path) as fresh:
            assert await store.list_messages("t1") == await fresh.list_messages("t1")
        [message] = await store.list_messages("t1")
        assert [type(p).__name__ for p in message.parts] == ["TextPart", "ToolPart"]


async def test_the_mirror_keeps_running_threads_and_a_bounded_number_of_others(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    count = MIRRORED_THREADS + 10
    with SqliteStore(path) as store:
        async with store.transaction() as tx:  # a thread being worked on stays
            tx.create_thread(thread("busy"))
            tx.put_run(run("r-busy", "busy"))
        for i in range(count):
            async with store.transaction() as tx:
                tx.create_thread(thread(f"t{i}"))
                tx.append_message(f"t{i}", user(f"m{i}"))
                tx.put_run(run(f"r{i}", f"t{i}", "completed"))
        assert len(store._mirror.threads) == MIRRORED_THREADS + 1
        assert "busy" in store._mirror.threads
        assert "t0" not in store._mirror.threads  # the least recently used went first
        with SqliteStore(path) as fresh:
            for i in (0, 5, count - 1):
                assert await everything(store, f"t{i}") == await everything(fresh, f"t{i}")
            assert (await store.get_run("r1")) == (await fresh.get_run("r1"))
        assert "t0" in store._mirror.threads  # read back in whole
        assert len(store._mirror.threads) == MIRRORED_THREADS + 1
        [busy] = await store.list_runs("busy")
        async with store.transaction() as tx:  # no longer running: evicted like the others
            tx.put_run(busy.model_copy(update={"status": "waiting"}))
        for i in range(MIRRORED_THREADS):
            await store.list_messages(f"t{i}")
        assert "busy" not in store._mirror.threads
        assert len(store._mirror.threads) == MIRRORED_THREADS


async def test_after_a_burst_of_running_threads_the_mirror_keeps_only_its_bound(
    tmp_path: Path,
) -> None:
    # Every thread of a burst runs at once (none can be evicted); as each run stops, its
    # thread becomes the most recently used idle one and the oldest idle beyond the bound
    # goes at once, not at the next new thread.
    path = tmp_path / "x.db"
    count = MIRRORED_THREADS * 2
    with SqliteStore(path) as store:
        for i in range(count):
            async with store.transaction() as tx:
                tx.create_thread(thread(f"t{i}"))
                tx.put_run(run(f"r{i}", f"t{i}"))
        assert len(store._mirror.threads) == count
        for i in range(count):
            [running] = await store.list_runs(f"t{i}")
            async with store.transaction() as tx:
                tx.put_run(running.model_copy(update={"status": "waiting"}))
        assert len(store._mirror.threads) == MIRRORED_THREADS
        assert "t0" not in store._mirror.threads  # the first to stop went first
        assert f"t{count - 1}" in store._mirror.threads
        assert (await store.get_run("r0")) is not None  # read from the file
        with SqliteStore(path) as fresh:
            for i in (0, count - 1):
                assert await everything(store, f"t{i}") == await everything(fresh, f"t{i}")


async def test_new_threads_wait_for_their_first_message_apart_from_the_idle_ones(
    tmp_path: Path,
) -> None:
    # A burst of new conversations: every thread is created before any gets its message.
    # Counted as idle ones they would push each other out (each read back whole when its
    # message comes); as new ones they all stay, up to their own bound, the oldest out.
    path = tmp_path / "x.db"
    count = MIRRORED_THREADS * 2
    with SqliteStore(path) as store:
        async with store.transaction() as tx:
            for i in range(count):
                tx.create_thread(thread(f"t{i}"))
        assert len(store._mirror.threads) == count
        statements = traced(store)
        for i in range(count):  # each gets its message: idle ones now, within their bound
            assert await store.list_messages(f"t{i}") == []
            async with store.transaction() as tx:
                tx.append_message(f"t{i}", user(f"m{i}"))
        assert not [s for s in statements if s.startswith("SELECT")]  # none was read back
        assert len(store._mirror.threads) == MIRRORED_THREADS
        assert f"t{count - 1}" in store._mirror.threads
        with SqliteStore(path) as fresh:
            for i in (0, count - 1):
                assert await everything(store, f"t{i}") == await everything(fresh, f"t{i}")
        async with store.transaction() as tx:
            for i in range(FRESH_THREADS + 1):
                tx.create_thread(thread(f"n{i}"))
        assert "n0" not in store._mirror.threads  # the oldest new one went
        assert f"n{FRESH_THREADS}" in store._mirror.threads
        assert await store.list_messages("n0") == []  # read from the file


async def test_a_threads_first_read_takes_it_whole_into_the_mirror(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with SqliteStore(path) as writer:
        async with writer.transaction() as tx:
            tx.create_thread(thread("t1"))
            tx.append_message("t1", user("m1"))
            tx.put_run(run("r1", "t1"))
    with SqliteStore(path) as store:  # (a new store: nothing mirrored)
        statements = traced(store)
        record = await store.get_thread("t1")
        assert record is not None
        assert record.thread_id == "t1"
        read = len(statements)
        assert [m.id for m in (await everything(store, "t1"))[0]] == ["m1"]
        assert (await store.get_thread("t1")) == record
        assert [s for s in statements[read:] if s.startswith("SELECT")] == []
        assert await store.get_thread("nobody") is None


async def test_a_burst_of_readers_reads_each_thread_once(tmp_path: Path) -> None:
    """Readers of more threads than the mirror keeps idle, all at once, each reading its
    thread's record and then the rest (as the runtime loads a thread): each thread is read
    from the file once; none is pushed out between its record and the rest."""
    path = tmp_path / "x.db"
    count = MIRRORED_THREADS + 44
    with SqliteStore(path) as writer:
        async with writer.transaction() as tx:
            for i in range(count):
                tx.create_thread(thread(f"t{i}"))
                tx.append_message(f"t{i}", user(f"m{i}"))
    with SqliteStore(path) as store:
        statements = traced(store)

        async def load(thread_id: str) -> None:
            assert await store.get_thread(thread_id) is not None
            assert len(await store.list_messages(thread_id)) == 1

        async with trio.open_nursery() as nursery:
            for i in range(count):
                nursery.start_soon(load, f"t{i}")
        reads = [s for s in statements if s.startswith("SELECT json FROM threads")]
        assert len(reads) == count
