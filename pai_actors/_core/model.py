"""The model side: the :class:`Model` protocol, what a model receives and what it streams back.

A model step is one call of :meth:`Model.stream`: it receives a :class:`ModelRequest`
(instructions, the conversation as model-facing messages, the offered tools) and yields
:data:`ModelEvent` values, ending with :class:`Finish`. The run loop reads a step with
``pai_actors._core.step`` (which checks the event protocol) and builds the model-facing messages
from the thread's messages.

Model-facing messages mirror the AI SDK's ``ModelMessage`` (``to_wire()`` gives its JSON):

- :class:`ModelSystemMessage` ``(text)`` and :class:`ModelUserMessage` ``(text)``;
- :class:`ModelAssistantMessage` ``(parts)``: :class:`ModelReasoningPart` ``(text,
  provider_metadata)``, :class:`ModelTextPart` and :class:`ModelToolCallPart`
  ``(tool_call_id, tool_name, input)``, in the order the model produced them;
- :class:`ModelToolMessage` ``(parts)``: :class:`ModelToolResultPart`
  ``(tool_call_id, tool_name, output)``, where ``output`` is the AI SDK's tool result output:
  ``{"type": "text" | "error-text", "value": str}``, ``{"type": "json" | "error-json",
  "value": <JSON>}`` or ``{"type": "content", "value": [<content blocks>]}``.

A successful result is what the tool's ``to_model_output`` made of its output (by default
``text`` for a ``str`` output, ``json`` otherwise); a failed or cancelled call is
``error-text`` with its ``errorText``.

What a model streams back (:data:`ModelEvent`): :class:`TextDelta`; :class:`ReasoningDelta`
and :class:`ReasoningEnd` (reasoning or "thinking", where the provider sends it);
:class:`ToolInputStart`, :class:`ToolInputDelta` and :class:`ToolCallEvent` (tool calls); and
:class:`Finish` last, with the finish reason, the step's :class:`Usage` and the provider's
metadata when the model reports them. ``provider_metadata`` (on :class:`ReasoningEnd`,
:class:`Finish` and :class:`ModelReasoningPart`) is the AI SDK's ``providerMetadata``: JSON
keyed by provider (``{"anthropic": {"signature": "..."}}``), passed through untouched so that
a provider can be given back what it needs (a thinking block's signature) on the next step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol, TypeAlias, get_args

from .errors import ModelProtocolError, OutputNotJSON
from .json import JsonValue, to_json_value

JsonSchema: TypeAlias = dict[str, JsonValue]

ProviderMetadata: TypeAlias = dict[str, dict[str, JsonValue]]
"""The AI SDK's ``providerMetadata``: JSON objects keyed by provider name."""

ToolResultOutput: TypeAlias = dict[str, JsonValue]
"""The AI SDK's tool result output: ``{"type": ..., "value": ...}`` (see the module docs)."""

FinishReason: TypeAlias = Literal[
    "stop", "tool-calls", "length", "content-filter", "error", "other", "unknown"
]
"""Why a model step ended: the AI SDK's finish reasons."""

_FINISH_REASONS: tuple[str, ...] = get_args(FinishReason)
_OUTPUT_TYPES = ("text", "json", "content", "error-text", "error-json")


def check_tool_result_output(output: object, *, what: str = "output") -> ToolResultOutput:
    """Return ``output`` as a :data:`ToolResultOutput` dict, or raise ModelProtocolError."""
    advice = (
        'use {"type": "text" | "error-text", "value": str}, '
        '{"type": "json" | "error-json", "value": <JSON>} or '
        '{"type": "content", "value": [...]}'
    )
    if not isinstance(output, Mapping) or set(output) != {"type", "value"}:
        raise ModelProtocolError(
            f"{what} {output!r} is not a tool result output (a dict with exactly the keys "
            f"'type' and 'value'); {advice}"
        )
    kind, value = output["type"], output["value"]
    if kind not in _OUTPUT_TYPES:
        raise ModelProtocolError(f"{what} has the unknown type {kind!r}; {advice}")
    if kind in ("text", "error-text") and not isinstance(value, str):
        raise ModelProtocolError(
            f"{what} of type {kind!r} has the value {value!r}; its value must be a str"
        )
    if kind == "content" and not isinstance(value, list | tuple):
        raise ModelProtocolError(
            f"{what} of type 'content' has the value {value!r}; its value must be a list of "
            "content blocks, such as [{'type': 'text', 'text': '...'}]"
        )
    try:
        return {"type": kind, "value": to_json_value(value, what=f"{what}['value']")}
    except OutputNotJSON as exc:
        raise ModelProtocolError(f"{exc}; a tool result output must be JSON") from exc


