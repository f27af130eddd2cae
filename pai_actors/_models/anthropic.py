"""The Anthropic Messages API: :class:`AnthropicModel`.

:func:`to_anthropic_request` maps a :class:`~pai_actors.ModelRequest` to the ``system``,
``messages`` and ``tools`` of ``POST /v1/messages``; :class:`AnthropicStreamReader` reads
its stream (``message_start``, then per content block ``content_block_start``,
``content_block_delta``\\ s and ``content_block_stop``, then ``message_delta`` and
``message_stop``; ``ping`` between, and ``error`` events, which the SDK raises):

- a ``text`` block's ``text_delta``\\ s are text;
- a ``thinking`` block's ``thinking_delta``\\ s are reasoning; its ``signature_delta`` is
  kept and given with the block's stop (:class:`~pai_actors.ReasoningEnd`, provider
  metadata ``{"anthropic": {"signature": ...}}``); a ``redacted_thinking`` block is a
  reasoning part without text (``{"anthropic": {"redactedData": ...}}``);
- a ``tool_use`` block starts a tool call (its ``id`` is the ``tool_call_id``), its
  ``input_json_delta``\\ s stream the input, its stop completes the call;
- ``message_delta`` carries the ``stop_reason``: ``end_turn``, ``stop_sequence`` and
  ``pause_turn`` -> ``stop``, ``max_tokens`` and ``model_context_window_exceeded`` ->
  ``length``, ``tool_use`` -> ``tool-calls``, ``refusal`` -> ``content-filter``, anything
  else ``unknown``. Usage: the input tokens of ``message_start``, the output tokens of the
  last ``message_delta`` (both are cumulative). A stream without ``message_stop`` is
  malformed.

System messages after the first user turn (the runtime's notifications) go to the model as
user text: the Messages API has no system role inside the conversation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from .._core.json import JsonValue
from .._core.model import (
    Finish,
    FinishReason,
    ModelAssistantMessage,
    ModelEvent,
    ModelFilePart,
    ModelReasoningPart,
    ModelRequest,
    ModelSystemMessage,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolMessage,
    ModelUserMessage,
    ReasoningDelta,
    ReasoningEnd,
    TextDelta,
    ToolCallEvent,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from .base import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, ProviderModel, StreamReader
from .common import (
    OpenCall,
    data_url,
    malformed,
    parse_tool_input,
    stream_error,
    unsupported_file,
    unsupported_setting,
)
from .openai_chat import result_text

DEFAULT_MAX_TOKENS = 4096

_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool-calls",
    "refusal": "content-filter",
}


def to_anthropic_request(
    request: ModelRequest, provider: str = "anthropic"
) -> dict[str, JsonValue]:
    """The ``system``, ``messages`` and ``tools`` of a Messages request (pure)."""
    system = [request.instructions] if request.instructions else []
    messages: list[JsonValue] = []
    for message in request.messages:
        if isinstance(message, ModelSystemMessage):
            if messages:
                messages.append({"role": "user", "content": _texts(message.text)})
            else:
                system.append(message.text)
        elif isinstance(message, ModelUserMessage):
            content = [*_texts(message.text), *(_file_block(f, provider) for f in message.files)]
            messages.append({"role": "user", "content": content})
        elif isinstance(message, ModelAssistantMessage):
            blocks: list[JsonValue] = []
            for part in message.parts:
                if isinstance(part, ModelReasoningPart):
                    block = _thinking_block(part)
                    if block is not None:
                        blocks.append(block)
                elif isinstance(part, ModelTextPart):
                    if part.text:
                        blocks.append(_text(part.text))
                elif isinstance(part, ModelToolCallPart):
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": part.tool_call_id,
                            "name": part.tool_name,
                            "input": part.input,
                        }
                    )
            if blocks:
                messages.append({"role": "assistant", "content": blocks})
        elif isinstance(message, ModelToolMessage):
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": result.tool_call_id,
                            "content": result_text(result.output),
                            "is_error": result.output["type"] in ("error-text", "error-json"),
                        }
                        for result in message.parts
                    ],
                }
            )
    body: dict[str, JsonValue] = {"messages": messages}
    if system:
        body["system"] = "\n\n".join(system)
    if request.tools:
        body["tools"] = [
            {"name": name, "description": tool.description, "input_schema": tool.input_schema}
            for name, tool in request.tools.items()
        ]
    return body


def _file_block(file: ModelFilePart, provider: str) -> JsonValue:
    """A user's file as an ``image`` or (a PDF, plain text) ``document`` block, from its
    base64 data or its URL."""
    if file.media_type.startswith("image/"):
        kind = "image"
    elif file.media_type in ("application/pdf", "text/plain"):
        kind = "document"
    else:
        raise unsupported_file(
            provider, "Anthropic Messages", file, "(it takes images, PDFs and plain text)"
        )
    inline = data_url(file.url)
    source: dict[str, JsonValue]
    if inline is not None:
        source = {"type": "base64", "media_type": inline[0] or file.media_type, "data": inline[1]}
    elif file.url.startswith("data:"):
        raise unsupported_file(provider, "Anthropic Messages", file, "as a data: URL not base64")
    else:
        source = {"type": "url", "url": file.url}
    block: dict[str, JsonValue] = {"type": kind, "source": source}
    if kind == "document" and file.filename is not None:
        block["title"] = file.filename
    return block


def _texts(text: str) -> list[JsonValue]:
    """A text block, or none for an empty text (the API refuses empty text blocks)."""
    return [_text(text)] if text else []


def _text(text: str) -> JsonValue:
    return {"type": "text", "text": text}


def _thinking_block(part: ModelReasoningPart) -> JsonValue | None:
    metadata = (part.provider_metadata or {}).get("anthropic") or {}
    signature = metadata.get("signature")
    redacted = metadata.get("redactedData")
    if isinstance(signature, str):
        return {"type": "thinking", "thinking": part.text, "signature": signature}
    if isinstance(redacted, str):
        return {"type": "redacted_thinking", "data": redacted}
    return None  # reasoning without a signature cannot be given back


class AnthropicStreamReader:
    """Reads Messages stream events (JSON) into model events (sans-IO; see the module
    docs)."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._calls: dict[int, OpenCall] = {}  # tool_use blocks, by block index
        self._thinking: dict[int, str | None] = {}  # thinking blocks: their signature
        self._input_tokens: int | None = None
        self._cached_tokens: int | None = None
        self._output_tokens: int | None = None
        self._stop: str | None = None
        self._metadata: dict[str, JsonValue] = {}
        self._stopped = False

    def feed(self, name: str | None, event: dict[str, Any]) -> Iterable[ModelEvent]:
        kind = event.get("type", name)
        if kind == "content_block_delta":
            return self._delta(event["index"], event["delta"])
        if kind == "content_block_start":
            return self._start(event["index"], event["content_block"])
        if kind == "content_block_stop":
            return self._block_stop(event["index"])
        if kind == "message_start":
            message = event["message"]
            self._metadata = {"id": message.get("id"), "model": message.get("model")}
            self._usage(message.get("usage"))
        elif kind == "message_delta":
            stop = (event.get("delta") or {}).get("stop_reason")
            if stop is not None:
                self._stop = stop
            self._usage(event.get("usage"))
        elif kind == "message_stop":
            self._stopped = True
        elif kind == "error":
            raise stream_error(self._provider, event)
        return []

    def _usage(self, usage: dict[str, Any] | None) -> None:
        if not usage:
            return
        if usage.get("input_tokens") is not None:
            cache_read = usage.get("cache_read_input_tokens") or 0
            cache_write = usage.get("cache_creation_input_tokens") or 0
            self._input_tokens = usage["input_tokens"] + cache_read + cache_write
            self._cached_tokens = cache_read
        if usage.get("output_tokens") is not None:
            self._output_tokens = usage["output_tokens"]

    def _start(self, index: int, block: dict[str, Any]) -> list[ModelEvent]:
        kind = block.get("type")
        if kind == "tool_use":
            call = self._calls[index] = OpenCall(block["id"], block["name"])
            return [ToolInputStart(call.tool_call_id, call.tool_name)]
        if kind == "thinking":
            self._thinking[index] = None
            return [ReasoningDelta(block["thinking"])] if block.get("thinking") else []
        if kind == "redacted_thinking":
            return [ReasoningEnd({"anthropic": {"redactedData": block["data"]}})]
        if kind == "text" and block.get("text"):
            return [TextDelta(block["text"])]
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[ModelEvent]:
        kind = delta.get("type")
        if kind == "text_delta":
            return [TextDelta(delta["text"])] if delta["text"] else []
        if kind == "input_json_delta":
            call = self._calls.get(index)
            if call is None:
                raise malformed(
                    self._provider, f"input_json_delta for block {index}, not a tool_use"
                )
            if not delta["partial_json"]:
                return []
            call.parts.append(delta["partial_json"])
            return [ToolInputDelta(call.tool_call_id, delta["partial_json"])]
        if kind == "thinking_delta":
            return [ReasoningDelta(delta["thinking"])] if delta["thinking"] else []
        if kind == "signature_delta":
            self._thinking[index] = delta["signature"]
        return []

    def _block_stop(self, index: int) -> list[ModelEvent]:
        call = self._calls.pop(index, None)
        if call is not None:
            tool_input = parse_tool_input(
                self._provider, call.tool_call_id, call.tool_name, call.text
            )
            return [ToolCallEvent(call.tool_call_id, call.tool_name, tool_input)]
        if index in self._thinking:
            signature = self._thinking.pop(index)
            if signature is None:
                return [ReasoningEnd()]
            return [ReasoningEnd({"anthropic": {"signature": signature}})]
        return []

    def end(self) -> Iterable[ModelEvent]:
        if not self._stopped:
            raise malformed(self._provider, "the stream ended before message_stop")
        if self._calls:
            raise malformed(self._provider, "the message stopped with tool_use blocks still open")
        reason: FinishReason = "unknown" if self._stop is None else _STOP.get(self._stop, "unknown")
        usage = Usage(
            input_tokens=self._input_tokens,
            output_tokens=self._output_tokens,
            cached_input_tokens=self._cached_tokens,
        )
        metadata = {self._provider: self._metadata} if self._metadata else None
        return [Finish(reason, usage, metadata)]


