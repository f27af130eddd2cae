"""PostgresStore: the conformance suite on a database, schema versioning and migration,
conflicts in MemoryStore's words, cancellation of reads and commits, group commit, and a
runtime that suspends, closes, reopens the database and resumes.

Every test that needs PostgreSQL gets a database of its own (``postgres_support``); they run
with the real clock under ``trio.fail_after``: a wait for the server looks idle to trio, so an
autojump clock would jump.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
from pydantic import BaseModel

from pai_actors import (
    MemoryStore,
    Message,
    PostgresStore,
    ResumeEntry,
    RunRecord,
    SqliteStore,
    Store,
    StoreConflict,
    StoreError,
    SuspendPoint,
    TextPart,
    ThreadRecord,
    ToolContext,
    ToolPart,
    Transaction,
    UploadedFile,
    define_agent,
    define_tool,
)
from pai_actors._store import postgres, postgres_schema
from pai_actors.client import open_client
from pai_actors.testing import ScriptedModel, check_store, create_test_runtime, text, tool_call

from .postgres_support import connect, postgres_stores, require_psycopg

T0 = datetime(2025, 1, 1, tzinfo=UTC)
FIXTURE_V2 = Path(__file__).with_name("fixtures") / "store_v2.sqlite"


@pytest.fixture
def psycopg_installed() -> None:
    """For the tests that need psycopg but no server."""
    require_psycopg()


def thread(thread_id: str) -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, scope_key="a", created_at=T0)


def schema_version(url: str) -> int:
    with connect(url) as db:
        return int(db.execute("SELECT version FROM pai_schema").fetchone()[0])


# The conformance suite.


@pytest.mark.parametrize("mirror", [True, False])
async def test_postgres_store_conforms(database: str, mirror: bool) -> None:
    with trio.fail_after(60):
        await check_store(postgres_stores(database, mirror=mirror), reopens=True)


def test_postgres_store_is_a_store_and_never_shows_a_password(database: str) -> None:
    secret = database.replace("user=postgres", "user=postgres password=hunter2")
    assert "hunter2" in secret  # trust authentication lets it in whatever the password
    with PostgresStore(secret) as opened:
        store: Store = opened  # mypy checks the protocol here
        assert isinstance(store.transaction(), Transaction)
        assert "hunter2" not in repr(opened)
        assert repr(opened) == f"PostgresStore({opened.name!r})"
        assert opened.name.startswith("postgresql://postgres@127.0.0.1:5432/pai_test_")


def test_sizes_and_timeouts_are_checked_at_construction(psycopg_installed: None) -> None:
    url = "postgresql://postgres@127.0.0.1:1/nowhere"
    with pytest.raises(ValueError, match="use 0 <= min_size <= max_size"):
        PostgresStore(url, min_size=3, max_size=2)
    with pytest.raises(ValueError, match="use 0 <= min_size <= max_size and max_size >= 1"):
        PostgresStore(url, min_size=0, max_size=0)
    with pytest.raises(ValueError, match="seconds > 0"):
        PostgresStore(url, connect_timeout=0)
    with pytest.raises(ValueError, match="write it as 'postgresql://") as info:
        PostgresStore("host=x password=hunter2 port")
    assert "hunter2" not in str(info.value)


def test_an_unreachable_server_is_a_store_error_that_says_what_to_check(
    psycopg_installed: None,
) -> None:
    with pytest.raises(StoreError, match=r"cannot connect to 'postgresql://u@127\.0\.0\.1:1/x'"):
        PostgresStore("postgresql://u:hunter2@127.0.0.1:1/x", connect_timeout=2)


def test_pai_actors_imports_without_psycopg_and_the_store_says_what_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None\n"  # import psycopg now raises ImportError
        "import pai_actors\n"
        "try:\n"
        "    pai_actors.PostgresStore('postgresql://localhost/x')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'pai_actors[postgres]'" in done.stdout


async def test_a_closed_store_says_so(database: str) -> None:
    store = PostgresStore(database)
    store.close()
    store.close()  # harmless
    with pytest.raises(StoreError, match="is closed; open the database again"):
        await store.get_thread("t1")
    with pytest.raises(StoreError, match="is closed"):
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))


# Schema versions.


def test_a_new_database_gets_the_current_schema_version(database: str) -> None:
    PostgresStore(database).close()
    assert schema_version(database) == postgres_schema.SCHEMA_VERSION == 3
    PostgresStore(database).close()  # opened again: nothing to do
    assert schema_version(database) == 3


def test_a_newer_store_is_refused_with_what_to_do(database: str) -> None:
    PostgresStore(database).close()
    with connect(database) as db:
        db.execute("UPDATE pai_schema SET version = 7")
    with pytest.raises(StoreError, match=r"schema version 7.*up to 3: upgrade pai_actors") as info:
        PostgresStore(database)
    assert "(nothing was changed)" in str(info.value)
    assert "/pai_test_" in str(info.value)  # names the database
    assert schema_version(database) == 7


def test_a_database_of_another_application_is_refused(database: str) -> None:
    with connect(database) as db:
        db.execute("CREATE TABLE threads (x INTEGER)")
    with pytest.raises(StoreError, match="is not a pai_actors store"):
        PostgresStore(database)
    with connect(database) as db:  # and left as it was
        assert db.execute("SELECT to_regclass('pai_schema')").fetchone() == (None,)


def test_a_failed_migration_changes_nothing(database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    PostgresStore(database).close()

    def broken(db: Any) -> None:
        db.execute_blocking("CREATE TABLE half (x INTEGER)")
        raise RuntimeError("migration bug")

    monkeypatch.setattr(postgres_schema, "_MIGRATIONS", (*postgres_schema._MIGRATIONS, broken))
    monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", 4)
    with pytest.raises(RuntimeError, match="migration bug"):
        PostgresStore(database)
    assert schema_version(database) == 3
    with connect(database) as db:
        assert db.execute("SELECT to_regclass('half')").fetchone() == (None,)


def test_two_stores_opening_at_once_migrate_the_database_once(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first to open holds the advisory lock through its migration; the second waits for
    it (seen in ``pg_locks``), then finds version 3 and runs no step."""
    ran: list[str] = []

    def counted(step: Callable[[Any], None]) -> Callable[[Any], None]:
        def run(db: Any) -> None:
            ran.append(step.__name__)
            if len(ran) == 1:
                wait_for_a_waiting_advisory_lock(database)
            step(db)

        return run

    monkeypatch.setattr(
        postgres_schema, "_MIGRATIONS", tuple(map(counted, postgres_schema._MIGRATIONS))
    )
    with ThreadPoolExecutor(2) as pool:
        opening = [pool.submit(PostgresStore, database) for _ in range(2)]
        stores = [future.result(timeout=60) for future in opening]
    for store in stores:
        store.close()
    assert ran == ["_create_v1", "_add_deadlines", "_one_message_per_turn"]
    assert schema_version(database) == 3


