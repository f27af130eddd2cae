""":class:`MemoryStore`: the in-process :class:`~pai_actors.Store`, for tests and examples.

It behaves like a real store rather than a dict of live objects: every record is held as
its JSON text (``model_dump_json`` / ``to_wire``) and decoded on each read, so a caller
never shares mutable state with it, and whatever does not survive a round trip through JSON
fails here as it would on disk. Commits are copy-on-write: a batch is applied to copies of
the tables it touches, and the new tables replace the old ones in one assignment, so a
reader sees a transaction entirely or not at all, and a refused batch leaves nothing behind.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, assert_never

import trio

from ._errors import StoreConflict
from ._parts import Message, ToolDataItem, ToolPart
from ._records import OpenAction, RunRecord, StoredCall, StoredFileBody, ThreadRecord, UploadedFile
from ._store import (
    AppendMessage,
    CreateThread,
    PutCall,
    PutRun,
    PutToolPart,
    ReplaceMessage,
    SaveFile,
    Transaction,
    Write,
    open_actions,
)


@dataclass(frozen=True, slots=True)
class _Tables:
    """One committed state of the store: JSON text by key, in insertion order. Never mutated."""

    threads: dict[str, str] = field(default_factory=dict)
    messages: dict[str, dict[str, str]] = field(default_factory=dict)  # thread -> id -> json
    runs: dict[str, str] = field(default_factory=dict)
    calls: dict[tuple[str, str], str] = field(default_factory=dict)  # (thread, call id)
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)


class MemoryBacking:
    """The data of a :class:`MemoryStore`, which outlives the store object.

    ``MemoryStore(store.backing)`` (or ``store.reopen()``) opens the same data again, as a
    new process would open the same SQLite file: what was committed is there.
    """

    def __init__(self) -> None:
        self.tables = _Tables()


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
        tables = self.backing.tables
        new = _apply(tables, writes)  # raises StoreConflict with nothing changed
        self.backing.tables = new
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def _read(self) -> _Tables:
        await trio.lowlevel.checkpoint()
        return self.backing.tables

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        text = (await self._read()).threads.get(thread_id)
        return None if text is None else ThreadRecord.model_validate_json(text)

    async def list_threads(self, scope_key: str) -> list[ThreadRecord]:
        threads = [
            ThreadRecord.model_validate_json(t) for t in (await self._read()).threads.values()
        ]
        return [t for t in threads if t.scope_key == scope_key]

    async def list_messages(self, thread_id: str) -> list[Message]:
        texts = (await self._read()).messages.get(thread_id, {})
        return [Message.model_validate_json(text) for text in texts.values()]

    async def get_run(self, run_id: str) -> RunRecord | None:
        text = (await self._read()).runs.get(run_id)
        return None if text is None else RunRecord.model_validate_json(text)

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        return _runs_of(await self._read(), thread_id)

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        return next((r for r in _runs_of(await self._read(), thread_id) if r.active), None)

    async def get_call(self, thread_id: str, tool_call_id: str) -> StoredCall | None:
        text = (await self._read()).calls.get((thread_id, tool_call_id))
        return None if text is None else StoredCall.model_validate_json(text)

    async def list_calls(self, thread_id: str) -> list[StoredCall]:
        return _calls_of(await self._read(), {thread_id})

    async def get_pending_action(self, thread_id: str, action_id: str) -> OpenAction | None:
        for call in _calls_of(await self._read(), {thread_id}):
            for action in open_actions(call):
                if action.ref.action_id == action_id:
                    return action
        return None

    async def list_pending_actions(self, thread_id: str) -> list[OpenAction]:
        calls = _calls_of(await self._read(), {thread_id})
        return [action for call in calls for action in open_actions(call)]

    async def list_scope_pending_actions(self, scope_key: str) -> list[OpenAction]:
        tables = await self._read()
        threads = {
            thread_id
            for thread_id, text in tables.threads.items()
            if ThreadRecord.model_validate_json(text).scope_key == scope_key
        }
        return [action for call in _calls_of(tables, threads) for action in open_actions(call)]

    async def list_tool_data(
        self, thread_id: str, tool_call_id: str, channel: str
    ) -> list[ToolDataItem]:
        call = await self.get_call(thread_id, tool_call_id)
        if call is None:
            return []
        return [
            ToolDataItem(id=item.id, value=item.value, updated_at=item.updated_at)
            for item in call.record.data.get(channel, ())
        ]

    async def read_file(self, file_id: str, *, scope_key: str) -> StoredFileBody | None:
        found = (await self._read()).files.get(file_id)
        if found is None:
            return None
        file = UploadedFile.model_validate_json(found[0])
        return StoredFileBody(file, found[1]) if file.scope_key == scope_key else None


def _runs_of(tables: _Tables, thread_id: str) -> list[RunRecord]:
    runs = [RunRecord.model_validate_json(text) for text in tables.runs.values()]
    return [run for run in runs if run.thread_id == thread_id]


def _calls_of(tables: _Tables, thread_ids: set[str]) -> list[StoredCall]:
    calls = [StoredCall.model_validate_json(text) for text in tables.calls.values()]
    return [call for call in calls if call.thread_id in thread_ids]


def _message_json(message: Message) -> str:
    return json.dumps(message.to_wire())


def _apply(tables: _Tables, writes: Sequence[Write]) -> _Tables:
    """``tables`` with ``writes`` applied, as new tables; ``tables`` itself is untouched."""
    new = _Tables(
        threads=dict(tables.threads),
        messages=dict(tables.messages),  # inner dicts are copied when written
        runs=dict(tables.runs),
        calls=dict(tables.calls),
        files=dict(tables.files),
    )
    copied: set[str] = set()

    def thread_messages(thread_id: str, key: str) -> dict[str, str]:
        if thread_id not in new.threads:
            raise StoreConflict(key, f"its thread {thread_id!r} does not exist; create it first")
        if thread_id not in copied:
            new.messages[thread_id] = dict(new.messages.get(thread_id, {}))
            copied.add(thread_id)
        return new.messages[thread_id]

    for write in writes:
        if isinstance(write, CreateThread):
            thread = write.thread
            key = f"thread {thread.thread_id!r}"
            if thread.thread_id in new.threads:
                raise StoreConflict(key, "already exists; a thread is created once")
            new.threads[thread.thread_id] = thread.model_dump_json()
        elif isinstance(write, AppendMessage):
            key = f"message {write.message.id!r}"
            messages = thread_messages(write.thread_id, key)
            if write.message.id in messages:
                raise StoreConflict(key, "already exists; use replace_message to change it")
            messages[write.message.id] = _message_json(write.message)
        elif isinstance(write, ReplaceMessage):
            key = f"message {write.message.id!r}"
            messages = thread_messages(write.thread_id, key)
            if write.message.id not in messages:
                raise StoreConflict(key, "does not exist; use append_message to add it")
            messages[write.message.id] = _message_json(write.message)
        elif isinstance(write, PutToolPart):
            key = f"message {write.message_id!r}"
            messages = thread_messages(write.thread_id, key)
            if write.message_id not in messages:
                raise StoreConflict(key, "does not exist; append it before putting parts in it")
            message = Message.model_validate_json(messages[write.message_id])
            messages[write.message_id] = _message_json(_with_part(message, write.part))
        elif isinstance(write, PutRun):
            run = write.run
            key = f"run {run.run_id!r}"
            _check_revision(new.runs, run.run_id, run.revision, run.thread_id, key, RunRecord)
            _check_thread(new, run.thread_id, key)
            if run.active:
                for other in _runs_of(new, run.thread_id):
                    if other.run_id != run.run_id and other.active:
                        raise StoreConflict(
                            key,
                            f"thread {run.thread_id!r} already has the active run "
                            f"{other.run_id!r} ({other.status}); a thread has one run at a "
                            "time, end that one first",
                        )
            stored = run.model_copy(update={"revision": run.revision + 1})
            new.runs[run.run_id] = stored.model_dump_json()
        elif isinstance(write, PutCall):
            call = write.call
            key = f"call {call.tool_call_id!r}"
            call_key = (call.thread_id, call.tool_call_id)
            _check_revision(new.calls, call_key, call.revision, call.thread_id, key, StoredCall)
            _check_thread(new, call.thread_id, key)
            stored_call = call.model_copy(update={"revision": call.revision + 1})
            new.calls[call_key] = stored_call.model_dump_json()
        elif isinstance(write, SaveFile):
            file = write.file
            key = f"file {file.file_id!r}"
            if file.file_id in new.files:
                raise StoreConflict(key, "already exists; a file is saved once")
            new.files[file.file_id] = (file.model_dump_json(), bytes(write.body))
        else:
            assert_never(write)
    return new


def _with_part(message: Message, part: ToolPart) -> Message:
    parts = list(message.parts)
    for index, old in enumerate(parts):
        if isinstance(old, ToolPart) and old.tool_call_id == part.tool_call_id:
            parts[index] = part
            break
    else:
        parts.append(part)
    return message.model_copy(update={"parts": tuple(parts)})


def _check_thread(tables: _Tables, thread_id: str, key: str) -> None:
    if thread_id not in tables.threads:
        raise StoreConflict(key, f"its thread {thread_id!r} does not exist; create it first")


K = TypeVar("K", bound=Hashable)


def _check_revision(
    table: Mapping[K, str],
    record_id: K,
    revision: int,
    thread_id: str,
    key: str,
    model: type[RunRecord] | type[StoredCall],
) -> None:
    text = table.get(record_id)
    if text is None:
        if revision != 0:
            raise StoreConflict(
                key,
                f"does not exist, but was written with revision {revision}; a new record "
                "has revision 0",
            )
        return
    stored = model.model_validate_json(text)
    if revision == 0:
        raise StoreConflict(key, "already exists; read it and write the changed record back")
    if stored.revision != revision:
        raise StoreConflict(
            key,
            f"was written with revision {revision}, but the store holds revision "
            f"{stored.revision}: another writer changed it; read it again and re-apply",
        )
    if stored.thread_id != thread_id:
        raise StoreConflict(
            key, f"belongs to thread {stored.thread_id!r}; it cannot move to {thread_id!r}"
        )
