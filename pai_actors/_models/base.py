"""The trio shell every adapter shares: :class:`ProviderModel`.

One path for a model step, whatever the provider: resolve the key and the base URL (the
arguments, else the provider's environment variables), get the run's SDK client
(``clients``), send the request, feed each stream event to the adapter's sans-IO reader and
yield what it gives, and turn every failure into a
:class:`~pai_actors.ModelProviderError` (``faults``). The HTTP response is closed when the
step ends, however it ends: read to its end, failed, or cancelled (then at once, shielded
and bounded, so the server sees the connection close).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any, ClassVar, Protocol

import trio

from .._core.errors import DefinitionError, ModelProviderError
from .._core.json import JsonValue, to_json_value
from .._core.model import ModelEvent, ModelRequest, ModelSettings
from .clients import CLOSE_SECONDS, run_client
from .common import malformed
from .faults import Endpoint, Secret, provider_error, redact
from .sse import SSEDecoder

DEFAULT_TIMEOUT = 600.0
DEFAULT_MAX_RETRIES = 2


class StreamReader(Protocol):
    """An adapter's sans-IO reader: the provider's stream events (SSE event name and JSON
    data) in, model events out."""

    def feed(self, name: str | None, data: dict[str, Any]) -> Iterable[ModelEvent]:
        """The model events for the provider's next stream event."""
        ...

    def end(self) -> Iterable[ModelEvent]:
        """The model events once the provider's stream ended (``Finish``), or raise
        :class:`ModelProviderError` when it ended too early."""
        ...