# -- what a model receives ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelTextPart:
    """Text the assistant wrote, inside a :class:`ModelAssistantMessage`."""

    text: str

    def to_wire(self) -> dict[str, JsonValue]:
        return {"type": "text", "text": self.text}


def _check_provider_metadata(owner: object, metadata: object) -> ProviderMetadata | None:
    """``metadata`` as a :data:`ProviderMetadata` copy, or raise ModelProtocolError."""
    if metadata is None:
        return None
    advice = 'give a dict of JSON objects keyed by provider, e.g. {"anthropic": {"signature": ...}}'
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Mapping) for k, v in metadata.items()
    ):
        raise ModelProtocolError(f"the provider_metadata of {owner} is {metadata!r}; {advice}")
    try:
        checked = to_json_value(metadata, what="provider_metadata")
    except OutputNotJSON as exc:
        raise ModelProtocolError(f"{exc}; provider_metadata must be JSON ({advice})") from exc
    assert isinstance(checked, dict)
    return {k: v for k, v in checked.items() if isinstance(v, dict)}


@dataclass(frozen=True, slots=True)
class ModelReasoningPart:
    """Reasoning ("thinking") the assistant wrote, inside a :class:`ModelAssistantMessage`.

    ``provider_metadata`` is what the provider needs to be given the reasoning back (an
    Anthropic thinking block's ``signature``, an OpenAI reasoning item's encrypted content);
    an adapter leaves out reasoning another provider produced.
    """

    text: str
    provider_metadata: ProviderMetadata | None = None

    def __post_init__(self) -> None:
        metadata = _check_provider_metadata("a ModelReasoningPart", self.provider_metadata)
        object.__setattr__(self, "provider_metadata", metadata)

    def to_wire(self) -> dict[str, JsonValue]:
        wire: dict[str, JsonValue] = {"type": "reasoning", "text": self.text}
        if self.provider_metadata is not None:
            wire["providerOptions"] = dict(self.provider_metadata)
        return wire


@dataclass(frozen=True, slots=True)
class ModelToolCallPart:
    """A tool call the assistant made, inside a :class:`ModelAssistantMessage`."""

    tool_call_id: str
    tool_name: str
    input: JsonValue

    def to_wire(self) -> dict[str, JsonValue]:
        return {
            "type": "tool-call",
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "input": self.input,
        }


@dataclass(frozen=True, slots=True)
class ModelToolResultPart:
    """The result of one tool call, inside a :class:`ModelToolMessage`.

    ``output`` is the AI SDK's tool result output (checked, and copied, at construction).
    """

    tool_call_id: str
    tool_name: str
    output: ToolResultOutput

    def __post_init__(self) -> None:
        checked = check_tool_result_output(
            self.output, what=f"the output of tool call {self.tool_call_id!r}"
        )
        object.__setattr__(self, "output", checked)

    def to_wire(self) -> dict[str, JsonValue]:
        return {
            "type": "tool-result",
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "output": self.output,
        }


def _parts(owner: str, parts: object, allowed: tuple[type, ...]) -> tuple[object, ...]:
    names = [t.__name__ for t in allowed]
    kinds = " or ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} or {names[-1]}"
    if isinstance(parts, str | bytes) or not isinstance(parts, Sequence):
        raise ModelProtocolError(
            f"{owner} parts must be a sequence, got {parts!r}; give a list of {kinds}"
        )
    for part in parts:
        if not isinstance(part, allowed):
            raise ModelProtocolError(f"{owner} cannot hold {part!r}; its parts are {kinds}")
    return tuple(parts)


@dataclass(frozen=True, slots=True)
class ModelSystemMessage:
    """System text: a notification the runtime appended, or other trusted instructions."""

    text: str
    role: ClassVar[Literal["system"]] = "system"

    def to_wire(self) -> dict[str, JsonValue]:
        return {"role": "system", "content": self.text}


