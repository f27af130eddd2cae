"""The protocol client: ``async with open_client(url, token=...) as client: ...``.

One WebSocket connection, shared by every thread the client opens. Requests are matched to
their answers by ``id``. Each watched thread keeps a :class:`ThreadReplica` (its
``get_state()``), applied from the server's snapshot and numbered update frames.

Reconnecting: when the connection drops after it was open, the client reconnects with
exponential backoff (``min_backoff`` doubling up to ``max_backoff``) and watches every
watched thread again **from its cursor**: the server replays exactly the updates it missed,
or sends a snapshot when it no longer has them (the state is replaced, and watchers get a
:class:`ThreadResynced`). A request in flight when the connection drops raises
:class:`ConnectionLost` (it may or may not have been carried out: read the state again);
requests made while disconnected wait for the next connection. A watch the server refuses
on the new connection (the thread is no longer in this scope) ends with that
:class:`ServerError`; the client goes on. A refused token raises
:class:`AuthenticationFailed` and is never retried; once the client gives up (that, or a
dropped connection with ``reconnect=False``), requests and watches raise that error.

Concurrency contract: a client belongs to the trio run that opened it; any of its tasks may
use it and its threads at once.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import ssl
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import trio
from pydantic import AwareDatetime, TypeAdapter
from pydantic.alias_generators import to_snake
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
)

from .._core.actions import ActionResult, PendingActionRef, SubAgentOrigin
from .._core.json import JsonValue
from .._core.pending import PendingActionView
from .._core.records import UploadedFile
from .._core.state import RunState
from .._protocol.frames import PROTOCOL_VERSION, encode
from .conversation import ClientThread
from .errors import AuthenticationFailed, ClientError, ConnectionLost, ServerError

_log = logging.getLogger("pai_actors.client")
_CLOSE_GRACE = 2.0

CLIENT_MAX_FRAME_BYTES = 64 << 20
"""The largest frame a client accepts by default (64 MiB): server frames carry whole thread
states and file bodies, so they may be much larger than the requests a server accepts."""


def _parse_url(url: str) -> tuple[str, int, str, bool]:
    """``(host, port, resource, secure)`` of a ``ws://`` or ``wss://`` URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(
            f"{url!r} is not a WebSocket URL; write ws://host:port/ (or wss:// for TLS)"
        )
    secure = parts.scheme == "wss"
    port = parts.port if parts.port is not None else (443 if secure else 80)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, port, resource, secure


@dataclass(frozen=True)
class FileDownload:
    """A file read with :meth:`Client.read_file`: its metadata and its body."""

    file: UploadedFile
    body: bytes


_INSTANT: TypeAdapter[datetime] = TypeAdapter(AwareDatetime)


class _Call:
    __slots__ = ("done", "error", "on_result", "result")

    def __init__(self, on_result: Callable[[dict[str, Any]], None] | None) -> None:
        self.done = trio.Event()
        self.result: dict[str, Any] | None = None
        self.error: Exception | None = None
        self.on_result = on_result  # run as the result is read, before any later frame


