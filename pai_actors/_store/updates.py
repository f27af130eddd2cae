"""What a committed batch of writes shows to the watchers of its threads (the updates a watch
yields), and those updates as JSON text, for a store that logs them for other processes
(``_store.postgres_updates``)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import TypeAdapter

from .._core.json import JsonValue, json_text
from .._core.updates import (
    MessageAppended,
    MessageReplaced,
    RunStatusChanged,
    ThreadUpdate,
    ToolPartUpdated,
)
from .base import AppendMessage, PutRun, PutToolPart, ReplaceMessage, Write

_UPDATES: TypeAdapter[list[ThreadUpdate]] = TypeAdapter(list[ThreadUpdate])


def updates_of(writes: Sequence[Write]) -> list[ThreadUpdate]:
    """The updates a committed batch of writes shows to watchers, in order."""
    updates: list[ThreadUpdate] = []
    for write in writes:
        if isinstance(write, AppendMessage):
            updates.append(MessageAppended(thread_id=write.thread_id, message=write.message))
        elif isinstance(write, ReplaceMessage):
            updates.append(MessageReplaced(thread_id=write.thread_id, message=write.message))
        elif isinstance(write, PutToolPart):
            updates.append(
                ToolPartUpdated(
                    thread_id=write.thread_id, message_id=write.message_id, part=write.part
                )
            )
        elif isinstance(write, PutRun):
            updates.append(RunStatusChanged(thread_id=write.run.thread_id, run=write.run.state))
    return updates


def threads_shown(writes: Sequence[Write]) -> frozenset[str]:
    """The threads whose watchers see some of ``writes`` once they are committed."""
    return frozenset(
        write.run.thread_id if isinstance(write, PutRun) else write.thread_id
        for write in writes
        if isinstance(write, AppendMessage | ReplaceMessage | PutToolPart | PutRun)
    )


def encoded_updates(writes: Sequence[Write]) -> dict[str, str]:
    """The updates ``writes`` show, by thread, each thread's as JSON text: the list of the
    updates' wire forms (``to_wire()`` of those :func:`updates_of` makes), in order. Made
    from the writes directly: this runs for every commit of a node."""
    by_thread: dict[str, list[JsonValue]] = {}
    for write in writes:
        if isinstance(write, AppendMessage | ReplaceMessage):
            kind = "message-appended" if isinstance(write, AppendMessage) else "message-replaced"
            thread_id = write.thread_id
            wire: JsonValue = {
                "type": kind,
                "threadId": thread_id,
                "message": write.message.to_wire(),
            }
        elif isinstance(write, PutToolPart):
            thread_id = write.thread_id
            wire = {
                "type": "tool-part-updated",
                "threadId": thread_id,
                "messageId": write.message_id,
                "part": write.part.to_wire(),
            }
        elif isinstance(write, PutRun):
            thread_id = write.run.thread_id
            wire = {"type": "run-status", "threadId": thread_id, "run": write.run.state.to_wire()}
        else:
            continue
        by_thread.setdefault(thread_id, []).append(wire)
    return {t: json_text(u) for t, u in by_thread.items()}


def decode_updates(text: str) -> list[ThreadUpdate]:
    """The updates :func:`encoded_updates` wrote as ``text``."""
    return _UPDATES.validate_json(text)
