"""MemoryStore: the conformance suite, focused tests, and a model-based Hypothesis test."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from pai_actors import (
    MemoryStore,
    Message,
    RunRecord,
    Store,
    StoreConflict,
    StoreError,
    TextPart,
    ThreadRecord,
)
from pai_actors._store.base import Write
from pai_actors._store.memory import _apply
from pai_actors.testing import check_store, memory_stores

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def thread(thread_id: str, scope_key: str = "a") -> ThreadRecord:
    return ThreadRecord(thread_id=thread_id, scope_key=scope_key, created_at=T0)


def text(message_id: str, body: str) -> Message:
    return Message(id=message_id, role="user", parts=(TextPart(text=body),))


async def test_memory_store_conforms() -> None:
    with trio.fail_after(10):
        await check_store(memory_stores())


async def test_check_store_accepts_plain_async_factories() -> None:
    async def open_store(name: str) -> Store:
        return MemoryStore()

    await check_store(open_store, reopens=False)


async def test_check_store_catches_a_store_that_forgets() -> None:
    async def open_store(name: str) -> Store:
        return MemoryStore()  # a fresh store every time: nothing survives reopening

    with pytest.raises(AssertionError, match="after reopening"):
        await check_store(open_store)


async def test_check_store_catches_a_store_that_leaks_scopes() -> None:
    class Leaky(MemoryStore):
        async def list_threads(self, scope_key: str) -> list[ThreadRecord]:
            found: list[ThreadRecord] = []
            for scope in ("scope-a", "scope-b"):
                found += await MemoryStore.list_threads(self, scope)
            return found

    async def open_store(name: str) -> Store:
        return Leaky()

    with pytest.raises(AssertionError, match="_check_threads"):
        await check_store(open_store, reopens=False)


async def test_check_store_catches_a_commit_that_never_yields() -> None:
    class Eager(MemoryStore):
        async def commit(self, writes: Sequence[Write]) -> None:
            backing = self.backing  # applied at once, the scheduler never given a turn
            backing.tables = _apply(backing.tables, writes, backing.sequence)

    async def open_store(name: str) -> Store:
        return Eager()

    with pytest.raises(AssertionError, match="commit returned without a checkpoint"):
        await check_store(open_store, reopens=False)


def test_memory_store_is_a_store() -> None:
    store: Store = MemoryStore()  # mypy checks the protocol here
    assert isinstance(store.transaction().writes, tuple)


async def test_reopen_shares_the_backing_and_nothing_else() -> None:
    store = MemoryStore()
    async with store.transaction() as tx:
        tx.create_thread(thread("t1"))
        tx.append_message("t1", text("m1", "hi"))
    again = store.reopen()
    assert again is not store
    assert await again.list_messages("t1") == [text("m1", "hi")]
    assert await MemoryStore().get_thread("t1") is None


async def test_a_cancelled_commit_changes_nothing() -> None:
    store = MemoryStore()
    before = store.backing.tables
    tx = store.transaction()
    tx.create_thread(thread("t1"))
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.commit(tx.writes)
    assert scope.cancelled_caught
    assert store.backing.tables is before


async def test_a_conflict_leaves_the_committed_tables_untouched() -> None:
    store = MemoryStore()
    async with store.transaction() as tx:
        tx.create_thread(thread("t1"))
    before = store.backing.tables
    tx = store.transaction()
    tx.append_message("t1", text("m1", "x"))
    tx.create_thread(thread("t1"))
    with pytest.raises(StoreConflict, match="thread 't1': already exists") as info:
        await store.commit(tx.writes)
    assert info.value.key == "thread 't1'"
    assert store.backing.tables is before
    assert await store.list_messages("t1") == []


async def test_stale_revision_message_says_what_to_do() -> None:
    store = MemoryStore()
    run = RunRecord(thread_id="t1", run_id="r1", status="running", created_at=T0)
    async with store.transaction() as tx:
        tx.create_thread(thread("t1"))
        stored = tx.put_run(run)
    async with store.transaction() as tx:
        tx.put_run(stored.model_copy(update={"status": "completed"}))
    with pytest.raises(StoreConflict, match="holds revision 2: another writer changed it"):
        async with store.transaction() as tx:
            tx.put_run(stored.model_copy(update={"status": "failed", "error": "x"}))


async def test_an_ended_transaction_refuses_writes() -> None:
    store = MemoryStore()
    async with store.transaction() as tx:
        pass
    with pytest.raises(StoreError, match="already ended"):
        tx.create_thread(thread("t1"))


async def test_a_thread_record_refuses_naive_times_and_unknown_versions() -> None:
    with pytest.raises(ValueError, match="timezone"):
        ThreadRecord(thread_id="t", scope_key="a", created_at=datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="version"):
        ThreadRecord.model_validate(
            {"thread_id": "t", "scope_key": "a", "created_at": T0, "version": 2}
        )


# Model-based: random operation sequences agree with a dict model.

THREADS = ("t1", "t2", "t3")
SCOPES = ("a", "b")


@given(st.data())
async def test_random_operations_agree_with_a_dict_model(data: st.DataObject) -> None:
    store = MemoryStore()
    threads: dict[str, str] = {}  # thread -> scope
    messages: dict[str, dict[str, str]] = {}  # thread -> id -> text
    runs: dict[str, RunRecord] = {}  # run id -> stored run
    for step in range(data.draw(st.integers(0, 25), label="steps")):
        op = data.draw(st.sampled_from(["thread", "append", "replace", "run", "update"]))
        thread_id = data.draw(st.sampled_from(THREADS), label=f"thread {step}")
        expect_conflict = False
        try:
            async with store.transaction() as tx:
                if op == "thread":
                    scope = data.draw(st.sampled_from(SCOPES))
                    expect_conflict = thread_id in threads
                    tx.create_thread(thread(thread_id, scope))
                elif op in ("append", "replace"):
                    message_id = data.draw(st.sampled_from(["m1", "m2", "m3"]))
                    body = data.draw(st.text(max_size=5))
                    exists = message_id in messages.get(thread_id, {})
                    expect_conflict = thread_id not in threads or exists == (op == "append")
                    if op == "append":
                        tx.append_message(thread_id, text(message_id, body))
                    else:
                        tx.replace_message(thread_id, text(message_id, body))
                elif op == "run":
                    run_id = data.draw(st.sampled_from(["r1", "r2", "r3"]))
                    status = data.draw(st.sampled_from(["running", "completed"]))
                    active = any(r.active and r.thread_id == thread_id for r in runs.values())
                    expect_conflict = (
                        thread_id not in threads
                        or run_id in runs
                        or (status == "running" and active)
                    )
                    tx.put_run(
                        RunRecord(thread_id=thread_id, run_id=run_id, status=status, created_at=T0)
                    )
                elif runs:
                    run_id = data.draw(st.sampled_from(sorted(runs)))
                    stale = data.draw(st.booleans(), label="stale")
                    old = runs[run_id]
                    revision = old.revision - 1 if stale else old.revision
                    others_active = any(
                        r.active and r.thread_id == old.thread_id and r.run_id != run_id
                        for r in runs.values()
                    )
                    status = data.draw(st.sampled_from(["waiting", "failed"]))
                    expect_conflict = stale or (status == "waiting" and others_active)
                    tx.put_run(old.model_copy(update={"status": status, "revision": revision}))
        except StoreConflict:
            assert expect_conflict, f"unexpected conflict in {op}"
        else:
            assert not expect_conflict, f"{op} should have conflicted"
            for write in tx.writes:
                apply_to_model(write, threads, messages, runs)
        for scope in SCOPES:
            listed = [t.thread_id for t in await store.list_threads(scope)]
            assert listed == [t for t, s in threads.items() if s == scope]
        for thread_id in THREADS:
            got = await store.list_messages(thread_id)
            expected = messages.get(thread_id, {})
            assert [(m.id, m.parts[0].text) for m in got] == list(expected.items())  # type: ignore[union-attr]
            assert await store.list_runs(thread_id) == [
                r for r in runs.values() if r.thread_id == thread_id
            ]
            active = [r for r in runs.values() if r.thread_id == thread_id and r.active]
            assert await store.get_active_run(thread_id) == (active[0] if active else None)


def apply_to_model(
    write: object,
    threads: dict[str, str],
    messages: dict[str, dict[str, str]],
    runs: dict[str, RunRecord],
) -> None:
    from pai_actors._store.base import AppendMessage, CreateThread, PutRun, ReplaceMessage

    if isinstance(write, CreateThread):
        threads[write.thread.thread_id] = write.thread.scope_key
    elif isinstance(write, AppendMessage | ReplaceMessage):
        part = write.message.parts[0]
        assert isinstance(part, TextPart)
        messages.setdefault(write.thread_id, {})[write.message.id] = part.text
    elif isinstance(write, PutRun):
        runs[write.run.run_id] = write.run.model_copy(update={"revision": write.run.revision + 1})
