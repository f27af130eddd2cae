""":class:`MemoryStore`: the in-process :class:`~pai_actors.Store`, for tests, examples and
simulations.

It holds the records themselves (frozen pydantic models and frozen dataclasses), never live
runtime objects, in persistent maps (``immutables.Map``, a hash array mapped trie): a commit
builds the next state from the last one with structural sharing, so it costs in proportion
to what it writes, never to what the store holds, and the new state replaces the old one in
one assignment. A reader sees a transaction entirely or not at all, and a refused batch
leaves nothing behind. A message's tool parts are kept by tool call id, so putting one part
costs the same in a message of ten parts or ten thousand.

Records are shared, not copied, with the runtime that reads them: they are immutable, and
the JSON values inside them (dicts and lists) must be treated as read-only. What a store
method hands towards an application (pending actions' inputs, tool data) is copied, and the
runtime copies the messages ``get_state`` returns, so changing a dict an application was
given never changes the store.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar, assert_never

import trio
from immutables import Map

from .._core.errors import StoreConflict
from .._core.parts import Message, Part, ToolDataItem, ToolPart
from .._core.records import (
    OpenAction,
    RunRecord,
    StoredCall,
    StoredFileBody,
    ThreadRecord,
    UploadedFile,
)
from .base import (
    AppendMessage,
    CreateThread,
    PutCall,
    PutRun,
    PutToolPart,
    ReplaceMessage,
    SaveFile,
    Transaction,
    Write,
    check_revision,
    expiring_actions,
    open_actions,
)

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class _StoredMessage:
    """A message as held: its parts by key (a tool part by its tool call id, any other part
    by ``"#<index>"``) and the keys in order."""

    message: Message  # id, role, metadata (its parts are rebuilt from ``parts``)
    keys: tuple[str, ...]
    parts: Map[str, Part]

    @classmethod
    def of(cls, message: Message) -> _StoredMessage:
        keys = tuple(
            part.tool_call_id if isinstance(part, ToolPart) else f"#{index}"
            for index, part in enumerate(message.parts)
        )
        return cls(
            message.model_copy(update={"parts": ()}),
            keys,
            Map(zip(keys, message.parts, strict=True)),
        )

    def with_part(self, part: ToolPart) -> _StoredMessage:
        keys = self.keys if part.tool_call_id in self.parts else (*self.keys, part.tool_call_id)
        return _StoredMessage(self.message, keys, self.parts.set(part.tool_call_id, part))

    def read(self) -> Message:
        return self.message.model_copy(update={"parts": tuple(self.parts[k] for k in self.keys)})


@dataclass(frozen=True, slots=True)
class _Thread:
    """A thread with what belongs to it: its messages in order, its runs' ids in order, and
    its calls by tool call id (each with its creation number, for ordering). Threads and
    calls are numbered from one sequence per backing."""

    record: ThreadRecord
    number: int  # creation order among threads
    message_ids: tuple[str, ...] = ()
    messages: Map[str, _StoredMessage] = field(default_factory=Map)
    run_ids: tuple[str, ...] = ()
    calls: Map[str, tuple[int, StoredCall]] = field(default_factory=Map)


@dataclass(frozen=True, slots=True)
class _Tables:
    """One committed state of the store. Never mutated: a commit makes the next one.

    ``expiring`` indexes the calls whose pending action has a deadline: (thread id, tool
    call id) to that deadline (``CallRecord.expires_at``)."""

    threads: Map[str, _Thread] = field(default_factory=Map)
    runs: Map[str, RunRecord] = field(default_factory=Map)
    files: Map[str, tuple[UploadedFile, bytes]] = field(default_factory=Map)
    expiring: Map[tuple[str, str], datetime] = field(default_factory=Map)


class MemoryBacking:
    """The data of a :class:`MemoryStore`, which outlives the store object.

    ``MemoryStore(store.backing)`` (or ``store.reopen()``) opens the same data again, as a
    new process would open the same SQLite file: what was committed is there.
    """

    def __init__(self) -> None:
        self.tables = _Tables()
        self.sequence = itertools.count()  # orders the calls of a thread by creation


class MemoryStore:
    """A :class:`~pai_actors.Store` held in memory (``MemoryStore()``).

    Concurrency contract: every method is atomic with respect to other tasks and to
    cancellation. ``commit`` either applies its whole batch and returns, or raises
    (:class:`~pai_actors.StoreConflict`, or ``trio.Cancelled`` before it started) and changes
    nothing. Readers see the last committed state.
    """

    def __init__(self, backing: MemoryBacking | None = None) -> None:
        self.backing = backing if backing is not None else MemoryBacking()

    def reopen(self) -> MemoryStore:
        """A new store object on the same data."""
        return MemoryStore(self.backing)

    def transaction(self) -> Transaction:
        return Transaction(self)

    async def commit(self, writes: Sequence[Write]) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        backing = self.backing
        backing.tables = _apply(backing.tables, writes, backing.sequence)  # or StoreConflict
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def _read(self) -> _Tables:
        await trio.lowlevel.checkpoint()
        return self.backing.tables

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        thread = (await self._read()).threads.get(thread_id)
        return None if thread is None else thread.record

    async def list_threads(self, scope_key: str) -> list[ThreadRecord]:
        threads = (await self._read()).threads.values()
        ordered = sorted(threads, key=lambda thread: thread.number)
        return [t.record for t in ordered if t.record.scope_key == scope_key]

    async def list_messages(self, thread_id: str) -> list[Message]:
        thread = (await self._read()).threads.get(thread_id)
        if thread is None:
            return []
        return [thread.messages[message_id].read() for message_id in thread.message_ids]

    async def get_run(self, run_id: str) -> RunRecord | None:
        return (await self._read()).runs.get(run_id)

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        return _runs_of(await self._read(), thread_id)

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        return next((r for r in _runs_of(await self._read(), thread_id) if r.active), None)

    async def get_call(self, thread_id: str, tool_call_id: str) -> StoredCall | None:
        thread = (await self._read()).threads.get(thread_id)
        found = None if thread is None else thread.calls.get(tool_call_id)
        return None if found is None else found[1]

    async def list_calls(self, thread_id: str) -> list[StoredCall]:
        return _calls_of((await self._read()).threads.get(thread_id))

    async def get_pending_action(self, thread_id: str, action_id: str) -> OpenAction | None:
        for call in _calls_of((await self._read()).threads.get(thread_id)):
            for action in open_actions(call):
                if action.ref.action_id == action_id:
                    return _copied(action)
        return None

    async def list_pending_actions(self, thread_id: str) -> list[OpenAction]:
        calls = _calls_of((await self._read()).threads.get(thread_id))
        return [_copied(action) for call in calls for action in open_actions(call)]

    async def list_scope_pending_actions(self, scope_key: str) -> list[OpenAction]:
        threads = sorted((await self._read()).threads.values(), key=lambda t: t.number)
        return [
            _copied(action)
            for thread in threads
            if thread.record.scope_key == scope_key
            for call in _calls_of(thread)
            for action in open_actions(call)
        ]

    async def list_expiring_actions(
        self, *, until: datetime | None = None, limit: int | None = None
    ) -> list[OpenAction]:
        tables = await self._read()
        threads = tables.threads
        due = sorted(
            (at, thread_id, threads[thread_id].calls[tool_call_id])
            for (thread_id, tool_call_id), at in tables.expiring.items()
            if until is None or at <= until
        )
        if limit is not None:
            due = due[:limit]
        calls = [call for _, _, (_, call) in due]
        return [_copied(a) for a in expiring_actions(calls, until=until, limit=limit)]

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
        found = (await self._read()).files.get(file_id)
        if found is None or found[0].scope_key != scope_key:
            return None
        return StoredFileBody(found[0], found[1])


def _copied(action: OpenAction) -> OpenAction:
    return replace(action, input=copy.deepcopy(action.input))


def _runs_of(tables: _Tables, thread_id: str) -> list[RunRecord]:
    thread = tables.threads.get(thread_id)
    return [] if thread is None else [tables.runs[run_id] for run_id in thread.run_ids]


def _calls_of(thread: _Thread | None) -> list[StoredCall]:
    if thread is None:
        return []
    return [call for _, call in sorted(thread.calls.values(), key=lambda found: found[0])]


class _ThreadWork:
    """A thread as one commit changes it: mutations of its maps, finished once at the end, so
    a batch of ten thousand writes to one thread builds one new thread, not ten thousand."""

    __slots__ = ("calls", "message_ids", "messages", "parts", "run_ids", "thread")

    def __init__(self, thread: _Thread) -> None:
        self.thread = thread
        self.message_ids = thread.message_ids
        self.messages = thread.messages.mutate()
        self.run_ids = thread.run_ids
        self.calls = thread.calls.mutate()
        # message id -> [message, keys, parts mutation] for messages whose parts are put here
        self.parts: dict[str, list[Any]] = {}

    def set_message(self, message: Message) -> None:
        self.parts.pop(message.id, None)  # the whole message replaces parts put before
        self.messages[message.id] = _StoredMessage.of(message)

    def put_part(self, message_id: str, part: ToolPart) -> None:
        work = self.parts.get(message_id)
        if work is None:
            stored: _StoredMessage = self.messages[message_id]
            work = self.parts[message_id] = [stored.message, stored.keys, stored.parts.mutate()]
        if part.tool_call_id not in work[2]:
            work[1] = (*work[1], part.tool_call_id)
        work[2][part.tool_call_id] = part

    def finish(self) -> _Thread:
        for message_id, (message, keys, parts) in self.parts.items():
            self.messages[message_id] = _StoredMessage(message, keys, parts.finish())
        return _Thread(
            self.thread.record,
            self.thread.number,
            self.message_ids,
            self.messages.finish(),
            self.run_ids,
            self.calls.finish(),
        )


def _apply(tables: _Tables, writes: Sequence[Write], sequence: Any) -> _Tables:
    """``tables`` with ``writes`` applied, as new tables; ``tables`` itself is untouched.

    Raises :class:`StoreConflict` for the first write that conflicts (nothing is kept).
    """
    threads = tables.threads.mutate()
    runs = tables.runs.mutate()
    files = tables.files.mutate()
    expiring = tables.expiring
    deadlines: Any = None  # expiring's mutation, made by the first write that changes it
    work: dict[str, _ThreadWork] = {}

    def thread_of(thread_id: str, key: str) -> _ThreadWork:
        found = work.get(thread_id)
        if found is None:
            thread = threads.get(thread_id)
            if thread is None:
                raise StoreConflict(
                    key, f"its thread {thread_id!r} does not exist; create it first"
                )
            found = work[thread_id] = _ThreadWork(thread)
        return found

    for write in writes:
        if isinstance(write, PutCall):  # the most frequent write first
            call = write.call
            key = f"call {call.tool_call_id!r}"
            thread = thread_of(call.thread_id, key)
            found = thread.calls.get(call.tool_call_id)
            check_revision(None if found is None else found[1].revision, call.revision, key)
            number = next(sequence) if found is None else found[0]
            thread.calls[call.tool_call_id] = (number, write.stored)
            expires_at = write.stored.record.expires_at
            where = (call.thread_id, call.tool_call_id)
            if expires_at is not None or where in (expiring if deadlines is None else deadlines):
                if deadlines is None:
                    deadlines = expiring.mutate()
                if expires_at is None:
                    del deadlines[where]
                else:
                    deadlines[where] = expires_at
        elif isinstance(write, PutToolPart):
            key = f"message {write.message_id!r}"
            thread = thread_of(write.thread_id, key)
            if write.message_id not in thread.messages:
                raise StoreConflict(key, "does not exist; append it before putting parts in it")
            thread.put_part(write.message_id, write.part)
        elif isinstance(write, CreateThread):
            record = write.thread
            key = f"thread {record.thread_id!r}"
            if record.thread_id in threads:
                raise StoreConflict(key, "already exists; a thread is created once")
            threads[record.thread_id] = _Thread(record, next(sequence))
        elif isinstance(write, AppendMessage):
            key = f"message {write.message.id!r}"
            thread = thread_of(write.thread_id, key)
            if write.message.id in thread.messages:
                raise StoreConflict(key, "already exists; use replace_message to change it")
            thread.message_ids = (*thread.message_ids, write.message.id)
            thread.set_message(write.message)
        elif isinstance(write, ReplaceMessage):
            key = f"message {write.message.id!r}"
            thread = thread_of(write.thread_id, key)
            if write.message.id not in thread.messages:
                raise StoreConflict(key, "does not exist; use append_message to add it")
            thread.set_message(write.message)
        elif isinstance(write, PutRun):
            run = write.run
            key = f"run {run.run_id!r}"
            old_run = runs.get(run.run_id)
            check_revision(None if old_run is None else old_run.revision, run.revision, key)
            if old_run is not None and old_run.thread_id != run.thread_id:
                raise StoreConflict(
                    key,
                    f"belongs to thread {old_run.thread_id!r}; it cannot move to {run.thread_id!r}",
                )
            thread = thread_of(run.thread_id, key)
            if run.active:
                for other_id in thread.run_ids:
                    other = runs[other_id]
                    if other_id != run.run_id and other.active:
                        raise StoreConflict(
                            key,
                            f"thread {run.thread_id!r} already has the active run "
                            f"{other_id!r} ({other.status}); a thread has one run at a "
                            "time, end that one first",
                        )
            runs[run.run_id] = write.stored
            if old_run is None:
                thread.run_ids = (*thread.run_ids, run.run_id)
        elif isinstance(write, SaveFile):
            file = write.file
            key = f"file {file.file_id!r}"
            if file.file_id in files:
                raise StoreConflict(key, "already exists; a file is saved once")
            files[file.file_id] = (file, bytes(write.body))
        else:
            assert_never(write)
    for thread_id, changed in work.items():
        threads[thread_id] = changed.finish()
    return _Tables(
        threads=threads.finish(),
        runs=runs.finish(),
        files=files.finish(),
        expiring=expiring if deadlines is None else deadlines.finish(),
    )
