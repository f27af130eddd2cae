"""OpenAI Chat Completions, and every OpenAI-compatible server: :class:`OpenAIChatModel`.

:func:`to_chat_request` maps a :class:`~pai_actors.ModelRequest` to the ``messages`` and
``tools`` of ``POST /chat/completions``; :class:`ChatStreamReader` reads its stream of
``chat.completion.chunk`` objects (with ``stream_options: {"include_usage": true}``, the
usage comes in a last chunk without choices):

- ``delta.content`` is text; ``delta.reasoning_content`` (DeepSeek, vLLM, llama.cpp) or
  ``delta.reasoning`` (OpenRouter, Ollama) is reasoning; ``delta.refusal`` is text too;
- ``delta.tool_calls[]`` fragments are keyed by ``index``: the first fragment of an index
  has the call's ``id`` and ``function.name`` (:class:`~pai_actors.ToolInputStart`), every
  ``function.arguments`` fragment is a :class:`~pai_actors.ToolInputDelta`; calls of
  several indexes may interleave. They are complete at the choice's ``finish_reason``
  (a :class:`~pai_actors.ToolCallEvent` each, in index order);
- ``finish_reason`` maps to the AI SDK's: ``stop``, ``length``, ``content_filter`` ->
  ``content-filter``, ``tool_calls`` / ``function_call`` -> ``tool-calls``, anything else
  ``unknown``. A stream that ends without one is malformed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from .._core.json import JsonValue
from .._core.model import (
    Finish,
    FinishReason,
    ModelAssistantMessage,
    ModelEvent,
    ModelRequest,
    ModelSystemMessage,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolMessage,
    ModelUserMessage,
    ReasoningDelta,
    TextDelta,
    ToolCallEvent,
    ToolInputDelta,
    ToolInputStart,
    ToolResultOutput,
    Usage,
)
from .base import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, ProviderModel, StreamReader
from .common import OpenCall, malformed, parse_tool_input, stream_error, unsupported_file

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content-filter",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
}


def result_text(output: ToolResultOutput) -> str:
    """A tool result output as the text a tool message carries: text as it is, anything
    else as JSON (content blocks of text only: their texts, joined)."""
    value = output["value"]
    if output["type"] in ("text", "error-text") and isinstance(value, str):
        return value
    if output["type"] == "content" and isinstance(value, list):
        texts = [
            block.get("text")
            for block in value
            if isinstance(block, dict) and block.get("type") == "text"
        ]
        if len(texts) == len(value) and all(isinstance(t, str) for t in texts):
            return "\n".join(t for t in texts if isinstance(t, str))
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _chat_user(message: ModelUserMessage, provider: str) -> JsonValue:
    """A user message: its text alone, or its text and files as content parts (an image as
    ``image_url``; any other file as ``file``, which the API takes only as data)."""
    if not message.files:
        return {"role": "user", "content": message.text}
    content: list[JsonValue] = [{"type": "text", "text": message.text}]
    for file in message.files:
        if file.media_type.startswith("image/"):
            content.append({"type": "image_url", "image_url": {"url": file.url}})
        elif file.url.startswith("data:"):
            entry: dict[str, JsonValue] = {"file_data": file.url}
            if file.filename is not None:
                entry["filename"] = file.filename
            content.append({"type": "file", "file": entry})
        else:
            raise unsupported_file(
                provider,
                "Chat Completions",
                file,
                "by URL: only images are fetched; send other files as data: URLs",
            )
    return {"role": "user", "content": content}


def to_chat_request(request: ModelRequest, provider: str = "openai") -> dict[str, JsonValue]:
    """The ``messages`` and ``tools`` of a Chat Completions request (pure)."""
    messages: list[JsonValue] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    for message in request.messages:
        if isinstance(message, ModelSystemMessage):
            messages.append({"role": "system", "content": message.text})
        elif isinstance(message, ModelUserMessage):
            messages.append(_chat_user(message, provider))
        elif isinstance(message, ModelAssistantMessage):
            text = "".join(p.text for p in message.parts if isinstance(p, ModelTextPart))
            calls: list[JsonValue] = [
                {
                    "id": p.tool_call_id,
                    "type": "function",
                    "function": {
                        "name": p.tool_name,
                        "arguments": json.dumps(p.input, ensure_ascii=False),
                    },
                }
                for p in message.parts
                if isinstance(p, ModelToolCallPart)
            ]
            assistant: dict[str, JsonValue] = {"role": "assistant", "content": text or None}
            if calls:
                assistant["tool_calls"] = calls
            messages.append(assistant)
        elif isinstance(message, ModelToolMessage):
            for part in message.parts:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": part.tool_call_id,
                        "content": result_text(part.output),
                    }
                )
    body: dict[str, JsonValue] = {"messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": tool.description,
                    "parameters": tool.input_schema,
                },
            }
            for name, tool in request.tools.items()
        ]
    return body


def chat_usage(usage: dict[str, Any]) -> Usage:
    """The AI SDK's usage from a Chat Completions ``usage`` object."""
    completion = usage.get("completion_tokens_details") or {}
    prompt = usage.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=usage.get("prompt_tokens"),
        output_tokens=usage.get("completion_tokens"),
        total_tokens=usage.get("total_tokens"),
        reasoning_tokens=completion.get("reasoning_tokens"),
        cached_input_tokens=prompt.get("cached_tokens"),
    )