@dataclass(frozen=True, slots=True)
class ModelFilePart:
    """A file the user sent, inside a :class:`ModelUserMessage`: its media type, its
    ``data:`` or ``http(s):`` URL, and its file name if it has one."""

    media_type: str
    url: str
    filename: str | None = None

    def to_wire(self) -> dict[str, JsonValue]:
        wire: dict[str, JsonValue] = {"type": "file", "mediaType": self.media_type}
        wire["data"] = self.url
        if self.filename is not None:
            wire["filename"] = self.filename
        return wire


@dataclass(frozen=True, slots=True)
class ModelUserMessage:
    """What the user wrote, and the files they sent with it."""

    text: str
    files: Sequence[ModelFilePart] = ()
    role: ClassVar[Literal["user"]] = "user"

    def __post_init__(self) -> None:
        for file in self.files:
            if not isinstance(file, ModelFilePart):
                raise ModelProtocolError(
                    f"ModelUserMessage files cannot hold {file!r}; give ModelFilePart values"
                )
        object.__setattr__(self, "files", tuple(self.files))

    def to_wire(self) -> dict[str, JsonValue]:
        content: list[JsonValue] = [{"type": "text", "text": self.text}]
        content.extend(file.to_wire() for file in self.files)
        return {"role": "user", "content": content}


@dataclass(frozen=True, slots=True)
class ModelAssistantMessage:
    """One model step's output: reasoning, text and tool calls, in the order the model
    produced them."""

    parts: Sequence[ModelReasoningPart | ModelTextPart | ModelToolCallPart]
    role: ClassVar[Literal["assistant"]] = "assistant"

    def __post_init__(self) -> None:
        parts = _parts(
            "ModelAssistantMessage",
            self.parts,
            (ModelReasoningPart, ModelTextPart, ModelToolCallPart),
        )
        object.__setattr__(self, "parts", parts)

    def to_wire(self) -> dict[str, JsonValue]:
        return {"role": "assistant", "content": [part.to_wire() for part in self.parts]}


@dataclass(frozen=True, slots=True)
class ModelToolMessage:
    """The results of an assistant message's tool calls, by ``tool_call_id``."""

    parts: Sequence[ModelToolResultPart]
    role: ClassVar[Literal["tool"]] = "tool"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "parts", _parts("ModelToolMessage", self.parts, (ModelToolResultPart,))
        )

    def to_wire(self) -> dict[str, JsonValue]:
        return {"role": "tool", "content": [part.to_wire() for part in self.parts]}


ModelMessage: TypeAlias = (
    ModelSystemMessage | ModelUserMessage | ModelAssistantMessage | ModelToolMessage
)
"""A model-facing message (the AI SDK's ``ModelMessage``); see the module docs."""

_MESSAGE_TYPES = (ModelSystemMessage, ModelUserMessage, ModelAssistantMessage, ModelToolMessage)


@dataclass(frozen=True, slots=True)
class ModelTool:
    """A tool as the model sees it: its resolved description and its input JSON Schema."""

    description: str
    input_schema: JsonSchema


ToolChoice: TypeAlias = Literal["auto", "none", "required"]
"""Whether the model may (``auto``), must not (``none``) or must (``required``) call a tool;
:class:`ModelSettings` also takes one tool's registration name as ``tool_choice``."""

