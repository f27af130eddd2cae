"""Messages and their parts: the client projection of a thread (the AI SDK ``UIMessage`` shape).

A :class:`Message` holds :class:`TextPart`, :class:`ReasoningPart`, :class:`FilePart`
(a user's files), :class:`StepStartPart` and :class:`ToolPart` values; an assistant message
holds a turn, its model steps each opened by a step-start part. A tool part is the
AI SDK's native, state-discriminated tool part (``type == "tool-<toolName>"`` for a registered
tool, ``"dynamic-tool"`` with ``toolName`` for a request-time one) plus the pai sidecars
``data``, ``suspensions``, ``pendingSuspension``, ``cancelled``, ``expiresAt`` and
``subThreads``. Each field lives on the state arm that owns it, and a model refuses a part
that puts one elsewhere: what the AI SDK's ``safeValidateUIMessages`` accepts
(``tests/pai_actors/test_ai_sdk_validation.py`` runs it, 6.x and 7.x, on the runtime's
output).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import AwareDatetime, Discriminator, Field, Tag, model_validator

from .json import JsonValue
from .wire import Json, WireModel, iso

ToolState: TypeAlias = Literal[
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
]
"""The AI SDK's native tool-part states; pai adds none."""

SuspensionState: TypeAlias = Literal["pending", "submitted", "cancelled", "failed"]
Role: TypeAlias = Literal["user", "assistant", "system"]

P = TypeVar("P")

_DYNAMIC = "dynamic-tool"
_NO_APPROVAL_STATES = ("input-streaming", "input-available")
_PENDING_STATES = ("input-available", "approval-requested", "approval-responded")


class TextPart(WireModel):
    """A text part, ``{"type": "text", "text": ...}``."""

    type: Literal["text"] = "text"
    text: str

    def to_wire(self) -> dict[str, JsonValue]:
        return {"type": "text", "text": self.text}


class StepStartPart(WireModel):
    """Where a model step begins in an assistant message, ``{"type": "step-start"}`` (the
    AI SDK's step-start part). An assistant message holds one turn: every model step of a
    run between two other messages, each opened by a step-start part and followed by the
    step's reasoning, text and tool parts (see :func:`message_steps`)."""

    type: Literal["step-start"] = "step-start"

    def to_wire(self) -> dict[str, JsonValue]:
        return {"type": "step-start"}


