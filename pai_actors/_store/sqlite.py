""":class:`SqliteStore`: the durable :class:`~pai_actors.Store`, one SQLite file per store.

It behaves exactly as :class:`~pai_actors.MemoryStore` does (the same conflicts, the same
orders, checked by the same conformance suite), with the data in a file that outlives the
process. Schema (version 2, kept in ``PRAGMA user_version``)::

    threads(thread_id PK, scope_key, seq, json)           seq orders a scope's threads
    messages(thread_id, message_id, seq, json)            json: the message without parts
    parts(thread_id, message_id, key, position, json)     one row per part, keyed like
                                                          MemoryStore's (tool call id, "#i")
    runs(run_id PK, thread_id, seq, revision, active, json)
    calls(thread_id, tool_call_id, seq, revision, open, json, expires_us)
                                                          open: holds pending actions;
                                                          expires_us: their deadline (v2)
    files(file_id PK, scope_key, json, body)

``json`` is the record's pydantic JSON (a message's and a part's wire JSON); the other columns
are what lookups, ordering and conflict checks need, written from the record in the same
statement, so they never disagree with it. A part has its own row, so putting one tool part
of a large message writes one row. The keys do the conflict checks: each write is one
statement that a primary key, a foreign key (``foreign_keys=ON``) or the one-active-run index
refuses, or an update conditioned on the stored revision (see ``_store.sqlite_writes``).

Why synchronous calls on the trio thread, not ``trio.to_thread``: everything here must run
under ``trio.testing.MockClock(autojump_threshold=0)``, where a thread hop looks idle and
makes the clock jump (spurious timeouts), and a WAL commit with ``synchronous=NORMAL``
costs tens of microseconds, less than a thread hop. Each method is one short SQLite
transaction between trio checkpoints, so it is atomic with respect to other tasks and to
cancellation, as ``MemoryStore``'s are (a read of a thread the store last touched runs no
query at all: ``sqlite_mirror`` answers it). The price: what SQLite waits for blocks the trio
thread, namely the fsync of every commit under ``synchronous=FULL`` (0.15 to several
milliseconds, by disk).

WAL checkpoints (copying the log into the database file, with an fsync of each) are not the
trio thread's: the store's connection has ``wal_autocheckpoint=0``, and a
:class:`_Checkpointer` thread with its own connection runs ``wal_checkpoint(PASSIVE)`` when
the store tells it enough rows changed. It never calls into trio and the store never waits
for it (a PASSIVE checkpoint takes no lock a writer needs), so the clock rule above holds.
The log restarts from its beginning only when a write begins with the log wholly copied;
a checkpoint that overlaps the trio thread's next commit leaves it a few frames short, so
the thread retries at once a few times, and past :data:`_WAL_LIMIT` rows the store copies
the rest itself, after a commit, where no write of this process can overlap it (a few
frames by then, since the thread copied the bulk): the log stays bounded whatever the
timing. Neither ever waits for a reader, so a reader that holds an old snapshot keeps the
log from restarting as it does with SQLite's own checkpoints, and never delays a commit.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import sqlite3
import weakref
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal, TypeVar

import pydantic
import trio

from .._core.errors import StoreError
from .._core.parts import Message, ToolDataItem
from .._core.records import (
    OpenAction,
    RunRecord,
    StoredCall,
    StoredFileBody,
    ThreadRecord,
    UploadedFile,
)
from .base import ClosingStore, Transaction, Write, expiring_actions, open_actions
from .sqlite_checkpoints import _Checkpointer
from .sqlite_mirror import Mirror, MirroredThread
from .sqlite_schema import migrate
from .sqlite_writes import apply_writes, instant_us

Durability = Literal["normal", "full"]
_SYNCHRONOUS: dict[str, str] = {"normal": "NORMAL", "full": "FULL"}
R = TypeVar("R", bound=pydantic.BaseModel)


class SqliteStore(ClosingStore):
    """A :class:`~pai_actors.Store` in a SQLite file: ``SqliteStore("app.db")``.

    The database is opened (and created, or migrated forward) at construction; ``close()``
    it, or use the store as a context manager (``with`` or ``async with``). Reopening the
    same path, in this process or another, finds every committed transaction.

    Durability: the file is in WAL mode. ``durability="normal"`` (``synchronous=NORMAL``,
    the default) survives a crash of the process at any point: a commit that returned is
    kept. A power loss or an operating-system crash may lose the last commits (never
    corrupt the file or keep part of a transaction). ``durability="full"``
    (``synchronous=FULL``) syncs the log on every commit, so a commit that returned also
    survives a power loss; each commit then waits for an fsync (on a disk that honours it,
    milliseconds rather than microseconds).

    Versioning: the schema version is the database's ``user_version``. A file written by an
    older release is migrated forward when it is opened; a file of a newer release is
    refused with :class:`~pai_actors.StoreError` (upgrade pai_actors to open it).

    Concurrency contract: every method is atomic with respect to other tasks and to
    cancellation. ``commit`` is a group commit: the commits of every task ready in the same
    scheduler tick share one ``BEGIN IMMEDIATE`` … ``COMMIT`` (each under a savepoint, run
    synchronously on the trio thread), so each either applies its whole batch and returns,
    or raises (:class:`~pai_actors.StoreConflict`, or ``trio.Cancelled`` before it joined a
    group) and writes nothing. Readers see the last committed state. Several processes may open one
    file; a writer waits for another process's write lock (blocking its trio thread, up to
    ``busy_timeout`` seconds) and then raises :class:`~pai_actors.StoreError`. A store
    object belongs to the thread that opened it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "normal",
        busy_timeout: float = 5.0,
    ) -> None:
        if durability not in _SYNCHRONOUS:
            raise ValueError(
                f"durability={durability!r} is not a durability level; use 'normal' (survives "
                "process crashes) or 'full' (also survives power loss)"
            )
        self.path = os.fspath(path)
        self.durability: Durability = durability
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal" and self.path != ":memory:":
                raise StoreError(
                    f"SQLite could not put {self.path!r} in WAL mode (it is in {mode!r} mode); "
                    "keep the database on a local file system"
                )
            db.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[durability]}")
            db.execute("PRAGMA foreign_keys = ON")
            migrate(db, self.path)
            checkpointer = None
            if mode == "wal":  # a second connection to ":memory:" would be another database
                db.execute("PRAGMA wal_autocheckpoint = 0")  # the checkpointer's work
                checkpointer = _Checkpointer(self.path, _SYNCHRONOUS[durability])
        except BaseException:
            db.close()
            raise
        self._checkpointer = checkpointer
        # Stops the thread once: at close(), when an unclosed store is collected, or at exit.
        self._stop_checkpointer = (
            None if checkpointer is None else weakref.finalize(self, checkpointer.stop)
        )
        self._checkpoint_at = _CHECKPOINT_ROWS  # db.total_changes at which to wake it next
        self._copied_here = 0  # db.total_changes when this connection last copied the log
        self._db: sqlite3.Connection | None = db
        self._batch: list[_Commit] | None = None  # the group commit being gathered
        # The threads this store last touched, in memory (see sqlite_mirror): valid while
        # the file's data_version is the one it was read at.
        self._mirror = Mirror()
        self._data_version = _data_version(db)

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r}, durability={self.durability!r})"

    def close(self) -> None:
        """Close the database; further calls raise :class:`~pai_actors.StoreError`.
        Closing twice is harmless."""
        db, self._db = self._db, None
        if self._stop_checkpointer is not None:
            self._stop_checkpointer()  # joins the thread; its connection is closed
        if db is not None:
            db.close()  # the last connection to the file copies the log and deletes it

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(f"{self!r} is closed; open the file again with SqliteStore(path)")
        return self._db

    # Writes.

    def transaction(self) -> Transaction:
        return Transaction(self)

    @trio.lowlevel.enable_ki_protection  # a Ctrl-C inside would strand the group (see below)
    async def commit(self, writes: Sequence[Write]) -> None:
        """Apply ``writes`` atomically: group commit.

        The first commit of a scheduler tick leads a group: it yields once (shielded), so
        that the commits of every task ready in the same tick join it, then writes them all
        in one SQLite transaction (one fsync under ``durability="full"``), each under its
        own savepoint: a conflict refuses that writer's batch alone, in the order they
        joined. Once a commit has joined a group it is not cancellable: it returns applied,
        or raises with nothing of it written. A ``KeyboardInterrupt`` waits, as a cancellation
        does, for the caller's next checkpoint: arriving between two lines here it would leave
        a leader's group never written (every later commit joining it) or a joiner listed for
        a wake-up after it left.
        """
        db = self._connection()
        await trio.lowlevel.checkpoint_if_cancelled()
        mine = _Commit(writes)
        group = self._batch
        if group is not None:  # a leader is gathering this tick's commits: join it
            group.append(mine)
            # Parked until the leader has written the group, and not cancellable meanwhile
            # (as under a shield, a cancel reaches the caller at its next checkpoint). No
            # Event and no CancelScope: thousands of writers join a group at once.
            mine.waiting = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(_not_now)
        else:
            group = self._batch = [mine]
            await trio.lowlevel.cancel_shielded_checkpoint()  # let this tick's writers join
            self._batch = None
            self._write(db, group)
            checkpointer = self._checkpointer
            if checkpointer is not None and (
                checkpointer.tail_wanted or db.total_changes >= self._checkpoint_at
            ):
                self._checkpoint_due(db, checkpointer)
        if mine.error is not None:
            raise mine.error

    def _write(self, db: sqlite3.Connection, group: list[_Commit]) -> None:
        """Write a group in one transaction, each commit under its own savepoint."""
        try:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(
                    f"cannot write to {self.path!r}: {exc}; another process holds its write "
                    "lock for too long, or the file is read-only"
                ) from exc
            try:
                self._check_mirror(db)  # under the write lock: the file as it now is
                alone = len(group) == 1  # no savepoint needed: a conflict refuses it all
                for commit in group:
                    if not alone:
                        db.execute("SAVEPOINT one_commit")
                    try:
                        apply_writes(db, commit.writes)
                    except (StoreError, sqlite3.Error) as exc:
                        db.execute("ROLLBACK" if alone else "ROLLBACK TO one_commit")
                        commit.error = (
                            StoreError(f"SQLite refused a commit to {self.path!r}: {exc}")
                            if isinstance(exc, sqlite3.Error)
                            else exc
                        )
                    if not alone:
                        db.execute("RELEASE one_commit")
                if db.in_transaction:
                    db.execute("COMMIT")
                self._mirror_commits(group)
            except BaseException as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"SQLite refused a commit to {self.path!r}: {exc}") from exc
                raise
        except BaseException as exc:  # nothing of the group was written
            for commit in group:
                commit.error = exc if commit.error is None else commit.error
            if not isinstance(exc, Exception):
                raise
        finally:
            for commit in group:
                if commit.waiting is not None:
                    trio.lowlevel.reschedule(commit.waiting)

    def _checkpoint_due(self, db: sqlite3.Connection, checkpointer: _Checkpointer) -> None:
        """Between two transactions: copy the log's last frames when the checkpointer asks
        (it copied the rest), or when the log has not restarted for :data:`_WAL_LIMIT` rows
        (the thread cannot keep up, or cannot run); every :data:`_CHECKPOINT_ROWS` rows,
        wake the checkpointer. Copied here, no other write of this process can land during
        the checkpoint, so the next commit restarts the log (unless a reader still uses it).
        A PASSIVE checkpoint never waits: busy (the thread, or another process, is
        checkpointing) or held back by a reader, it returns, and the next wake tries again."""
        changes = db.total_changes
        if (
            checkpointer.tail_wanted
            or changes - max(checkpointer.copied, self._copied_here) >= _WAL_LIMIT
        ):
            checkpointer.tail_wanted = False
            try:
                busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.OperationalError:  # the commits are written: see _Checkpointer
                busy = 1
            if not busy and frames == copied:
                self._copied_here = changes
        if changes >= self._checkpoint_at:
            self._checkpoint_at = changes + _CHECKPOINT_ROWS
            checkpointer.wake(changes)

    def _mirror_commits(self, group: list[_Commit]) -> None:
        """Apply to the mirror the commits of ``group`` SQLite applied. A mirror that cannot
        take one is dropped, never trusted, and the commits stand: they are written."""
        try:
            for commit in group:
                if commit.error is None:
                    self._mirror.apply(commit.writes)
        except Exception:
            self._mirror.clear()

    def _check_mirror(self, db: sqlite3.Connection) -> None:
        """Drop the mirror if another connection wrote the file since the store last looked."""
        version = _data_version(db)
        if version != self._data_version:
            self._data_version = version
            self._mirror.clear()

    # Reads: one statement after a checkpoint (a snapshot of the last commit), or the mirror
    # after a cancellation point only: a read of a mirrored thread waits for nothing, and
    # yielding the trio thread for it cost a scheduler pass each (a quarter of a durable
    # conversation's passes).

    async def _rows(self, sql: str, *args: object) -> list[Any]:
        db = self._connection()
        await trio.lowlevel.checkpoint()
        return db.execute(sql, args).fetchall()

    async def _mirrored(self) -> sqlite3.Connection:
        """The connection, once the mirror is known to hold the file's last commit."""
        db = self._connection()
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_mirror(db)
        return db

    async def _thread(self, thread_id: str) -> MirroredThread | None:
        """The thread as the mirror holds it, read into it first if it is not there."""
        db = await self._mirrored()
        found = self._mirror.thread(thread_id)
        if found is not None:
            return found
        db.execute("BEGIN")  # one snapshot for the four reads
        try:
            rows = db.execute(
                "SELECT json FROM threads WHERE thread_id = ?", (thread_id,)
            ).fetchall()
            if not rows:
                return None
            messages = _message_rows(db, thread_id)
            runs = db.execute(
                "SELECT json FROM runs WHERE thread_id = ? ORDER BY seq", (thread_id,)
            ).fetchall()
            calls = db.execute(
                "SELECT json FROM calls WHERE thread_id = ? ORDER BY seq", (thread_id,)
            ).fetchall()
        finally:
            db.execute("COMMIT")
        return self._mirror.load(
            _load(ThreadRecord, rows[0][0]),
            _messages(messages),
            [_load(RunRecord, row[0]) for row in runs],
            [_load(StoredCall, row[0]) for row in calls],
        )

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        # Read whole into the mirror if it is not there: the runtime reads the rest of a
        # thread right after its record. A checkpoint, as the query it replaced was, and
        # before the read: a turn given after it lets a burst of other readers push the
        # thread out of the mirror before its reader reads the rest.
        await trio.lowlevel.cancel_shielded_checkpoint()
        thread = await self._thread(thread_id)
        return None if thread is None else thread.record

    async def list_threads(self, scope_key: str) -> list[ThreadRecord]:
        rows = await self._rows(
            "SELECT json FROM threads WHERE scope_key = ? ORDER BY seq", scope_key
        )
        return [_load(ThreadRecord, row[0]) for row in rows]

    async def list_messages(self, thread_id: str) -> list[Message]:
        thread = await self._thread(thread_id)
        return [] if thread is None else list(thread.messages)

    async def get_run(self, run_id: str) -> RunRecord | None:
        db = await self._mirrored()
        found = self._mirror.run(run_id)
        if found is not None:
            return found
        rows = db.execute("SELECT json FROM runs WHERE run_id = ?", (run_id,)).fetchall()
        return _load(RunRecord, rows[0][0]) if rows else None

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        thread = await self._thread(thread_id)
        return [] if thread is None else list(thread.runs.values())

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        db = await self._mirrored()
        thread = self._mirror.thread(thread_id)
        if thread is not None:
            return next((run for run in thread.runs.values() if run.active), None)
        # Not mirrored: one indexed read, not the whole thread (a tree of sub-agent runs
        # asks this of threads it does not otherwise read).
        rows = db.execute(
            "SELECT json FROM runs WHERE thread_id = ? AND active = 1", (thread_id,)
        ).fetchall()
        return _load(RunRecord, rows[0][0]) if rows else None

    async def get_call(self, thread_id: str, tool_call_id: str) -> StoredCall | None:
        thread = await self._thread(thread_id)
        return None if thread is None else thread.calls.get(tool_call_id)

    async def list_calls(self, thread_id: str) -> list[StoredCall]:
        thread = await self._thread(thread_id)
        return [] if thread is None else list(thread.calls.values())

    async def get_pending_action(self, thread_id: str, action_id: str) -> OpenAction | None:
        for action in await self.list_pending_actions(thread_id):
            if action.ref.action_id == action_id:
                return action
        return None

    async def list_pending_actions(self, thread_id: str) -> list[OpenAction]:
        thread = await self._thread(thread_id)
        if thread is None:
            return []
        return [
            replace(action, input=copy.deepcopy(action.input))
            for call in thread.calls.values()
            for action in open_actions(call)
        ]

    async def list_scope_pending_actions(self, scope_key: str) -> list[OpenAction]:
        rows = await self._rows(
            "SELECT c.json FROM threads t JOIN calls c ON c.thread_id = t.thread_id"
            " WHERE t.scope_key = ? AND c.open = 1 ORDER BY t.seq, c.seq",
            scope_key,
        )
        return [action for row in rows for action in open_actions(_load(StoredCall, row[0]))]

    async def list_expiring_actions(
        self, *, until: datetime | None = None, limit: int | None = None
    ) -> list[OpenAction]:
        rows = await self._rows(
            "SELECT json FROM calls WHERE expires_us IS NOT NULL AND expires_us <= ?"
            " ORDER BY expires_us, thread_id, seq LIMIT ?",
            _MAX_US if until is None else instant_us(until),
            -1 if limit is None else limit,
        )
        calls = [_load(StoredCall, row[0]) for row in rows]
        return expiring_actions(calls, until=until, limit=limit)

    async def list_tool_data(
        self, thread_id: str, tool_call_id: str, channel: str
    ) -> list[ToolDataItem]:
        call = await self.get_call(thread_id, tool_call_id)
        if call is None:
            return []
        return [
            ToolDataItem(id=item.id, value=copy.deepcopy(item.value), updated_at=item.updated_at)
            for item in call.record.data.get(channel, ())
        ]

    async def read_file(self, file_id: str, *, scope_key: str) -> StoredFileBody | None:
        rows = await self._rows(
            "SELECT json, body FROM files WHERE file_id = ? AND scope_key = ?", file_id, scope_key
        )
        return StoredFileBody(_load(UploadedFile, rows[0][0]), bytes(rows[0][1])) if rows else None


