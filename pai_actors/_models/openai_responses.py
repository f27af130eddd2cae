"""The OpenAI Responses API: :class:`OpenAIResponsesModel`.

:func:`to_responses_request` maps a :class:`~pai_actors.ModelRequest` to the ``input`` items,
``instructions`` and ``tools`` of ``POST /responses``; :class:`ResponsesStreamReader` reads
its stream of semantic events:

- ``response.output_text.delta`` is text (``response.refusal.delta`` too);
  ``response.reasoning_summary_text.delta`` and ``response.reasoning_text.delta`` are
  reasoning, and a reasoning item's ``response.output_item.done`` closes it
  (:class:`~pai_actors.ReasoningEnd`, with the item's id and encrypted content);
- a ``function_call`` item's ``response.output_item.added`` starts a tool call (its
  ``call_id`` is the ``tool_call_id``), ``response.function_call_arguments.delta`` streams
  its arguments (by ``item_id``; several calls may interleave), and its
  ``response.output_item.done`` completes it;
- ``response.completed`` / ``response.incomplete`` end the step with the usage and a finish
  reason (``incomplete_details.reason``: ``max_output_tokens`` -> ``length``,
  ``content_filter`` -> ``content-filter``; otherwise ``tool-calls`` when the step called a
  tool, else ``stop``); ``response.failed`` and ``error`` fail it.
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
from .common import OpenCall, malformed, parse_tool_input, stream_error, unsupported_setting
from .openai_chat import result_text


def to_responses_request(request: ModelRequest) -> dict[str, JsonValue]:
    """The ``instructions``, ``input`` and ``tools`` of a Responses request (pure).

    Reasoning parts that carry an OpenAI reasoning item's encrypted content go back as
    ``reasoning`` items; other providers' reasoning is left out.
    """
    items: list[JsonValue] = []
    for message in request.messages:
        if isinstance(message, ModelSystemMessage):
            items.append({"role": "system", "content": message.text})
        elif isinstance(message, ModelUserMessage):
            content: list[JsonValue] = [{"type": "input_text", "text": message.text}]
            for file in message.files:
                if file.media_type.startswith("image/"):
                    content.append({"type": "input_image", "image_url": file.url})
                else:
                    given: dict[str, JsonValue] = {"type": "input_file"}
                    given["file_data" if file.url.startswith("data:") else "file_url"] = file.url
                    if file.filename is not None:
                        given["filename"] = file.filename
                    content.append(given)
            items.append({"role": "user", "content": content})
        elif isinstance(message, ModelAssistantMessage):
            for part in message.parts:
                if isinstance(part, ModelTextPart) and part.text:
                    items.append(
                        {
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": part.text}],
                        }
                    )
                elif isinstance(part, ModelToolCallPart):
                    items.append(
                        {
                            "type": "function_call",
                            "call_id": part.tool_call_id,
                            "name": part.tool_name,
                            "arguments": json.dumps(part.input, ensure_ascii=False),
                        }
                    )
                elif isinstance(part, ModelReasoningPart):
                    item = _reasoning_item(part)
                    if item is not None:
                        items.append(item)
        elif isinstance(message, ModelToolMessage):
            for result in message.parts:
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": result.tool_call_id,
                        "output": result_text(result.output),
                    }
                )
    body: dict[str, JsonValue] = {"input": items}
    if request.instructions:
        body["instructions"] = request.instructions
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": name,
                "description": tool.description,
                "parameters": tool.input_schema,
                "strict": False,
            }
            for name, tool in request.tools.items()
        ]
    return body


def _reasoning_item(part: ModelReasoningPart) -> JsonValue | None:
    metadata = (part.provider_metadata or {}).get("openai") or {}
    encrypted = metadata.get("encryptedContent")
    if not isinstance(encrypted, str):
        return None
    summary: list[JsonValue] = [{"type": "summary_text", "text": part.text}] if part.text else []
    item: dict[str, JsonValue] = {
        "type": "reasoning",
        "summary": summary,
        "encrypted_content": encrypted,
    }
    if isinstance(metadata.get("itemId"), str):  # the API requires the item's id back
        item["id"] = metadata["itemId"]
    return item


def responses_usage(usage: dict[str, Any]) -> Usage:
    """The AI SDK's usage from a Responses ``usage`` object."""
    output = usage.get("output_tokens_details") or {}
    cached = usage.get("input_tokens_details") or {}
    return Usage(
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        total_tokens=usage.get("total_tokens"),
        reasoning_tokens=output.get("reasoning_tokens"),
        cached_input_tokens=cached.get("cached_tokens"),
    )


