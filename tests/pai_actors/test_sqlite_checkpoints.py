"""SqliteStore's WAL checkpoints: run by a thread of the store's own, never by its commits,
the log kept bounded when that thread cannot keep up, and the thread gone at close.

The thread is waited for with its ``wait_handled`` condition, never with a sleep; the timeouts
there are a bound on a hang, not a measurement.
"""

from __future__ import annotations

import gc
import shutil
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pai_actors import SqliteStore, StoreError, ThreadRecord
from pai_actors._store import sqlite as sqlite_store_module
from pai_actors._store.sqlite_checkpoints import _Checkpointer

T0 = datetime(2025, 1, 1, tzinfo=UTC)
HANG = 30.0  # seconds: only a checkpointer that never runs waits this long


def thread(thread_id: str) -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, scope_key="a", created_at=T0)


async def create_threads(store: SqliteStore, first: int, count: int) -> None:
    """``count`` commits of one row each."""
    for n in range(first, first + count):
        async with store.transaction() as tx:
            tx.create_thread(thread(f"t{n}"))


def checkpointer(store: SqliteStore) -> _Checkpointer:
    found = store._checkpointer
    assert found is not None
    return found


def connection(store: SqliteStore) -> sqlite3.Connection:
    db = store._db
    assert db is not None
    return db


def threads_in_database_file(path: Path, tmp_path: Path) -> int:
    """Threads the database file holds by itself, without its log: what checkpoints
    copied there (0 before the first, which copies the schema too)."""
    alone = tmp_path / "alone.db"
    shutil.copyfile(path, alone)
    db = sqlite3.connect(alone)
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'threads'").fetchone():
            return 0
        return int(db.execute("SELECT count(*) FROM threads").fetchone()[0])
    finally:
        db.close()
        alone.unlink()


def frames_in_log(path: Path) -> int:
    """The WAL's frames, read by a checkpoint of another connection (which copies them)."""
    db = sqlite3.connect(path)
    try:
        busy, frames, _ = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0
        return int(frames)
    finally:
        db.close()


def checkpointer_threads() -> list[threading.Thread]:
    return [
        t for t in threading.enumerate() if t.name.startswith("pai_actors sqlite checkpointer ")
    ]


@pytest.fixture
def every_ten_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpointer woken every 10 rows, the store's own copy past 30."""
    monkeypatch.setattr(sqlite_store_module, "_CHECKPOINT_ROWS", 10)
    monkeypatch.setattr(sqlite_store_module, "_WAL_LIMIT", 30)


@pytest.mark.parametrize(("durability", "synchronous"), [("normal", 1), ("full", 2)])
def test_commits_never_checkpoint_the_thread_does(
    tmp_path: Path, durability: Any, synchronous: int
) -> None:
    with SqliteStore(tmp_path / "x.db", durability=durability) as store:
        assert connection(store).execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
        ours = checkpointer(store)
        assert ours._thread.is_alive()
        assert ours._thread.name == f"pai_actors sqlite checkpointer {store.path}"
        # Idle until woken: its connection syncs as the store's does, in its checkpoints.
        assert ours._db.execute("PRAGMA synchronous").fetchone() == (synchronous,)
    assert not ours._thread.is_alive()


async def test_the_thread_copies_the_log_and_the_next_commit_restarts_it(
    tmp_path: Path, every_ten_rows: None
) -> None:
    path = tmp_path / "x.db"
    with SqliteStore(path) as store:
        await create_threads(store, 0, 10)  # the tenth row wakes the thread
        ours = checkpointer(store)
        assert ours.wait_handled(HANG)
        assert ours.error is None
        # Nothing else was written: its second pass found nothing new, so the whole log
        # was copied, and the store has nothing to copy itself.
        assert ours.copied == connection(store).total_changes == 10
        assert not ours.tail_wanted
        assert threads_in_database_file(path, tmp_path) == 10
        grown = path.with_name("x.db-wal").stat().st_size
        await create_threads(store, 10, 1)  # restarts the log from its first frame
        assert path.with_name("x.db-wal").stat().st_size == grown
        assert 0 < frames_in_log(path) <= 4  # one commit's pages, not eleven commits'