_TOOL_CHOICES = ("auto", "none", "required")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSettings:
    """How a model step is sampled, on an agent (``define_agent(model_settings=...)``), per
    request (``send(..., model_settings=...)``, stored with the run) or on an adapter; each
    field ``None`` leaves it to the layer below (the request's over the agent's over the
    adapter's over the provider's default).

    ``temperature``, ``top_p``, ``max_tokens`` (the step's output tokens), ``stop``
    (sequences that end the step), ``seed``; ``tool_choice``: ``"auto"``, ``"none"``,
    ``"required"``, or the registration name of the one tool the model must call;
    ``parallel_tool_calls``: whether the model may call several tools in one step.
    """

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise ModelProtocolError(f"ModelSettings {name} is {value!r}; give a number")
        for name, least in (("max_tokens", 1), ("seed", None)):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int)
                or (least is not None and value < least)
            ):
                bound = f" >= {least}" if least is not None else ""
                raise ModelProtocolError(f"ModelSettings {name} is {value!r}; give an int{bound}")
        if self.stop is not None:
            if isinstance(self.stop, str) or not all(isinstance(x, str) for x in self.stop):
                raise ModelProtocolError(
                    f"ModelSettings stop is {self.stop!r}; give a sequence of str, "
                    'e.g. stop=("END",)'
                )
            object.__setattr__(self, "stop", tuple(self.stop))
        if self.tool_choice is not None and (
            not isinstance(self.tool_choice, str) or not self.tool_choice
        ):
            raise ModelProtocolError(
                f"ModelSettings tool_choice is {self.tool_choice!r}; give 'auto', 'none', "
                "'required' or a tool's registration name"
            )
        if self.parallel_tool_calls is not None and not isinstance(self.parallel_tool_calls, bool):
            raise ModelProtocolError(
                f"ModelSettings parallel_tool_calls is {self.parallel_tool_calls!r}; give a bool"
            )

    @property
    def forced_tool(self) -> str | None:
        """The registration name of the tool the model must call, if ``tool_choice`` names
        one (else ``None``)."""
        choice = self.tool_choice
        return None if choice is None or choice in _TOOL_CHOICES else choice

    def over(self, below: ModelSettings | None) -> ModelSettings:
        """These settings, each field ``None`` taken from ``below``."""
        if below is None:
            return self
        return ModelSettings(
            **{
                name: getattr(below, name) if getattr(self, name) is None else getattr(self, name)
                for name in _SETTINGS_FIELDS
            }
        )

    def to_json(self) -> dict[str, JsonValue]:
        """The settings that are set, by field name (as a run stores them)."""
        out: dict[str, JsonValue] = {}
        for name in _SETTINGS_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if name == "stop" else value
        return out

    @classmethod
    def from_json(cls, value: object) -> ModelSettings:
        """Settings :meth:`to_json` wrote (unknown keys refused)."""
        if not isinstance(value, Mapping) or not set(value) <= set(_SETTINGS_FIELDS):
            raise ModelProtocolError(
                f"stored model settings {value!r} are not ModelSettings; known fields: "
                f"{', '.join(_SETTINGS_FIELDS)}"
            )
        fields = dict(value)
        if isinstance(fields.get("stop"), list):
            fields["stop"] = tuple(fields["stop"])
        return cls(**fields)


_SETTINGS_FIELDS = (
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "seed",
    "tool_choice",
    "parallel_tool_calls",
)
_NO_SETTINGS = ModelSettings()


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything one model step receives.

    ``instructions`` is the agent's system prompt (``None`` when it has none); ``messages``
    the conversation so far (kept as a tuple); ``tools`` the tools the model may call in
    this step, by registration name (a copy of the mapping given); ``settings`` the
    request's and the agent's :class:`ModelSettings`, merged (an adapter applies its own
    under them).
    """

    instructions: str | None = None
    messages: Sequence[ModelMessage] = ()
    tools: dict[str, ModelTool] = field(default_factory=dict)
    settings: ModelSettings = field(default_factory=ModelSettings, repr=False)

    def __repr__(self) -> str:
        settings = "" if self.settings == _NO_SETTINGS else f", settings={self.settings!r}"
        return (
            f"ModelRequest(instructions={self.instructions!r}, messages={self.messages!r}, "
            f"tools={self.tools!r}{settings})"
        )

    def __post_init__(self) -> None:
        if not isinstance(self.settings, ModelSettings):
            raise ModelProtocolError(
                f"ModelRequest settings must be ModelSettings, got {self.settings!r}"
            )
        if isinstance(self.messages, str | bytes) or not isinstance(self.messages, Sequence):
            raise ModelProtocolError(
                f"ModelRequest messages must be a sequence of model messages, got {self.messages!r}"
            )
        for message in self.messages:
            if not isinstance(message, _MESSAGE_TYPES):
                raise ModelProtocolError(
                    f"ModelRequest messages cannot hold {message!r}; use ModelSystemMessage, "
                    "ModelUserMessage, ModelAssistantMessage or ModelToolMessage"
                )
        for name, tool in self.tools.items():
            if not isinstance(tool, ModelTool):
                raise ModelProtocolError(
                    f"ModelRequest tool {name!r} is {tool!r}; give a "
                    "ModelTool(description, input_schema)"
                )
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "tools", dict(self.tools))


# -- what a model streams back -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A fragment of the text the model is writing."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A fragment of the reasoning ("thinking") the model is writing before it answers.

    Consecutive fragments make one reasoning part, which a :class:`ReasoningEnd`, or any
    other event, closes.
    """

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningEnd:
    """The reasoning part being written is complete.

    ``provider_metadata`` carries what the provider needs to be given the part back (see
    :class:`ModelReasoningPart`). A ``ReasoningEnd`` without fragments before it is a part
    of its own, with no text (a redacted or encrypted reasoning block).
    """

    provider_metadata: ProviderMetadata | None = None

    def __post_init__(self) -> None:
        metadata = _check_provider_metadata("a ReasoningEnd", self.provider_metadata)
        object.__setattr__(self, "provider_metadata", metadata)


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens one model step used, as the provider counted them (the AI SDK's usage).

    ``input_tokens`` and ``output_tokens`` are ``None`` when the provider did not report
    them; ``total_tokens`` is their sum unless the provider reports its own;
    ``reasoning_tokens`` (part of ``output_tokens``) and ``cached_input_tokens`` (part of
    ``input_tokens``) where the provider reports them.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_input_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "reasoning_tokens",
            "cached_input_tokens",
        ):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ModelProtocolError(
                    f"Usage {name} is {value!r}; give a token count (an int >= 0) or None"
                )
        if self.total_tokens is None and None not in (self.input_tokens, self.output_tokens):
            total = (self.input_tokens or 0) + (self.output_tokens or 0)
            object.__setattr__(self, "total_tokens", total)


