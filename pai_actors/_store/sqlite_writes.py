"""How :class:`~pai_actors.SqliteStore` turns a commit's writes into SQL, and says why it
refuses one.

Each write is one statement, with no lookup before it: an insert that a primary key, a foreign
key (the store's connection has ``foreign_keys=ON``) or the one-active-run index refuses when
it conflicts, or an update conditioned on the stored revision, which matches no row when the
writer's revision is stale. Only a refused write looks at what is stored, to raise the
:class:`~pai_actors.StoreConflict` :class:`~pai_actors.MemoryStore` raises, with the same key
and words. Kept apart from the store: the store module holds the connection, group commit,
checkpoints and reads; this one holds what a write means in SQL.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import assert_never

from .._core.errors import StoreConflict, StoreError
from .._core.json import json_text
from .._core.parts import Message, ToolPart
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
from .updates import PartTexts, part_text


def apply_writes(db: sqlite3.Connection, writes: Sequence[Write]) -> None:
    """Apply ``writes`` in order inside the open transaction; :class:`StoreConflict` for the
    first that conflicts (the caller rolls back).

    Each write is one statement that the schema's keys refuse when it conflicts (a primary
    key taken, a foreign key missing, a second active run of a thread) or that matches no
    row (an update of a stale revision): no lookup before it. Only a refused write looks,
    in :func:`_refuse`, to say why in MemoryStore's words."""
    for write in writes:
        try:
            applied = _write_one(db, write)
        except sqlite3.IntegrityError:
            _refuse(db, write)
            raise  # refused for no reason MemoryStore has: the caller reports a StoreError
        if not applied:
            _refuse(db, write)
            raise StoreError(
                f"SQLite matched no row for a {type(write).__name__}, yet nothing conflicts"
            )


def _write_one(db: sqlite3.Connection, write: Write) -> bool:
    """Write one ``write``; ``False`` if it is an update that matched no row."""
    if isinstance(write, PutCall):  # the most frequent write first
        call, stored = write.call, write.stored
        text = stored.model_dump_json()
        is_open = int(has_open_action(stored))
        expires_us = instant_us(stored.record.expires_at)
        if call.revision == 0:
            db.execute(
                "INSERT INTO calls (thread_id, tool_call_id, seq, revision, open, json,"
                " expires_us) VALUES (?1, ?2, (SELECT coalesce(max(seq), 0) + 1 FROM calls"
                " WHERE thread_id = ?1), ?3, ?4, ?5, ?6)",
                (call.thread_id, call.tool_call_id, stored.revision, is_open, text, expires_us),
            )
        elif not db.execute(
            "UPDATE calls SET revision = ?, open = ?, json = ?, expires_us = ?"
            " WHERE thread_id = ? AND tool_call_id = ? AND revision = ?",
            (
                stored.revision,
                is_open,
                text,
                expires_us,
                call.thread_id,
                call.tool_call_id,
                call.revision,
            ),
        ).rowcount:
            return False
    elif isinstance(write, PutToolPart):
        db.execute(
            "INSERT INTO parts (thread_id, message_id, key, position, json)"
            " VALUES (?1, ?2, ?3, (SELECT coalesce(max(position), -1) + 1 FROM parts"
            " WHERE thread_id = ?1 AND message_id = ?2), ?4)"
            " ON CONFLICT DO UPDATE SET json = excluded.json",
            (
                write.thread_id,
                write.message_id,
                write.part.tool_call_id,
                part_text(write.part),
            ),
        )
    elif isinstance(write, CreateThread):
        record = write.thread
        db.execute(
            "INSERT INTO threads (thread_id, scope_key, seq, json) VALUES (?1, ?2,"
            " (SELECT coalesce(max(seq), 0) + 1 FROM threads WHERE scope_key = ?2), ?3)",
            (record.thread_id, record.scope_key, record.model_dump_json()),
        )
    elif isinstance(write, AppendMessage):
        message = write.message
        db.execute(
            "INSERT INTO messages (thread_id, message_id, seq, json) VALUES (?1, ?2,"
            " (SELECT coalesce(max(seq), 0) + 1 FROM messages WHERE thread_id = ?1), ?3)",
            (write.thread_id, message.id, _message_json(message)),
        )
        db.executemany(_INSERT_PART, _part_rows(write.thread_id, message))
    elif isinstance(write, ReplaceMessage):
        message = write.message
        if not db.execute(
            "UPDATE messages SET json = ? WHERE thread_id = ? AND message_id = ?",
            (_message_json(message), write.thread_id, message.id),
        ).rowcount:
            return False
        # A turn's next step keeps the parts before it: rows that did not change are not
        # written again (an assistant message grows by a step at a time).
        rows = _part_rows(write.thread_id, message)
        db.execute(
            "DELETE FROM parts WHERE thread_id = ? AND message_id = ?"
            " AND key NOT IN (SELECT value FROM json_each(?))",
            (write.thread_id, message.id, json_text([row[2] for row in rows])),
        )
        db.executemany(_UPSERT_PART, rows)
    elif isinstance(write, PutRun):
        run, new = write.run, write.stored
        text = new.model_dump_json()
        if run.revision == 0:
            db.execute(
                "INSERT INTO runs (run_id, thread_id, seq, revision, active, json) VALUES"
                " (?1, ?2, (SELECT coalesce(max(seq), 0) + 1 FROM runs WHERE thread_id = ?2),"
                " ?3, ?4, ?5)",
                (run.run_id, run.thread_id, new.revision, int(new.active), text),
            )
        elif not db.execute(
            "UPDATE runs SET revision = ?, active = ?, json = ?"
            " WHERE run_id = ? AND revision = ? AND thread_id = ?",
            (new.revision, int(new.active), text, run.run_id, run.revision, run.thread_id),
        ).rowcount:
            return False
    elif isinstance(write, SaveFile):
        file = write.file
        db.execute(
            "INSERT INTO files (file_id, scope_key, json, body) VALUES (?, ?, ?, ?)",
            (file.file_id, file.scope_key, file.model_dump_json(), write.body),
        )
    else:
        assert_never(write)
    return True


