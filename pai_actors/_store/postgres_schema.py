"""The :class:`~pai_actors.PostgresStore` schema and its migrations (table ``pai_schema``).

The tables, columns and indexes are SQLite's (``_store.sqlite_schema``), in PostgreSQL's
types: ``BIGINT`` revisions and deadlines, ``BOOLEAN`` flags, ``BYTEA`` file bodies, and ids
in the ``"C"`` collation, so that ids order by code point as they do in SQLite and in
:class:`~pai_actors.MemoryStore` whatever the database's locale. Two differences, both
about ``seq``: it is an identity column (a sequence) rather than one more than the largest
of the thread's, so that writers in several processes never draw the same number and an
insert reads nothing first; its values are increasing, not consecutive, which is all
ordering needs.

The schema version is the one row of ``pai_schema``; ``_MIGRATIONS[n]`` takes a database
from version ``n`` to ``n + 1``, the same steps as SQLite's (no PostgreSQL store was released
at versions 1 or 2, but a database migrates forward the same way). :func:`migrate` runs
those a database needs in one transaction when a store opens, holding a transaction-level
advisory lock, so that two processes opening one database at once migrate it once; it
refuses a database written by a newer release, or by another application.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence

from .._core.errors import StoreError
from . import sqlite_schema
from .postgres_connection import Connection, Param, Row

_SCHEMA_V1 = """
CREATE TABLE threads (
    thread_id TEXT COLLATE "C" PRIMARY KEY,
    scope_key TEXT COLLATE "C" NOT NULL,
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    json TEXT NOT NULL
);
CREATE INDEX threads_by_scope ON threads (scope_key, seq);
CREATE TABLE messages (
    thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (thread_id),
    message_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    json TEXT NOT NULL,
    PRIMARY KEY (thread_id, message_id)
);
CREATE INDEX messages_in_order ON messages (thread_id, seq);
CREATE TABLE parts (
    thread_id TEXT COLLATE "C" NOT NULL,
    message_id TEXT COLLATE "C" NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    position INTEGER NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (thread_id, message_id, key),
    FOREIGN KEY (thread_id, message_id) REFERENCES messages (thread_id, message_id)
);
CREATE INDEX parts_in_order ON parts (thread_id, message_id, position);
CREATE TABLE runs (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (thread_id),
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    revision BIGINT NOT NULL,
    active BOOLEAN NOT NULL,
    json TEXT NOT NULL
);
CREATE INDEX runs_in_order ON runs (thread_id, seq);
CREATE UNIQUE INDEX runs_one_active ON runs (thread_id) WHERE active;
CREATE TABLE calls (
    thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (thread_id),
    tool_call_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    revision BIGINT NOT NULL,
    open BOOLEAN NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (thread_id, tool_call_id)
);
CREATE INDEX calls_in_order ON calls (thread_id, seq);
CREATE INDEX calls_open ON calls (thread_id, seq) WHERE open;
CREATE TABLE files (
    file_id TEXT COLLATE "C" PRIMARY KEY,
    scope_key TEXT COLLATE "C" NOT NULL,
    json TEXT NOT NULL,
    body BYTEA NOT NULL
);
"""


def _create_v1(db: Connection) -> None:
    db.execute_blocking(_SCHEMA_V1)


def _add_deadlines(db: Connection) -> None:
    """Version 2: ``calls.expires_us``, as SQLite's ``_add_deadlines`` (its docstring)."""
    db.execute_blocking(
        "ALTER TABLE calls ADD COLUMN expires_us BIGINT;"
        " CREATE INDEX calls_expiring ON calls (expires_us, thread_id, seq)"
        " WHERE expires_us IS NOT NULL"
    )