class ChatStreamReader:
    """Reads ``chat.completion.chunk`` objects (JSON) into model events (sans-IO; see the
    module docs). Only the first choice (``index == 0``) is read: a request asks for one."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._calls: dict[int, OpenCall] = {}
        self._reason: FinishReason | None = None
        self._usage: Usage | None = None
        self._metadata: dict[str, JsonValue] = {}

    def feed(self, event: str | None, chunk: dict[str, Any]) -> Iterable[ModelEvent]:
        if chunk.get("error") is not None:  # an error the server sent inside the stream
            raise stream_error(self._provider, chunk)
        events: list[ModelEvent] = []
        if chunk.get("usage"):
            self._usage = chat_usage(chunk["usage"])
        if not self._metadata and chunk.get("id"):
            self._metadata = {"id": chunk["id"], "model": chunk.get("model")}
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if delta:
                self._delta(delta, events)
            reason = choice.get("finish_reason")
            if reason is not None and self._reason is None:
                events += self._complete_calls()
                self._reason = _FINISH.get(reason, "unknown")
        return events

    def _delta(self, delta: dict[str, Any], events: list[ModelEvent]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.append(ReasoningDelta(reasoning))
        if delta.get("content"):
            events.append(TextDelta(delta["content"]))
        if delta.get("refusal"):
            events.append(TextDelta(delta["refusal"]))
        for fragment in delta.get("tool_calls") or ():
            function = fragment.get("function") or {}
            arguments = function.get("arguments")
            index = fragment.get("index", 0)
            call = self._calls.get(index)
            if call is None:
                name = function.get("name")
                if not fragment.get("id") or not name:
                    raise malformed(
                        self._provider,
                        f"tool call {index} began without an id and a function name "
                        f"({fragment!r:.200})",
                    )
                call = self._calls[index] = OpenCall(fragment["id"], name)
                events.append(ToolInputStart(call.tool_call_id, call.tool_name))
            if arguments:
                call.parts.append(arguments)
                events.append(ToolInputDelta(call.tool_call_id, arguments))

    def _complete_calls(self) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            tool_input = parse_tool_input(
                self._provider, call.tool_call_id, call.tool_name, call.text
            )
            events.append(ToolCallEvent(call.tool_call_id, call.tool_name, tool_input))
        self._calls.clear()
        return events

    def end(self) -> Iterable[ModelEvent]:
        if self._reason is None:
            raise malformed(self._provider, "the stream ended without a finish_reason")
        metadata = {self._provider: self._metadata} if self._metadata else None
        return [Finish(self._reason, self._usage, metadata)]


class OpenAIChatModel(ProviderModel):
    """A :class:`~pai_actors.Model` on OpenAI's Chat Completions API, with the ``openai`` SDK.

    ``OpenAIChatModel("gpt-4.1-mini")`` talks to OpenAI (the key from ``OPENAI_API_KEY``);
    with ``base_url`` (or ``OPENAI_BASE_URL``) it talks to any OpenAI-compatible server:
    vLLM, Ollama (``http://localhost:11434/v1``), llama.cpp's server, LM Studio, OpenRouter.
    A local server needs no key. ``provider`` names the server in error texts and provider
    metadata (``"openai"`` by default). ``max_tokens``, ``temperature`` and
    ``reasoning_effort`` are sent when given; ``extra_body`` is merged into every request
    (any other parameter the server takes). ``client`` is an ``openai.AsyncOpenAI`` of your
    own (you close it); by default each trio run gets its own client, closed when the run
    ends. ``max_retries`` and ``timeout`` (seconds) are the SDK's.

    See :class:`~pai_actors._models.base.ProviderModel` for the concurrency contract.
    """

    provider_name: ClassVar[str] = "openai"
    key_variable: ClassVar[str] = "OPENAI_API_KEY"
    base_url_variable: ClassVar[str] = "OPENAI_BASE_URL"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    extra: ClassVar[str] = "openai"
    sdk_module: ClassVar[str] = "openai"
    client_class: ClassVar[str] = "AsyncOpenAI"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        provider: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float = DEFAULT_TIMEOUT,
        max_tokens: int | None = None,
        temperature: float | None = None,
        reasoning_effort: str | None = None,
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
            temperature=temperature,
            extra_body=extra_body,
            client=client,
        )
        self.reasoning_effort = reasoning_effort

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            **to_chat_request(request, self.provider),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        settings = self.settings_for(request)
        for name in ("temperature", "top_p", "seed"):
            value = getattr(settings, name)
            if value is not None:
                params[name] = value
        if settings.max_tokens is not None:
            # OpenAI's own API wants max_completion_tokens (its reasoning models refuse
            # max_tokens); the OpenAI-compatible servers know max_tokens.
            own = self.base_url == self.default_base_url
            params["max_completion_tokens" if own else "max_tokens"] = settings.max_tokens
        if settings.stop is not None:
            params["stop"] = list(settings.stop)
        if settings.tool_choice is not None:
            forced = settings.forced_tool
            params["tool_choice"] = (
                settings.tool_choice
                if forced is None
                else {"type": "function", "function": {"name": forced}}
            )
        if settings.parallel_tool_calls is not None and request.tools:
            params["parallel_tool_calls"] = settings.parallel_tool_calls
        if self.reasoning_effort is not None:
            params["reasoning_effort"] = self.reasoning_effort
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    def _open(self, client: Any, request: ModelRequest) -> Any:
        return client.chat.completions.with_streaming_response.create(**self._params(request))

    def _reader(self) -> StreamReader:
        return ChatStreamReader(self.provider)
