"""The :class:`Store` protocol: everything the runtime keeps durably, behind one interface.

A store holds threads (isolated by ``scope_key``), their messages, their runs, the
:class:`~pai_actors.StoredCall` of every tool call, and file bodies. Pending actions and
durable tool data are not stored on their own: they are *derived* from the stored calls
(:func:`open_actions`, ``CallRecord.data``), so they can never disagree with them.

Atomicity: a transaction, not combined methods. Every write is staged on a
:class:`Transaction` (``async with store.transaction() as tx: tx.put_call(...);
tx.put_tool_part(...)``) and the whole batch is handed to :meth:`Store.commit` when the block
ends without an exception. ``commit`` applies all of it or none of it. Why a batch of staged
writes rather than ``put_call_and_part`` style methods: the runtime's writes come in several
combinations (a call and its part; a run's status and the calls it cancelled; a message and
the run that produced it), and one method per combination would grow with every feature. A
batch of plain values also suits a SQL backend: it can check and apply a batch inside one
``BEGIN IMMEDIATE``, and group-commit the batches of concurrent writers (each under its own
savepoint, so a conflict in one refuses that batch alone) in one fsync. Staging is
synchronous and does no I/O, so a transaction holds no lock while the actor works; conflicts
are found at commit time, by revision (optimistic concurrency).

Revisions: runs and calls carry ``revision``. Writing a record back succeeds only if the store
still holds the revision the record carries; the store keeps it as ``revision + 1``, which is
what :meth:`Transaction.put_call` / :meth:`Transaction.put_run` return. A stale writer gets
:class:`~pai_actors.StoreConflict` and nothing of its transaction is written. Threads and files
are written once; messages are written by the one run that owns them (a tool call updates its
own part with :meth:`Transaction.put_tool_part`, which replaces that part inside the message,
so concurrent calls of one message never overwrite each other's parts).

Durability: a store's data outlives the object. How it is reopened is the backend's business
(``MemoryStore(backing)``, ``SqliteStore(path)``); :func:`pai_actors.testing.check_store`
checks that reopening finds every committed transaction and nothing of an uncommitted one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Protocol, Self, TypeAlias

from .._core.call_record import CallRecord
from .._core.errors import StoreConflict, StoreError
from .._core.json import JsonValue
from .._core.parts import Message, ToolDataItem, ToolPart
from .._core.records import (
    OpenAction,
    RunRecord,
    StoredCall,
    StoredFileBody,
    ThreadRecord,
    UploadedFile,
)
from .._core.wire import updated

# The staged writes: plain values a backend interprets in ``commit``.


@dataclass(frozen=True, slots=True)
class CreateThread:
    """Create a thread; conflict if its id exists."""

    thread: ThreadRecord


@dataclass(frozen=True, slots=True)
class AppendMessage:
    """Append a message to a thread; conflict if the thread is missing or the id is used."""

    thread_id: str
    message: Message


@dataclass(frozen=True, slots=True)
class ReplaceMessage:
    """Replace a message in place (same id, same position); conflict if it is missing."""

    thread_id: str
    message: Message


@dataclass(frozen=True, slots=True)
class PutToolPart:
    """Replace the tool part of ``part.tool_call_id`` in a message, or append it there."""

    thread_id: str
    message_id: str
    part: ToolPart


@dataclass(frozen=True, slots=True)
class PutRun:
    """Create (``revision == 0``) or update a run, checked by revision: ``run`` as written
    (its ``revision`` is the one the store must hold), ``stored`` as it is to be stored."""

    run: RunRecord
    stored: RunRecord


@dataclass(frozen=True, slots=True)
class PutCall:
    """Create (``revision == 0``) or update a stored call, checked by revision: ``call`` as
    written (its ``revision`` is the one the store must hold), ``stored`` as it is to be
    stored (``revision + 1``)."""

    call: StoredCall
    stored: StoredCall


@dataclass(frozen=True, slots=True)
class SaveFile:
    """Store a file body and its metadata; conflict if the file id exists."""

    file: UploadedFile
    body: bytes


Write: TypeAlias = (
    CreateThread | AppendMessage | ReplaceMessage | PutToolPart | PutRun | PutCall | SaveFile
)
"""One staged write of a :class:`Transaction`."""


class Transaction:
    """Writes staged for one atomic commit; ``async with store.transaction() as tx:``.

    Staging methods are synchronous and do no I/O; they check only what they can check
    alone (a file's size). Leaving the block normally commits every staged write at once
    (``await store.commit(...)``, which raises :class:`~pai_actors.StoreConflict` and
    writes nothing if any write conflicts); leaving it by an exception, ``trio.Cancelled``
    included, writes nothing. A transaction commits once; staging on it afterwards raises
    :class:`~pai_actors.StoreError`.

    Concurrency: a transaction belongs to the task that opened it.
    """

    # (slots: a transaction lives as long as its commit is written, one per commit; a dict
    # would be one more object for the garbage collector to scan, thousands at once)
    __slots__ = ("_done", "_store", "_writes")

    def __init__(self, store: Store) -> None:
        self._store = store
        self._writes: list[Write] | tuple[Write, ...] = []
        self._done = False

    @property
    def writes(self) -> tuple[Write, ...]:
        """The writes staged so far, in order."""
        return tuple(self._writes)

    def _stage(self, write: Write) -> None:
        if self._done:
            raise StoreError(
                "this transaction has already ended; open a new one with store.transaction()"
            )
        self._writes.append(write)  # type: ignore[union-attr]  # (a list until it ended)

    def create_thread(self, thread: ThreadRecord) -> ThreadRecord:
        self._stage(CreateThread(thread))
        return thread

    def append_message(self, thread_id: str, message: Message) -> None:
        self._stage(AppendMessage(thread_id, message))

    def replace_message(self, thread_id: str, message: Message) -> None:
        self._stage(ReplaceMessage(thread_id, message))

    def put_tool_part(self, thread_id: str, message_id: str, part: ToolPart) -> None:
        self._stage(PutToolPart(thread_id, message_id, part))

    def put_run(self, run: RunRecord) -> RunRecord:
        """Stage ``run``; returns it as it will be stored (``revision + 1``)."""
        stored = updated(run, revision=run.revision + 1)
        self._stage(PutRun(run, stored))
        return stored

    def put_call(self, call: StoredCall, *, record: CallRecord | None = None) -> StoredCall:
        """Stage ``call`` (with its record replaced by ``record``, when given: one copy for
        what would be two); returns it as it will be stored (``revision + 1``)."""
        stored = updated(
            call, revision=call.revision + 1, record=call.record if record is None else record
        )
        self._stage(PutCall(call, stored))
        return stored

    def save_file(self, file: UploadedFile, body: bytes) -> UploadedFile:
        if file.size != len(body):
            raise ValueError(
                f"file {file.file_id!r} says size={file.size} but its body has {len(body)} "
                "bytes; set size=len(body)"
            )
        self._stage(SaveFile(file, bytes(body)))
        return file

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        writes = self._end()
        if exc_type is None and writes:
            await self._store.commit(writes)

    def _end(self) -> tuple[Write, ...]:
        """End the transaction (nothing can be staged on it any more); its writes."""
        self._done = True
        # (kept as the tuple: the list is garbage while the commit is written)
        writes = self._writes = tuple(self._writes)
        return writes


class ClosingStore:
    """A store that holds connections: ``close()`` them, or use it as a context manager
    (``with`` or ``async with``), which closes it on the way out."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class Store(Protocol):
    """Durable storage of threads, messages, runs, tool calls and files.

    Reads return immutable records. A backend may share them between callers (the
    :class:`~pai_actors.MemoryStore` does, to stay cheap), so the JSON values inside them
    (dicts, lists) are read-only: copy before changing one. Lists are oldest first (creation or
    append order; a replaced message keeps its position).

    Concurrency contract (every implementation): each method is one atomic step. ``commit``
    applies its whole batch or nothing; concurrent commits are serialised, and a reader sees
    a transaction entirely or not at all. Operations are atomic with respect to
    cancellation: a cancelled call either completed or changed nothing.
    """

    def transaction(self) -> Transaction:
        """A new :class:`Transaction` on this store (``return Transaction(self)``)."""
        ...

    async def commit(self, writes: Sequence[Write]) -> None:
        """Apply ``writes`` atomically, in order; :class:`~pai_actors.StoreConflict` (and
        nothing written) if any of them conflicts. A trio checkpoint (a cancel point and a
        schedule point), as any I/O is: a client call whose last step is a commit, such as
        ``send``, has no other."""
        ...

    # Threads and messages.

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """The thread, or ``None``."""
        ...

    async def list_threads(self, scope_key: str) -> list[ThreadRecord]:
        """The threads of ``scope_key`` (never another scope's)."""
        ...

    async def list_messages(self, thread_id: str) -> list[Message]:
        """The messages of a thread (``[]`` for an unknown one)."""
        ...

    # Runs.

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or ``None``."""
        ...

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        """The runs of a thread."""
        ...

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        """The thread's ``running`` or ``waiting`` run (at most one exists), or ``None``."""
        ...

    # Tool calls, and what is derived from them.

    async def get_call(self, thread_id: str, tool_call_id: str) -> StoredCall | None:
        """The stored call ``tool_call_id`` of the thread, or ``None``.

        Calls are keyed by thread and id: a model's tool call ids are unique only within a
        conversation, so two threads may hold calls with the same id."""
        ...

    async def list_calls(self, thread_id: str) -> list[StoredCall]:
        """The stored calls of a thread, in the order they were created."""
        ...

    async def get_pending_action(self, thread_id: str, action_id: str) -> OpenAction | None:
        """The thread's open (pending) action ``action_id``, or ``None`` (unknown or
        resolved)."""
        ...

    async def list_pending_actions(self, thread_id: str) -> list[OpenAction]:
        """The open actions of a thread, by call creation order."""
        ...

    async def list_scope_pending_actions(self, scope_key: str) -> list[OpenAction]:
        """The open actions of every thread of ``scope_key`` (never another scope's)."""
        ...

    async def list_expiring_actions(
        self, *, until: datetime | None = None, limit: int | None = None
    ) -> list[OpenAction]:
        """The open actions that have a deadline, of every thread, earliest deadline first
        (ties: by thread id, then by call creation order): only those due at or before
        ``until`` when it is given, at most ``limit`` when it is given. What the runtime's
        deadline timer reads, when it opens and at each deadline; each action carries
        ``expires_at``. A backend keeps this cheap (an index of the calls whose pending
        action has a deadline), not a scan of every call."""
        ...

    async def list_tool_data(
        self, thread_id: str, tool_call_id: str, channel: str
    ) -> list[ToolDataItem]:
        """The durable tool-data items of a call's channel (``[]`` if none)."""
        ...

    # Files.

    async def read_file(self, file_id: str, *, scope_key: str) -> StoredFileBody | None:
        """The file and its body, or ``None`` if it is missing or of another scope."""
        ...


def check_revision(stored: int | None, revision: int, key: str) -> None:
    """Raise the :class:`StoreConflict` of writing ``key`` with ``revision`` over the stored
    revision (``None``: nothing stored). Every backend refuses in these words."""
    if stored is None:
        if revision != 0:
            raise StoreConflict(
                key,
                f"does not exist, but was written with revision {revision}; a new record "
                "has revision 0",
            )
        return
    if revision == 0:
        raise StoreConflict(key, "already exists; read it and write the changed record back")
    if stored != revision:
        raise StoreConflict(
            key,
            f"was written with revision {revision}, but the store holds revision "
            f"{stored}: another writer changed it; read it again and re-apply",
        )


def has_open_action(call: StoredCall) -> bool:
    """Whether ``call`` holds a pending action (:func:`open_actions` would list one), without
    making them: a store asks this of every call it writes."""
    record = call.record
    approval = record.approval
    return (
        record.pending_episode is not None
        or (approval is not None and approval.state == "pending")
        or record.output_action == "pending"
    )


def open_actions(call: StoredCall) -> list[OpenAction]:
    """The pending actions a stored call holds: its pending suspension, its pending approval
    (named after the tool, its input the call's), or its pending output action (a tool
    without ``execute``). Pure; every backend derives them this way."""
    record = call.record
    found: list[tuple[str, str | None, JsonValue, datetime | None]] = []
    pending = record.pending_episode
    if pending is not None:
        found.append((pending.action_id, pending.name, pending.input, pending.expires_at))
    approval = record.approval
    if approval is not None and approval.state == "pending":
        found.append((approval.id, None, record.input, approval.expires_at))
    if record.output_action == "pending":
        found.append((record.tool_call_id, None, record.input, record.output_expires_at))
    return [
        OpenAction(
            ref=call.action_ref(action_id, suspend_name),
            input=shown,
            call=call,
            expires_at=expires_at,
        )
        for action_id, suspend_name, shown, expires_at in found
    ]


def expiring_actions(
    calls: Iterable[StoredCall], *, until: datetime | None, limit: int | None
) -> list[OpenAction]:
    """The open actions with a deadline of ``calls`` (given earliest ``expires_at`` first, in
    the order :meth:`Store.list_expiring_actions` lists them), due by ``until`` when given,
    at most ``limit``. Every backend derives the answer from its candidate calls this way."""
    found: list[OpenAction] = []
    for call in calls:
        for action in open_actions(call):
            at = action.expires_at
            if at is not None and (until is None or at <= until):
                found.append(action)
    found.sort(key=lambda action: action.expires_at)  # type: ignore[arg-type,return-value]  # all set
    return found if limit is None else found[:limit]