class ProviderModel:
    """A :class:`~pai_actors.Model` over a provider's official SDK (a base class).

    Subclasses name the provider (``provider``, ``key_variable``, ``base_url_variable``,
    ``default_base_url``) and its SDK (``extra`` installs the module ``sdk_module``, whose
    ``client_class`` is made with the base URL, the key, ``max_retries`` and ``timeout``), and
    implement :meth:`_open` (send the request, return the SDK's stream) and :meth:`_reader`.

    Concurrency contract: an adapter holds no per-step state; any number of steps may
    stream at once, in one trio run or several (each run has its own SDK client).
    """

    provider_name: ClassVar[str]
    key_variable: ClassVar[str]
    base_url_variable: ClassVar[str]
    default_base_url: ClassVar[str]
    extra: ClassVar[str]  # the pip extra that installs the SDK
    sdk_module: ClassVar[str]  # the SDK's module
    client_class: ClassVar[str]  # its async client class

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
        extra_body: Mapping[str, object] | None = None,
        client: Any = None,
    ) -> None:
        what = type(self).__name__
        if not isinstance(model, str) or not model.strip() or model != model.strip():
            raise DefinitionError(
                f"{what}: model must be a model name such as 'gpt-4.1-mini', got {model!r}"
            )
        for name, value in (("base_url", base_url), ("api_key", api_key), ("provider", provider)):
            if value is not None and (not isinstance(value, str) or not value):
                shown = "<hidden>" if name == "api_key" else repr(value)
                raise DefinitionError(
                    f"{what}: {name} must be a non-empty str or None, got {shown}"
                )
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise DefinitionError(f"{what}: max_retries must be an int >= 0, got {max_retries!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise DefinitionError(
                f"{what}: timeout must be a number of seconds > 0, got {timeout!r}"
            )
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise DefinitionError(
                f"{what}: max_tokens must be an int >= 1 or None, got {max_tokens!r}"
            )
        if temperature is not None and (
            isinstance(temperature, bool) or not isinstance(temperature, int | float)
        ):
            raise DefinitionError(
                f"{what}: temperature must be a number or None, got {temperature!r}"
            )
        self._sdk = self._import_sdk()
        self.model = model
        self.provider = provider or self.provider_name
        self.max_retries = max_retries
        self.timeout = float(timeout)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_body: dict[str, JsonValue] | None = None
        if extra_body is not None:
            try:
                body = to_json_value(dict(extra_body), what=f"{what}(extra_body=...)")
            except Exception as exc:
                raise DefinitionError(f"{what}: {exc}; extra_body must be JSON") from None
            assert isinstance(body, dict)
            self.extra_body = body
        self._base_url = base_url
        self._api_key = None if api_key is None else Secret(api_key)
        self._client = client

    # -- what subclasses implement ------------------------------------------------------

    @classmethod
    def _import_sdk(cls) -> Any:
        return import_sdk(cls.sdk_module, cls.__name__, cls.extra)

    def _make_client(self, base_url: str, api_key: str) -> Any:
        make = getattr(self._sdk, self.client_class)
        return make(
            base_url=base_url, api_key=api_key, max_retries=self.max_retries, timeout=self.timeout
        )

    def _open(self, client: Any, request: ModelRequest) -> Any:
        """The SDK's streaming-response context manager for ``request`` (its
        ``with_streaming_response.create(...)``): entering it sends the request (with the
        SDK's retries) and gives the response, whose body this shell reads."""
        raise NotImplementedError

    def _reader(self) -> StreamReader:
        raise NotImplementedError

    def settings_for(self, request: ModelRequest) -> ModelSettings:
        """The step's settings: the request's (the run's over the agent's) over this
        adapter's own ``max_tokens`` and ``temperature``."""
        return request.settings.over(
            ModelSettings(max_tokens=self.max_tokens, temperature=self.temperature)
        )

    # -- the shell ----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The base URL steps go to: the argument, else the environment's, else the
        provider's own."""
        return self._base_url or os.environ.get(self.base_url_variable) or self.default_base_url

    def _key(self) -> str:
        key = self._api_key.value if self._api_key else os.environ.get(self.key_variable)
        if key:
            return key
        if self._base_url or os.environ.get(self.base_url_variable):
            return "none"  # a local server (Ollama, llama.cpp, vLLM) needs no key
        raise ModelProviderError(
            f"{self.provider} has no API key: set {self.key_variable} or give "
            f"{type(self).__name__}(..., api_key=...); a local server takes base_url=... and "
            "no key",
            provider=self.provider,
            code="missing_api_key",
        )

    def _endpoint(self) -> Endpoint:
        return Endpoint(
            provider=self.provider,
            base_url=self.base_url,
            model=self.model,
            key_variable=self.key_variable,
            max_retries=self.max_retries,
            timeout=self.timeout,
        )

    def _sdk_client(self) -> Any:
        if self._client is not None:
            return self._client
        key = self._key()
        base_url = self.base_url

        def make() -> Any:
            return self._make_client(base_url, key)

        async def close(client: Any) -> None:
            await client.close()

        return run_client((self, base_url, Secret(key)), make, close)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one step's events for ``request``, ending with ``Finish``; a provider
        failure raises :class:`~pai_actors.ModelProviderError`."""
        client = self._sdk_client()
        secret = self._api_key.value if self._api_key else os.environ.get(self.key_variable)
        reader = self._reader()
        decoder = SSEDecoder()
        manager = self._open(client, request)
        try:
            response = await manager.__aenter__()
        except Exception as exc:
            raise self._fault(exc, secret, started=False) from None
        chunks = response.http_response.aiter_bytes()
        try:
            while True:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise self._fault(exc, secret, started=True) from None
                for out in self._read(reader, decoder.feed(chunk)):
                    yield out
            for out in self._read(reader, decoder.flush(), end=True):
                yield out
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_SECONDS):
                await close_body(response.http_response, chunks)
                await manager.__aexit__(None, None, None)

    def _read(
        self, reader: StreamReader, sse: list[tuple[str | None, str]], *, end: bool = False
    ) -> list[ModelEvent]:
        """The model events for the decoded server-sent events ``sse`` (and the end of the
        stream when ``end``)."""
        events: list[ModelEvent] = []
        for name, data in sse:
            if data.startswith("[DONE]"):  # Chat Completions' last event
                continue
            try:
                value = json.loads(data)
            except ValueError as exc:
                raise malformed(
                    self.provider, f"an event is not JSON ({exc}): {data[:200]!r}"
                ) from None
            events += self._feed(reader.feed, name, value)
        if end:
            events += self._feed(lambda _name, _value: reader.end(), None, None)
        return events

    def _feed(self, feed: Any, name: str | None, value: Any) -> list[ModelEvent]:
        try:
            return list(feed(name, value))
        except ModelProviderError:
            raise
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            raise malformed(
                self.provider, f"the event {value!r:.300} could not be read ({exc!r})"
            ) from None

    def _fault(
        self, exc: BaseException, secret: str | None, *, started: bool
    ) -> ModelProviderError:
        if isinstance(exc, ModelProviderError):
            return exc
        if isinstance(exc, json.JSONDecodeError):
            return malformed(self.provider, f"an event is not JSON ({exc})")
        if started and isinstance(exc, _timeout_errors()):
            return ModelProviderError(
                f"{self.provider} at {self.base_url!r} stopped sending in the middle of the "
                f"stream for {self.timeout:g} s; try the step again later, or raise timeout=...",
                provider=self.provider,
                code="timeout",
                retryable=True,
            )
        if started and isinstance(exc, (self._sdk.APIConnectionError, *_transport_errors())):
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            return ModelProviderError(
                redact(
                    f"the connection to {self.provider} at {self.base_url!r} broke in the "
                    f"middle of the stream ({type(cause).__name__}: {cause}); try the step again",
                    secret,
                ),
                provider=self.provider,
                code="connection_error",
                retryable=True,
            )
        return provider_error(exc, self._sdk, self._endpoint(), secret)

    def __repr__(self) -> str:
        base = "" if self._base_url is None else f", base_url={self._base_url!r}"
        named = "" if self.provider == self.provider_name else f", provider={self.provider!r}"
        return f"{type(self).__name__}(model={self.model!r}{base}{named})"


async def close_body(http_response: Any, chunks: AsyncGenerator[bytes, None]) -> None:
    """Close a response whose body may be unread, at once (the server sees the connection
    close), then run the body's iterators to their end, which comes at once on the closed
    connection. Closing only the outermost iterator would leave httpx's inner async
    generators unfinished, which trio reports when they are garbage collected."""
    if not http_response.is_closed:
        await http_response.aclose()
    with contextlib.suppress(Exception):  # the closed connection's read error, as expected
        async for _ in chunks:
            pass
    await chunks.aclose()


def _timeout_errors() -> tuple[type[BaseException], ...]:
    import httpx2

    return (httpx2.TimeoutException,)


def _transport_errors() -> tuple[type[BaseException], ...]:
    import httpx2  # the SDKs' HTTP client; an anthropic stream lets its errors through

    return (httpx2.TransportError,)


def import_sdk(module: str, what: str, extra: str) -> Any:
    """Import an SDK, or say how to install it."""
    try:
        return __import__(module)
    except ImportError as exc:
        raise DefinitionError(
            f"{what} needs the {module!r} package ({exc}); install it with "
            f"pip install 'pai-actors[{extra}]'"
        ) from None