class Client:
    """A connection to a pai_actors server (from :func:`open_client`)."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        reconnect: bool,
        min_backoff: float,
        max_backoff: float,
        max_frame_bytes: int,
        connect_timeout: float = 10.0,
    ) -> None:
        self.url = url
        self._host, self._port, self._resource, secure = _parse_url(url)
        self._ssl_context = ssl.create_default_context() if secure else None
        self._connect_timeout = connect_timeout
        self._token = token
        self._reconnect = reconnect
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._max_frame_bytes = max_frame_bytes
        self._ids = itertools.count(1)
        self._calls: dict[int, _Call] = {}
        self._ws: WebSocketConnection | None = None
        self._connected = trio.Event()
        self._failure: Exception | None = None
        self._closing = False
        # The threads opened and still in use: a thread the application dropped (and does
        # not watch) is forgotten, so a long-lived client does not grow with every thread.
        self._threads: weakref.WeakValueDictionary[str, ClientThread] = (
            weakref.WeakValueDictionary()
        )
        self._nursery: trio.Nursery | None = None
        self.connections = 0
        """How many times this client has connected (``1`` until it first reconnects)."""

    # -- requests ----------------------------------------------------------------------------

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request (``op`` and its camelCase fields) and return its result, or raise
        :class:`ServerError` with the error frame's code."""
        return await self._request(op, fields, None)

    async def _request(
        self,
        op: str,
        fields: Mapping[str, Any],
        on_result: Callable[[dict[str, Any]], None] | None,
    ) -> dict[str, Any]:
        while self._ws is None:
            if self._failure is not None:
                raise self._failure
            if self._closing:
                raise ClientError("this client is closed; open a new one")
            await self._connected.wait()
        ws = self._ws
        request_id = next(self._ids)
        call = _Call(on_result)
        self._calls[request_id] = call
        try:
            await ws.send_message(
                encode({"v": PROTOCOL_VERSION, "id": request_id, "op": op, **fields})
            )
            await call.done.wait()
        except ConnectionClosed:
            raise ConnectionLost(
                f"the connection dropped before the server answered {op!r}; read the state "
                "again before repeating it"
            ) from None
        finally:
            self._calls.pop(request_id, None)
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    async def create_thread(self, *, agent_id: str | None = None) -> ClientThread:
        """Create a thread in this connection's scope, and open it. ``agent_id`` picks the
        server's agent that runs it (its registry id; default: the server's first agent);
        an unknown one raises :class:`ServerError` ``invalid-request`` naming the agents."""
        fields: dict[str, JsonValue] = {} if agent_id is None else {"agentId": agent_id}
        result = await self.request("createThread", **fields)
        return await self.thread(result["threadId"])

    async def thread(self, thread_id: str) -> ClientThread:
        """Open the thread ``thread_id`` (its state read once; :class:`ServerError`
        ``not-found`` if it is not in this connection's scope)."""
        thread = self._threads.get(thread_id)
        if thread is None:
            thread = ClientThread(self, thread_id)
            await thread.refresh()
            thread = self._threads.setdefault(thread_id, thread)
        return thread

    async def pending_actions(self, thread_id: str | None = None) -> list[PendingActionView]:
        """The pending actions of ``thread_id``, or of every thread in this scope."""
        fields: dict[str, JsonValue] = {} if thread_id is None else {"threadId": thread_id}
        result = await self.request("listPendingActions", **fields)
        return [self.action_view(action) for action in result["actions"]]

    def action_view(self, action: Mapping[str, Any]) -> PendingActionView:
        """A view of a pending action as the protocol shows it, resolved through this client."""
        expires = action.get("expiresAt")
        return PendingActionView(
            self,
            PendingActionRef.model_validate(action["ref"]),
            action["input"],
            action.get("resumeSchema"),
            None if expires is None else _INSTANT.validate_python(expires),
            tuple(SubAgentOrigin.model_validate(link) for link in action.get("originChain", ())),
        )

    async def submit_action(self, ref: PendingActionRef, payload: object) -> ActionResult:
        result = await self.request("submitAction", ref=ref.to_wire(), payload=payload)
        return ActionResult.model_validate(result["actionResult"])

    async def cancel_action(self, ref: PendingActionRef, reason: str | None = None) -> ActionResult:
        result = await self.request("cancelAction", ref=ref.to_wire(), reason=reason)
        return ActionResult.model_validate(result["actionResult"])

    async def fail_action(self, ref: PendingActionRef, error: str | BaseException) -> ActionResult:
        result = await self.request("failAction", ref=ref.to_wire(), error=str(error))
        return ActionResult.model_validate(result["actionResult"])

    async def cancel_run(self, run_id: str, reason: str | None = None) -> RunState:
        """Cancel a run of this scope; returns once its cancellation is recorded, with the
        run's state: ``cancelled``, or the status it had already ended with."""
        result = await self.request("cancelRun", runId=run_id, reason=reason)
        return RunState.model_validate(
            {to_snake(name): value for name, value in result["run"].items()}
        )

    async def read_file(self, file_id: str) -> FileDownload:
        """A file of this scope (:class:`ServerError` ``not-found`` otherwise)."""
        result = await self.request("readFile", fileId=file_id)
        record = {to_snake(name): value for name, value in result["file"].items()}
        return FileDownload(UploadedFile.model_validate(record), base64.b64decode(result["body"]))

    # -- the connection ----------------------------------------------------------------------

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve the connection, reconnect with backoff (see the module docstring).
        The first connection's failure is raised to :func:`open_client`."""
        backoff = self._min_backoff
        first = True
        while True:
            try:
                async with self._connection() as ws:
                    if first:
                        first = False
                        task_status.started()
                    backoff = self._min_backoff
                    await self._serve(ws)
            except ConnectionRejected as exc:
                if exc.status_code in (401, 403):
                    refused = AuthenticationFailed(
                        f"the server at {self.url} refused the token (HTTP {exc.status_code}); "
                        "check the token passed to open_client"
                    )
                    if first:
                        raise refused from None
                    self._fail(refused)
                    return
                if first:
                    raise
            except (OSError, HandshakeError, trio.TooSlowError, trio.BrokenResourceError):
                if first:
                    raise
            if self._closing:
                return
            if not self._reconnect:
                self._fail(ConnectionLost(f"the connection to {self.url} was closed"))
                return
            await trio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[WebSocketConnection]:
        """One WebSocket connection over a TCP stream this client owns and always closes.

        trio-websocket's ``open_websocket_url`` leaves the socket open when the server
        refuses the handshake or closes the connection (the client side waits for a TCP
        close it then never performs), so the client opens the stream itself and hands it
        to ``wrap_client_stream``.
        """
        with trio.fail_after(self._connect_timeout):
            stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]
            stream = await trio.open_tcp_stream(self._host, self._port)
        try:
            if self._ssl_context is not None:
                stream = trio.SSLStream(stream, self._ssl_context, server_hostname=self._host)
            try:
                async with trio.open_nursery() as nursery:  # the connection's reader task
                    with trio.fail_after(self._connect_timeout):
                        ws = await wrap_client_stream(
                            nursery,
                            stream,
                            self._host,
                            self._resource,
                            extra_headers=[(b"Authorization", f"Bearer {self._token}".encode())],
                            max_message_size=self._max_frame_bytes,
                        )
                    try:
                        yield ws
                    finally:
                        with trio.move_on_after(_CLOSE_GRACE, shield=True):
                            await ws.aclose()  # returns at once if another task is closing
                        # Let the reader finish the closing handshake (that other task may be
                        # waiting for it), or see the end of a dropped stream; within a grace.
                        nursery.cancel_scope.deadline = min(
                            nursery.cancel_scope.deadline, trio.current_time() + _CLOSE_GRACE
                        )
            except BaseExceptionGroup as group:  # the reader task's error (a refused handshake)
                if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
                    raise group.exceptions[0] from None
                raise
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    async def _serve(self, ws: WebSocketConnection) -> None:
        self._ws = ws
        self.connections += 1
        self._connected.set()
        try:
            async with trio.open_nursery() as nursery:
                for thread in list(self._threads.values()):
                    if thread.watching:
                        nursery.start_soon(thread.resubscribe)
                while True:
                    try:
                        message = await ws.get_message()
                    except ConnectionClosed:
                        break
                    self._dispatch(message, nursery)
                nursery.cancel_scope.cancel()
        finally:
            self._ws = None
            self._connected = trio.Event()
            for call in list(self._calls.values()):
                call.error = ConnectionLost(
                    "the connection dropped before the server answered; read the state again "
                    "before repeating the request"
                )
                call.done.set()

    def _fail(self, exc: Exception) -> None:
        """Give up for good: requests and watches raise ``exc`` from now on."""
        self._failure = exc
        self._connected.set()
        for thread in self._threads.values():
            thread._end_watches(exc)

    def _dispatch(self, message: str | bytes, nursery: trio.Nursery) -> None:
        frame = json.loads(message)
        kind = frame.get("type")
        if kind in ("result", "error"):
            call = self._calls.get(frame.get("id"))
            if call is None:
                if kind == "error":
                    _log.warning("the server sent an error: %s", frame.get("message"))
                return
            if kind == "result":
                call.result = frame["result"]
                if call.on_result is not None:
                    call.on_result(call.result)
            else:
                call.error = ServerError(frame["code"], frame["message"])
            call.done.set()
            return
        thread = self._threads.get(frame.get("threadId"))
        if thread is None:
            return
        if kind == "snapshot":
            thread.on_snapshot(frame)
        elif kind == "update":
            if thread.on_update(frame) == "gap":
                nursery.start_soon(thread.resubscribe)
        elif kind == "delta":
            thread.on_delta(frame)
        elif kind == "watchEnded" and thread.watching and frame.get("reason") != "shutting-down":
            nursery.start_soon(thread.resubscribe)