# Opening.


# Records in and out.


def _load(model: type[R], text: str) -> R:
    try:
        return model.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise StoreError(
            f"a stored {model.__name__} cannot be read (an unknown shape version, or a file "
            f"changed by hand): {exc}"
        ) from exc


def _data_version(db: sqlite3.Connection) -> int:
    version: int = db.execute("PRAGMA data_version").fetchone()[0]
    return version


def _message_rows(db: sqlite3.Connection, thread_id: str) -> list[Any]:
    """A thread's messages joined with their parts, in order: (message id, json, part json)."""
    return db.execute(
        "SELECT m.message_id, m.json, p.json FROM messages m LEFT JOIN parts p"
        " ON p.thread_id = m.thread_id AND p.message_id = m.message_id"
        " WHERE m.thread_id = ? ORDER BY m.seq, p.position",
        (thread_id,),
    ).fetchall()


def _messages(rows: list[Any]) -> list[Message]:
    """The messages :func:`_message_rows` read, parsed."""
    messages = []
    for _, group in itertools.groupby(rows, key=lambda row: row[0]):
        [first, *rest] = group
        wire = json.loads(first[1])
        wire["parts"] = [json.loads(row[2]) for row in (first, *rest) if row[2] is not None]
        messages.append(_load_message(wire))
    return messages