def _one_message_per_turn(db: Connection) -> None:
    """Version 3: one assistant message per turn, by SQLite's own step
    (``sqlite_schema._one_message_per_turn``), given this connection in sqlite3's shape.
    Its statements are plain SQL both databases run (``?`` placeholders aside); the step
    reads and rewrites the JSON in Python, so sharing it keeps the two stores' merges one."""
    sqlite_schema._one_message_per_turn(_SqliteShaped(db))  # type: ignore[arg-type]  # duck


class _SqliteShaped:
    """The part of ``sqlite3.Connection`` a shared migration step calls: ``execute`` (whose
    result is iterated or ``fetchall``-ed) and ``executemany``, with ``?`` placeholders."""

    def __init__(self, db: Connection) -> None:
        self._db = db

    def execute(self, sql: str, params: Sequence[Param] = ()) -> _Fetched:
        return _Fetched(self._db.fetch_blocking(_numbered(sql), *params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Param]]) -> None:
        for params in rows:
            self._db.execute_blocking(_numbered(sql), *params)


class _Fetched(list[Row]):
    def fetchall(self) -> list[Row]:
        return self


def _numbered(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...`` (the shared steps quote no ``?``)."""
    numbers = itertools.count(1)
    return re.sub(r"\?", lambda _: f"${next(numbers)}", sql)


_MIGRATIONS: tuple[Callable[[Connection], None], ...] = (
    _create_v1,
    _add_deadlines,
    _one_message_per_turn,
)
"""``_MIGRATIONS[n]`` takes a database from schema version ``n`` to ``n + 1``, inside the
opening transaction: the steps of ``sqlite_schema._MIGRATIONS``, one for one. A new schema
version appends one step here and there; released steps never change."""

SCHEMA_VERSION = len(_MIGRATIONS)

_MIGRATION_LOCK = 0x7061695F73636865  # "pai_sche": the advisory lock key of a migration


def migrate(db: Connection, name: str, also: str | None = None) -> None:
    """Bring the database to :data:`SCHEMA_VERSION` in one transaction, or refuse it.
    ``name`` names the database in the refusals (a URL without its password). ``also``:
    statements to run in the same transaction, under the same lock (what a store adds
    beside the schema, such as the nodes' leases table)."""
    db.execute_blocking("BEGIN")
    try:
        # Held until COMMIT or ROLLBACK: another process opening the database meanwhile
        # waits here, then finds the version this one wrote.
        db.execute_blocking("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        version = _version(db)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{name!r} has schema version {version}, written by a newer pai_actors; this "
                f"release reads versions up to {SCHEMA_VERSION}: upgrade pai_actors to open it "
                "(nothing was changed)"
            )
        if version == 0 and _has_tables(db):
            raise StoreError(
                f"{name!r} holds tables but no pai_actors schema version (no pai_schema "
                "table in its schema): it is not a pai_actors store; give PostgresStore a "
                "new or a pai_actors database"
            )
        if version == 0:
            db.execute_blocking(
                "CREATE TABLE pai_schema (version INTEGER NOT NULL,"
                " one_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one_row));"
                " INSERT INTO pai_schema (version) VALUES (0)"
            )
        for step in _MIGRATIONS[version:]:
            step(db)
        if version != SCHEMA_VERSION:
            db.execute_blocking("UPDATE pai_schema SET version = $1", SCHEMA_VERSION)
        if also is not None:
            db.execute_blocking(also)
        db.execute_blocking("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute_blocking("ROLLBACK")
        raise


def _version(db: Connection) -> int:
    """The stored schema version; 0 for a database without a ``pai_schema`` table."""
    [(exists,)] = db.fetch_blocking("SELECT to_regclass('pai_schema') IS NOT NULL")
    if not exists:
        return 0
    rows = db.fetch_blocking("SELECT version FROM pai_schema")
    return int(rows[0][0]) if rows else 0


def _has_tables(db: Connection) -> bool:
    """Whether the schema the store's tables would go in (the first of the connection's
    ``search_path``) holds any table or view."""
    [(count,)] = db.fetch_blocking(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
    )
    return bool(count)
