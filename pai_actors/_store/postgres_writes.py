"""How :class:`~pai_actors.PostgresStore` turns a commit's writes into SQL, and says why it
refuses one.

As in ``_store.sqlite_writes``, each write is one statement with no lookup before it, and
only a refused write looks at what is stored, to raise the
:class:`~pai_actors.StoreConflict` :class:`~pai_actors.MemoryStore` raises, with the same key
and words. One difference: in PostgreSQL a statement that fails aborts the transaction, so
nothing could be looked at after it, and refusing the batch would roll back the writes it
made before (changing what the lookup sees). So no write is *meant* to fail: an insert that
would take a used key does nothing (``ON CONFLICT DO NOTHING``), one whose thread or message
is missing selects nothing to insert (``WHERE EXISTS``), an update that would make a second
active run matches no row, and a statement that wrote no row is what :func:`apply_writes`
looks into, in the transaction as it stands.

A statement can still fail when another process's transaction races this one (both make an
active run of one thread); :func:`apply_writes` then undoes the batch first and looks after.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias, assert_never

from .._core.errors import StoreConflict, StoreError
from .._core.json import JsonValue, json_text
from .._core.parts import Message
from .base import (
    AppendMessage,
    CreateThread,
    PutCall,
    PutRun,
    PutToolPart,
    ReplaceMessage,
    SaveFile,
    Write,
    check_revision,
    has_open_action,
)
from .postgres_connection import Connection, Param, ServerError, Statement
from .sqlite_writes import _message_json, _part_rows, instant_us
from .updates import PartTexts, part_text

_NeedThread: TypeAlias = Callable[[str, str], Awaitable[None]]


async def apply_writes(db: Connection, writes: Sequence[Write], *, undo: str) -> None:
    """Apply ``writes`` in order inside the open transaction. On the first that is refused,
    run ``undo`` (the statement that takes the transaction back to before them: a
    ``ROLLBACK``, or a ``ROLLBACK TO SAVEPOINT``) and raise :class:`StoreConflict`, or the
    :class:`ServerError` of a statement that failed for no reason MemoryStore has (the
    caller reports it)."""
    for write in writes:
        try:
            sql, params = statement(write)
            applied = bool(await db.execute(sql, *params))
        except ServerError as exc:
            await db.execute(undo)  # the transaction is aborted: look once it is not
            if exc.integrity:  # another process's transaction raced this one
                await _refuse(db, write)
            raise
        if not applied:
            try:
                await _refuse(db, write)  # in the transaction as the write found it
            finally:
                if not db.broken:  # (a broken connection's transaction ends with it)
                    await db.execute(undo)
            raise StoreError(
                f"PostgreSQL wrote no row for a {type(write).__name__}, yet nothing conflicts"
            )


def statement(write: Write, texts: PartTexts | None = None) -> Statement:
    """The one statement that applies ``write``; it writes no row when the write is refused
    (:func:`apply_writes` then looks into why). ``texts``: its parts' JSON, shared with the
    commit's log of updates (``_store.updates.part_text``)."""
    if isinstance(write, PutCall):  # the most frequent write first
        call, stored = write.call, write.stored
        text = stored.model_dump_json()
        is_open = has_open_action(stored)
        expires_us = instant_us(stored.record.expires_at)
        if call.revision == 0:
            return _sql(
                "INSERT INTO calls (thread_id, tool_call_id, revision, open, json, expires_us)"
                " SELECT $1, $2, $3, $4, $5, $6::bigint WHERE EXISTS"
                " (SELECT 1 FROM threads WHERE thread_id = $1) ON CONFLICT DO NOTHING",
                call.thread_id,
                call.tool_call_id,
                stored.revision,
                is_open,
                text,
                expires_us,
            )
        return _sql(
            "UPDATE calls SET revision = $1, open = $2, json = $3, expires_us = $4::bigint"
            " WHERE thread_id = $5 AND tool_call_id = $6 AND revision = $7",
            stored.revision,
            is_open,
            text,
            expires_us,
            call.thread_id,
            call.tool_call_id,
            call.revision,
        )
    if isinstance(write, PutToolPart):
        return _sql(
            "INSERT INTO parts (thread_id, message_id, key, position, json)"
            " SELECT $1, $2, $3, (SELECT coalesce(max(position), -1) + 1 FROM parts"
            " WHERE thread_id = $1 AND message_id = $2), $4"
            " WHERE EXISTS (SELECT 1 FROM messages WHERE thread_id = $1 AND message_id = $2)"
            " ON CONFLICT (thread_id, message_id, key) DO UPDATE SET json = excluded.json",
            write.thread_id,
            write.message_id,
            write.part.tool_call_id,
            part_text(write.part, texts),
        )
    if isinstance(write, CreateThread):
        record = write.thread
        return _sql(
            "INSERT INTO threads (thread_id, scope_key, json) VALUES ($1, $2, $3)"
            " ON CONFLICT DO NOTHING",
            record.thread_id,
            record.scope_key,
            record.model_dump_json(),
        )
    if isinstance(write, AppendMessage):
        return _sql(
            "WITH message AS (INSERT INTO messages (thread_id, message_id, json)"
            " SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM threads WHERE thread_id = $1)"
            " ON CONFLICT DO NOTHING RETURNING 1),"
            f" parts AS (INSERT INTO parts (thread_id, message_id, key, position, json)"
            f" SELECT $1, $2, key, position, json FROM {_PARTS}"
            " WHERE EXISTS (SELECT 1 FROM message))"
            " SELECT 1 FROM message",
            write.thread_id,
            write.message.id,
            _message_json(write.message),
            _parts_json(write.thread_id, write.message, texts),
        )
    if isinstance(write, ReplaceMessage):
        # A turn's next step keeps the parts before it: rows that did not change are not
        # written again (an assistant message grows by a step at a time).
        return _sql(
            "WITH message AS (UPDATE messages SET json = $3"
            " WHERE thread_id = $1 AND message_id = $2 RETURNING 1),"
            f" new AS (SELECT * FROM {_PARTS}),"
            " gone AS (DELETE FROM parts WHERE thread_id = $1 AND message_id = $2"
            " AND key NOT IN (SELECT key FROM new) AND EXISTS (SELECT 1 FROM message)),"
            " put AS (INSERT INTO parts (thread_id, message_id, key, position, json)"
            " SELECT $1, $2, key, position, json FROM new WHERE EXISTS (SELECT 1 FROM message)"
            " ON CONFLICT (thread_id, message_id, key) DO UPDATE"
            " SET position = excluded.position, json = excluded.json"
            " WHERE parts.position <> excluded.position OR parts.json <> excluded.json)"
            " SELECT 1 FROM message",
            write.thread_id,
            write.message.id,
            _message_json(write.message),
            _parts_json(write.thread_id, write.message, texts),
        )
    if isinstance(write, PutRun):
        run, new = write.run, write.stored
        text = new.model_dump_json()
        if run.revision == 0:  # a second active run of the thread: the index's conflict
            return _sql(
                "INSERT INTO runs (run_id, thread_id, revision, active, json)"
                " SELECT $1, $2, $3, $4, $5 WHERE EXISTS"
                " (SELECT 1 FROM threads WHERE thread_id = $2) ON CONFLICT DO NOTHING",
                run.run_id,
                run.thread_id,
                new.revision,
                new.active,
                text,
            )
        return _sql(
            "UPDATE runs SET revision = $1, active = $2, json = $3"
            " WHERE run_id = $4 AND revision = $5 AND thread_id = $6 AND NOT ($2 AND EXISTS"
            " (SELECT 1 FROM runs other WHERE other.thread_id = $6 AND other.active"
            " AND other.run_id <> $4))",
            new.revision,
            new.active,
            text,
            run.run_id,
            run.revision,
            run.thread_id,
        )
    if isinstance(write, SaveFile):
        file = write.file
        return _sql(
            "INSERT INTO files (file_id, scope_key, json, body) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT DO NOTHING",
            file.file_id,
            file.scope_key,
            file.model_dump_json(),
            write.body,
        )
    assert_never(write)