def _load_message(wire: dict[str, Any]) -> Message:
    try:
        return Message.model_validate(wire)
    except pydantic.ValidationError as exc:
        raise StoreError(f"a stored message cannot be read: {exc}") from exc


_CHECKPOINT_ROWS = 1000
"""Rows a :class:`SqliteStore` changes between two wakes of its checkpointer: about 2,500 WAL
pages (10 MB) in the W1 benchmark's small commits, fewer in large group commits, whose rows
share pages. Every wake costs the store one short checkpoint of the log's tail, so fewer,
larger wakes cost it less (400 rows measured slower); SQLite's own interval is 1,000
pages."""

_WAL_LIMIT = 2 * _CHECKPOINT_ROWS
"""Rows changed since the log last restarted past which the store copies it itself."""

_MAX_US = 2**63 - 1
"""No deadline is later than this (``calls.expires_us`` is a 64-bit integer)."""


class _Commit:
    """One writer's batch in a group commit, and what became of it."""

    __slots__ = ("error", "waiting", "writes")

    def __init__(self, writes: Sequence[Write]) -> None:
        self.writes = writes
        self.error: BaseException | None = None
        self.waiting: trio.lowlevel.Task | None = None  # a joiner, parked until written


def _not_now(_: object) -> trio.lowlevel.Abort:
    """A joined commit is not cancelled: it returns once its group is written."""
    return trio.lowlevel.Abort.FAILED
