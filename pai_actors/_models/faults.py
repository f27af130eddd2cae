"""Provider failures as :class:`~pai_actors.ModelProviderError`, with API keys kept out.

:func:`provider_error` reads an exception of either official SDK (``openai``, ``anthropic``:
their ``APIStatusError``, ``APITimeoutError`` and ``APIConnectionError`` have the same
shape) and words what happened and what to do. The provider's own message is kept,
with the API key cut out wherever it appears (a server may echo it); the SDK's exception is
not chained (its request carries the key in a header).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._core.errors import ModelProviderError

REDACTED = "[redacted]"


@dataclass(frozen=True, slots=True, repr=False)
class Secret:
    """An API key, held so that no repr shows it (``vars(model)`` included)."""

    value: str

    def __repr__(self) -> str:
        return "Secret('<hidden>')"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Who an adapter talks to, for error texts: the provider's name, the base URL, the
    model, the environment variable of its key, and the SDK's retries and timeout."""

    provider: str
    base_url: str
    model: str
    key_variable: str
    max_retries: int
    timeout: float


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` (an API key) replaced."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, REDACTED)
    return text


def _body_error(body: object) -> tuple[str | None, str | None]:
    """The provider's ``(code, message)`` from an error body (OpenAI's ``{"error": {...}}``,
    Anthropic's ``{"type": "error", "error": {"type", "message"}}``)."""
    if not isinstance(body, dict):
        return None, None
    error = body.get("error", body)
    if not isinstance(error, dict):
        return None, str(error) if error else None
    code = error.get("code") or error.get("type")
    message = error.get("message")
    return (
        None if code is None else str(code),
        None if message is None else str(message),
    )


def _advice(endpoint: Endpoint, status: int) -> str:
    retries = f"the SDK retried {endpoint.max_retries} time(s)"
    if status in (401, 403):
        return (
            f"check the API key ({endpoint.key_variable}, or api_key=...) and that it may use "
            f"the model {endpoint.model!r}"
        )
    if status == 404:
        return f"check the model name {endpoint.model!r} and the base URL {endpoint.base_url!r}"
    if status == 429:
        return (
            f"rate limited or out of quota ({retries}); wait and send again, lower the load, "
            "or raise max_retries"
        )
    if status in (400, 413, 422):
        return (
            "the provider refused the request: check the model's settings, the size of the "
            "conversation and the tools' JSON Schemas"
        )
    if status >= 500:
        return f"the provider failed ({retries}); try again later"
    return "see the provider's message"


def provider_error(
    exc: BaseException, sdk: Any, endpoint: Endpoint, secret: str | None
) -> ModelProviderError:
    """The :class:`ModelProviderError` for an exception the SDK ``sdk`` raised while it sent
    a request (an error status once its retries are spent, a timeout, a connection that
    failed); any other exception is worded as an unexpected failure. Errors inside a stream
    that had begun are the readers' (``common.stream_error``)."""
    name = endpoint.provider
    if isinstance(exc, sdk.APIStatusError):
        status = int(exc.status_code)
        code, message = _body_error(exc.body)
        detail = f" ({code})" if code else ""
        return ModelProviderError(
            redact(
                f"{name} answered HTTP {status}{detail}: {message or exc}; "
                f"{_advice(endpoint, status)}",
                secret,
            ),
            provider=name,
            status=status,
            code=code,
            retryable=status in (408, 409, 429) or status >= 500,
        )
    if isinstance(exc, sdk.APITimeoutError):
        return ModelProviderError(
            f"{name} did not answer within {endpoint.timeout:g} s at {endpoint.base_url!r} "
            f"(the SDK retried {endpoint.max_retries} time(s)); try again later, or raise "
            "timeout=...",
            provider=name,
            code="timeout",
            retryable=True,
        )
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        return ModelProviderError(
            redact(
                f"could not reach {name} at {endpoint.base_url!r} ({type(cause).__name__}: "
                f"{cause}; the SDK retried {endpoint.max_retries} time(s)); check base_url "
                "and that the server is running and reachable",
                secret,
            ),
            provider=name,
            code="connection_error",
            retryable=True,
        )
    return ModelProviderError(
        redact(
            f"{name} failed unexpectedly ({type(exc).__name__}: {exc}); try the step again",
            secret,
        ),
        provider=name,
        code=type(exc).__name__,
    )