@asynccontextmanager
async def open_client(
    url: str,
    *,
    token: str,
    reconnect: bool = True,
    min_backoff: float = 0.05,
    max_backoff: float = 5.0,
    max_frame_bytes: int = CLIENT_MAX_FRAME_BYTES,
    connect_timeout: float = 10.0,
) -> AsyncIterator[Client]:
    """Connect to a pai_actors server at ``url`` (``ws://host:port/``, or ``wss://``) with
    the bearer ``token``. The first connection must succeed (its error is raised here:
    :class:`AuthenticationFailed`, ``OSError``, ``trio.TooSlowError`` after
    ``connect_timeout`` seconds, ...); later drops reconnect with backoff. An exception
    raised in the block comes out as itself, not inside an exception group."""
    if not isinstance(token, str) or not token:
        raise TypeError("open_client(token=...) needs the bearer token, a non-empty str")
    client = Client(
        url,
        token,
        reconnect=reconnect,
        min_backoff=min_backoff,
        max_backoff=max_backoff,
        max_frame_bytes=max_frame_bytes,
        connect_timeout=connect_timeout,
    )
    failed: Exception | None = None
    async with trio.open_nursery() as nursery:
        client._nursery = nursery
        try:
            await nursery.start(client._run)
        except Exception as exc:  # raised below, as itself rather than in the nursery's group
            failed = exc
        else:
            try:
                yield client
            except Exception as exc:  # raised below, as itself
                failed = exc
            finally:
                client._closing = True
                ws = client._ws
                if ws is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(2):
                        await ws.aclose()
                nursery.cancel_scope.cancel()
    if failed is not None:
        raise failed
