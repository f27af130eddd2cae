"""What a committed batch of writes shows to the watchers of its threads (the updates a watch
yields), and those updates as JSON text, for a store that logs them for other processes
(``_store.postgres_updates``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import TypeAdapter, ValidationError

from .._core.json import JsonValue, json_text
from .._core.parts import Part
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


def threads_shown(writes: Sequence[Write]) -> tuple[str, ...]:
    """The threads whose watchers see some of ``writes`` once they are committed, each once.
    (A tuple of strings, which the garbage collector stops tracking at its first look; a
    frozenset it would scan for as long as the commit is written.)"""
    return tuple(
        dict.fromkeys(
            write.run.thread_id if isinstance(write, PutRun) else write.thread_id
            for write in writes
            # (a tuple: ``A | B`` here would make a union object for every write)
            if isinstance(write, (AppendMessage, ReplaceMessage, PutToolPart, PutRun))
        )
    )


PartTexts = dict[int, str]
"""The JSON text of parts, by ``id(part)``: what one commit's statements and its log of
updates share, so each part is encoded once. Only for the parts of writes alive meanwhile
(a part's id is unique while it lives)."""


def part_text(part: Part, texts: PartTexts | None = None) -> str:
    """``part``'s wire form as JSON text (a store's part row), taken from ``texts`` when
    it is there, and kept there."""
    if texts is None:
        return json_text(part.to_wire())
    text = texts.get(id(part))
    if text is None:
        text = texts[id(part)] = json_text(part.to_wire())
    return text


def encoded_updates(writes: Sequence[Write], texts: PartTexts | None = None) -> dict[str, str]:
    """The updates ``writes`` show, by thread, each thread's as JSON text: the list of the
    updates' wire forms (``to_wire()`` of those :func:`updates_of` makes), in order. Made
    from the writes directly, the texts of their parts taken from ``texts`` (those the
    commit's statements encoded): this runs for every commit of a node."""
    by_thread: dict[str, list[str]] = {}
    for write in writes:
        if isinstance(write, (AppendMessage, ReplaceMessage)):
            kind = "message-appended" if isinstance(write, AppendMessage) else "message-replaced"
            thread_id = write.thread_id
            message = write.message
            head = json_text(message.to_wire(parts=False))  # {"id":...,"role":...}
            parts = ",".join(part_text(part, texts) for part in message.parts)
            text = (
                f'{{"type":"{kind}","threadId":{json_text(thread_id)},'
                f'"message":{head[:-1]},"parts":[{parts}]}}}}'
            )
        elif isinstance(write, PutToolPart):
            thread_id = write.thread_id
            text = (
                f'{{"type":"tool-part-updated","threadId":{json_text(thread_id)},'
                f'"messageId":{json_text(write.message_id)},'
                f'"part":{part_text(write.part, texts)}}}'
            )
        elif isinstance(write, PutRun):
            thread_id = write.run.thread_id
            wire: JsonValue = {
                "type": "run-status",
                "threadId": thread_id,
                "run": write.run.state.to_wire(),
            }
            text = json_text(wire)
        else:
            continue
        by_thread.setdefault(thread_id, []).append(text)
    return {t: f"[{','.join(u)}]" for t, u in by_thread.items()}


def decode_updates(text: str) -> list[ThreadUpdate]:
    """The updates :func:`encoded_updates` wrote as ``text``."""
    try:
        return _UPDATES.validate_json(text)
    except ValidationError:
        # Text no JSON value holds (a lone surrogate, in an exception's message) is written
        # escaped (``json_text``), which pydantic's parser refuses and ``json`` reads.
        return _UPDATES.validate_python(json.loads(text))