def _refuse(db: sqlite3.Connection, write: Write) -> None:
    """Raise the :class:`StoreConflict` MemoryStore raises for ``write``, which the store
    refused (its own statement changed nothing); return if there is none."""

    def need_thread(thread_id: str, key: str) -> None:
        if not db.execute("SELECT 1 FROM threads WHERE thread_id = ?", (thread_id,)).fetchone():
            raise StoreConflict(key, f"its thread {thread_id!r} does not exist; create it first")

    def has_message(thread_id: str, message_id: str) -> bool:
        return bool(
            db.execute(
                "SELECT 1 FROM messages WHERE thread_id = ? AND message_id = ?",
                (thread_id, message_id),
            ).fetchone()
        )

    if isinstance(write, PutCall):
        call = write.call
        key = f"call {call.tool_call_id!r}"
        found = db.execute(
            "SELECT revision FROM calls WHERE thread_id = ? AND tool_call_id = ?",
            (call.thread_id, call.tool_call_id),
        ).fetchone()
        if found is None:
            need_thread(call.thread_id, key)
        check_revision(None if found is None else found[0], call.revision, key)
    elif isinstance(write, PutToolPart):
        key = f"message {write.message_id!r}"
        if not has_message(write.thread_id, write.message_id):
            need_thread(write.thread_id, key)
            raise StoreConflict(key, "does not exist; append it before putting parts in it")
    elif isinstance(write, CreateThread):
        thread_id = write.thread.thread_id
        if db.execute("SELECT 1 FROM threads WHERE thread_id = ?", (thread_id,)).fetchone():
            raise StoreConflict(f"thread {thread_id!r}", "already exists; a thread is created once")
    elif isinstance(write, AppendMessage):
        key = f"message {write.message.id!r}"
        need_thread(write.thread_id, key)
        if has_message(write.thread_id, write.message.id):
            raise StoreConflict(key, "already exists; use replace_message to change it")
    elif isinstance(write, ReplaceMessage):
        key = f"message {write.message.id!r}"
        need_thread(write.thread_id, key)
        if not has_message(write.thread_id, write.message.id):
            raise StoreConflict(key, "does not exist; use append_message to add it")
    elif isinstance(write, PutRun):
        _refuse_run(db, write, need_thread)
    elif isinstance(write, SaveFile):
        file_id = write.file.file_id
        if db.execute("SELECT 1 FROM files WHERE file_id = ?", (file_id,)).fetchone():
            raise StoreConflict(f"file {file_id!r}", "already exists; a file is saved once")
    else:
        assert_never(write)


def _refuse_run(
    db: sqlite3.Connection, write: PutRun, need_thread: Callable[[str, str], None]
) -> None:
    run = write.run
    key = f"run {run.run_id!r}"
    found = db.execute(
        "SELECT revision, thread_id FROM runs WHERE run_id = ?", (run.run_id,)
    ).fetchone()
    check_revision(None if found is None else found[0], run.revision, key)
    if found is not None and found[1] != run.thread_id:
        raise StoreConflict(
            key, f"belongs to thread {found[1]!r}; it cannot move to {run.thread_id!r}"
        )
    if found is None:
        need_thread(run.thread_id, key)
    if write.stored.active:
        other = db.execute(
            "SELECT run_id, json FROM runs WHERE thread_id = ? AND active = 1 AND run_id != ?",
            (run.thread_id, run.run_id),
        ).fetchone()
        if other is not None:
            raise StoreConflict(
                key,
                f"thread {run.thread_id!r} already has the active run {other[0]!r} "
                f"({json.loads(other[1])['status']}); a thread has one run at a time, end "
                "that one first",
            )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant_us(at: datetime | None) -> int | None:
    """``at`` as whole microseconds since the Unix epoch (``calls.expires_us``); exact, so
    that SQLite orders and compares deadlines as the datetimes compare."""
    return None if at is None else (at - _EPOCH) // timedelta(microseconds=1)


def _part_rows(
    thread_id: str, message: Message, texts: PartTexts | None = None
) -> list[tuple[str, str, str, int, str]]:
    return [
        (
            thread_id,
            message.id,
            part.tool_call_id if isinstance(part, ToolPart) else f"#{index}",
            index,
            part_text(part, texts),
        )
        for index, part in enumerate(message.parts)
    ]


def _message_json(message: Message) -> str:
    return json_text(message.to_wire(parts=False))


_UPSERT_PART = (
    "INSERT INTO parts (thread_id, message_id, key, position, json) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT DO UPDATE SET position = excluded.position, json = excluded.json"
    " WHERE position != excluded.position OR json != excluded.json"
)

_INSERT_PART = (
    "INSERT INTO parts (thread_id, message_id, key, position, json) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT DO UPDATE SET json = excluded.json"
)
