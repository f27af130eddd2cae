"""Reading one model step: :class:`StepAccumulator` (sans-IO) and :func:`accumulate_step`.

The run loop feeds every event a model streams to a :class:`StepAccumulator`, which checks
the event protocol as the events arrive (so a broken stream fails at the event that broke
it) and keeps the partial input of calls still streaming (for the ``input-streaming``
state). :func:`accumulate_step` is the trio shell that reads a whole stream.

The protocol, per step:

- ``ToolInputStart(id, name)`` opens a streamed call; ``ToolInputDelta(id, delta)``\\ s
  follow for that open call; ``ToolCallEvent(id, name, input)`` completes it with the same
  name and, when deltas were streamed, the input their concatenation parses to. A
  ``ToolCallEvent`` without a ``ToolInputStart`` is a call whose input was not streamed.
- every ``tool_call_id`` is used by one call of the step;
- ``Finish`` comes once, last, when no call is still streaming.
- ``ReasoningDelta``\\ s may come anywhere before ``Finish``; consecutive ones make one
  reasoning part, which a ``ReasoningEnd`` (with the part's provider metadata) or any other
  event closes. A ``ReasoningEnd`` with no fragment before it is a part without text.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from types import MappingProxyType

from .errors import ModelProtocolError
from .json import JsonValue
from .model import (
    MODEL_EVENT_TYPES,
    Finish,
    FinishReason,
    ModelEvent,
    ModelReasoningPart,
    ProviderMetadata,
    ReasoningDelta,
    ReasoningEnd,
    TextDelta,
    ToolCallEvent,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)


@dataclass(frozen=True, slots=True)
class ModelStep:
    """What one model step produced: its text, its tool calls in order, its finish reason;
    its reasoning parts in order, and the usage and provider metadata its ``Finish`` gave."""

    text: str
    tool_calls: tuple[ToolCallEvent, ...]
    finish_reason: FinishReason
    reasoning: tuple[ModelReasoningPart, ...] = ()
    usage: Usage | None = None
    provider_metadata: ProviderMetadata | None = None


@dataclass(slots=True)
class _Streaming:
    tool_name: str
    text: str = ""
    deltas: int = 0


class StepAccumulator:
    """Checks one step's events as they arrive and collects them into a :class:`ModelStep`.

    Pure (no I/O, no trio). :meth:`feed` raises :class:`ModelProtocolError` at the first
    event that breaks the protocol (see the module docs); after an error the accumulator
    is no longer usable.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: list[ToolCallEvent] = []
        self._done: set[str] = set()
        self._streaming: dict[str, _Streaming] = {}
        self._finish: Finish | None = None
        self._reasoning: list[ModelReasoningPart] = []
        self._thinking: list[str] | None = None  # the open reasoning part's fragments

    @property
    def streaming(self) -> Mapping[str, str]:
        """The JSON text streamed so far for each call still streaming, by tool_call_id."""
        return MappingProxyType({id: s.text for id, s in self._streaming.items()})

    @property
    def reasoning(self) -> str:
        """The text of the reasoning part still being written ("" when none is open)."""
        return "".join(self._thinking or ())

    @property
    def finished(self) -> bool:
        """Whether the step's :class:`Finish` has arrived."""
        return self._finish is not None

    def feed(self, event: ModelEvent) -> None:
        """Take the next event of the step, or raise :class:`ModelProtocolError`."""
        if not isinstance(event, MODEL_EVENT_TYPES):
            raise ModelProtocolError(
                f"the model stream yielded {event!r} ({type(event).__name__}), which is not a "
                "model event; yield TextDelta, ToolInputStart, ToolInputDelta, ToolCallEvent "
                "or Finish"
            )
        if self._finish is not None:
            raise ModelProtocolError(
                f"{event!r} arrived after {self._finish!r}; Finish must be the last event of "
                "a step (start a new step with a new stream)"
            )
        if isinstance(event, ReasoningDelta):
            if self._thinking is None:
                self._thinking = []
            self._thinking.append(event.text)
            return
        if isinstance(event, ReasoningEnd):
            self._close_reasoning(event.provider_metadata, always=True)
            return
        self._close_reasoning(None)
        if isinstance(event, TextDelta):
            self._text.append(event.text)
        elif isinstance(event, ToolInputStart):
            self._check_new_id(event, event.tool_call_id)
            self._streaming[event.tool_call_id] = _Streaming(event.tool_name)
        elif isinstance(event, ToolInputDelta):
            self._delta(event)
        elif isinstance(event, ToolCallEvent):
            self._call(event)
        else:
            self._end(event)

    def result(self) -> ModelStep:
        """The step, once its :class:`Finish` has arrived; otherwise raise."""
        if self._finish is None:
            raise ModelProtocolError(
                "the model stream ended without a Finish event; a model must end every step "
                "with Finish(reason), e.g. Finish('stop') or Finish('tool-calls')"
            )
        finish = self._finish
        return ModelStep(
            "".join(self._text),
            tuple(self._calls),
            finish.reason,
            tuple(self._reasoning),
            finish.usage,
            finish.provider_metadata,
        )

    def _close_reasoning(self, metadata: ProviderMetadata | None, *, always: bool = False) -> None:
        if self._thinking is None and not always:
            return
        text = "".join(self._thinking or ())
        self._reasoning.append(ModelReasoningPart(text, metadata))
        self._thinking = None

    def _check_new_id(self, event: ModelEvent, tool_call_id: str) -> None:
        if tool_call_id in self._streaming or tool_call_id in self._done:
            raise ModelProtocolError(
                f"{event!r} reuses the tool_call_id {tool_call_id!r} of an earlier call in "
                "this step; give every tool call its own tool_call_id"
            )

    def _delta(self, event: ToolInputDelta) -> None:
        streaming = self._streaming.get(event.tool_call_id)
        if streaming is None:
            when = (
                "after the ToolCallEvent that completed it"
                if event.tool_call_id in self._done
                else "without a ToolInputStart"
            )
            raise ModelProtocolError(
                f"{event!r} arrived for tool call {event.tool_call_id!r} {when}; stream a "
                f"call's input between ToolInputStart({event.tool_call_id!r}, <tool name>) "
                "and its ToolCallEvent"
            )
        streaming.text += event.delta
        streaming.deltas += 1

    def _call(self, event: ToolCallEvent) -> None:
        streaming = self._streaming.pop(event.tool_call_id, None)
        if streaming is None:
            self._check_new_id(event, event.tool_call_id)
        else:
            if streaming.tool_name != event.tool_name:
                raise ModelProtocolError(
                    f"{event!r} names the tool {event.tool_name!r}, but its ToolInputStart "
                    f"named {streaming.tool_name!r}; a call keeps the tool it started with"
                )
            if streaming.deltas:
                _check_streamed_input(event, streaming.text)
        self._done.add(event.tool_call_id)
        self._calls.append(event)

    def _end(self, event: Finish) -> None:
        if self._streaming:
            open_calls = ", ".join(f"{id!r} ({s.tool_name!r})" for id, s in self._streaming.items())
            raise ModelProtocolError(
                f"{event!r} arrived while tool calls were still streaming their input: "
                f"{open_calls}; complete each with a ToolCallEvent before Finish"
            )
        self._finish = event


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _check_streamed_input(event: ToolCallEvent, text: str) -> None:
    try:
        parsed = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ModelProtocolError(
            f"the streamed input of tool call {event.tool_call_id!r} is not valid JSON "
            f"({exc}): {text!r}; the ToolInputDeltas of a call must spell the JSON text of "
            "its ToolCallEvent's input"
        ) from None
    if not json_equal(parsed, event.input):
        raise ModelProtocolError(
            f"{event!r} does not match its streamed input {text!r} (which parses to "
            f"{parsed!r}); the ToolInputDeltas of a call must spell the JSON text of its "
            "ToolCallEvent's input"
        )


def json_equal(a: JsonValue, b: JsonValue) -> bool:
    """JSON equality: like ``==``, but a bool never equals a number (``True != 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b  # 1 and 1.0 are the same JSON number
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


async def accumulate_step(events: AsyncIterator[ModelEvent]) -> ModelStep:
    """Read a whole model stream into a :class:`ModelStep`, checking the event protocol.

    The stream is read to its end (events after ``Finish`` are an error) and closed, also
    when a :class:`ModelProtocolError` is raised.
    """
    accumulator = StepAccumulator()
    if hasattr(events, "aclose"):
        async with aclosing(events):  # type: ignore[type-var]  # checked: it has aclose
            async for event in events:
                accumulator.feed(event)
    else:
        async for event in events:
            accumulator.feed(event)
    return accumulator.result()
