"""The client protocol's frames: what a client sends, and what the server sends back.

Every frame is one JSON text message over a WebSocket, a JSON object with ``"v": 1`` (the
protocol version). A client sends **requests**, each with an ``id`` of its choosing and an
``op``; the server answers each with a ``result`` or an ``error`` frame carrying that ``id``,
and sends ``snapshot`` and ``update`` frames for the threads the connection watches. The
requests are pydantic models that refuse unknown fields, so no frame can name a scope: the
scope is the connection's, from its credentials. The reference, with an example of each
frame, is ``docs/reference/protocol.md``.

:func:`parse_request` reads a frame strictly, so that the server acts on exactly what the
client's own code reads in it: a key given twice in an object (JSON readers differ on which
one wins), an integer beyond ±(2**53 - 1) (JavaScript reads it rounded) and a lone surrogate
are refused wherever they are, and a ``ref`` comes back whole, ``kind`` included.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    Field,
    GetPydanticSchema,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
)
from pydantic_core import core_schema

from .._core.actions import ActionResult, PendingActionRef, SubAgentOrigin
from .._core.json import MAX_SAFE_INTEGER, JsonValue
from .._core.model import ModelSettings
from .._core.parts import FilePart
from .._core.wire import Json, WireModel, iso

PROTOCOL_VERSION = 1
"""The version every frame carries as ``"v"``."""

MAX_REQUEST_ID = MAX_SAFE_INTEGER
"""The largest request ``id`` (JavaScript's ``Number.MAX_SAFE_INTEGER``)."""

MAX_FRAME_BYTES = 1 << 20
"""The largest frame a server accepts by default (1 MiB); a larger one closes the
connection with code 1009 (message too big)."""


class Cursor(WireModel):
    """Where a watcher is in a thread's stream of updates: the stream's ``epoch`` and the
    ``seq`` of the last update it applied (the snapshot's ``seq`` before any update)."""

    epoch: str
    seq: int = Field(ge=0, strict=True)  # as the request 'id': not "7", 7.0 or true

    def to_wire(self) -> dict[str, JsonValue]:
        return {"epoch": self.epoch, "seq": self.seq}


class ClientToolSpec(WireModel):
    """A request-time client tool offered with a ``send``: ``deadline`` (seconds, > 0) and
    ``onDeadline`` (``{"kind": "cancel", "reason"?}``, ``{"kind": "fail", "error"}`` or
    ``{"kind": "resolve", "payload"}``) bound how long its output is waited for."""

    name: str
    description: str = ""
    input_schema: dict[str, Json] | None = None
    deadline: float | None = Field(default=None, gt=0)
    on_deadline: dict[str, Json] | None = None


class ModelSettingsSpec(WireModel):
    """The ``modelSettings`` of a ``send``: :class:`~pai_actors.ModelSettings` in camelCase
    (``temperature``, ``topP``, ``maxTokens``, ``stop``, ``seed``, ``toolChoice``,
    ``parallelToolCalls``); each left out leaves it to the agent's."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    tool_choice: str | None = Field(default=None, min_length=1)
    parallel_tool_calls: bool | None = None

    def settings(self) -> ModelSettings:
        return ModelSettings(**{name: getattr(self, name) for name in type(self).model_fields})


class _SentRef(PendingActionRef):
    """A ref as a client sends it back: whole, as the server sent it. The runtime's own refs
    may leave out ``kind`` (it has one value); a client's may not."""

    kind: Literal["tool"]


def _read_sent_ref(value: Any, read: ValidatorFunctionWrapHandler) -> PendingActionRef:
    if isinstance(value, PendingActionRef):  # a request built in Python
        return value
    return PendingActionRef.trusted(**dict(read(value)))


SentRef: TypeAlias = Annotated[
    PendingActionRef,
    GetPydanticSchema(
        lambda _, handler: core_schema.no_info_wrap_validator_function(
            _read_sent_ref, handler(_SentRef)
        )
    ),
]
"""A request's ``ref``: read with every field required (errors name ``ref.kind``), held as
the plain :class:`PendingActionRef` the runtime takes."""


class _Request(WireModel):
    v: Literal[1]
    id: int = Field(ge=0, le=MAX_REQUEST_ID)


class CreateThreadRequest(_Request):
    op: Literal["createThread"]
    agent_id: str | None = None


class SendRequest(_Request):
    op: Literal["send"]
    thread_id: str
    text: str
    client_data: Json = None
    client_tools: tuple[ClientToolSpec, ...] = ()
    files: tuple[FilePart, ...] = ()
    model_settings: ModelSettingsSpec | None = None


class GetStateRequest(_Request):
    op: Literal["getState"]
    thread_id: str


class WatchRequest(_Request):
    op: Literal["watch"]
    thread_id: str
    cursor: Cursor | None = None
    deltas: bool = False


class UnwatchRequest(_Request):
    op: Literal["unwatch"]
    thread_id: str


class ListPendingActionsRequest(_Request):
    op: Literal["listPendingActions"]
    thread_id: str | None = None


class SubmitActionRequest(_Request):
    op: Literal["submitAction"]
    ref: SentRef
    payload: Json = None


class CancelActionRequest(_Request):
    op: Literal["cancelAction"]
    ref: SentRef
    reason: str | None = None


class FailActionRequest(_Request):
    op: Literal["failAction"]
    ref: SentRef
    error: str


class CancelRunRequest(_Request):
    op: Literal["cancelRun"]
    run_id: str
    reason: str | None = None


class ReadFileRequest(_Request):
    op: Literal["readFile"]
    file_id: str


Request: TypeAlias = Annotated[
    CreateThreadRequest
    | SendRequest
    | GetStateRequest
    | WatchRequest
    | UnwatchRequest
    | ListPendingActionsRequest
    | SubmitActionRequest
    | CancelActionRequest
    | FailActionRequest
    | CancelRunRequest
    | ReadFileRequest,
    Field(discriminator="op"),
]
"""Every request a client may send."""

OPS: tuple[str, ...] = (
    "createThread",
    "send",
    "getState",
    "watch",
    "unwatch",
    "listPendingActions",
    "submitAction",
    "cancelAction",
    "failAction",
    "cancelRun",
    "readFile",
)

_REQUEST: TypeAdapter[Request] = TypeAdapter(Request)

ErrorCode: TypeAlias = Literal[
    "bad-frame",
    "unsupported-version",
    "unknown-op",
    "invalid-request",
    "not-found",
    "thread-busy",
    "migration-required",
    "shutting-down",
    "internal",
]
"""What an ``error`` frame's ``code`` may be (see the protocol reference)."""


class FrameError(Exception):
    """A frame the server cannot take; ``code`` and ``message`` go into the error frame,
    ``request_id`` is the frame's ``id`` when it could be read."""

    def __init__(self, code: ErrorCode, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.request_id = request_id


def _short(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (a frame may hold anything)."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def parse_request(text: str | bytes) -> Request:
    """Read one client frame, or raise :class:`FrameError` saying what is wrong with it."""
    if isinstance(text, bytes):
        raise FrameError("bad-frame", "frames are JSON text messages; this was a binary message")
    try:
        raw: Any = json.loads(text, object_pairs_hook=_object)
    except ValueError as exc:
        raise FrameError("bad-frame", f"the frame is not JSON ({exc})") from None
    except RecursionError:
        raise FrameError(
            "bad-frame", "the frame's JSON is nested too deeply to read; flatten it"
        ) from None
    if not isinstance(raw, dict):
        raise FrameError(
            "bad-frame", f"a frame is a JSON object, got {type(raw).__name__}"
        ) from None
    if isinstance(raw, _KeysGivenTwice) and "id" in raw.twice:
        raise FrameError(
            "bad-frame", "a request needs one 'id'; this frame has the key 'id' more than once"
        )
    request_id = raw.get("id")
    if (
        not isinstance(request_id, int)
        or isinstance(request_id, bool)
        or not 0 <= request_id <= MAX_REQUEST_ID
    ):
        raise FrameError(
            "bad-frame",
            f"a request needs an 'id' that is an integer from 0 to 2**53 - 1, "
            f"got {_short(request_id)}",
        )
    version = raw.get("v")
    if type(version) is not int or version != PROTOCOL_VERSION:  # not True, not 1.0
        raise FrameError(
            "unsupported-version",
            f"this server speaks protocol version {PROTOCOL_VERSION}, the frame says "
            f"'v': {version!r}; send 'v': {PROTOCOL_VERSION}",
            request_id,
        )
    op = raw.get("op")
    if op not in OPS:
        raise FrameError(
            "unknown-op",
            f"unknown op {_short(op)}; use one of {', '.join(OPS)}",
            request_id,
        )
    problem = _unreadable(raw)
    if problem is not None:
        raise FrameError("invalid-request", f"invalid {op!r} request: {problem}", request_id)
    try:
        return _REQUEST.validate_python(raw, by_alias=True, by_name=False)  # camelCase only
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'][1:])) or 'frame'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise FrameError(
            "invalid-request", f"invalid {op!r} request: {problems}", request_id
        ) from None


class _KeysGivenTwice(dict[str, Any]):
    """A decoded JSON object that held some keys more than once (``twice``, in order); it
    holds the last value of each, as ``json.loads`` does. Never gets past the parser."""

    twice: tuple[str, ...]


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object, marked if a key came twice."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    twice: dict[str, None] = {}  # in order, each once
    for key, _ in pairs:
        if key in seen:
            twice[key] = None
        seen.add(key)
    marked = _KeysGivenTwice(obj)
    marked.twice = tuple(twice)
    return marked


# A place in the frame as a linked list, innermost last (a container costs one pair, not a
# copy of its path): ``None`` is the frame itself.
_Place: TypeAlias = "tuple[_Place, str | int] | None"


def _where(place: _Place) -> str:
    """``place`` as validation errors name a field: ``clientTools.0.name``."""
    keys: list[str] = []
    while place is not None:
        place, key = place
        keys.append(str(key))
    return ".".join(reversed(keys)) or "frame"


def _unreadable(frame: dict[str, Any]) -> str | None:
    """What in the decoded ``frame`` the server must not act on, as ``<field>: <why>; <what
    to do>``, or ``None``: a key given twice in its object, an integer beyond ±(2**53 - 1),
    or a string or key that is not valid Unicode (a lone surrogate, which JSON's ``\\ud800``
    escape can make). Iterative, and it pushes containers only: ``frame`` may be nested as
    deeply as the JSON reader allows, and hold a megabyte of numbers."""
    stack: list[tuple[_Place, Any]] = [(None, frame)]
    while stack:
        place, container = stack.pop()
        items: Iterable[tuple[str | int, Any]]
        if type(container) is list:
            items = enumerate(container)
        else:
            for key in container:
                if not _is_unicode(key):
                    return f"{_where(place)}: the key {_lone_surrogate(key)}"
            if type(container) is _KeysGivenTwice:
                key = container.twice[0]
                return (
                    f"{_where((place, key))}: the key {key!r} appears more than once in its "
                    "object; send each key once"
                )
            items = container.items()
        for key, value in items:
            kind = type(value)
            if kind is str:
                if not _is_unicode(value):
                    return f"{_where((place, key))}: the string {_lone_surrogate(value)}"
            elif kind is int:
                if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
                    return (
                        f"{_where((place, key))}: {_short(value)} is beyond ±(2**53 - 1), the "
                        "integers every JSON reader holds exactly; send a number within that "
                        "range"
                    )
            elif kind is dict or kind is list or kind is _KeysGivenTwice:
                stack.append(((place, key), value))
    return None


def _is_unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _lone_surrogate(text: str) -> str:
    return (
        f"{reprlib.repr(text)} holds a lone surrogate, which is not valid Unicode and cannot "
        "be stored or sent back; escape a character only as a whole surrogate pair "
        "(\\ud83d\\ude00)"
    )


# -- server frames ----------------------------------------------------------------------------


def encode(frame: dict[str, JsonValue]) -> str:
    """A server frame as the JSON text sent."""
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def result_frame(request_id: int, result: dict[str, JsonValue]) -> dict[str, JsonValue]:
    return {"v": PROTOCOL_VERSION, "type": "result", "id": request_id, "result": result}


def error_frame(code: ErrorCode, message: str, request_id: int | None) -> dict[str, JsonValue]:
    return {
        "v": PROTOCOL_VERSION,
        "type": "error",
        "id": request_id,
        "code": code,
        "message": message,
    }


def snapshot_frame(
    thread_id: str,
    cursor: Cursor,
    state: dict[str, JsonValue],
    pending_actions: list[JsonValue],
) -> dict[str, JsonValue]:
    return {
        "v": PROTOCOL_VERSION,
        "type": "snapshot",
        "threadId": thread_id,
        "cursor": cursor.to_wire(),
        "state": state,
        "pendingActions": pending_actions,
    }


def update_frame(
    thread_id: str,
    cursor: Cursor,
    update: dict[str, JsonValue],
    pending_action: dict[str, JsonValue] | None = None,
    pending_actions: dict[str, JsonValue] | None = None,
) -> dict[str, JsonValue]:
    """An ``update`` frame. A ``tool-part-updated`` update carries ``pendingAction``, the
    pending action its part shows (``None``: none); a ``message-appended`` or
    ``message-replaced`` one carries ``pendingActions``, the pending action (or ``None``)
    of each tool part of the message, by ``toolCallId``."""
    frame: dict[str, JsonValue] = {
        "v": PROTOCOL_VERSION,
        "type": "update",
        "threadId": thread_id,
        "cursor": cursor.to_wire(),
        "update": update,
    }
    kind = update.get("type")
    if kind == "tool-part-updated":
        frame["pendingAction"] = pending_action
    elif kind in ("message-appended", "message-replaced"):
        frame["pendingActions"] = pending_actions or {}
    return frame


def delta_frame(thread_id: str, update: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A ``delta`` frame: a fragment of the text or reasoning a model step is streaming
    (a ``message-delta`` update), for the watches that asked for them. Live only: not
    numbered (no cursor: a client that reconnects does not get the fragments it missed;
    the stored message arrives complete), never in a snapshot."""
    return {"v": PROTOCOL_VERSION, "type": "delta", "threadId": thread_id, "update": update}


def watch_ended_frame(thread_id: str, reason: str, message: str) -> dict[str, JsonValue]:
    """The server stopped a watch (``reason``: ``overflow`` or ``shutting-down``); after an
    overflow the client watches again from its cursor."""
    return {
        "v": PROTOCOL_VERSION,
        "type": "watchEnded",
        "threadId": thread_id,
        "reason": reason,
        "message": message,
    }


def action_wire(
    name: str,
    input: JsonValue,
    ref: PendingActionRef,
    resume_schema: JsonValue,
    expires_at: datetime | None = None,
    origin_chain: Sequence[SubAgentOrigin] = (),
) -> dict[str, JsonValue]:
    """A pending action as the protocol shows it (``expiresAt``: its deadline, ``None``
    when it has none; ``originChain``, only for an action of a sub-agent run: the tool calls
    that started it, outermost first)."""
    wire: dict[str, JsonValue] = {
        "name": name,
        "input": input,
        "ref": ref.to_wire(),
        "resumeSchema": resume_schema,
        "expiresAt": None if expires_at is None else iso(expires_at),
    }
    if origin_chain:
        wire["originChain"] = [link.to_wire() for link in origin_chain]
    return wire


def action_result_wire(result: ActionResult) -> dict[str, JsonValue]:
    return {"actionResult": result.to_wire()}
