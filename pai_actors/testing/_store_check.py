""":func:`check_store`: the conformance suite every :class:`~pai_actors.Store` backend runs.

Like ``trio.testing.check_one_way_stream``: give it a way to open stores and it exercises
every method of the protocol, raising ``AssertionError`` with a message that says what the
backend did wrong.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeAlias

import trio
import trio.testing

from .._core.call_record import Approval, CallRecord, Cancellation, DataItem, Episode
from .._core.errors import StoreConflict, StoreError
from .._core.parts import Message, TextPart, ToolPart
from .._core.records import RunRecord, StoredCall, ThreadRecord, UploadedFile
from .._core.schema import frozen_mapping
from .._store.base import Store

StoreOpener: TypeAlias = Callable[[str], AbstractAsyncContextManager[Store] | Awaitable[Store]]
"""``open_store(name)``: a store; the same ``name`` again opens the same (reopened) store."""

_T0 = datetime(2025, 1, 1, tzinfo=UTC)


async def check_store(open_store: StoreOpener, *, reopens: bool = True) -> None:
    """Check that the stores ``open_store`` makes implement the :class:`Store` protocol.

    ``open_store(name)`` returns an async context manager yielding a store, or an awaitable
    of one. Each check uses its own ``name`` and expects an empty store for it. With
    ``reopens=True`` (the default), opening a name again after its context has exited must
    find everything committed before, and nothing of what was not: that is durability.
    Raises ``AssertionError`` naming the first deviation.
    """
    for check in _CHECKS:
        async with _opened(open_store, check.__name__) as store:
            try:
                await check(store)
            except AssertionError as exc:
                raise AssertionError(f"{check.__name__}: {exc}") from exc
    if reopens:
        await _check_reopen(open_store)


@asynccontextmanager
async def _opened(open_store: StoreOpener, name: str) -> AsyncIterator[Store]:
    made = open_store(name)
    if isinstance(made, AbstractAsyncContextManager):
        async with made as store:
            yield store
    else:
        yield await made


# Builders.


def _thread(thread_id: str, scope_key: str = "scope-a", minutes: int = 0) -> ThreadRecord:
    return ThreadRecord(
        thread_id=thread_id,
        scope_key=scope_key,
        user_key="user-1",
        created_at=_T0 + timedelta(minutes=minutes),
    )


def _run(thread_id: str, run_id: str, status: Any = "running") -> RunRecord:
    return RunRecord(thread_id=thread_id, run_id=run_id, status=status, created_at=_T0)


def _text(message_id: str, text: str, role: Any = "user") -> Message:
    return Message(id=message_id, role=role, parts=(TextPart(text=text),))


def _suspended(tool_call_id: str, action_id: str) -> CallRecord:
    """A call waiting at a suspend point, with durable data: a rich record to round-trip."""
    return CallRecord(
        name="requestApproval",
        tool_call_id=tool_call_id,
        phase="suspended",
        input={"summary": "Send invoice", "n": [1, 2.5, None, True]},
        episodes=(
            Episode(
                action_id=f"{action_id}-old",
                name="approval",
                input={"try": 1},
                suspended_at=_T0,
                state="submitted",
                resolved_at=_T0 + timedelta(seconds=5),
                resume={"approved": False},
            ),
            Episode(
                action_id=action_id,
                name="approval",
                input={"try": 2},
                suspended_at=_T0,
                expires_at=_T0 + timedelta(hours=1),
            ),
        ),
        data=frozen_mapping(
            {"progress": (DataItem("build", {"step": "build"}, _T0 + timedelta(seconds=1)),)}
        ),
    )


def _external(tool_call_id: str) -> CallRecord:
    """A call of a tool without ``execute``, waiting for its output action."""
    return CallRecord(
        name="pickColor",
        tool_call_id=tool_call_id,
        phase="awaiting_output",
        input={"options": ["red"]},
        output_action="pending",
    )


def _call(record: CallRecord, thread_id: str = "t1", run_id: str = "r1") -> StoredCall:
    return StoredCall(thread_id=thread_id, run_id=run_id, message_id="m-assistant", record=record)


async def _expect_conflict(store: Store, what: str, *writes: Callable[[Any], object]) -> None:
    try:
        async with store.transaction() as tx:
            for write in writes:
                write(tx)
    except StoreConflict:
        return
    raise AssertionError(f"{what}: expected StoreConflict, but the transaction committed")


async def _setup(store: Store, *threads: ThreadRecord) -> None:
    async with store.transaction() as tx:
        for thread in threads:
            tx.create_thread(thread)


# Checks.


async def _check_threads(store: Store) -> None:
    a1, a2, b1 = _thread("t1"), _thread("t2", minutes=1), _thread("t3", "scope-b")
    try:
        with trio.testing.assert_checkpoints():
            await _setup(store, a1, a2, b1)
    except AssertionError as exc:
        raise AssertionError(
            "commit returned without a checkpoint (a cancel point and a schedule point): "
            "await trio.lowlevel.checkpoint() in it if its I/O does not yield"
        ) from exc
    got = await store.get_thread("t1")
    assert got == a1, f"get_thread returned {got!r}, expected {a1!r}"
    assert await store.get_thread("nope") is None, "get_thread of an unknown id is not None"
    listed = await store.list_threads("scope-a")
    assert listed == [a1, a2], f"list_threads('scope-a') returned {listed!r}, expected t1, t2"
    assert await store.list_threads("scope-b") == [b1], "scope-b must list only its thread"
    assert await store.list_threads("scope-c") == [], "an unknown scope lists no threads"
    await _expect_conflict(store, "creating a thread twice", lambda tx: tx.create_thread(a1))


async def _check_messages(store: Store) -> None:
    await _setup(store, _thread("t1"), _thread("t2"))
    first, second, third = _text("m1", "one"), _text("m2", "two"), _text("m3", "three")
    async with store.transaction() as tx:
        for message in (first, second, third):
            tx.append_message("t1", message)
    got = await store.list_messages("t1")
    assert got == [first, second, third], f"messages out of order or changed: {got!r}"
    assert await store.list_messages("t2") == [], "messages leaked into another thread"
    changed = second.model_copy(update={"metadata": {"notification": {"hidden": True}}})
    async with store.transaction() as tx:
        tx.replace_message("t1", changed)
    got = await store.list_messages("t1")
    assert got == [first, changed, third], f"replace_message must keep position: {got!r}"
    got[1].metadata["notification"] = "mutated"  # type: ignore[index]  # the store's copy?
    again = await store.list_messages("t1")
    assert again[1] == changed, "a read shares mutable state with the store"

    part = ToolPart(
        type="tool-lookup", tool_name="lookup", tool_call_id="c1", state="input-available"
    )
    done = ToolPart(
        type="tool-lookup",
        tool_name="lookup",
        tool_call_id="c1",
        state="output-available",
        input={"q": 1},
        output=None,
    )
    other = ToolPart(type="dynamic-tool", tool_name="x", tool_call_id="c2", state="input-streaming")
    assistant = Message(id="m4", role="assistant", parts=(TextPart(text="hi"),))
    async with store.transaction() as tx:
        tx.append_message("t1", assistant)
        tx.put_tool_part("t1", "m4", part)
        tx.put_tool_part("t1", "m4", other)
    async with store.transaction() as tx:
        tx.put_tool_part("t1", "m4", done)
    [*_, last] = await store.list_messages("t1")
    expected = assistant.model_copy(update={"parts": (TextPart(text="hi"), done, other)})
    assert last == expected, f"put_tool_part must replace by tool_call_id in place: {last!r}"
    assert last.to_wire() == expected.to_wire(), "a message does not round-trip its wire JSON"

    await _expect_conflict(
        store, "appending a used message id", lambda tx: tx.append_message("t1", first)
    )
    await _expect_conflict(
        store, "replacing a missing message", lambda tx: tx.replace_message("t1", _text("x", ""))
    )
    await _expect_conflict(
        store, "a message in an unknown thread", lambda tx: tx.append_message("t9", _text("y", ""))
    )
    await _expect_conflict(
        store, "a part in a missing message", lambda tx: tx.put_tool_part("t1", "m9", part)
    )


async def _check_runs(store: Store) -> None:
    await _setup(store, _thread("t1"), _thread("t2"))
    async with store.transaction() as tx:
        r1 = tx.put_run(_run("t1", "r1"))
    assert r1.revision == 1, f"put_run of a new run must return revision 1, got {r1.revision}"
    got = await store.get_run("r1")
    assert got == r1, f"get_run returned {got!r}, expected {r1!r}"
    assert await store.get_active_run("t1") == r1, "the running run is the active run"
    await _expect_conflict(
        store, "a second active run in one thread", lambda tx: tx.put_run(_run("t1", "r2"))
    )
    failed = r1.model_copy(update={"status": "failed", "error": "boom"})
    async with store.transaction() as tx:
        r1b = tx.put_run(failed)
    got = await store.get_run("r1")
    assert got is not None, "an updated run is gone"
    assert got == r1b, f"update lost: {got!r}"
    assert got.revision == 2, f"an updated run is stored with revision 2, not {got.revision}"
    assert got.state.error == "boom", "RunRecord.state must carry the error"
    assert await store.get_active_run("t1") is None, "a failed run is not active"
    await _expect_conflict(store, "a stale run revision", lambda tx: tx.put_run(failed))
    await _expect_conflict(store, "creating a run twice", lambda tx: tx.put_run(_run("t1", "r1")))
    await _expect_conflict(
        store, "a run of an unknown thread", lambda tx: tx.put_run(_run("t9", "r9"))
    )
    await _expect_conflict(
        store,
        "moving a run to another thread",
        lambda tx: tx.put_run(r1b.model_copy(update={"thread_id": "t2"})),
    )
    async with store.transaction() as tx:
        r2 = tx.put_run(_run("t1", "r2", "waiting"))
        tx.put_run(_run("t2", "r3"))
    runs = await store.list_runs("t1")
    assert runs == [r1b, r2], f"list_runs('t1') returned {runs!r}, expected r1, r2 in order"
    assert await store.get_active_run("t1") == r2, "a waiting run is the active run"
    assert await store.get_run("r404") is None, "get_run of an unknown id is not None"


async def _check_calls(store: Store) -> None:
    await _setup(store, _thread("t1"), _thread("t2"))
    record = _suspended("c1", "a1")
    async with store.transaction() as tx:
        c1 = tx.put_call(_call(record))
        tx.put_call(_call(_external("c2")))
        tx.put_call(_call(_external("c3"), thread_id="t2"))
    got = await store.get_call("t1", "c1")
    assert got is not None, "get_call of a stored call returned None"
    assert got == c1, f"get_call returned {got!r}, expected {c1!r}"
    assert got.record == record, "the CallRecord did not round-trip"
    assert got.revision == 1, f"a new call is stored with revision 1, not {got.revision}"
    assert await store.get_call("t1", "nope") is None, "get_call of an unknown id is not None"
    listed = [c.tool_call_id for c in await store.list_calls("t1")]
    assert listed == ["c1", "c2"], f"list_calls('t1') returned {listed}, expected c1, c2"
    # A model's call ids are unique only within a conversation: another thread may reuse one.
    async with store.transaction() as tx:
        other = tx.put_call(_call(_external("c1"), thread_id="t2"))
    assert await store.get_call("t2", "c1") == other, "a call id of another thread is separate"
    assert await store.get_call("t1", "c1") == c1, "a call of another thread replaced this one"
    assert await store.get_call("t2", "c2") is None, "get_call read another thread's call"

    cancelled = replace(
        record,
        phase="done",
        finish="output-error",
        error_text="The tool call was cancelled.",
        cancelled=Cancellation(None, _T0),
    )
    async with store.transaction() as tx:
        c1b = tx.put_call(c1.model_copy(update={"record": cancelled}))
    got = await store.get_call("t1", "c1")
    assert got is not None, "an updated call is gone"
    assert got == c1b, f"update lost: {got!r}"
    assert got.revision == 2, f"an updated call is stored with revision 2, not {got.revision}"
    await _expect_conflict(
        store,
        "a stale call revision",
        lambda tx: tx.put_call(c1.model_copy(update={"record": record})),
    )
    await _expect_conflict(store, "creating a call twice", lambda tx: tx.put_call(_call(record)))
    await _expect_conflict(
        store, "a call of an unknown thread", lambda tx: tx.put_call(_call(_external("c9"), "t9"))
    )
    still = await store.get_call("t1", "c1")
    assert still == c1b, "a refused write changed the stored call"


async def _check_pending_actions(store: Store) -> None:
    await _setup(store, _thread("t1"), _thread("t2"), _thread("t3", "scope-b"))
    async with store.transaction() as tx:
        c1 = tx.put_call(_call(_suspended("c1", "a1")))
        tx.put_call(_call(_external("c2")))
        tx.put_call(_call(_external("c3"), "t2"))
        tx.put_call(_call(_external("c4"), "t3"))
        tx.put_call(
            _call(
                replace(
                    _external("c5"),
                    phase="done",
                    finish="output-available",
                    output_action="submitted",
                )
            )
        )
    actions = await store.list_pending_actions("t1")
    ids = [(a.ref.action_id, a.ref.name, a.ref.suspend_name) for a in actions]
    assert ids == [
        ("a1", "requestApproval.approval", "approval"),
        ("c2", "pickColor", None),
    ], f"list_pending_actions('t1') returned {ids}"
    assert actions[0].input == {"try": 2}, f"the action's input is {actions[0].input!r}"
    assert actions[0].ref.run_id == "r1", f"the action's run is {actions[0].ref.run_id!r}"
    assert actions[0].ref.message_id == "m-assistant", "the action's message is wrong"
    scoped = [a.ref.action_id for a in await store.list_scope_pending_actions("scope-a")]
    assert scoped == ["a1", "c2", "c3"], f"scope-a's actions are {scoped} (c4 is scope-b's)"
    found = await store.get_pending_action("t1", "a1")
    assert found is not None, "get_pending_action('a1') found nothing"
    assert found.call == c1, f"get_pending_action('a1') is {found!r}"
    for missing in ("a1-old", "c5", "nope"):
        assert await store.get_pending_action("t1", missing) is None, f"{missing!r} is not open"
    items = await store.list_tool_data("t1", "c1", "progress")
    assert [(i.id, i.value) for i in items] == [("build", {"step": "build"})], items
    assert await store.list_tool_data("t1", "c1", "other") == [], "an unknown channel is empty"
    assert await store.list_tool_data("t1", "nope", "progress") == [], "an unknown call has no data"


async def _check_expiring_actions(store: Store) -> None:
    await _setup(store, _thread("t1"), _thread("t2"), _thread("t3", "scope-b"))
    soon, later = _T0 + timedelta(minutes=5), _T0 + timedelta(minutes=10)
    elsewhere = timezone(timedelta(hours=5, minutes=30))  # the same instant, another offset
    waiting = replace(
        _suspended("c1", "a1"),
        episodes=(
            Episode(
                action_id="a1", name="approval", input=None, suspended_at=_T0, expires_at=later
            ),
        ),
    )
    output = replace(_external("c2"), output_expires_at=soon)
    approval = CallRecord(
        name="refund",
        tool_call_id="c3",
        phase="awaiting_approval",
        input={"cents": 5},
        approval=Approval(
            id="c3.approval", requested_at=_T0, expires_at=soon.astimezone(elsewhere)
        ),
    )
    first = replace(_external("c6"), output_expires_at=_T0 + timedelta(minutes=1))
    no_deadline = _external("c4")
    resolved = replace(
        _suspended("c5", "a5"),
        phase="done",
        finish="output-error",
        error_text="The tool call was cancelled.",
        episodes=(
            Episode(
                action_id="a5",
                name="approval",
                input=None,
                suspended_at=_T0,
                state="cancelled",
                resolved_at=_T0,
                expires_at=_T0,
            ),
        ),
    )
    async with store.transaction() as tx:
        c1 = tx.put_call(_call(waiting))
        c2 = tx.put_call(_call(output))
        tx.put_call(_call(approval, "t2"))
        tx.put_call(_call(no_deadline))
        tx.put_call(_call(resolved))
        tx.put_call(_call(first, "t3"))

    def listed(actions: list[Any]) -> list[tuple[str, str, datetime | None]]:
        return [(a.ref.thread_id, a.ref.action_id, a.expires_at) for a in actions]

    everything = await store.list_expiring_actions()
    expected = [
        ("t3", "c6", _T0 + timedelta(minutes=1)),
        ("t1", "c2", soon),
        ("t2", "c3.approval", soon),
        ("t1", "a1", later),
    ]
    assert listed(everything) == expected, (
        f"list_expiring_actions() returned {listed(everything)}, expected {expected}: every "
        "scope's open actions with a deadline, earliest first, ties by thread id"
    )
    assert everything[1].call == c2, f"an expiring action's call is {everything[1].call!r}"
    assert everything[1].input == {"options": ["red"]}, "an expiring action's input is wrong"
    assert everything[3].ref == c1.action_ref("a1", "approval"), "its ref is wrong"
    due = listed(await store.list_expiring_actions(until=soon))
    assert due == expected[:3], f"list_expiring_actions(until=soon) returned {due}"
    assert await store.list_expiring_actions(until=_T0) == [], "nothing is due at _T0"
    just = listed(await store.list_expiring_actions(until=soon - timedelta(microseconds=1)))
    assert just == expected[:1], f"a microsecond before, {just} are due"
    first_two = listed(await store.list_expiring_actions(limit=2))
    assert first_two == expected[:2], f"list_expiring_actions(limit=2) returned {first_two}"
    assert listed(await store.list_expiring_actions(until=soon, limit=1)) == expected[:1]
    # Resolving an action takes it out; a new deadline comes in.
    done = replace(output, phase="done", finish="output-available", output_action="submitted")
    async with store.transaction() as tx:
        tx.put_call(c2.model_copy(update={"record": done}))
        tx.put_call(_call(replace(_external("c7"), output_expires_at=_T0), "t2"))
    after = listed(await store.list_expiring_actions())
    assert after == [("t2", "c7", _T0), *(e for e in expected if e[1] != "c2")], (
        f"after resolving c2 and adding c7, list_expiring_actions() returned {after}"
    )


async def _check_files(store: Store) -> None:
    await _setup(store, _thread("t1"))
    file = UploadedFile(
        file_id="f1",
        filename="report.csv",
        media_type="text/csv",
        size=5,
        scope_key="scope-a",
        user_key="user-1",
        thread_id="t1",
        created_at=_T0,
        metadata={"kind": "report"},
    )
    async with store.transaction() as tx:
        tx.save_file(file, b"a,b\n\x00")
    got = await store.read_file("f1", scope_key="scope-a")
    assert got is not None, "read_file of a saved file returned None"
    assert got.file == file, f"the file's metadata did not round-trip: {got.file!r}"
    assert got.body == b"a,b\n\x00", f"the file's body did not round-trip: {got.body!r}"
    assert await store.read_file("f1", scope_key="scope-b") is None, "read across scopes"
    assert await store.read_file("f9", scope_key="scope-a") is None, "read of a missing file"
    await _expect_conflict(store, "saving a file twice", lambda tx: tx.save_file(file, b"x" * 5))
    try:
        store.transaction().save_file(file, b"")
    except ValueError:
        pass
    else:
        raise AssertionError("save_file with a size that is not len(body) must raise ValueError")


async def _check_atomicity(store: Store) -> None:
    await _setup(store, _thread("t1"))
    async with store.transaction() as tx:
        tx.put_call(_call(_external("c0")))

    def snapshot() -> Awaitable[tuple[object, ...]]:
        async def read() -> tuple[object, ...]:
            return (
                await store.list_messages("t1"),
                await store.list_runs("t1"),
                await store.list_calls("t1"),
                await store.list_threads("scope-a"),
            )

        return read()

    before = await snapshot()

    def stage_all(tx: Any) -> None:
        tx.create_thread(_thread("t2"))
        tx.append_message("t1", _text("m1", "x"))
        tx.put_run(_run("t1", "r1"))
        tx.put_call(_call(_external("c1")))

    # A conflict at the end refuses the writes before it.
    await _expect_conflict(
        store,
        "a batch ending in a conflict",
        stage_all,
        lambda tx: tx.put_call(_call(_external("c0"))),
    )
    assert await snapshot() == before, "a refused transaction wrote some of its writes"

    # An exception inside the block writes nothing.
    try:
        async with store.transaction() as tx:
            stage_all(tx)
            raise KeyError("boom")
    except KeyError:
        pass
    assert await snapshot() == before, "a transaction left by an exception wrote something"

    # Cancellation inside the block writes nothing.
    with trio.CancelScope() as scope:
        async with store.transaction() as tx:
            stage_all(tx)
            scope.cancel()
            await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught, "the cancellation was not delivered"
    assert await snapshot() == before, "a cancelled transaction wrote something"

    # A commit cancelled as it starts writes all of its batch or none of it.
    with trio.CancelScope() as scope:
        scope.cancel()
        tx = store.transaction()
        stage_all(tx)
        await store.commit(tx.writes)
    after = await snapshot()
    if after != before:
        for found in (
            await store.get_thread("t2"),
            await store.get_run("r1"),
            await store.get_call("t1", "c1"),
        ):
            assert found is not None, "a cancelled commit wrote part of its batch"

    # A transaction commits once.
    done = store.transaction()
    async with done:
        pass
    try:
        done.append_message("t1", _text("late", "x"))
    except StoreError:
        pass
    else:
        raise AssertionError("staging on an ended transaction must raise StoreError")


async def _check_concurrent_writers(store: Store) -> None:
    await _setup(store, _thread("t1"))
    async with store.transaction() as tx:
        c1 = tx.put_call(_call(_external("c1")))
    outcomes: list[str] = []

    async def write(output: str) -> None:
        record = replace(c1.record, phase="done", finish="output-available", output=output)
        try:
            async with store.transaction() as tx:
                tx.put_call(c1.model_copy(update={"record": record}))
        except StoreConflict:
            outcomes.append("conflict")
        else:
            outcomes.append(output)

    async with trio.open_nursery() as nursery:
        for output in ("x", "y", "z"):
            nursery.start_soon(write, output)
    winners = [o for o in outcomes if o != "conflict"]
    assert len(winners) == 1, f"writers of one revision: exactly one must win, got {outcomes}"
    got = await store.get_call("t1", "c1")
    assert got is not None, "the call is gone"
    assert got.record.output == winners[0], f"the winner was {winners[0]!r}, stored: {got!r}"
    assert got.revision == 2, f"one update stores revision 2, not {got.revision}"


_CHECKS: tuple[Callable[[Store], Awaitable[None]], ...] = (
    _check_threads,
    _check_messages,
    _check_runs,
    _check_calls,
    _check_pending_actions,
    _check_expiring_actions,
    _check_files,
    _check_atomicity,
    _check_concurrent_writers,
)


async def _check_reopen(open_store: StoreOpener) -> None:
    name = "_check_reopen"
    async with _opened(open_store, name) as store:
        await _setup(store, _thread("t1"))
        async with store.transaction() as tx:
            tx.append_message("t1", _text("m1", "kept"))
            tx.put_run(_run("t1", "r1", "waiting"))
            call = tx.put_call(_call(_suspended("c1", "a1")))
            tx.save_file(
                UploadedFile(
                    file_id="f1",
                    filename="a.txt",
                    media_type="text/plain",
                    size=2,
                    scope_key="scope-a",
                    created_at=_T0,
                ),
                b"hi",
            )
        with trio.CancelScope() as scope:
            async with store.transaction() as tx:
                tx.append_message("t1", _text("m2", "lost"))
                scope.cancel()
                await trio.lowlevel.checkpoint()
    async with _opened(open_store, name) as store:
        where = "after reopening"
        assert await store.get_thread("t1") == _thread("t1"), f"{where}, the thread is gone"
        messages = await store.list_messages("t1")
        assert [m.id for m in messages] == ["m1"], f"{where}, the messages are {messages!r}"
        run = await store.get_active_run("t1")
        assert run is not None, f"{where}, the active run is gone"
        assert run.revision == 1, f"{where}, the active run is {run!r}"
        assert await store.get_call("t1", "c1") == call, f"{where}, the call did not survive"
        [action] = await store.list_pending_actions("t1")
        assert action.ref.action_id == "a1", f"{where}, the pending action is {action!r}"
        [expiring] = await store.list_expiring_actions()
        assert (expiring.ref.action_id, expiring.expires_at) == (
            "a1",
            _T0 + timedelta(hours=1),
        ), f"{where}, the expiring action is {expiring!r}"
        body = await store.read_file("f1", scope_key="scope-a")
        assert body is not None, f"{where}, the file is gone"
        assert body.body == b"hi", f"{where}, the file is {body!r}"
    async with _opened(open_store, f"{name}-other") as store:
        assert await store.get_thread("t1") is None, "another name must open a fresh store"
