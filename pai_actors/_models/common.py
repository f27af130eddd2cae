"""What the stream readers share: a tool call's JSON input, and the malformed-stream error."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .._core.errors import ModelProviderError
from .._core.json import JsonValue
from .._core.model import ModelFilePart


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def malformed(provider: str, problem: str) -> ModelProviderError:
    """The error for a stream that is not the provider's format, or stops too early."""
    return ModelProviderError(
        f"{provider} sent a malformed stream: {problem}; this is the provider's (or the "
        "server's) fault, not the request's: try the step again, and if it persists, check "
        "that the server speaks this API (base_url) or report it to its maintainers",
        provider=provider,
        code="malformed_stream",
        retryable=True,
    )


def parse_tool_input(provider: str, tool_call_id: str, tool_name: str, text: str) -> JsonValue:
    """A tool call's arguments as JSON (an empty text is ``{}``: a call without arguments)."""
    if not text.strip():
        return {}
    try:
        value: JsonValue = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ModelProviderError(
            f"{provider} gave tool call {tool_call_id!r} ({tool_name!r}) arguments that are "
            f"not JSON ({exc}): {text[:200]!r}; the model wrote broken JSON: try the step "
            "again, or use a model that supports tool calling (or a stricter tool schema)",
            provider=provider,
            code="invalid_tool_arguments",
            retryable=True,
        ) from None
    return value


@dataclass(slots=True)
class OpenCall:
    """A tool call whose input is streaming: its id, tool name and the JSON text so far."""

    tool_call_id: str
    tool_name: str
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts)


def stream_error(provider: str, body: dict[str, JsonValue]) -> ModelProviderError:
    """The error for an error event inside a stream that had begun (OpenAI's
    ``{"error": {...}}`` chunk, Anthropic's ``error`` event, a Responses ``error`` event)."""
    error = body.get("error", body)
    if not isinstance(error, dict):
        error = {"message": error}
    code = error.get("code") or error.get("type")
    message = error.get("message") or "no message"
    detail = "" if code is None else f" ({code})"
    advice = (
        "the provider is overloaded or failed; try again later"
        if code in ("overloaded_error", "server_error", "api_error")
        else "try the step again"
    )
    return ModelProviderError(
        f"{provider} reported an error in the stream{detail}: {message}; {advice}",
        provider=provider,
        code=None if code is None else str(code),
        retryable=True,
    )


def unsupported_setting(provider: str, api: str, name: str) -> ModelProviderError:
    """The error for a :class:`~pai_actors.ModelSettings` field the provider's API has not."""
    return ModelProviderError(
        f"{provider}: the {api} API has no {name!r} setting; leave ModelSettings.{name} unset "
        "for this model (on the request, the agent or the adapter)",
        provider=provider,
        code="unsupported_setting",
    )


def unsupported_file(provider: str, api: str, file: ModelFilePart, what: str) -> ModelProviderError:
    """The error for a user's file the provider's API cannot take as given."""
    name = f" {file.filename!r}" if file.filename else ""
    return ModelProviderError(
        f"{provider}: the {api} API cannot take the user's file{name} ({file.media_type}) {what}",
        provider=provider,
        code="unsupported_file",
    )


def data_url(url: str) -> tuple[str, str] | None:
    """``(media type, base64 data)`` of a base64 ``data:`` URL, else ``None``."""
    if not url.startswith("data:"):
        return None
    header, _, data = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    return (media_type, data) if encoding == "base64" else None
