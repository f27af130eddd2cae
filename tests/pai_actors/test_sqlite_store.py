"""SqliteStore: the conformance suite on files, schema versioning, durability settings, and a
runtime that suspends, closes, reopens the file and resumes."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    Message,
    ResumeEntry,
    SqliteStore,
    Store,
    StoreConflict,
    StoredCall,
    StoreError,
    SuspendPoint,
    TextPart,
    ThreadRecord,
    ToolContext,
    ToolPart,
    define_agent,
    define_tool,
)
from pai_actors._core.call_record import CallRecord
from pai_actors._store import sqlite_schema as sqlite_store_module
from pai_actors.testing import ScriptedModel, check_store, create_test_runtime, text, tool_call

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def sqlite_stores(
    directory: Path, durability: Any = "normal"
) -> Callable[[str], AbstractAsyncContextManager[SqliteStore]]:
    """``open_store(name)``: the store in ``directory / f"{name}.db"``, closed on exit."""

    @asynccontextmanager
    async def open_store(name: str) -> AsyncIterator[SqliteStore]:
        async with SqliteStore(directory / f"{name}.db", durability=durability) as store:
            yield store

    return open_store


def thread(thread_id: str) -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, scope_key="a", created_at=T0)


@pytest.mark.parametrize("durability", ["normal", "full"])
async def test_sqlite_store_conforms(tmp_path: Path, durability: str) -> None:
    with trio.fail_after(30):
        await check_store(sqlite_stores(tmp_path, durability))


async def test_sqlite_store_conforms_under_an_autojump_clock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(10):  # virtual seconds: a thread hop would trip this
        await check_store(sqlite_stores(tmp_path))


def test_sqlite_store_is_a_store(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "x.db") as opened:
        store: Store = opened  # mypy checks the protocol here
        assert isinstance(store.transaction().writes, tuple)
        assert repr(opened) == f"SqliteStore({str(tmp_path / 'x.db')!r}, durability='normal')"


@pytest.mark.parametrize(("durability", "synchronous"), [("normal", 1), ("full", 2)])
def test_durability_sets_wal_and_synchronous(
    tmp_path: Path, durability: Any, synchronous: int
) -> None:
    with SqliteStore(tmp_path / "x.db", durability=durability) as store:
        db = store._db  # the private connection: synchronous is a per-connection setting
        assert db is not None
        assert db.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_an_unknown_durability_is_refused_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"use 'normal'.*or 'full'"):
        SqliteStore(tmp_path / "x.db", durability="extra")  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()


def user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_a_new_file_gets_the_current_schema_version(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "x.db").close()
    assert user_version(tmp_path / "x.db") == sqlite_store_module.SCHEMA_VERSION == 3


async def test_a_version_0_empty_database_is_migrated_to_the_current_version(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    sqlite3.connect(path).close()  # an empty SQLite database: user_version 0, no tables
    assert user_version(path) == 0
    with SqliteStore(path) as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
        assert await store.get_thread("t1") == thread("t1")
    assert user_version(path) == sqlite_store_module.SCHEMA_VERSION


async def test_an_older_store_migrates_forward_and_keeps_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.db"
    with SqliteStore(path) as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))

    def add_notes(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE notes (note TEXT)")

    monkeypatch.setattr(
        sqlite_store_module, "_MIGRATIONS", (*sqlite_store_module._MIGRATIONS, add_notes)
    )
    newer = sqlite_store_module.SCHEMA_VERSION + 1
    monkeypatch.setattr(sqlite_store_module, "SCHEMA_VERSION", newer)
    with SqliteStore(path) as store:
        assert await store.get_thread("t1") == thread("t1")
    assert user_version(path) == newer
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT count(*) FROM notes").fetchone() == (0,)
    finally:
        db.close()


async def test_a_version_1_store_migrates_and_its_waiting_calls_have_no_deadline(
    tmp_path: Path,
) -> None:
    """A file written before deadlines existed (schema version 1, call JSON without the
    ``expires_at`` keys) opens: its pending actions have none, and new ones can."""
    path = tmp_path / "v1.db"
    record = CallRecord(
        name="pick", tool_call_id="c1", phase="awaiting_output", output_action="pending"
    )
    old = json.loads(
        StoredCall(
            thread_id="t1", run_id="r1", message_id="m1", record=record, revision=1
        ).model_dump_json()
    )
    del old["record"]["output_expires_at"]  # as version 1 wrote it
    db = sqlite3.connect(path, isolation_level=None)
    try:
        sqlite_store_module._MIGRATIONS[0](db)
        db.execute("PRAGMA user_version = 1")
        db.execute(
            "INSERT INTO threads VALUES ('t1', 'a', 1, ?)", (thread("t1").model_dump_json(),)
        )
        db.execute("INSERT INTO calls VALUES ('t1', 'c1', 1, 1, 1, ?)", (json.dumps(old),))
    finally:
        db.close()
    with SqliteStore(path) as store:
        assert user_version(path) == 3
        [action] = await store.list_pending_actions("t1")
        assert (action.ref.action_id, action.expires_at) == ("c1", None)
        assert await store.list_expiring_actions() == []
        async with store.transaction() as tx:
            tx.put_call(action.call, record=replace(record, output_expires_at=T0))
        [expiring] = await store.list_expiring_actions(until=T0)
        assert (expiring.ref.action_id, expiring.expires_at) == ("c1", T0)


def test_a_failed_migration_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.db"
    SqliteStore(path).close()

    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half (x)")
        raise RuntimeError("migration bug")

    monkeypatch.setattr(
        sqlite_store_module, "_MIGRATIONS", (*sqlite_store_module._MIGRATIONS, broken)
    )
    current = sqlite_store_module.SCHEMA_VERSION
    monkeypatch.setattr(sqlite_store_module, "SCHEMA_VERSION", current + 1)
    with pytest.raises(RuntimeError, match="migration bug"):
        SqliteStore(path)
    assert user_version(path) == current
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchall() == []
    finally:
        db.close()


def test_a_newer_store_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 7")
    db.close()
    with pytest.raises(StoreError, match=r"schema version 7.*up to 3: upgrade pai_actors"):
        SqliteStore(path)
    assert user_version(path) == 7


def test_a_database_of_another_application_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE threads (x)")
    db.close()
    with pytest.raises(StoreError, match="not a pai_actors store"):
        SqliteStore(path)


async def test_a_closed_store_says_so(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "x.db")
    store.close()
    store.close()  # harmless
    with pytest.raises(StoreError, match="is closed; open the file again"):
        await store.get_thread("t1")
    with pytest.raises(StoreError, match="is closed"):
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))


async def test_a_conflict_rolls_back_and_reads_like_memory_store(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "x.db") as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
        tx = store.transaction()
        tx.append_message("t1", Message(id="m1", role="user", parts=(TextPart(text="x"),)))
        tx.create_thread(thread("t1"))
        with pytest.raises(StoreConflict, match="thread 't1': already exists") as info:
            await store.commit(tx.writes)
        assert info.value.key == "thread 't1'"
        assert await store.list_messages("t1") == []
        db = store._db
        assert db is not None
        assert not db.in_transaction


async def test_putting_one_tool_part_writes_one_row(tmp_path: Path) -> None:
    def part(n: int, state: Any = "input-available") -> ToolPart:
        return ToolPart(type="tool-t", tool_name="t", tool_call_id=f"c{n}", state=state)

    big = Message(id="m1", role="assistant", parts=tuple(part(n) for n in range(200)))
    with SqliteStore(tmp_path / "x.db") as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
            tx.append_message("t1", big)
        db = store._db
        assert db is not None
        before = db.total_changes
        done = part(7).model_copy(update={"state": "output-available"})
        async with store.transaction() as tx:
            tx.put_tool_part("t1", "m1", done)
        assert db.total_changes - before == 1
        [got] = await store.list_messages("t1")
        assert got.parts[7] == done
        assert got.parts[:7] == big.parts[:7]
        assert got.parts[8:] == big.parts[8:]


# A runtime on the file: suspend, close everything, reopen, resume.


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


async def test_a_runtime_suspends_closes_reopens_the_file_and_resumes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "x.db"
    agent = define_agent(name="a", tools={"requestApproval": approval_tool()})
    model = ScriptedModel([[tool_call("requestApproval", {"summary": "s"})]])
    with trio.fail_after(10):
        with SqliteStore(path) as store:
            async with create_test_runtime(agent, model=model, store=store) as rt:
                thread_id = await rt.create_thread("s")
                await rt.send(thread_id, "go")
                await rt.wait_idle(thread_id)
        model = ScriptedModel([text("resumed")])
        with SqliteStore(path) as reopened:
            async with create_test_runtime(agent, model=model, store=reopened) as rt:
                [action] = await rt.pending_actions(thread_id)
                assert action.name == "requestApproval.approval"
                assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["waiting"]
                assert (await action.submit({"approved": True})).status == "accepted"
                await rt.wait_idle(thread_id)
                state = await rt.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    assert state.messages[-1].parts[-1].to_wire() == {"type": "text", "text": "resumed"}
    with SqliteStore(path) as again:
        assert await again.list_pending_actions(thread_id) == []
        assert [r.status for r in await again.list_runs(thread_id)] == ["completed"]


async def test_test_runtimes_on_the_same_file_never_reuse_ids(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = define_agent(name="a", tools={})
    path = tmp_path / "ids.db"
    ids = []
    for _ in range(2):
        with SqliteStore(path) as store:
            async with create_test_runtime(
                agent, model=ScriptedModel([text("hi")]), store=store
            ) as rt:
                thread_id = await rt.create_thread("s")
                ids.append((thread_id, await rt.send(thread_id, "go")))
                await rt.wait_idle(thread_id)
    assert ids[0] != ids[1]
    assert ids[1][0].startswith("thread_g")


async def test_commits_ready_in_one_tick_share_one_transaction_and_conflict_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[int] = []
    original = SqliteStore._write

    def counting(self: SqliteStore, db: Any, group: Any) -> None:
        groups.append(len(group))
        original(self, db, group)

    monkeypatch.setattr(SqliteStore, "_write", counting)
    outcomes: dict[str, str] = {}
    with SqliteStore(tmp_path / "g.db") as store:

        async def create(name: str, record: Any) -> None:
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
        # Of the two writers of t1, whichever joined first committed; the other alone failed.
        assert sorted([outcomes["a"], outcomes["c"]]) == ["committed", "conflict"]
        assert await store.get_thread("t1") == thread("t1")
        assert await store.get_thread("t2") == thread("t2")


async def test_a_commit_cancelled_after_it_joined_a_group_is_written_then_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scopes: dict[trio.lowlevel.Task, trio.CancelScope] = {}
    original = SqliteStore._write

    def cancel_the_joiners(self: SqliteStore, db: Any, group: Any) -> None:
        for commit in group:  # the leader writes; the others joined and wait for it
            if commit.waiting is not None:
                scopes[commit.waiting].cancel()
        original(self, db, group)

    monkeypatch.setattr(SqliteStore, "_write", cancel_the_joiners)
    results: dict[str, str] = {}
    with SqliteStore(tmp_path / "j.db") as store:

        async def create(thread_id: str) -> None:
            with trio.CancelScope() as scope:
                scopes[trio.lowlevel.current_task()] = scope
                async with store.transaction() as tx:
                    tx.create_thread(thread(thread_id))
                results[thread_id] = "returned"
                await trio.lowlevel.checkpoint()
                results[thread_id] = "not cancelled"
            if scope.cancelled_caught:
                results[thread_id] += ", then cancelled at its next checkpoint"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create, "t1")
            nursery.start_soon(create, "t2")
        assert sorted(results.values()) == [
            "not cancelled",  # the leader
            "returned, then cancelled at its next checkpoint",  # the joiner
        ]
        assert await store.get_thread("t1") == thread("t1")
        assert await store.get_thread("t2") == thread("t2")


async def test_a_group_commit_is_protected_from_keyboard_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    protected: list[bool] = []
    original = SqliteStore._write

    def noting(self: SqliteStore, db: Any, group: Any) -> None:
        protected.append(trio.lowlevel.currently_ki_protected())
        original(self, db, group)

    monkeypatch.setattr(SqliteStore, "_write", noting)
    with SqliteStore(tmp_path / "k.db") as store:
        async with store.transaction() as tx:
            tx.create_thread(thread("t1"))
        assert not trio.lowlevel.currently_ki_protected()  # the caller's code is not
    assert protected == [True]


async def test_a_commit_cancelled_before_it_joins_a_group_writes_nothing(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "c.db") as store:
        with trio.CancelScope() as scope:
            scope.cancel()
            async with store.transaction() as tx:
                tx.create_thread(thread("t1"))
        assert scope.cancelled_caught
        assert await store.get_thread("t1") is None


async def test_a_test_runtime_on_a_temporary_sqlite_file(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={"requestApproval": approval_tool()})
    model = ScriptedModel([[tool_call("requestApproval", {"summary": "s"})], text("Sent.")])
    async with create_test_runtime(agent, model=model, store="sqlite") as rt:
        assert isinstance(rt.store, SqliteStore)
        path = Path(rt.store.path)
        thread_id = await rt.create_thread("s")
        await rt.send(thread_id, "go")
        await rt.wait_idle(thread_id)
        [action] = await rt.pending_actions(thread_id)
        assert (await action.submit({"approved": True})).status == "accepted"
        await rt.wait_idle(thread_id)
        assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["completed"]
        assert os.path.exists(path)  # noqa: ASYNC240 - a test's quick local check
    assert not os.path.exists(path)  # noqa: ASYNC240 - removed with the runtime
    with pytest.raises(TypeError, match="takes a Store, 'memory' or 'sqlite'"):
        create_test_runtime(agent, model=model, store="postgres")  # type: ignore[arg-type]