async def test_the_store_copies_the_tail_the_thread_asks_for(
    tmp_path: Path, every_ten_rows: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def tail_left(self: _Checkpointer, wanted: int) -> None:
        self.tail_wanted = True  # as when commits kept landing during its passes

    monkeypatch.setattr(_Checkpointer, "_copy", tail_left)
    path = tmp_path / "x.db"
    with SqliteStore(path) as store:
        await create_threads(store, 0, 10)
        ours = checkpointer(store)
        assert ours.wait_handled(HANG)
        assert ours.tail_wanted
        assert threads_in_database_file(path, tmp_path) == 0
        await create_threads(store, 10, 1)  # then copies the log, this commit's too
        assert not ours.tail_wanted
        assert store._copied_here == 11
        assert threads_in_database_file(path, tmp_path) == 11


async def test_the_store_copies_the_log_itself_when_the_thread_cannot(
    tmp_path: Path, every_ten_rows: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Checkpointer, "_copy", lambda self, wanted: None)
    path = tmp_path / "x.db"
    with SqliteStore(path) as store:
        await create_threads(store, 0, 29)
        assert threads_in_database_file(path, tmp_path) == 0
        await create_threads(store, 29, 1)  # 30 rows since the log last restarted
        assert store._copied_here == 30
        assert threads_in_database_file(path, tmp_path) == 30
        await create_threads(store, 30, 29)  # the log restarted: 29 rows are not enough
        assert threads_in_database_file(path, tmp_path) == 30


async def test_a_reader_holding_the_log_never_delays_a_commit(
    tmp_path: Path, every_ten_rows: None
) -> None:
    path = tmp_path / "x.db"
    with SqliteStore(path, busy_timeout=0) as store:  # a commit that waited would fail
        await create_threads(store, 0, 1)
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            assert reader.execute("SELECT count(*) FROM threads").fetchone() == (1,)
            # Checkpoints past the reader's snapshot cannot copy: the thread's and the
            # store's own (past 30 rows) return without waiting, and the log grows.
            await create_threads(store, 1, 60)
            assert checkpointer(store).wait_handled(HANG)
            assert reader.execute("SELECT count(*) FROM threads").fetchone() == (1,)
        finally:
            reader.close()
        await create_threads(store, 61, 10)  # the next wake copies it all
        ours = checkpointer(store)
        assert ours.wait_handled(HANG)
        assert ours.error is None
        assert threads_in_database_file(path, tmp_path) == 71


async def test_close_joins_the_thread_and_the_file_reopens_with_everything(
    tmp_path: Path, every_ten_rows: None
) -> None:
    path = tmp_path / "x.db"
    store = SqliteStore(path)
    await create_threads(store, 0, 25)
    ours = checkpointer(store)
    store.close()
    store.close()  # harmless
    assert not ours._thread.is_alive()
    assert not path.with_name("x.db-wal").exists()  # the last connection copied the log
    with SqliteStore(path) as reopened:
        assert len(await reopened.list_threads("a")) == 25
        assert connection(reopened).execute("PRAGMA integrity_check").fetchone() == ("ok",)


async def test_two_stores_on_one_file_checkpoint_it_in_turn(
    tmp_path: Path, every_ten_rows: None
) -> None:
    path = tmp_path / "x.db"
    with SqliteStore(path) as first, SqliteStore(path) as second:
        for n in range(0, 40, 2):
            await create_threads(first, n, 1)
            await create_threads(second, n + 1, 1)
        for store in (first, second):
            assert checkpointer(store).wait_handled(HANG)
            assert checkpointer(store).error is None
    assert checkpointer_threads() == []
    with SqliteStore(path) as reopened:
        assert len(await reopened.list_threads("a")) == 40


def test_an_unclosed_store_stops_its_thread_when_collected(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "x.db")
    worker = checkpointer(store)._thread
    del store
    gc.collect()
    assert not worker.is_alive()


async def test_an_in_memory_store_has_no_checkpointer(tmp_path: Path) -> None:
    before = checkpointer_threads()
    with SqliteStore(":memory:") as store:
        assert store._checkpointer is None
        assert checkpointer_threads() == before
        await create_threads(store, 0, 3)
        assert len(await store.list_threads("a")) == 3
    with pytest.raises(StoreError, match="is closed"):
        await store.get_thread("t0")
