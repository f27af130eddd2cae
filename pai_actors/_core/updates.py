"""The updates a watch of a thread yields (:data:`ThreadUpdate`): values of the core, so the
client reads the same classes the runtime writes, and neither needs the other.

Each is a frozen wire model with ``to_wire()`` (the protocol's camelCase JSON); each class's
``type`` is a ``Literal``, so ``update.type == "run-status"`` narrows the union.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, Protocol, TypeAlias, TypeVar

from pydantic import Field

from .json import JsonValue
from .parts import Message, ToolDataItem, ToolPart
from .state import RunState
from .wire import WireModel

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class MessageAppended(WireModel):
    """A message was appended to the thread."""

    type: Literal["message-appended"] = "message-appended"
    thread_id: str
    message: Message

    def to_wire(self) -> dict[str, JsonValue]:
        return {"type": self.type, "threadId": self.thread_id, "message": self.message.to_wire()}


class MessageReplaced(WireModel):
    """A message was replaced in place (same id, same position)."""

    type: Literal["message-replaced"] = "message-replaced"
    thread_id: str
    message: Message

    def to_wire(self) -> dict[str, JsonValue]:
        return {"type": self.type, "threadId": self.thread_id, "message": self.message.to_wire()}


class ToolPartUpdated(WireModel):
    """The tool part of ``part.tool_call_id`` in message ``message_id`` was put (replaced,
    or appended to the message when it was not there)."""

    type: Literal["tool-part-updated"] = "tool-part-updated"
    thread_id: str
    message_id: str
    part: ToolPart

    def to_wire(self) -> dict[str, JsonValue]:
        return {
            "type": self.type,
            "threadId": self.thread_id,
            "messageId": self.message_id,
            "part": self.part.to_wire(),
        }


class RunStatusChanged(WireModel):
    """A run of the thread was created or its status (or error) was written."""

    type: Literal["run-status"] = "run-status"
    thread_id: str
    run: RunState

    def to_wire(self) -> dict[str, JsonValue]:
        return {"type": self.type, "threadId": self.thread_id, "run": self.run.to_wire()}


class ToolDataUpdated(WireModel):
    """A transient tool-data item: live only, never stored, never in a snapshot."""

    type: Literal["tool-data"] = "tool-data"
    thread_id: str
    tool_call_id: str
    channel: str
    item: ToolDataItem

    def to_wire(self) -> dict[str, JsonValue]:
        return {
            "type": self.type,
            "threadId": self.thread_id,
            "toolCallId": self.tool_call_id,
            "channel": self.channel,
            "item": self.item.to_wire(),
        }


class MessageDelta(WireModel):
    """A fragment of the assistant message a model step is writing, as the model streams
    it: live only, never stored, never in a snapshot.

    ``part`` says which: ``"text"`` (the message's text), ``"reasoning"`` (its reasoning),
    or ``"tool-input"``: the raw JSON text of the input of the tool call ``tool_call_id`` as
    the model writes it (its part is stored meanwhile in ``input-streaming``, its input parsed
    so far).
    The fragments of a step, in order, are the text (and the reasoning) of step ``step``
    (0 for the first) of the turn's assistant message ``message_id``: the step's parts, after
    its step-start part, are stored once, complete, when the step ends (a
    ``message-appended`` or ``message-replaced`` update; a step that streams a tool call's
    input stores its step-start and tool part earlier, without text). A watch that starts
    during a step first receives the step's text so far (and its reasoning so far) as one
    fragment each, then the rest as it comes.
    """

    type: Literal["message-delta"] = "message-delta"
    thread_id: str
    run_id: str
    message_id: str
    part: Literal["text", "reasoning", "tool-input"]
    delta: str
    tool_call_id: str | None = None
    step: int = Field(default=0, ge=0)

    def to_wire(self) -> dict[str, JsonValue]:
        wire: dict[str, JsonValue] = {
            "type": self.type,
            "threadId": self.thread_id,
            "runId": self.run_id,
            "messageId": self.message_id,
            "step": self.step,
            "part": self.part,
            "delta": self.delta,
        }
        if self.tool_call_id is not None:
            wire["toolCallId"] = self.tool_call_id
        return wire


class _Channel(Protocol[T_contra]):
    """What :class:`DeltaHold` needs of a trio memory send channel (the core names no trio)."""

    def send_nowait(self, value: T_contra, /) -> None: ...

    def statistics(self) -> Any: ...


class DeltaHold(Generic[T]):
    """How a watch takes a model's streamed fragments without ever being dropped for them.

    Deltas fill at most ``room`` slots of the watch's channel (half of it, by the callers'
    choice), so the other slots stay free for the stored updates a watch must not miss. A
    delta that finds no room is held, joined to the held delta of the same message part,
    and goes into the channel, in order, before anything sent after it: when the reader
    makes room (:meth:`flush` with the room as ``limit``) or when the next stored update
    comes (``limit=None``: as far as the channel holds). ``wrap`` makes a channel item of a
    delta (the delta itself, or the protocol's ``delta`` frame)."""

    __slots__ = ("held", "room", "wrap")

    def __init__(self, room: int, wrap: Callable[[MessageDelta], T]) -> None:
        self.room = room
        self.wrap = wrap
        self.held: list[MessageDelta] = []

    def offer(self, channel: _Channel[T], delta: MessageDelta) -> None:
        """Send ``delta``, or hold it if deltas already fill their room or some are held."""
        if self.held or channel.statistics().current_buffer_used >= self.room:
            self._hold(delta)
        else:
            channel.send_nowait(self.wrap(delta))

    def flush(self, channel: _Channel[T], *, limit: int | None) -> bool:
        """Send the held deltas while the channel holds fewer than ``limit`` items (``None``:
        while it has room); ``True`` once none is held."""
        held = self.held
        while held:
            stats = channel.statistics()
            bound = stats.max_buffer_size if limit is None else limit
            if stats.current_buffer_used >= bound:
                return False
            channel.send_nowait(self.wrap(held[0]))
            del held[0]
        return True

    def _hold(self, delta: MessageDelta) -> None:
        held = self.held
        last = held[-1] if held else None
        if last is not None and (
            last.message_id,
            last.part,
            last.run_id,
            last.tool_call_id,
        ) == (delta.message_id, delta.part, delta.run_id, delta.tool_call_id):
            held[-1] = last.model_copy(update={"delta": last.delta + delta.delta})
        else:
            held.append(delta)


ThreadUpdate: TypeAlias = (
    MessageAppended | MessageReplaced | ToolPartUpdated | RunStatusChanged | ToolDataUpdated
)
"""One update a :meth:`AgentRuntime.watch` yields. Each class's ``type`` is a ``Literal``, so
``if update.type == "run-status":`` narrows the union to :class:`RunStatusChanged`."""

ThreadUpdateOrDelta: TypeAlias = ThreadUpdate | MessageDelta
"""What a watch with ``deltas=True`` yields: the updates, and the model's streamed text."""