@dataclass(frozen=True, slots=True)
class ToolInputStart:
    """The model began a tool call whose input will follow as :class:`ToolInputDelta`\\ s."""

    tool_call_id: str
    tool_name: str


@dataclass(frozen=True, slots=True)
class ToolInputDelta:
    """A fragment of a started tool call's input, as JSON text.

    The fragments of one call, concatenated, are the JSON text of the ``input`` of the
    :class:`ToolCallEvent` that completes the call.
    """

    tool_call_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """A complete tool call: its parsed JSON input.

    It completes a call that a :class:`ToolInputStart` began, or stands alone when the
    input was not streamed. The input is what the model wrote; it is checked against the
    tool's ``input_schema`` later, by the run loop.
    """

    tool_call_id: str
    tool_name: str
    input: JsonValue


@dataclass(frozen=True, slots=True, repr=False)
class Finish:
    """The last event of every step, with the AI SDK's finish reason.

    ``"tool-calls"`` when the step called tools, ``"stop"`` when the model answered; the
    run loop decides what comes next from the tool calls, not from the reason. ``usage``
    is the step's :class:`Usage` and ``provider_metadata`` what the provider said about the
    step (its response id, the model that answered), when the model reports them.
    """

    reason: FinishReason
    usage: Usage | None = None
    provider_metadata: ProviderMetadata | None = None

    def __post_init__(self) -> None:
        if self.reason not in _FINISH_REASONS:
            known = ", ".join(map(repr, _FINISH_REASONS))
            raise ModelProtocolError(
                f"Finish reason {self.reason!r} is not one of {known}; "
                "map the provider's reason to one of them ('other' when none fits)"
            )
        if self.usage is not None and not isinstance(self.usage, Usage):
            raise ModelProtocolError(
                f"Finish usage is {self.usage!r}; give a Usage(input_tokens, output_tokens, "
                "...) or None"
            )
        metadata = _check_provider_metadata("a Finish", self.provider_metadata)
        object.__setattr__(self, "provider_metadata", metadata)

    def __repr__(self) -> str:  # constructor-like, without the fields left at None
        extra = "" if self.usage is None else f", usage={self.usage!r}"
        if self.provider_metadata is not None:
            extra += f", provider_metadata={self.provider_metadata!r}"
        return f"Finish(reason={self.reason!r}{extra})"


ModelEvent: TypeAlias = (
    TextDelta
    | ReasoningDelta
    | ReasoningEnd
    | ToolInputStart
    | ToolInputDelta
    | ToolCallEvent
    | Finish
)
"""What :meth:`Model.stream` yields; every step ends with exactly one :class:`Finish`."""

MODEL_EVENT_TYPES = (
    TextDelta,
    ReasoningDelta,
    ReasoningEnd,
    ToolInputStart,
    ToolInputDelta,
    ToolCallEvent,
    Finish,
)


class Model(Protocol):
    """A language model, as the run loop calls it: one :meth:`stream` per step.

    Implementations are trio-native: the iterator awaits at checkpoints and is cancellable
    there. ``pai_actors.testing.ScriptedModel`` is a scripted implementation for tests.
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one step's events for ``request``, ending with :class:`Finish`."""
        ...