class ResponsesStreamReader:
    """Reads Responses stream events (JSON) into model events (sans-IO; see the module
    docs)."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._calls: dict[str, OpenCall] = {}  # by item id
        self._called = False
        self._finish: Finish | None = None

    def feed(self, name: str | None, event: dict[str, Any]) -> Iterable[ModelEvent]:
        kind = event.get("type", name)
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return [TextDelta(event["delta"])] if event["delta"] else []
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return [ReasoningDelta(event["delta"])] if event["delta"] else []
        if kind == "response.function_call_arguments.delta":
            call = self._calls.get(event["item_id"])
            if call is None:
                raise malformed(
                    self._provider, f"arguments for item {event['item_id']!r}, which never began"
                )
            if not event["delta"]:
                return []
            call.parts.append(event["delta"])
            return [ToolInputDelta(call.tool_call_id, event["delta"])]
        if kind == "response.output_item.added":
            return self._added(event["item"])
        if kind == "response.output_item.done":
            return self._done(event["item"])
        if kind in ("response.completed", "response.incomplete"):
            self._finish = self._end(event["response"])
            return []
        if kind == "response.failed":
            raise stream_error(self._provider, {"error": event["response"].get("error") or {}})
        if kind == "error":
            raise stream_error(self._provider, event)
        return []

    def _added(self, item: dict[str, Any]) -> list[ModelEvent]:
        if item.get("type") != "function_call":
            return []
        if not item.get("call_id") or not item.get("name"):
            raise malformed(
                self._provider, f"a function call began without call_id and name ({item!r:.200})"
            )
        call = self._calls[item["id"]] = OpenCall(item["call_id"], item["name"])
        events: list[ModelEvent] = [ToolInputStart(call.tool_call_id, call.tool_name)]
        if item.get("arguments"):  # a server that sends the arguments whole
            call.parts.append(item["arguments"])
            events.append(ToolInputDelta(call.tool_call_id, item["arguments"]))
        return events

    def _done(self, item: dict[str, Any]) -> list[ModelEvent]:
        if item.get("type") == "reasoning":
            metadata: dict[str, JsonValue] = {"itemId": item["id"]}
            if item.get("encrypted_content"):
                metadata["encryptedContent"] = item["encrypted_content"]
            return [ReasoningEnd({"openai": metadata})]
        if item.get("type") != "function_call":
            return []
        call = self._calls.pop(item["id"], None)
        if call is None:
            raise malformed(
                self._provider, f"function call item {item['id']!r} ended, but never began"
            )
        text = call.text if call.parts else (item.get("arguments") or "")
        tool_input = parse_tool_input(self._provider, call.tool_call_id, call.tool_name, text)
        self._called = True
        return [ToolCallEvent(call.tool_call_id, call.tool_name, tool_input)]

    def _end(self, response: dict[str, Any]) -> Finish:
        details = response.get("incomplete_details") or {}
        cause = details.get("reason")
        reason: FinishReason
        if cause == "max_output_tokens":
            reason = "length"
        elif cause == "content_filter":
            reason = "content-filter"
        elif cause is None:
            reason = "tool-calls" if self._called else "stop"
        else:
            reason = "tool-calls" if self._called else "unknown"
        usage = responses_usage(response["usage"]) if response.get("usage") else None
        metadata: dict[str, JsonValue] = {
            "responseId": response.get("id"),
            "model": response.get("model"),
        }
        return Finish(reason, usage, {self._provider: metadata})

    def end(self) -> Iterable[ModelEvent]:
        if self._finish is None:
            raise malformed(self._provider, "the stream ended before response.completed")
        if self._calls:
            raise malformed(self._provider, "the response completed with function calls still open")
        return [self._finish]


class OpenAIResponsesModel(ProviderModel):
    """A :class:`~pai_actors.Model` on OpenAI's Responses API, with the ``openai`` SDK.

    Keys and base URLs as :class:`OpenAIChatModel` (``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL``). Each step sends the whole conversation (``store=False`` by
    default: the runtime keeps the history, OpenAI need not). ``reasoning`` is the
    Responses ``reasoning`` parameter (``{"effort": "low", "summary": "auto"}``);
    ``max_tokens`` is sent as ``max_output_tokens``. With ``store=False`` and a reasoning
    model, ask for ``include=["reasoning.encrypted_content"]`` (``extra_body``) so that the
    reasoning can be given back on the next step.
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
        reasoning: Mapping[str, object] | None = None,
        store: bool = False,
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
        self.reasoning = None if reasoning is None else dict(reasoning)
        self.store = store

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            **to_responses_request(request),
            "stream": True,
            "store": self.store,
        }
        settings = self.settings_for(request)
        for name in ("stop", "seed"):
            if getattr(settings, name) is not None:
                raise unsupported_setting(self.provider, "OpenAI Responses", name)
        for name in ("temperature", "top_p"):
            value = getattr(settings, name)
            if value is not None:
                params[name] = value
        if settings.max_tokens is not None:
            params["max_output_tokens"] = settings.max_tokens
        if settings.tool_choice is not None:
            forced = settings.forced_tool
            params["tool_choice"] = (
                settings.tool_choice if forced is None else {"type": "function", "name": forced}
            )
        if settings.parallel_tool_calls is not None and request.tools:
            params["parallel_tool_calls"] = settings.parallel_tool_calls
        if self.reasoning is not None:
            params["reasoning"] = self.reasoning
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    def _open(self, client: Any, request: ModelRequest) -> Any:
        return client.responses.with_streaming_response.create(**self._params(request))

    def _reader(self) -> StreamReader:
        return ResponsesStreamReader(self.provider)
