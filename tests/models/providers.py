"""The three adapters as the conformance tests see them: how to make one against the local
server, where its requests go, and how its wire format spells each finish reason."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from pai_actors import FinishReason, Model, ModelEvent, ModelRequest
from pai_actors.models import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel

from .sse_server import FIXTURES, fixture

API_KEY = "sk-test-a1b2c3d4e5f6-secret"


@dataclass(frozen=True)
class Provider:
    """One adapter under test: ``name`` (the fixtures' prefix), the path its requests go to,
    how to make it against a server URL, the provider name in its errors, and
    ``with_stop(body, wire_reason)``: the text fixture ending with another stop reason."""

    name: str
    path: str
    make: Callable[..., Model]
    provider: str
    errors: str
    stops: dict[str, FinishReason]
    with_stop: Callable[[str, str], str]

    def __repr__(self) -> str:
        return self.name

    def fixture(self, scenario: str) -> str:
        return fixture(f"{self.name}_{scenario}.sse")


def _chat_stop(body: str, reason: str) -> str:
    return body.replace('"finish_reason":"stop"', f'"finish_reason":"{reason}"')


def _responses_stop(body: str, reason: str) -> str:
    head, _, last = body.rstrip("\n").rpartition("\n\n")
    last = last.replace("response.completed", "response.incomplete")
    last = last.replace('"status":"completed"', '"status":"incomplete"')
    details = f'"incomplete_details":{{"reason":"{reason}"}}'
    last = last.replace('"incomplete_details":null', details)
    return f"{head}\n\n{last}\n\n"


def _anthropic_stop(body: str, reason: str) -> str:
    return body.replace('"stop_reason":"end_turn"', f'"stop_reason":"{reason}"')


def _openai(cls: type[Any]) -> Callable[..., Model]:
    def make(url: str, **options: Any) -> Model:
        options.setdefault("api_key", API_KEY)
        options.setdefault("max_retries", 0)
        model: Model = cls("gpt-4o-mini", base_url=f"{url}/v1", **options)
        return model

    return make


def _anthropic(url: str, **options: Any) -> Model:
    options.setdefault("api_key", API_KEY)
    options.setdefault("max_retries", 0)
    model: Model = AnthropicModel("claude-sonnet-4-20250514", base_url=url, **options)
    return model


PROVIDERS = [
    Provider(
        "openai_chat",
        "/v1/chat/completions",
        _openai(OpenAIChatModel),
        "openai",
        "openai",
        {"length": "length", "content_filter": "content-filter", "tool_calls": "tool-calls"},
        _chat_stop,
    ),
    Provider(
        "openai_responses",
        "/v1/responses",
        _openai(OpenAIResponsesModel),
        "openai",
        "openai",
        {"max_output_tokens": "length", "content_filter": "content-filter"},
        _responses_stop,
    ),
    Provider(
        "anthropic",
        "/v1/messages",
        _anthropic,
        "anthropic",
        "anthropic",
        {
            "max_tokens": "length",
            "refusal": "content-filter",
            "stop_sequence": "stop",
            "tool_use": "tool-calls",
            "model_context_window_exceeded": "length",
        },
        _anthropic_stop,
    ),
]


def error_bodies() -> dict[str, Any]:
    bodies: dict[str, Any] = json.loads((FIXTURES / "errors.json").read_text())
    return bodies


def with_key(body: Any) -> Any:
    """An error body whose message echoes the API key, as some servers do."""
    return json.loads(re.sub(r"\{api_key\}", API_KEY, json.dumps(body)))


async def events_of(model: Model, request: ModelRequest) -> list[ModelEvent]:
    """Every event of one step, the stream closed afterwards."""
    async with aclosing(model.stream(request)) as stream:  # type: ignore[type-var]
        return [event async for event in stream]
