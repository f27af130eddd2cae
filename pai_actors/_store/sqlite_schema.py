"""The :class:`SqliteStore` schema and its migrations (``PRAGMA user_version``).

``_MIGRATIONS[n]`` takes a database from version ``n`` to ``n + 1``; :func:`migrate` runs
the ones a file needs in one transaction when it is opened, and refuses a file written by a
newer release (or by another application). Kept apart from the store so that the store
module holds behaviour and this one holds data definitions.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from .._core.errors import StoreError

_SCHEMA_V1 = """
CREATE TABLE threads (
    thread_id TEXT PRIMARY KEY,
    scope_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    json TEXT NOT NULL
);
CREATE INDEX threads_by_scope ON threads (scope_key, seq);
CREATE TABLE messages (
    thread_id TEXT NOT NULL REFERENCES threads (thread_id),
    message_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (thread_id, message_id)
);
CREATE INDEX messages_in_order ON messages (thread_id, seq);
CREATE TABLE parts (
    thread_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (thread_id, message_id, key),
    FOREIGN KEY (thread_id, message_id) REFERENCES messages (thread_id, message_id)
);
CREATE INDEX parts_in_order ON parts (thread_id, message_id, position);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads (thread_id),
    seq INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    active INTEGER NOT NULL,
    json TEXT NOT NULL
);
CREATE INDEX runs_in_order ON runs (thread_id, seq);
CREATE UNIQUE INDEX runs_one_active ON runs (thread_id) WHERE active = 1;
CREATE TABLE calls (
    thread_id TEXT NOT NULL REFERENCES threads (thread_id),
    tool_call_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    open INTEGER NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (thread_id, tool_call_id)
);
CREATE INDEX calls_in_order ON calls (thread_id, seq);
CREATE INDEX calls_open ON calls (thread_id, seq) WHERE open = 1;
CREATE TABLE files (
    file_id TEXT PRIMARY KEY,
    scope_key TEXT NOT NULL,
    json TEXT NOT NULL,
    body BLOB NOT NULL
);
"""


def _create_v1(db: sqlite3.Connection) -> None:
    for statement in _SCHEMA_V1.split(";"):
        if statement.strip():
            db.execute(statement)


def _add_deadlines(db: sqlite3.Connection) -> None:
    """Version 2: ``calls.expires_us``, the deadline of a call's pending action (microseconds
    since the Unix epoch, UTC; ``NULL``: none), indexed for the runtime's deadline timer.
    Calls stored before version 2 have no deadline, so ``NULL`` is right for all of them."""
    db.execute("ALTER TABLE calls ADD COLUMN expires_us INTEGER")
    db.execute(
        "CREATE INDEX calls_expiring ON calls (expires_us, thread_id, seq)"
        " WHERE expires_us IS NOT NULL"
    )


def _one_message_per_turn(db: sqlite3.Connection) -> None:
    """Version 3: an assistant message holds a turn. Until version 2 every model step was an
    assistant message of its own; now each run of consecutive assistant messages of a thread
    becomes one, with the first one's id, each step's parts after a step-start part, its
    ``usage`` metadata summed over the steps (``providerMetadata``: the latest step's). The
    calls (``message_id``) and sub-agent threads (``parent.message_id``) that named a merged
    message name the turn's."""
    renamed: dict[tuple[str, str], str] = {}  # (thread id, old message id) -> the turn's
    for (thread_id,) in db.execute("SELECT thread_id FROM threads").fetchall():
        rows = db.execute(
            "SELECT message_id, json FROM messages WHERE thread_id = ? ORDER BY seq",
            (thread_id,),
        ).fetchall()
        turn: list[tuple[str, dict[str, Any]]] = []
        for message_id, text in [*rows, (None, '{"role": null}')]:
            message = json.loads(text)
            if message["role"] == "assistant":
                turn.append((message_id, message))
                continue
            if turn:
                _merge_turn(db, thread_id, turn)
                renamed.update({(thread_id, old): turn[0][0] for old, _ in turn[1:]})
                turn = []
    if not renamed:
        return
    for thread_id, tool_call_id, text in db.execute(
        "SELECT thread_id, tool_call_id, json FROM calls"
    ).fetchall():
        call = json.loads(text)
        turn_id = renamed.get((thread_id, call["message_id"]))
        if turn_id is not None:
            call["message_id"] = turn_id
            db.execute(
                "UPDATE calls SET json = ? WHERE thread_id = ? AND tool_call_id = ?",
                (json.dumps(call), thread_id, tool_call_id),
            )
    for thread_id, text in db.execute("SELECT thread_id, json FROM threads").fetchall():
        thread = json.loads(text)
        parent = thread.get("parent")
        turn_id = (
            None if parent is None else renamed.get((parent["thread_id"], parent["message_id"]))
        )
        if turn_id is not None:
            parent["message_id"] = turn_id
            db.execute(
                "UPDATE threads SET json = ? WHERE thread_id = ?", (json.dumps(thread), thread_id)
            )


def _merge_turn(
    db: sqlite3.Connection, thread_id: str, turn: list[tuple[str, dict[str, Any]]]
) -> None:
    """Write the assistant messages ``turn`` (id, stored JSON; in order) as its first one."""
    turn_id, merged = turn[0]
    parts: list[dict[str, Any]] = []
    usage: dict[str, int] = {}
    metadata = dict(merged.get("metadata") or {})
    for message_id, message in turn:
        parts.append({"type": "step-start"})
        parts.extend(
            json.loads(text)
            for (text,) in db.execute(
                "SELECT json FROM parts WHERE thread_id = ? AND message_id = ? ORDER BY position",
                (thread_id, message_id),
            )
        )
        step = message.get("metadata") or {}
        for key, value in (step.get("usage") or {}).items():
            usage[key] = usage.get(key, 0) + value
        if "providerMetadata" in step:
            metadata["providerMetadata"] = step["providerMetadata"]
        db.execute(
            "DELETE FROM parts WHERE thread_id = ? AND message_id = ?", (thread_id, message_id)
        )
        if message_id != turn_id:
            db.execute(
                "DELETE FROM messages WHERE thread_id = ? AND message_id = ?",
                (thread_id, message_id),
            )
    if usage:
        metadata["usage"] = usage
    if metadata:
        merged["metadata"] = metadata
    db.execute(
        "UPDATE messages SET json = ? WHERE thread_id = ? AND message_id = ?",
        (json.dumps(merged), thread_id, turn_id),
    )
    db.executemany(
        "INSERT INTO parts (thread_id, message_id, key, position, json) VALUES (?, ?, ?, ?, ?)",
        [
            (
                thread_id,
                turn_id,
                part["toolCallId"] if "toolCallId" in part else f"#{index}",
                index,
                json.dumps(part),
            )
            for index, part in enumerate(parts)
        ],
    )


_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _create_v1,
    _add_deadlines,
    _one_message_per_turn,
)
"""``_MIGRATIONS[n]`` takes a database from schema version ``n`` to ``n + 1``, inside the
opening transaction. A new schema version appends one step; released steps never change."""

SCHEMA_VERSION = len(_MIGRATIONS)


def migrate(db: sqlite3.Connection, path: str) -> None:
    """Bring the database to :data:`SCHEMA_VERSION` in one transaction, or refuse it."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path!r} has schema version {version}, written by a newer pai_actors; this "
                f"release reads versions up to {SCHEMA_VERSION}: upgrade pai_actors to open it "
                "(nothing was changed)"
            )
        if version == 0 and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise StoreError(
                f"{path!r} holds tables but no pai_actors schema version (user_version 0): it "
                "is not a pai_actors store; give SqliteStore a new or a pai_actors file"
            )
        for migrate in _MIGRATIONS[version:]:
            migrate(db)
        if version != SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