class ReasoningPart(WireModel):
    """The reasoning ("thinking") a model step wrote, before its text:
    ``{"type": "reasoning", "text": ..., "providerMetadata"?: {...}}`` (the AI SDK's
    reasoning part). ``provider_metadata`` (JSON objects keyed by provider) is what the
    provider needs to be given the reasoning back on the next step: an Anthropic thinking
    block's signature, an OpenAI reasoning item's encrypted content."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    provider_metadata: dict[str, dict[str, Json]] | None = None

    def to_wire(self) -> dict[str, JsonValue]:
        wire: dict[str, JsonValue] = {"type": "reasoning", "text": self.text}
        if self.provider_metadata is not None:
            wire["providerMetadata"] = {k: dict(v) for k, v in self.provider_metadata.items()}
        return wire


class FilePart(WireModel):
    """A file the user sent with a message (the AI SDK's file part):
    ``{"type": "file", "mediaType": ..., "url": ..., "filename"?: ...}``. ``url`` is a
    ``data:`` URL holding the file, or an ``http(s):`` URL the provider fetches;
    ``media_type`` is its IANA media type (``image/png``, ``application/pdf``)."""

    type: Literal["file"] = "file"
    media_type: str
    url: str
    filename: str | None = None

    @model_validator(mode="after")
    def _check(self) -> FilePart:
        if "/" not in self.media_type.strip("/"):
            raise ValueError(
                f"media_type {self.media_type!r} is not a media type such as 'image/png'"
            )
        if not self.url.startswith(("data:", "https://", "http://")):
            raise ValueError(
                f"url {self.url[:40]!r} is neither a data: URL nor an http(s): URL; give the "
                "file as 'data:<media type>;base64,<data>' or a URL the provider can fetch"
            )
        return self

    def to_wire(self) -> dict[str, JsonValue]:
        wire: dict[str, JsonValue] = {
            "type": "file",
            "mediaType": self.media_type,
            "url": self.url,
        }
        if self.filename is not None:
            wire["filename"] = self.filename
        return wire


class ToolDataItem(WireModel):
    """One item of a tool-data channel: ``{"id", "value", "updatedAt"}``."""

    id: str
    value: Json
    updated_at: AwareDatetime

    def to_wire(self) -> dict[str, JsonValue]:
        return {"id": self.id, "value": self.value, "updatedAt": iso(self.updated_at)}


class SuspensionView(WireModel):
    """One suspension episode of a call, as clients see it on ``part.suspensions``.

    ``resolved_at`` is set exactly when ``state`` is not ``"pending"``; ``resume`` (the
    submitted payload) is only written for ``"submitted"``. ``expires_at`` is the episode's
    deadline (written as ``expiresAt`` only when it has one).
    """

    action_id: str
    name: str
    input: Json = None
    suspended_at: AwareDatetime
    state: SuspensionState
    resolved_at: AwareDatetime | None = None
    resume: Json = None
    expires_at: AwareDatetime | None = None

    @model_validator(mode="after")
    def _check_arms(self) -> SuspensionView:
        if (self.state == "pending") != (self.resolved_at is None):
            raise ValueError(
                f"a {self.state!r} suspension "
                + ("has no resolvedAt" if self.state == "pending" else "needs resolvedAt")
            )
        if self.state != "submitted" and self.resume is not None:
            raise ValueError(f"a {self.state!r} suspension has no resume payload")
        return self

    def to_wire(self) -> dict[str, JsonValue]:
        wire: dict[str, JsonValue] = {
            "actionId": self.action_id,
            "name": self.name,
            "input": self.input,
            "suspendedAt": iso(self.suspended_at),
            "state": self.state,
        }
        if self.resolved_at is not None:
            wire["resolvedAt"] = iso(self.resolved_at)
        if self.state == "submitted":
            wire["resume"] = self.resume
        if self.expires_at is not None:
            wire["expiresAt"] = iso(self.expires_at)
        return wire


class CancelledInfo(WireModel):
    """The ``cancelled`` sidecar of a cancelled call: ``{"reason", "at"}``."""

    reason: str | None = None
    at: AwareDatetime

    def to_wire(self) -> dict[str, JsonValue]:
        return {"reason": self.reason, "at": iso(self.at)}


class ToolApproval(WireModel):
    """The AI SDK's approval facts: ``{"id"}`` while requested, then the answer: ``approved``
    and an optional ``reason``."""

    id: str
    approved: bool | None = None
    reason: str | None = None

    @model_validator(mode="after")
    def _check_answer(self) -> ToolApproval:
        if self.approved is None and self.reason is not None:
            raise ValueError("an approval's reason comes with its answer; set approved too")
        return self

    def to_wire(self) -> dict[str, JsonValue]:
        wire: dict[str, JsonValue] = {"id": self.id}
        if self.approved is not None:
            wire["approved"] = self.approved
        if self.reason is not None:
            wire["reason"] = self.reason
        return wire


class ToolPart(WireModel):
    """A tool call as a message part: the AI SDK's native tool part plus pai's sidecars.

    ``tool_name`` is always set in Python; on the wire only a ``"dynamic-tool"`` part carries
    ``toolName`` (a registered tool's name is in its ``type``). ``input`` is omitted on the
    wire while it is still streaming and on an ``output-error`` whose input failed its schema
    (the model's input is then ``raw_input``, as the AI SDK writes it for a registered tool).
    ``output`` is on ``output-available`` only, and always there (``None`` included);
    ``error_text`` is on ``output-error`` only. ``pending_suspension`` is the pending member
    of ``suspensions`` or ``None``; the native ``state`` stays ``input-available`` meanwhile.
    ``expires_at`` is the deadline of the part's pending action (its pending suspension, its
    requested approval or its output action), on the wire as ``expiresAt`` only while one
    with a deadline is pending. ``sub_threads`` holds the ids of the threads of the sub-agent
    runs the call started (``ctx.agents.run``), in the order of their ids; on the wire as
    ``subThreads`` only when there is one.

    ``approval``, as the AI SDK allows it: none while the input is streaming or available;
    unanswered on ``approval-requested``; answered on ``approval-responded``; denied
    (``approved=False``) on ``output-denied``; granted (``approved=True``) or none on
    ``output-available`` and ``output-error``. A call whose approval ended without an answer
    (cancelled, failed, or cut off with its run) shows none. Reading such a part as it was
    stored before that rule (an ``output-error`` with an unanswered approval) drops the
    approval, so old threads still load.
    """

    type: str
    tool_name: str
    tool_call_id: str
    state: ToolState
    input: Json = None
    raw_input: Json = None
    output: Json = None
    error_text: str | None = None
    approval: ToolApproval | None = None
    data: Mapping[str, tuple[ToolDataItem, ...]] = Field(default_factory=dict)
    suspensions: tuple[SuspensionView, ...] = ()
    pending_suspension: SuspensionView | None = None
    cancelled: CancelledInfo | None = None
    expires_at: AwareDatetime | None = None
    sub_threads: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _from_wire(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        kind = data.get("type")
        if not isinstance(kind, str) or not (kind == _DYNAMIC or kind.startswith("tool-")):
            raise ValueError(
                f"a tool part's type is 'tool-<toolName>' or 'dynamic-tool', got {kind!r}"
            )
        name_key = "toolName" if "toolName" in data else "tool_name"
        if kind == _DYNAMIC:
            if name_key not in data:
                raise ValueError("a 'dynamic-tool' part needs toolName")
        else:
            name = kind.removeprefix("tool-")
            if not name:
                raise ValueError("a tool part's type 'tool-' names no tool")
            if data.setdefault(name_key, name) != name:
                raise ValueError(f"type {kind!r} and toolName {data[name_key]!r} disagree")
        state = data.get("state")
        if state == "output-available" and "output" not in data:
            raise ValueError("an 'output-available' part always carries output (null included)")
        approval = data.get("approval")
        if state == "output-error" and isinstance(approval, Mapping):
            if approval.get("approved") is None:  # stored before the rule above
                del data["approval"]
        return data

    @model_validator(mode="after")
    def _check_arms(self) -> ToolPart:
        state = self.state
        if state != "output-available" and self.output is not None:
            raise ValueError(f"a {state!r} part has no output; output is on 'output-available'")
        if (state == "output-error") != (self.error_text is not None):
            raise ValueError(
                "an 'output-error' part needs errorText"
                if state == "output-error"
                else f"a {state!r} part has no errorText; errorText is on 'output-error'"
            )
        self._check_approval()
        if self.expires_at is not None and state not in _PENDING_STATES:
            raise ValueError(
                f"a {state!r} part has no expiresAt; it is the deadline of a pending action"
            )
        pending = [s for s in self.suspensions if s.state == "pending"]
        if len(pending) > 1:
            raise ValueError("a tool part has at most one pending suspension")
        if self.pending_suspension != (pending[0] if pending else None):
            raise ValueError("pendingSuspension must be the pending member of suspensions, or null")
        return self

    def _check_approval(self) -> None:
        state, approval = self.state, self.approval
        answer = None if approval is None else approval.approved
        if state in _NO_APPROVAL_STATES:
            if approval is not None:
                raise ValueError(f"a {state!r} part has no approval")
        elif state == "approval-requested":
            if approval is None or answer is not None:
                raise ValueError(
                    "an 'approval-requested' part needs an approval without an answer yet "
                    "(approved unset)"
                )
        elif state == "approval-responded":
            if answer is None:
                raise ValueError(
                    "an 'approval-responded' part needs an answered approval (approved set)"
                )
        elif state == "output-denied":
            if answer is not False:
                raise ValueError("an 'output-denied' part needs a denied approval (approved=False)")
        elif approval is not None and answer is not True:
            raise ValueError(
                f"a {state!r} part carries an approval only as granted (approved=True); a "
                "call whose approval ended without an answer shows none"
            )

    @property
    def dynamic(self) -> bool:
        """Whether this is a ``"dynamic-tool"`` part (a request-time or provider tool)."""
        return self.type == _DYNAMIC

    def to_wire(self) -> dict[str, JsonValue]:
        """The part as the camelCase JSON a client receives."""
        wire: dict[str, JsonValue] = {"type": self.type}
        if self.dynamic:
            wire["toolName"] = self.tool_name
        wire["toolCallId"] = self.tool_call_id
        wire["state"] = self.state
        if self.input is not None or self.state not in ("input-streaming", "output-error"):
            wire["input"] = self.input
        if self.raw_input is not None:
            wire["rawInput"] = self.raw_input
        if self.state == "output-available":
            wire["output"] = self.output
        if self.error_text is not None:
            wire["errorText"] = self.error_text
        if self.approval is not None:
            wire["approval"] = self.approval.to_wire()
        wire["data"] = {
            channel: [item.to_wire() for item in items] for channel, items in self.data.items()
        }
        wire["suspensions"] = [s.to_wire() for s in self.suspensions]
        pending = self.pending_suspension
        wire["pendingSuspension"] = None if pending is None else pending.to_wire()
        wire["cancelled"] = None if self.cancelled is None else self.cancelled.to_wire()
        if self.expires_at is not None:
            wire["expiresAt"] = iso(self.expires_at)
        if self.sub_threads:
            wire["subThreads"] = list(self.sub_threads)
        return wire


def get_tool_name(part: ToolPart | Mapping[str, Any]) -> str:
    """The tool name of a tool part, given the part or its wire dict.

    ``"tool-<toolName>"`` parts carry the name in their type; ``"dynamic-tool"`` parts carry
    it in ``toolName``. Anything else (a text part, a dict that is no tool part) raises
    ``TypeError``.
    """
    if isinstance(part, ToolPart):
        return part.tool_name
    if isinstance(part, Mapping):
        kind = part.get("type")
        if kind == _DYNAMIC and isinstance(part.get("toolName"), str):
            return str(part["toolName"])
        if isinstance(kind, str) and kind.startswith("tool-") and len(kind) > len("tool-"):
            return kind.removeprefix("tool-")
        raise TypeError(
            f"not a tool part: type {kind!r}; tool parts have type 'tool-<toolName>', or "
            "'dynamic-tool' with a str toolName"
        )
    raise TypeError(f"get_tool_name() takes a ToolPart or its wire dict, got {type(part).__name__}")


def _part_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)
    return kind if kind in ("text", "reasoning", "file", "step-start") else "tool"


Part: TypeAlias = Annotated[
    Annotated[TextPart, Tag("text")]
    | Annotated[StepStartPart, Tag("step-start")]
    | Annotated[ReasoningPart, Tag("reasoning")]
    | Annotated[FilePart, Tag("file")]
    | Annotated[ToolPart, Tag("tool")],
    Discriminator(_part_kind),
]


def message_steps(parts: Sequence[P]) -> list[list[P]]:
    """The parts of an assistant message by model step: split before each step-start part
    (which each step keeps first). Parts before the first step-start (a message written
    without them) are a step of their own; a message without parts has no step. Works on
    parts and on their wire dicts alike."""
    steps: list[list[P]] = []
    for part in parts:
        kind = part.get("type") if isinstance(part, Mapping) else getattr(part, "type", None)
        if kind == "step-start" or not steps:
            steps.append([])
        steps[-1].append(part)
    return steps


class Message(WireModel):
    """A thread message in the AI SDK's ``UIMessage`` shape: ``{"id", "role", "parts"}``.

    ``metadata`` (a JSON object, or ``None`` when there is none) is written only when set,
    e.g. ``{"notification": {"hidden": False, "data": None}}`` on a server notification.
    """

    id: str
    role: Role
    parts: tuple[Part, ...] = ()
    metadata: dict[str, Json] | None = None

    @property
    def tool_parts(self) -> tuple[ToolPart, ...]:
        """The message's tool parts, in order (an assistant turn's calls, step by step)."""
        return tuple(part for part in self.parts if isinstance(part, ToolPart))

    @property
    def steps(self) -> list[list[Part]]:
        """The message's parts by model step (see :func:`message_steps`)."""
        return message_steps(self.parts)

    def to_wire(self, *, parts: bool = True) -> dict[str, JsonValue]:
        """The message as the camelCase JSON a client receives (without ``"parts"`` when
        not ``parts``: a store writes its parts apart)."""
        wire: dict[str, JsonValue] = {"id": self.id, "role": self.role}
        if parts:
            wire["parts"] = [part.to_wire() for part in self.parts]
        if self.metadata is not None:
            wire["metadata"] = dict(self.metadata)
        return wire