def _sql(sql: str, *params: Param) -> Statement:
    return sql, params


_PARTS = "json_to_recordset($4::json) AS p(key text, position integer, json text)"
"""A message's part rows, from :func:`_parts_json`'s parameter."""


def _parts_json(thread_id: str, message: Message, texts: PartTexts | None = None) -> str:
    """A message's part rows as JSON, one row per key: the first position and the last part
    of a key used twice, as SQLite's upsert keeps (PostgreSQL refuses to upsert one row twice
    in a statement)."""
    rows: dict[str, dict[str, JsonValue]] = {}
    for _, _, key, position, text in _part_rows(thread_id, message, texts):
        rows.setdefault(key, {"key": key, "position": position})["json"] = text
    return json_text(list(rows.values()))


async def _refuse(db: Connection, write: Write) -> None:
    """Raise the :class:`StoreConflict` MemoryStore raises for ``write``, which the store
    refused (its own statement changed nothing); return if there is none."""

    async def need_thread(thread_id: str, key: str) -> None:
        if not await db.fetch("SELECT 1 FROM threads WHERE thread_id = $1", thread_id):
            raise StoreConflict(key, f"its thread {thread_id!r} does not exist; create it first")

    async def has_message(thread_id: str, message_id: str) -> bool:
        return bool(
            await db.fetch(
                "SELECT 1 FROM messages WHERE thread_id = $1 AND message_id = $2",
                thread_id,
                message_id,
            )
        )

    if isinstance(write, PutCall):
        call = write.call
        key = f"call {call.tool_call_id!r}"
        found = await db.fetch(
            "SELECT revision FROM calls WHERE thread_id = $1 AND tool_call_id = $2",
            call.thread_id,
            call.tool_call_id,
        )
        if not found:
            await need_thread(call.thread_id, key)
        check_revision(found[0][0] if found else None, call.revision, key)
    elif isinstance(write, PutToolPart):
        key = f"message {write.message_id!r}"
        if not await has_message(write.thread_id, write.message_id):
            await need_thread(write.thread_id, key)
            raise StoreConflict(key, "does not exist; append it before putting parts in it")
    elif isinstance(write, CreateThread):
        thread_id = write.thread.thread_id
        if await db.fetch("SELECT 1 FROM threads WHERE thread_id = $1", thread_id):
            raise StoreConflict(f"thread {thread_id!r}", "already exists; a thread is created once")
    elif isinstance(write, AppendMessage):
        key = f"message {write.message.id!r}"
        await need_thread(write.thread_id, key)
        if await has_message(write.thread_id, write.message.id):
            raise StoreConflict(key, "already exists; use replace_message to change it")
    elif isinstance(write, ReplaceMessage):
        key = f"message {write.message.id!r}"
        await need_thread(write.thread_id, key)
        if not await has_message(write.thread_id, write.message.id):
            raise StoreConflict(key, "does not exist; use append_message to add it")
    elif isinstance(write, PutRun):
        await _refuse_run(db, write, need_thread)
    elif isinstance(write, SaveFile):
        file_id = write.file.file_id
        if await db.fetch("SELECT 1 FROM files WHERE file_id = $1", file_id):
            raise StoreConflict(f"file {file_id!r}", "already exists; a file is saved once")
    else:
        assert_never(write)


async def _refuse_run(db: Connection, write: PutRun, need_thread: _NeedThread) -> None:
    run = write.run
    key = f"run {run.run_id!r}"
    found = await db.fetch("SELECT revision, thread_id FROM runs WHERE run_id = $1", run.run_id)
    check_revision(found[0][0] if found else None, run.revision, key)
    if found and found[0][1] != run.thread_id:
        raise StoreConflict(
            key, f"belongs to thread {found[0][1]!r}; it cannot move to {run.thread_id!r}"
        )
    if not found:
        await need_thread(run.thread_id, key)
    if write.stored.active:
        other = await db.fetch(
            "SELECT run_id, json FROM runs WHERE thread_id = $1 AND active AND run_id <> $2",
            run.thread_id,
            run.run_id,
        )
        if other:
            raise StoreConflict(
                key,
                f"thread {run.thread_id!r} already has the active run {other[0][0]!r} "
                f"({json.loads(other[0][1])['status']}); a thread has one run at a time, end "
                "that one first",
            )
