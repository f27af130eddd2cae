"""The :class:`SqliteStore` schema and its migrations (``PRAGMA user_version``).

``_MIGRATIONS[n]`` takes a database from version ``n`` to ``n + 1``; :func:`migrate` runs
the ones a file needs in one transaction when it is opened, and refuses a file written by a
newer release (or by another application). Kept apart from the store so that the store
module holds behaviour and this one holds data definitions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

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


_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_create_v1, _add_deadlines)
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