class AnthropicModel(ProviderModel):
    """A :class:`~pai_actors.Model` on Anthropic's Messages API, with the ``anthropic`` SDK.

    ``AnthropicModel("claude-sonnet-4-5")`` takes its key from ``ANTHROPIC_API_KEY`` and its
    base URL from ``ANTHROPIC_BASE_URL`` when they are not given. ``max_tokens`` is
    required by the API (4096 by default); the SDK's ``messages.create`` takes no
    ``temperature``, ``top_p`` or ``seed``, so neither does this adapter. ``thinking`` is
    the ``thinking`` parameter (``{"type": "enabled", "budget_tokens": 2048}``): the
    thinking blocks stream as reasoning, and a step's signed thinking is stored and given
    back on the next step. ``extra_body``, ``client``, ``max_retries``, ``timeout`` as
    :class:`OpenAIChatModel`.
    """

    provider_name: ClassVar[str] = "anthropic"
    key_variable: ClassVar[str] = "ANTHROPIC_API_KEY"
    base_url_variable: ClassVar[str] = "ANTHROPIC_BASE_URL"
    default_base_url: ClassVar[str] = "https://api.anthropic.com"
    extra: ClassVar[str] = "anthropic"
    sdk_module: ClassVar[str] = "anthropic"
    client_class: ClassVar[str] = "AsyncAnthropic"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        provider: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float = DEFAULT_TIMEOUT,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking: Mapping[str, object] | None = None,
        extra_body: Mapping[str, object] | None = None,
        client: Any = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            provider=provider,
            max_retries=max_retries,
            timeout=timeout,
            max_tokens=max_tokens,
            extra_body=extra_body,
            client=client,
        )
        self.thinking = None if thinking is None else dict(thinking)

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        settings = self.settings_for(request)
        # The SDK's Messages.create takes no temperature, top_p or seed (anthropic 2.x).
        for name in ("temperature", "top_p", "seed"):
            if getattr(settings, name) is not None:
                raise unsupported_setting(self.provider, "Anthropic Messages", name)
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": settings.max_tokens or self.max_tokens,
            **to_anthropic_request(request, self.provider),
            "stream": True,
        }
        if settings.stop is not None:
            params["stop_sequences"] = list(settings.stop)
        choice: dict[str, Any] | None = None
        if settings.tool_choice is not None:
            forced = settings.forced_tool
            kinds = {"auto": "auto", "none": "none", "required": "any"}
            choice = (
                {"type": kinds[settings.tool_choice]}
                if forced is None
                else {"type": "tool", "name": forced}
            )
        if (
            settings.parallel_tool_calls is False
            and request.tools
            and (choice is None or choice["type"] != "none")
        ):
            choice = {"type": "auto", **(choice or {}), "disable_parallel_tool_use": True}
        if choice is not None:
            params["tool_choice"] = choice
        if self.thinking is not None:
            params["thinking"] = self.thinking
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    def _open(self, client: Any, request: ModelRequest) -> Any:
        return client.messages.with_streaming_response.create(**self._params(request))

    def _reader(self) -> StreamReader:
        return AnthropicStreamReader(self.provider)