def wait_for_a_waiting_advisory_lock(url: str) -> None:
    with connect(url) as db:
        deadline = time.monotonic() + 30
        while not db.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "the second store never waited for the lock"
            time.sleep(0.01)  # another process's state: nothing to wait on but the catalog


async def test_a_version_2_database_migrates_as_sqlite_does(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows of the SQLite version 2 fixture, in a PostgreSQL version 2 database, open
    as SqliteStore opens the fixture: one assistant message per turn, the same records."""
    with monkeypatch.context() as patched:
        patched.setattr(postgres_schema, "_MIGRATIONS", postgres_schema._MIGRATIONS[:2])
        patched.setattr(postgres_schema, "SCHEMA_VERSION", 2)
        PostgresStore(database).close()
    assert schema_version(database) == 2
    copy_v2_rows(FIXTURE_V2, database)
    path = tmp_path / "v2.sqlite"
    shutil.copyfile(FIXTURE_V2, path)
    with trio.fail_after(30):
        with PostgresStore(database) as store, SqliteStore(path) as sqlite_store:
            with sqlite3.connect(path) as db:
                thread_ids = [row[0] for row in db.execute("SELECT thread_id FROM threads")]
            assert len(thread_ids) >= 3
            for thread_id in thread_ids:
                for read in ("get_thread", "list_messages", "list_runs", "list_calls"):
                    ours = await getattr(store, read)(thread_id)
                    assert ours == await getattr(sqlite_store, read)(thread_id), (read, thread_id)
            [buy] = [m for m in await store.list_messages("thread_1") if m.role == "assistant"]
            assert [getattr(part, "type", None) for part in buy.parts].count("step-start") == 2
    assert schema_version(database) == 3


V2_COLUMNS = {
    "threads": ("thread_id", "scope_key", "seq", "json"),
    "messages": ("thread_id", "message_id", "seq", "json"),
    "parts": ("thread_id", "message_id", "key", "position", "json"),
    "runs": ("run_id", "thread_id", "seq", "revision", "active", "json"),
    "calls": ("thread_id", "tool_call_id", "seq", "revision", "open", "json", "expires_us"),
    "files": ("file_id", "scope_key", "json", "body"),
}


def copy_v2_rows(source: Path, url: str) -> None:
    """Every row of a SQLite version 2 store into a PostgreSQL version 2 database (the
    flags as booleans, each ``seq`` kept, and its sequence moved past them)."""
    with contextlib.closing(sqlite3.connect(source)) as sqlite_db, connect(url) as db:
        for table, names in V2_COLUMNS.items():
            rows = [
                tuple(
                    bool(value) if name in ("active", "open") else value
                    for name, value in zip(names, row, strict=True)
                )
                for row in sqlite_db.execute(f"SELECT {', '.join(names)} FROM {table}")
            ]
            overriding = " OVERRIDING SYSTEM VALUE" if "seq" in names else ""
            with db.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {table} ({', '.join(names)}){overriding}"
                    f" VALUES ({', '.join(['%s'] * len(names))})",
                    rows,
                )
            if "seq" in names:
                db.execute(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'seq'), max(seq))"
                    f" FROM {table}"
                )


# Conflicts: MemoryStore's, word for word.


async def test_conflicts_read_like_memory_store(database: str) -> None:
    def message(message_id: str) -> Message:
        return Message(id=message_id, role="user", parts=(TextPart(text="x"),))

    part = ToolPart(type="tool-t", tool_name="t", tool_call_id="c1", state="input-available")
    run = RunRecord(thread_id="t1", run_id="r1", status="running", created_at=T0)
    file = UploadedFile(
        file_id="f1",
        filename="a.txt",
        media_type="text/plain",
        size=1,
        scope_key="a",
        created_at=T0,
    )

    async def setup(store: Any) -> None:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
            tx.create_thread(thread("t2"))
            tx.append_message("t1", message("m1"))
            tx.put_run(run)
            tx.save_file(file, b"x")

    stored_run = run.model_copy(update={"revision": 1})
    refused: list[Callable[[Transaction], object]] = [
        lambda tx: tx.create_thread(thread("t1")),
        lambda tx: tx.append_message("t9", message("m2")),
        lambda tx: tx.append_message("t1", message("m1")),
        lambda tx: tx.replace_message("t1", message("m9")),
        lambda tx: tx.replace_message("t9", message("m1")),
        lambda tx: tx.put_tool_part("t1", "m9", part),
        lambda tx: tx.put_tool_part("t9", "m9", part),
        lambda tx: tx.put_run(run),
        lambda tx: tx.put_run(
            RunRecord(thread_id="t1", run_id="r2", status="waiting", created_at=T0)
        ),
        lambda tx: tx.put_run(
            RunRecord(thread_id="t9", run_id="r9", status="failed", created_at=T0)
        ),
        lambda tx: tx.put_run(stored_run.model_copy(update={"thread_id": "t2"})),
        lambda tx: tx.put_run(stored_run.model_copy(update={"revision": 5})),
        lambda tx: tx.save_file(file, b"x"),
        # refused by what the same batch wrote before it
        lambda tx: (
            tx.create_thread(thread("t3")),
            tx.append_message("t3", message("m3")),
            tx.append_message("t3", message("m3")),
        ),
    ]
    memory = MemoryStore()
    with trio.fail_after(30):
        with PostgresStore(database) as store:
            await setup(memory)
            await setup(store)
            for stage in refused:
                words = []
                for each in (memory, store):
                    tx = each.transaction()
                    stage(tx)
                    with pytest.raises(StoreConflict) as info:
                        await each.commit(tx.writes)
                    words.append((info.value.key, str(info.value)))
                assert words[0] == words[1]
            assert await store.get_thread("t3") is None
            assert [m.id for m in await store.list_messages("t1")] == ["m1"]


def counted_groups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each group the store writes, in order (``PostgresStore._write`` wrapped)."""
    groups: list[int] = []
    original = PostgresStore._write

    async def counting(store: PostgresStore, group: Any, flight: Any) -> None:
        groups.append(len(group))
        await original(store, group, flight)

    monkeypatch.setattr(PostgresStore, "_write", counting)
    return groups


async def test_commits_ready_together_share_one_transaction_and_conflict_alone(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = counted_groups(monkeypatch)
    outcomes: dict[str, str] = {}
    with trio.fail_after(30), PostgresStore(database) as store:

        async def create(name: str, record: ThreadRecord) -> None:
            try:
                async with store.transaction() as tx:
                    tx.create_thread(record)
                outcomes[name] = "committed"
            except StoreConflict:
                outcomes[name] = "conflict"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create, "a", thread("t1"))
            nursery.start_soon(create, "b", thread("t2"))
            nursery.start_soon(create, "c", thread("t1"))  # the same id again: refused alone
        assert groups == [3]
        assert outcomes["b"] == "committed"
        assert sorted([outcomes["a"], outcomes["c"]]) == ["committed", "conflict"]
        assert await store.get_thread("t1") == thread("t1")
        assert await store.get_thread("t2") == thread("t2")


class HeldWrites:
    """``PostgresStore._write`` wrapped: notes each group's threads as it starts and ends;
    the first group takes its connection and waits, before it is written, until
    ``release``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = trio.Event()
        self.events: list[tuple[str, list[str]]] = []
        self.held: frozenset[str] | None = None
        original = PostgresStore._write

        async def noting(store: PostgresStore, group: Any, flight: Any) -> None:
            threads = sorted(flight.threads)
            self.events.append(("start", threads))
            if self.held is None:
                self.held = flight.threads
                await store._writer_connection(flight)  # (the one it then writes on)
                with trio.fail_after(10):  # (a group is written under a shield)
                    await self.release.wait()
            await original(store, group, flight)
            self.events.append(("end", threads))

        monkeypatch.setattr(PostgresStore, "_write", noting)


async def test_a_burst_larger_than_a_group_is_written_as_two_groups_at_once(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``GROUP_LIMIT`` commits, the next commits form a group of their own, written on
    the second connection while the first group is still in flight."""
    monkeypatch.setattr(postgres, "GROUP_LIMIT", 2)
    held = HeldWrites(monkeypatch)
    with trio.fail_after(30), PostgresStore(database) as store:

        async def create(k: int) -> None:
            async with store.transaction() as tx:
                tx.create_thread(thread(f"t{k}"))
            assert held.held is not None
            if f"t{k}" not in held.held:  # the other group landed while the first waits
                held.release.set()

        async with trio.open_nursery() as nursery:
            for k in range(1, 5):
                nursery.start_soon(create, k)
        first, second = held.events[0][1], held.events[1][1]
        assert held.events == [
            ("start", first),
            ("start", second),
            ("end", second),
            ("end", first),
        ]
        assert sorted(first + second) == ["t1", "t2", "t3", "t4"]
        assert len(store._writer_pids()) == 2  # two connections wrote
        for k in range(1, 5):
            assert await store.get_thread(f"t{k}") == thread(f"t{k}")


async def test_a_group_whose_connection_died_in_flight_is_written_on_another(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends the connection of one of two groups in flight before it sends
    anything: that group is written on another connection, the other group is not
    disturbed, and the dead one is not used again."""
    monkeypatch.setattr(postgres, "GROUP_LIMIT", 2)
    held = HeldWrites(monkeypatch)
    ended: list[int] = []
    with trio.fail_after(30), PostgresStore(database) as store:

        async def create(k: int) -> None:
            async with store.transaction() as tx:
                tx.create_thread(thread(f"t{k}"))
            assert held.held is not None
            if f"t{k}" not in held.held and not ended:  # the other group landed
                [flight] = store._flights  # the held one, its connection taken
                ended.append(flight.db.pgconn.backend_pid)
                with connect(database) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (ended[0],))
                held.release.set()

        async with trio.open_nursery() as nursery:
            for k in range(1, 5):
                nursery.start_soon(create, k)
        assert [event for event, _ in held.events] == ["start", "start", "end", "end"]
        assert ended[0] not in store._writer_pids()  # (the idle one took its place)
        for k in range(1, 5):
            assert await store.get_thread(f"t{k}") == thread(f"t{k}")


async def test_a_nodes_groups_take_every_commit_waiting_one_group_at_a_time(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a ``node_id`` a burst is not split: one group at a time, as large as what waits
    (nodes sharing a machine's cores lost by the split)."""
    monkeypatch.setattr(postgres, "GROUP_LIMIT", 2)
    groups = counted_groups(monkeypatch)
    with trio.fail_after(30), PostgresStore(database, node_id="node-1") as store:

        async def create(k: int) -> None:
            async with store.transaction() as tx:
                tx.create_thread(thread(f"t{k}"))

        async with trio.open_nursery() as nursery:
            for k in range(1, 5):
                nursery.start_soon(create, k)
        assert groups == [4]
        assert len(store._writer_pids()) == 1


async def test_a_threads_commits_are_never_in_flight_at_once(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit to a thread that a group in flight writes waits for that group to land, so
    a thread's commits reach the server in the order made; groups take off in the order
    they formed, so a later group to another thread waits in line behind it."""
    monkeypatch.setattr(postgres, "GROUP_LIMIT", 1)
    held = HeldWrites(monkeypatch)
    with trio.fail_after(30), PostgresStore(database) as store:
        held.release.set()  # (not the threads' creation)
        for thread_id in ("t1", "t2"):
            async with store.transaction() as tx:
                tx.create_thread(thread(thread_id))
        held.events.clear()
        held.held, held.release = None, trio.Event()
        order: list[str] = []

        async def append(thread_id: str, message_id: str) -> None:
            async with store.transaction() as tx:
                tx.append_message(
                    thread_id, Message(id=message_id, role="user", parts=(TextPart(text="x"),))
                )
            order.append(message_id)

        async with trio.open_nursery() as nursery:
            for thread_id, message_id in (("t1", "m1"), ("t1", "m2"), ("t2", "m3")):
                nursery.start_soon(append, thread_id, message_id)
                await trio.testing.wait_all_tasks_blocked()
            assert held.events == [("start", ["t1"])]  # m2 waits for it, m3 in line
            held.release.set()
        assert held.events[:3] == [("start", ["t1"]), ("end", ["t1"]), ("start", ["t1"])]
        assert sorted(held.events[3:]) == [("end", ["t1"]), ("end", ["t2"]), ("start", ["t2"])]
        assert order.index("m1") < order.index("m2")
        assert [m.id for m in await store.list_messages("t1")] == ["m1", "m2"]


async def test_a_group_that_cannot_board_fails_whole_and_the_next_commit_is_written(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group whose threads cannot be named (a store bug: here forced) fails every commit
    of it with the error, and leaves no gathering group behind for later commits to join."""
    original = postgres.thread_ids
    broken = [True]

    def failing(group: Any) -> Any:
        if broken[0]:
            raise RuntimeError("no threads for you")
        return original(group)

    monkeypatch.setattr(postgres, "thread_ids", failing)
    errors: list[str] = []
    with trio.fail_after(30), PostgresStore(database) as store:

        async def create(k: int) -> None:
            try:
                async with store.transaction() as tx:
                    tx.create_thread(thread(f"t{k}"))
            except RuntimeError as exc:
                errors.append(str(exc))

        async with trio.open_nursery() as nursery:
            for k in range(3):
                nursery.start_soon(create, k)
        assert errors == ["no threads for you"] * 3
        broken[0] = False
        await create(9)
        assert await store.get_thread("t9") == thread("t9")
        assert [await store.get_thread(f"t{k}") for k in range(3)] == [None] * 3


async def test_groups_formed_in_one_tick_take_off_in_the_order_they_formed(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five commits in one scheduler tick, groups of at most two: three groups form in the
    same tick, their leaders woken together in an order trio may reverse. Two of the
    commits append to one thread; they are stored in the order they were made."""
    monkeypatch.setattr(postgres, "GROUP_LIMIT", 2)
    made = itertools.count()
    with trio.fail_after(60), PostgresStore(database) as store:
        for round_ in range(20):
            shared, others = f"s{round_}", [f"o{round_}-{k}" for k in range(3)]
            async with store.transaction() as tx:
                for thread_id in (shared, *others):
                    tx.create_thread(thread(thread_id))

            async def append(thread_id: str) -> None:
                async with store.transaction() as tx:
                    message_id = f"m{next(made):04d}"  # (made as it commits: no checkpoint)
                    tx.append_message(
                        thread_id, Message(id=message_id, role="user", parts=(TextPart(text="x"),))
                    )

            async with trio.open_nursery() as nursery:
                for thread_id in (shared, others[0], others[1], shared, others[2]):
                    nursery.start_soon(append, thread_id)
            stored = [m.id for m in await store.list_messages(shared)]
            assert stored == sorted(stored), f"round {round_}"
        with PostgresStore(database, mirror=False) as fresh:
            for round_ in range(20):
                stored = [m.id for m in await fresh.list_messages(f"s{round_}")]
                assert stored == sorted(stored), f"round {round_}"


@pytest.mark.parametrize("seed", range(3))
async def test_small_groups_racing_on_few_threads_leave_the_mirror_as_the_database(
    database: str, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Many writers, each appending messages one after another to threads picked at random
    among four, in groups of at most three, two in flight: what the store's mirror answers
    is what a store without one reads from the database (the same messages, in the same
    order), because groups writing one thread never fly at once."""
    monkeypatch.setattr(postgres, "GROUP_LIMIT", 3)
    rng = random.Random(seed)
    threads = [f"t{k}" for k in range(4)]
    plans = [[rng.choice(threads) for _ in range(3)] for _ in range(60)]
    with trio.fail_after(60), PostgresStore(database) as store:
        for thread_id in threads:
            async with store.transaction() as tx:
                tx.create_thread(thread(thread_id))

        async def writer(w: int, plan: list[str]) -> None:
            for k, thread_id in enumerate(plan):
                async with store.transaction() as tx:
                    tx.append_message(
                        thread_id,
                        Message(id=f"w{w}-{k}", role="user", parts=(TextPart(text="x"),)),
                    )

        async with trio.open_nursery() as nursery:
            for w, plan in enumerate(plans):
                nursery.start_soon(writer, w, plan)
        mirrored = {t: [m.id for m in await store.list_messages(t)] for t in threads}
        with PostgresStore(database, mirror=False) as fresh:
            stored = {t: [m.id for m in await fresh.list_messages(t)] for t in threads}
    assert mirrored == stored
    assert sum(map(len, stored.values())) == 180
    for w in range(len(plans)):  # each writer's messages in the order it wrote them
        mine = [m for t in threads for m in stored[t] if m.startswith(f"w{w}-")]
        for thread_id in threads:
            in_thread = [m for m in stored[thread_id] if m.startswith(f"w{w}-")]
            assert in_thread == sorted(in_thread, key=lambda m: int(m.split("-")[1]))
        assert len(mine) == 3


async def test_a_store_without_a_mirror_sees_another_writer(database: str) -> None:
    with trio.fail_after(30):
        with PostgresStore(database, mirror=False) as reader, PostgresStore(database) as writer:
            async with writer.transaction() as tx:
                tx.create_thread(thread("t1"))
            assert await reader.list_messages("t1") == []
            async with writer.transaction() as tx:
                tx.append_message("t1", Message(id="m1", role="user", parts=(TextPart(text="x"),)))
            assert [m.id for m in await reader.list_messages("t1")] == ["m1"]


async def test_connections_the_server_ended_while_idle_are_replaced(database: str) -> None:
    """A server restart (here: every session of the database ended) costs a retry, not an
    error: nothing had been sent on the dead connections."""

    def end_sessions() -> None:
        with connect(database) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )

    with trio.fail_after(30), PostgresStore(database, min_size=2, mirror=False) as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
        end_sessions()
        async with store.transaction() as tx:
            tx.create_thread(thread("t2"))
        end_sessions()
        assert [t.thread_id for t in await store.list_threads("a")] == ["t1", "t2"]


# Cancellation.


class Locked:
    """Another session, in a transaction that ran ``sql`` and holds the locks it took (a
    table's, a row's) until :meth:`release`, so that statements needing them wait."""

    def __init__(self, url: str, sql: str, *params: object) -> None:
        self.url = url
        self.db = connect(url)
        self.db.execute("BEGIN")
        self.db.execute(sql, params)

    def waiters(self) -> int:
        """How many sessions of the database wait for a lock."""
        with connect(self.url) as db:
            return int(
                db.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()[0]
            )

    async def wait_until(self, condition: Callable[[int], bool]) -> None:
        """Until ``condition(number of sessions waiting for a lock)``."""
        while not condition(await trio.to_thread.run_sync(self.waiters)):  # noqa: ASYNC110 - another process's state: nothing to wait on but polling it
            await trio.sleep(0.01)

    def release(self) -> None:
        if not self.db.closed:
            self.db.execute("COMMIT")
            self.db.close()


async def test_a_cancelled_read_returns_at_once_and_the_server_stops_it(database: str) -> None:
    with trio.fail_after(30), PostgresStore(database) as store:
        locked = Locked(database, "LOCK TABLE threads IN ACCESS EXCLUSIVE MODE")
        try:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(store.get_thread, "t1")  # waits for the lock
                    await locked.wait_until(lambda waiters: waiters == 1)
                    scope.cancel()
            assert scope.cancelled_caught
            # The worker thread's cancel request ends the statement in the server.
            await locked.wait_until(lambda waiters: waiters == 0)
        finally:
            locked.release()
        assert await store.get_thread("t1") is None  # the pool opens another connection


async def test_a_commit_cancelled_while_the_server_holds_it_is_written_then_cancelled(
    database: str,
) -> None:
    with trio.fail_after(30), PostgresStore(database) as store:
        locked = Locked(database, "LOCK TABLE threads IN ACCESS EXCLUSIVE MODE")
        results: list[str] = []
        scope = trio.CancelScope()

        async def create() -> None:
            with scope:
                async with store.transaction() as tx:
                    tx.create_thread(thread("t1"))
                    tx.append_message(
                        "t1", Message(id="m1", role="user", parts=(TextPart(text="x"),))
                    )
                results.append("returned")
                await trio.lowlevel.checkpoint()
                results.append("not cancelled")

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(create)
                await locked.wait_until(lambda waiters: waiters == 1)
                scope.cancel()  # the commit has joined its group: it goes on
                await trio.to_thread.run_sync(locked.release)
        finally:
            locked.release()
        assert scope.cancelled_caught
        assert results == ["returned"]  # cancelled at its first checkpoint after the commit
        assert await store.get_thread("t1") == thread("t1")
        assert [m.id for m in await store.list_messages("t1")] == ["m1"]


async def test_a_run_made_active_in_a_race_with_another_process_is_a_conflict(
    database: str,
) -> None:
    """Another process makes a run of the thread active while this store's update does:
    the one-active-run index refuses the update (PostgreSQL aborts its transaction), and the
    conflict still reads as MemoryStore's."""
    with trio.fail_after(30), PostgresStore(database) as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
            done = tx.put_run(
                RunRecord(thread_id="t1", run_id="r1", status="failed", created_at=T0)
            )
        other = RunRecord(thread_id="t1", run_id="r2", status="running", created_at=T0)
        racing = Locked(
            database,
            "INSERT INTO runs (run_id, thread_id, revision, active, json)"
            " VALUES ('r2', 't1', 1, true, %s)",
            other.model_dump_json(),
        )
        refused: list[StoreConflict] = []

        async def rerun() -> None:
            with pytest.raises(StoreConflict) as info:
                async with store.transaction() as tx:
                    tx.put_run(done.model_copy(update={"status": "running"}))
            refused.append(info.value)

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rerun)
                await racing.wait_until(lambda waiters: waiters == 1)  # on the index entry
                await trio.to_thread.run_sync(racing.release)
        finally:
            racing.release()
        assert str(refused[0]) == (
            "run 'r1': thread 't1' already has the active run 'r2' (running); a thread has one "
            "run at a time, end that one first"
        )
        assert await store.get_run("r1") == done


async def test_a_write_the_server_refuses_fails_its_batch_alone(database: str) -> None:
    """A text with a NUL character is one PostgreSQL cannot store: the batch holding it fails
    with StoreError, alone in its group or among others (which commit)."""
    with trio.fail_after(30), PostgresStore(database) as store:
        with pytest.raises(StoreError, match="PostgreSQL refused a commit") as info:
            async with store.transaction() as tx:
                tx.create_thread(thread("nul\x00"))
        assert not isinstance(info.value, StoreConflict)
        outcomes: dict[str, str] = {}

        async def create(thread_id: str) -> None:
            try:
                async with store.transaction() as tx:
                    tx.create_thread(thread(thread_id))
                outcomes[thread_id] = "committed"
            except StoreError:
                outcomes[thread_id] = "refused"

        async with trio.open_nursery() as nursery:
            for thread_id in ("t1", "nul\x00", "t2"):
                nursery.start_soon(create, thread_id)
        assert outcomes == {"t1": "committed", "nul\x00": "refused", "t2": "committed"}
        assert sorted(t.thread_id for t in await store.list_threads("a")) == ["t1", "t2"]


async def test_commits_cancelled_at_any_moment_write_all_of_their_batch_or_none(
    database: str,
) -> None:
    with trio.fail_after(60), PostgresStore(database, mirror=False) as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t0"))
        outcomes = set()
        n = 0
        while n < 60 or True not in outcomes:  # sweep until a commit had the time to finish
            n += 1
            thread_id = f"t{n}"
            with trio.move_on_after((n - 1) * 0.00005):
                async with store.transaction() as tx:
                    tx.create_thread(thread(thread_id))
                    tx.append_message(
                        thread_id, Message(id="m1", role="user", parts=(TextPart(text="x"),))
                    )
                    tx.put_run(
                        RunRecord(
                            thread_id=thread_id, run_id=f"r{n}", status="running", created_at=T0
                        )
                    )
            found = (
                await store.get_thread(thread_id) is not None,
                len(await store.list_messages(thread_id)),
                len(await store.list_runs(thread_id)),
            )
            assert found in [(False, 0, 0), (True, 1, 1)], found
            outcomes.add(found[0])
        assert False in outcomes  # the first, cancelled before it joined a group


# A runtime on the database: suspend, close everything, reopen, resume.


class Summary(BaseModel):
    summary: str


class Decision(BaseModel):
    approved: bool


def approval_tool() -> Any:
    async def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            return {"approved": ctx.entry.resume.approved}
        return ctx.suspend("approval", {"summary": ctx.input.summary})

    return define_tool(
        id="test.request-approval.v1",
        description="Ask a human to approve.",
        input_schema=Summary,
        suspend={"approval": SuspendPoint(suspend_schema=Summary, resume_schema=Decision)},
        execute=execute,
    )


async def test_a_runtime_suspends_closes_reopens_the_database_and_resumes(database: str) -> None:
    agent = define_agent(name="a", tools={"requestApproval": approval_tool()})
    model = ScriptedModel([[tool_call("requestApproval", {"summary": "s"})]])
    with trio.fail_after(60):
        with PostgresStore(database) as store:
            async with create_test_runtime(agent, model=model, store=store) as rt:
                thread_id = await rt.create_thread("s")
                await rt.send(thread_id, "go")
                await rt.wait_idle(thread_id)
        model = ScriptedModel([text("resumed")])
        with PostgresStore(database) as reopened:
            async with create_test_runtime(agent, model=model, store=reopened) as rt:
                [action] = await rt.pending_actions(thread_id)
                assert action.name == "requestApproval.approval"
                assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["waiting"]
                assert (await action.submit({"approved": True})).status == "accepted"
                await rt.wait_idle(thread_id)
                state = await rt.get_state(thread_id)
                second = await rt.create_thread("s")  # ids go on after the stored ones
        assert second != thread_id
        assert [r.status for r in state.runs] == ["completed"]
        assert state.messages[-1].parts[-1].to_wire() == {"type": "text", "text": "resumed"}
        with PostgresStore(database) as again:
            assert await again.list_pending_actions(thread_id) == []
            assert [r.status for r in await again.list_runs(thread_id)] == ["completed"]


# -- pai-actors serve --db postgresql://... ---------------------------------------------------


def _url(conninfo: str) -> str:
    """A ``postgresql://`` URL of the test database (the fixture gives a key=value string)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(conninfo)
    host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
    return f"postgresql://{params.get('user', 'postgres')}@{host}:{port}/{params['dbname']}"


_SERVE = [sys.executable, "-m", "pai_actors._cli", "serve", "pai_actors.demo_app:factory"]


def _serving(url: str, *options: str) -> tuple[subprocess.Popen[str], str]:
    """``pai-actors serve`` of the demo application on ``url``; its WebSocket URL."""
    process = subprocess.Popen(
        [*_SERVE, "--port", "0", "--no-http", "--db", url, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    found = re.search(r" on (ws://\S+) \(database (\S+)\)", line)
    if found is None:
        process.kill()
        raise AssertionError((line, process.communicate(timeout=20)))
    assert found.group(2) == url
    return process, found.group(1)


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err


async def _pending_invoice(ws_url: str) -> tuple[str, str]:
    with trio.fail_after(30):
        return await _invoice(ws_url)


async def _invoice(ws_url: str) -> tuple[str, str]:
    async with open_client(ws_url, token="alice-token") as client:
        thread = await client.create_thread()
        async with thread.watch() as updates:
            await thread.send("Please invoice Initech for 80")
            async for _ in updates:
                if thread.pending_actions():
                    break
        return thread.thread_id, thread.pending_actions()[0].ref.action_id


def test_pai_actors_serve_serves_from_postgresql_across_a_restart(database: str) -> None:
    url = _url(database)
    process, ws_url = _serving(url)
    try:
        thread_id, action_id = trio.run(_pending_invoice, ws_url)
    finally:
        _stop(process)
    process, ws_url = _serving(url)  # a new process: the action waits in the database

    async def approve() -> str:
        with trio.fail_after(30):
            return await approving()

    async def approving() -> str:
        async with open_client(ws_url, token="alice-token") as client:
            [action] = await client.pending_actions()
            assert (action.ref.thread_id, action.ref.action_id) == (thread_id, action_id)
            thread = await client.thread(thread_id)
            async with thread.watch() as updates:
                result = await client.submit_action(action.ref, {"approved": True})
                assert result.status == "accepted"
                async for update in updates:
                    if update.type == "run-status" and update.run.status == "completed":
                        break
            return thread.get_state().messages[-1].parts[-1].text  # type: ignore[union-attr]

    try:
        answer = trio.run(approve)
    finally:
        _stop(process)
    assert "Initech" in answer


def test_pai_actors_serve_says_why_it_cannot_use_a_postgresql_url() -> None:
    result = subprocess.run(
        [*_SERVE, "--port", "0", "--db", "postgresql://postgres:secret@127.0.0.1:1/nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "cannot connect to 'postgresql://postgres@127.0.0.1:1/nowhere'" in result.stderr
    assert "secret" not in result.stderr + result.stdout


def test_two_nodes_serve_one_database_and_either_answers_any_thread(database: str) -> None:
    """A conversation waits for its approval on node a (which gives the idle thread up);
    the approval submitted through node b runs the rest there."""
    url = _url(database)
    a, a_url = _serving(url, "--node-id", "a")
    b, b_url = _serving(url, "--node-id", "b")
    try:
        thread_id, action_id = trio.run(_pending_invoice, a_url)

        async def approve_on_b() -> str:
            with trio.fail_after(30):
                async with open_client(b_url, token="alice-token") as client:
                    thread = await client.thread(thread_id)
                    [action] = await client.pending_actions()
                    assert action.ref.action_id == action_id
                    async with thread.watch() as updates:
                        result = await client.submit_action(action.ref, {"approved": True})
                        assert result.status == "accepted", result
                        async for update in updates:
                            if update.type == "run-status" and update.run.status == "completed":
                                break
                    return thread.get_state().messages[-1].parts[-1].text  # type: ignore[union-attr]

        answer = trio.run(approve_on_b)
    finally:
        _stop(a)
        _stop(b)
    assert "Initech" in answer
    with connect(database) as db:
        [(node,)] = db.execute(
            "SELECT node_id FROM pai_thread_owners WHERE thread_id = %s AND expires_at > now()",
            (thread_id,),
        ).fetchall() or [("(given up)",)]
    assert node in ("b", "(given up)")  # b drove the rest; a never wrote it again
