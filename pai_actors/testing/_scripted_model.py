"""``ScriptedModel``: a :class:`~pai_actors.Model` that plays back scripted steps, for tests.

Public through :mod:`pai_actors.testing`, with the step builders :func:`tool_call` and
:func:`text`.
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import trio

from .._core.errors import OutputNotJSON, ScriptedModelError
from .._core.json import JsonValue, to_json_value
from .._core.model import (
    MODEL_EVENT_TYPES,
    Finish,
    ModelAssistantMessage,
    ModelEvent,
    ModelRequest,
    ModelToolCallPart,
    TextDelta,
    ToolCallEvent,
    ToolInputDelta,
    ToolInputStart,
)

_MAX_FRAGMENT = 8


@dataclass(frozen=True, slots=True, repr=False)
class ScriptedText:
    """Text the model writes in a step; made by :func:`text`."""

    text: str

    def __repr__(self) -> str:
        return f"text({self.text!r})"


@dataclass(frozen=True, slots=True, repr=False)
class ScriptedToolCall:
    """A tool call the model makes in a step; made by :func:`tool_call`."""

    name: str
    input: JsonValue
    id: str | None = None
    stream: bool = False

    def __repr__(self) -> str:
        extra = "" if self.id is None else f", id={self.id!r}"
        extra += ", stream=True" if self.stream else ""
        return f"tool_call({self.name!r}, {self.input!r}{extra})"


def text(text: str) -> ScriptedText:
    """The model writes ``text`` (one :class:`~pai_actors.TextDelta`).

    Alone, ``text("Done.")`` is a whole step: the model answers and the step finishes with
    ``Finish("stop")``.
    """
    if not isinstance(text, str):
        raise ScriptedModelError(f"text() takes a str, got {text!r}; write text(str(value))")
    return ScriptedText(text)


def tool_call(
    name: str, input: object, *, id: str | None = None, stream: bool = False
) -> ScriptedToolCall:
    """The model calls the tool registered as ``name`` with ``input`` (any JSON value).

    ``id`` is the ``tool_call_id``; by default the model numbers the calls of a conversation
    ``call_1``, ``call_2``, ...: a step's first call takes the number after the tool calls
    already in the request's messages, so ids are unique within a thread (as a real model's
    are), deterministic, and go on after a restart. The input is not checked against the tool's
    schema, so invalid model input can be scripted too. With ``stream=True`` the call is
    streamed as a model streams it: :class:`~pai_actors.ToolInputStart`, the input's JSON text
    in :class:`~pai_actors.ToolInputDelta` fragments of at most 8 characters (at least two
    fragments when the text is longer than one character), then the
    :class:`~pai_actors.ToolCallEvent`.
    """
    if not isinstance(name, str) or not name:
        raise ScriptedModelError(
            f"tool_call() needs the tool's registration name, got {name!r}; "
            "e.g. tool_call('requestApproval', {'summary': 'Send invoice'})"
        )
    if id is not None and (not isinstance(id, str) or not id):
        raise ScriptedModelError(
            f"tool_call({name!r}, ...): id must be a non-empty str or None (numbered "
            f"call_1, call_2, ...), got {id!r}"
        )
    try:
        value = to_json_value(input, what="input")
    except OutputNotJSON as exc:
        raise ScriptedModelError(
            f"tool_call({name!r}, ...): {exc}; a model can only send JSON input"
        ) from exc
    return ScriptedToolCall(name, value, id, bool(stream))


ScriptItem: TypeAlias = ScriptedText | ScriptedToolCall | ModelEvent
"""One item of a step: :func:`text`, :func:`tool_call`, or a raw model event."""

StepSpec: TypeAlias = Sequence[ScriptItem] | ScriptedText | ScriptedToolCall
StepFunction: TypeAlias = Callable[[ModelRequest], StepSpec | Awaitable[StepSpec]]
Step: TypeAlias = StepSpec | StepFunction
"""A scripted step: a list of items, a single item, or a callable that returns one."""

_ITEM_TYPES = (ScriptedText, ScriptedToolCall, *MODEL_EVENT_TYPES)


def _items(step: object, where: str) -> tuple[ScriptItem, ...]:
    if isinstance(step, ScriptedText | ScriptedToolCall):
        return (step,)
    if isinstance(step, str | bytes) or not isinstance(step, Sequence):
        raise ScriptedModelError(
            f"{where} is {step!r}, which is not a step; a step is a list of tool_call(...) "
            "and text(...) items, a single text(...) or tool_call(...), or a callable that "
            "takes the ModelRequest and returns one"
        )
    for item in step:
        if not isinstance(item, _ITEM_TYPES):
            hint = f"text({item!r})" if isinstance(item, str) else "tool_call(...) or text(...)"
            raise ScriptedModelError(
                f"{where} holds {item!r}, which is not a step item; use {hint} "
                "(or a raw model event)"
            )
    return tuple(step)


def _fragments(text: str) -> list[str]:
    size = max(1, min(_MAX_FRAGMENT, len(text) // 2))
    return [text[i : i + size] for i in range(0, len(text), size)]


class ScriptedModel:
    """A :class:`~pai_actors.Model` that plays ``steps`` back, one per model request.

    Each step is a list of :func:`tool_call` and :func:`text` items (played in order), a
    single item, or a callable ``(request) -> step`` (sync or async) that decides from the
    :class:`~pai_actors.ModelRequest`. Every step ends with ``Finish("tool-calls")`` if it
    called a tool, else ``Finish("stop")``. :attr:`requests` records every request received.

    Raw model events may appear among a step's items; they are emitted verbatim and
    unchecked, to inject faults (a call to a tool that was not offered, a broken stream).
    A step that holds a raw :class:`~pai_actors.Finish` gets no automatic one.

    A step raises :class:`ScriptedModelError` (when its stream is iterated) if it calls a
    tool the request did not offer, or if no step is left for the request.
    ``repeat_last=True`` plays the last step for every request after it (a callable step
    then scripts every conversation, as a served application needs); ``record=False``
    keeps :attr:`requests` empty, so a long-running model holds no history.

    Concurrency: :meth:`stream` takes the next step and records the request when it is
    called, so concurrent streams get steps in the order they were requested. Every event
    is preceded by a trio checkpoint, as a real model's stream would be.
    """

    def __init__(
        self, steps: Iterable[Step], *, repeat_last: bool = False, record: bool = True
    ) -> None:
        if isinstance(steps, str | bytes | ScriptedText | ScriptedToolCall):
            raise ScriptedModelError(
                f"ScriptedModel takes a list of steps, got {steps!r}; "
                f"write ScriptedModel([{steps!r}])"
            )
        self._given: tuple[Step, ...] = tuple(steps)
        self._steps: tuple[tuple[ScriptItem, ...] | StepFunction, ...] = tuple(
            step if callable(step) else _items(step, f"step {n}")
            for n, step in enumerate(self._given, 1)
        )
        self._requests: list[ModelRequest] = []
        self._repeat_last = repeat_last and bool(self._steps)
        self._record = record
        self._count = 0

    @property
    def requests(self) -> list[ModelRequest]:
        """Every :class:`~pai_actors.ModelRequest` received, in order (a copy)."""
        return list(self._requests)

    def __repr__(self) -> str:
        return f"ScriptedModel({list(self._given)!r})"

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Record ``request``, take the next step and return the stream of its events."""
        self._count += 1
        if self._record:
            self._requests.append(request)
        return self._play(self._count, request)

    async def _play(self, number: int, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        items = await self._resolve(number, request)
        for item in items:
            if isinstance(item, ScriptedToolCall) and item.name not in request.tools:
                offered = sorted(request.tools)
                raise ScriptedModelError(
                    f"step {number} calls the tool {item.name!r}, which the request did not "
                    f"offer (offered: {offered!r}); script a call to an offered tool, or check "
                    f"that the agent registers {item.name!r} and that it is enabled"
                )
        called = finished = False
        ids = itertools.count(_calls_in(request) + 1)
        for item in items:
            for event in self._events(item, ids):
                called = called or isinstance(event, ToolCallEvent)
                finished = finished or isinstance(event, Finish)
                await trio.lowlevel.checkpoint()
                yield event
        if not finished:
            await trio.lowlevel.checkpoint()
            yield Finish("tool-calls" if called else "stop")

    async def _resolve(self, number: int, request: ModelRequest) -> tuple[ScriptItem, ...]:
        if number > len(self._steps) and self._repeat_last:
            number = len(self._steps)
        if number > len(self._steps):
            count = len(self._steps)
            raise ScriptedModelError(
                f"ScriptedModel ran out of steps: it received request {number} but "
                f"only {count} step{'' if count == 1 else 's'} {'was' if count == 1 else 'were'} "
                f"scripted; that request offered the tools {sorted(request.tools)!r}. Script "
                "another step, or find out why the run asked the model again"
            )
        step = self._steps[number - 1]
        if not callable(step):
            return step
        result = step(request)
        if inspect.isawaitable(result):
            result = await result
        if callable(result):
            raise ScriptedModelError(
                f"step {number} ({step!r}) returned the callable {result!r}; a callable step "
                "must return a list of tool_call(...) and text(...) items or a single one"
            )
        return _items(result, f"step {number} ({step!r}) returned a value that")

    def _events(self, item: ScriptItem, ids: Iterator[int]) -> list[ModelEvent]:
        if isinstance(item, ScriptedText):
            return [TextDelta(item.text)]
        if not isinstance(item, ScriptedToolCall):
            return [item]
        call_id = item.id if item.id is not None else f"call_{next(ids)}"
        call = ToolCallEvent(call_id, item.name, item.input)
        if not item.stream:
            return [call]
        source = json.dumps(item.input, ensure_ascii=False, separators=(",", ":"))
        deltas = [ToolInputDelta(call_id, fragment) for fragment in _fragments(source)]
        return [ToolInputStart(call_id, item.name), *deltas, call]


def _calls_in(request: ModelRequest) -> int:
    """How many tool calls the conversation in ``request`` already holds."""
    return sum(
        isinstance(part, ModelToolCallPart)
        for message in request.messages
        if isinstance(message, ModelAssistantMessage)
        for part in message.parts
    )
