"""The protocol server: a trio shell around the frames (``_protocol.frames``), the feeds
(``_server.feeds``) and a runtime, on trio-websocket.

``async with open_server(rt, authenticate=...) as server:`` serves ``server.url`` until the
block ends. A connection presents a bearer token (``Authorization: Bearer <token>``) in its
opening handshake; ``authenticate(token)`` turns it into a trusted :class:`Identity` (or
``None``: refused with HTTP 401, as is a connection without credentials). Every request is
then authorised by the identity's ``scope_key``: a connection sees and acts on the threads,
actions and files of its scope only, and a thread, run or action of another scope looks
exactly like one that does not exist.

Each connection carries out up to 32 of its requests at once (a client may pipeline them;
each answer carries its request's ``id``, and answers may come in any order), and stops
reading while that many are in flight; watches are forwarded by their own tasks, and a
watch's result frame comes before any frame of the watch. A frame that is not a valid
request gets an ``error`` frame and the connection goes on; one over ``max_frame_bytes``
closes the connection with 1009 (message too big). Nothing one connection sends reaches
another's tasks.

Leaving the block closes every connection (1001, "going away") within a bounded grace
period, then cancels what is left. The runtime is the caller's: closing it cancels and
records the running calls, and suspended calls stay durable.
"""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeAlias

import trio
from pydantic.alias_generators import to_camel
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
    serve_websocket,
)

from .._core.actions import ActionResult, PendingActionRef
from .._core.client_tool import ClientTool
from .._core.deadlines import CancelAtDeadline, on_deadline_from_json
from .._core.errors import (
    AgentNotFound,
    DefinitionError,
    FileNotFound,
    MigrationRequired,
    PaiError,
    RuntimeClosed,
    StoreError,
    ThreadBusy,
    ThreadNotFound,
    ThreadOwnedElsewhere,
)
from .._core.json import JsonValue, to_json_value
from .._protocol.frames import (
    MAX_FRAME_BYTES,
    CancelActionRequest,
    CancelRunRequest,
    ClientToolSpec,
    CreateThreadRequest,
    ErrorCode,
    FailActionRequest,
    FrameError,
    GetStateRequest,
    ListPendingActionsRequest,
    ReadFileRequest,
    Request,
    SendRequest,
    SubmitActionRequest,
    UnwatchRequest,
    WatchRequest,
    action_result_wire,
    encode,
    error_frame,
    parse_request,
    result_frame,
    watch_ended_frame,
)
from .._runtime.runtime import AgentRuntime
from .._tools.registration import call_callback
from .feeds import FeedHub, Subscriber, state_actions, view_wire

_log = logging.getLogger("pai_actors.server")

_OUTBOX = 256
_CONCURRENT_REQUESTS = 32  # a connection's requests carried out at once
_CLOSE_GRACE = 2.0


@dataclass(frozen=True)
class Identity:
    """Who a connection is, as the application's ``authenticate`` hook vouches: the
    ``scope_key`` that isolates its threads, actions and files, an optional ``user_key``
    (recorded on the threads it creates) and JSON ``claims``. ``map_context``, ``enabled``
    and ``runtime_context`` callbacks receive it as ``identity``, in its JSON form
    :meth:`to_json` (stored with the run, so it is the same after a restart)."""

    scope_key: str
    user_key: str | None = None
    claims: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.scope_key, str) or not self.scope_key:
            raise TypeError(
                f"Identity(scope_key=...) must be a non-empty str, got {self.scope_key!r}"
            )
        to_json_value(dict(self.claims), what="Identity claims")

    def to_json(self) -> dict[str, JsonValue]:
        """``{"scope_key": ..., "user_key": ..., "claims": {...}}``."""
        return {
            "scope_key": self.scope_key,
            "user_key": self.user_key,
            "claims": to_json_value(dict(self.claims), what="Identity claims"),
        }


Authenticate: TypeAlias = Callable[[str], "Identity | Awaitable[Identity | None] | None"]
"""``authenticate(token) -> Identity | None`` (sync or async): ``None`` refuses the token."""


def _client_tool(spec: ClientToolSpec) -> ClientTool:
    """The client tool a ``send`` offers (:class:`DefinitionError` if its deadline's
    outcome is not one)."""
    if spec.deadline is None:
        if spec.on_deadline is not None:
            raise DefinitionError(
                f"client tool {spec.name!r}: onDeadline needs a deadline (seconds > 0)"
            )
        return ClientTool(spec.name, spec.description, spec.input_schema or {})
    on_deadline = (
        CancelAtDeadline() if spec.on_deadline is None else on_deadline_from_json(spec.on_deadline)
    )
    return ClientTool(
        spec.name,
        spec.description,
        spec.input_schema or {},
        deadline=timedelta(seconds=spec.deadline),
        on_deadline=on_deadline,
    )


class _Refused(Exception):
    """A request the server answers with an error frame."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message


@dataclass(frozen=True)
class ServerStatistics:
    """``Server.statistics()``: open connections and thread feeds."""

    connections: int
    feeds: int


class Server:
    """A running protocol server (from :func:`open_server`): ``url``, ``port``."""

    def __init__(self, runtime: AgentRuntime, authenticate: Authenticate, feeds: FeedHub) -> None:
        self._rt = runtime
        self._authenticate = authenticate
        self._feeds = feeds
        self._connections: set[_Connection] = set()
        self._ws_server: WebSocketServer | None = None
        self.host = "127.0.0.1"
        self.closing = False

    @property
    def port(self) -> int:
        assert self._ws_server is not None
        return int(self._ws_server.port)

    @property
    def url(self) -> str:
        """``ws://host:port/`` of the listening socket."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}/"

    def statistics(self) -> ServerStatistics:
        return ServerStatistics(connections=len(self._connections), feeds=self._feeds.feeds)

    async def handle(self, request: WebSocketRequest) -> None:
        """trio-websocket's handler: authenticate, then serve the connection."""
        token = _bearer(request.headers)
        if token is None:
            await request.reject(
                401,
                extra_headers=[(b"WWW-Authenticate", b"Bearer")],
                body=b"credentials required: send the header 'Authorization: Bearer <token>'",
            )
            return
        try:
            identity = await call_callback(self._authenticate, token)
        except Exception:
            _log.exception("authenticate() raised; refusing the connection")
            await request.reject(500, body=b"the server could not check the credentials")
            return
        if identity is None:
            await request.reject(401, body=b"the token was refused")
            return
        if not isinstance(identity, Identity):
            _log.error("authenticate() returned %r, not an Identity or None", identity)
            await request.reject(500, body=b"the server could not check the credentials")
            return
        if self.closing:
            await request.reject(503, body=b"the server is shutting down")
            return
        ws = await request.accept()
        connection = _Connection(self._rt, self._feeds, ws, identity)
        self._connections.add(connection)
        try:
            await connection.serve()
        finally:
            self._connections.discard(connection)

    async def close_connections(self) -> None:
        """Close every connection with 1001 (going away), waiting at most a short grace."""
        self.closing = True
        with trio.move_on_after(_CLOSE_GRACE) as scope:
            scope.shield = True
            async with trio.open_nursery() as nursery:
                for connection in list(self._connections):
                    nursery.start_soon(connection.ws.aclose, 1001, "the server is shutting down")


def _bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


class _Connection:
    """One authenticated connection: its reader (requests carried out concurrently), its
    writer, its watches. Concurrency contract: only this connection's tasks touch it."""

    def __init__(
        self, runtime: AgentRuntime, feeds: FeedHub, ws: WebSocketConnection, identity: Identity
    ) -> None:
        self._rt = runtime
        self._feeds = feeds
        self.ws = ws
        self.identity = identity
        self._out_send, self._out_receive = trio.open_memory_channel[dict[str, JsonValue]](_OUTBOX)
        self._watches: dict[str, tuple[Subscriber, trio.CancelScope]] = {}
        self._nursery: trio.Nursery | None = None
        self._in_flight = trio.Semaphore(_CONCURRENT_REQUESTS)
        self._watching = trio.Lock()

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._write)
            try:
                await self._read()
            finally:
                nursery.cancel_scope.cancel()
                for thread_id in list(self._watches):
                    self._unwatch(thread_id)

    async def _write(self) -> None:
        try:
            async for frame in self._out_receive:
                await self.ws.send_message(encode(frame))
        except ConnectionClosed:
            pass

    async def _read(self) -> None:
        while True:
            try:
                message = await self.ws.get_message()
            except ConnectionClosed:
                return
            try:
                request = parse_request(message)
            except FrameError as exc:
                await self._out_send.send(error_frame(exc.code, exc.message, exc.request_id))
                continue
            await self._in_flight.acquire()  # at most _CONCURRENT_REQUESTS; then stop reading
            assert self._nursery is not None
            self._nursery.start_soon(self._serve_request, request)

    async def _serve_request(self, request: Request) -> None:
        try:
            after: list[Callable[[], None]] = []
            answer = await self._answer(request, after)
            await self._out_send.send(answer)
            for start in after:  # a watch: its frames follow its result frame
                start()
        finally:
            self._in_flight.release()

    async def _answer(
        self, request: Request, after: list[Callable[[], None]]
    ) -> dict[str, JsonValue]:
        try:
            return result_frame(request.id, await self._perform(request, after))
        except _Refused as exc:
            return error_frame(exc.code, exc.message, request.id)
        except ThreadNotFound:
            return error_frame(
                "not-found", _no_thread(getattr(request, "thread_id", "?")), request.id
            )
        except (ThreadBusy, ThreadOwnedElsewhere) as exc:  # (another node drives it)
            return error_frame("thread-busy", str(exc), request.id)
        except MigrationRequired as exc:
            return error_frame("migration-required", str(exc), request.id)
        except RuntimeClosed as exc:
            return error_frame("shutting-down", str(exc), request.id)
        except StoreError:  # the server's trouble, not the client's: never invalid-request
            _log.exception("request %r failed in the store", request.op)
            return error_frame(
                "internal", "the server failed to carry out this request; see its log", request.id
            )
        except (PaiError, ValueError, TypeError) as exc:
            return error_frame("invalid-request", str(exc), request.id)
        except Exception:
            _log.exception("request %r failed", request.op)
            return error_frame(
                "internal", "the server failed to carry out this request; see its log", request.id
            )

    async def _perform(
        self, request: Request, after: list[Callable[[], None]]
    ) -> dict[str, JsonValue]:
        rt = self._rt
        if isinstance(request, CreateThreadRequest):
            try:
                thread_id = await rt.create_thread(
                    self.identity.scope_key, self.identity.user_key, agent_id=request.agent_id
                )
            except AgentNotFound as exc:
                raise _Refused("invalid-request", str(exc)) from None
            return {"threadId": thread_id}
        if isinstance(request, SendRequest):
            await self._in_scope(request.thread_id)
            try:
                tools = [_client_tool(tool) for tool in request.client_tools]
            except DefinitionError as exc:
                raise _Refused("invalid-request", str(exc)) from None
            run_id = await rt.send(
                request.thread_id,
                request.text,
                identity=self.identity.to_json(),
                client_data=request.client_data,
                client_tools=tools,
                files=request.files,
                model_settings=(
                    None if request.model_settings is None else request.model_settings.settings()
                ),
            )
            return {"runId": run_id}
        if isinstance(request, GetStateRequest):
            await self._in_scope(request.thread_id)
            state = await rt.get_state(request.thread_id)
            return {"state": state.to_wire(), "pendingActions": state_actions(rt, state)}
        if isinstance(request, WatchRequest):
            async with self._watching:  # one watch or unwatch at a time on a connection
                return {"frames": await self._watch(request, after)}
        if isinstance(request, UnwatchRequest):
            async with self._watching:
                self._unwatch(request.thread_id)
            return {}
        if isinstance(request, ListPendingActionsRequest):
            if request.thread_id is None:
                views = await rt.scope_pending_actions(self.identity.scope_key)
            else:
                await self._in_scope(request.thread_id)
                views = await rt.pending_actions(request.thread_id)
            return {"actions": [view_wire(view) for view in views]}
        if isinstance(request, SubmitActionRequest | CancelActionRequest | FailActionRequest):
            return action_result_wire(await self._resolve(request))
        if isinstance(request, CancelRunRequest):
            run_thread = await rt.run_thread(request.run_id)
            if run_thread is None or not await self._owns(run_thread):
                raise _Refused("not-found", f"no run {request.run_id!r} in your scope")
            ended = await rt.cancel_run(request.run_id, request.reason)
            return {"run": ended.to_wire()}
        assert isinstance(request, ReadFileRequest)
        try:
            found = await rt.read_file(request.file_id, scope_key=self.identity.scope_key)
        except FileNotFound:
            raise _Refused("not-found", f"no file {request.file_id!r} in your scope") from None
        record = found.file.model_dump(mode="json", exclude={"version"})
        return {
            "file": {to_camel(name): value for name, value in record.items()},
            "body": base64.b64encode(found.body).decode("ascii"),
        }

    async def _resolve(
        self, request: SubmitActionRequest | CancelActionRequest | FailActionRequest
    ) -> ActionResult:
        ref: PendingActionRef = request.ref
        if not await self._owns(ref.thread_id):
            return ActionResult.rejected(f"action {ref.action_id!r} is not in your scope")
        if isinstance(request, SubmitActionRequest):
            return await self._rt.submit_action(ref, request.payload)
        if isinstance(request, CancelActionRequest):
            return await self._rt.cancel_action(ref, request.reason)
        return await self._rt.fail_action(ref, request.error)

    async def _owns(self, thread_id: str) -> bool:
        return await self._rt.thread_scope(thread_id) == self.identity.scope_key

    async def _in_scope(self, thread_id: str) -> None:
        if not await self._owns(thread_id):
            raise _Refused("not-found", _no_thread(thread_id))
        try:
            await self._rt.get_thread(thread_id)
        except AgentNotFound as exc:
            raise _Refused("not-found", str(exc)) from None

    async def _watch(
        self, request: WatchRequest, after: list[Callable[[], None]]
    ) -> list[JsonValue]:
        await self._in_scope(request.thread_id)
        self._unwatch(request.thread_id)
        subscriber, frames = await self._feeds.subscribe(
            request.thread_id, request.cursor, deltas=request.deltas
        )
        scope = trio.CancelScope()
        self._watches[request.thread_id] = (subscriber, scope)
        nursery = self._nursery
        assert nursery is not None
        after.append(
            lambda: nursery.start_soon(self._forward, request.thread_id, subscriber, scope)
        )
        return list(frames)

    def _unwatch(self, thread_id: str) -> None:
        watch = self._watches.pop(thread_id, None)
        if watch is not None:
            subscriber, scope = watch
            scope.cancel()
            self._feeds.unsubscribe(thread_id, subscriber)

    async def _forward(
        self,
        thread_id: str,
        subscriber: Subscriber,
        scope: trio.CancelScope,
    ) -> None:
        with scope:
            async for frame in subscriber.receive:
                subscriber.read_one()  # room for the delta frames held back
                await self._out_send.send(frame)
            if self._watches.get(thread_id, (None,))[0] is subscriber:
                del self._watches[thread_id]
            if subscriber.overflowed:
                await self._out_send.send(
                    watch_ended_frame(
                        thread_id,
                        "overflow",
                        "this watch fell too far behind; watch again from your cursor",
                    )
                )
            else:
                reason = subscriber.reason or "closed"
                await self._out_send.send(
                    watch_ended_frame(thread_id, reason, _ENDED.get(reason, "the watch ended"))
                )


_ENDED = {
    "overflow": "the server's feed of this thread fell behind; watch again from your cursor",
    "shutting-down": "the server is shutting down",
    "internal": "the server's feed of this thread failed; see its log, then watch again",
}


def _no_thread(thread_id: str) -> str:
    return f"no thread {thread_id!r} in your scope; use a thread created in your scope"


@asynccontextmanager
async def open_server(
    runtime: AgentRuntime,
    *,
    authenticate: Authenticate,
    host: str = "127.0.0.1",
    port: int = 0,
    max_frame_bytes: int = MAX_FRAME_BYTES,
    linger: float = 15.0,
    instance: str | None = None,
) -> AsyncIterator[Server]:
    """Serve ``runtime`` over WebSocket on ``host:port`` (``0``: a free port; read
    ``server.port``) until the block ends. ``runtime`` must be open (inside its
    ``async with``); an exception raised in the block comes out as itself. ``linger``: how
    long a thread's feed outlives its last watcher, so a client that reconnects within it
    gets exactly the updates it missed. ``instance`` names this server's streams in cursors
    (a random name by default)."""
    if max_frame_bytes < 1024:
        raise ValueError(f"max_frame_bytes must be at least 1024, got {max_frame_bytes!r}")
    failed: Exception | None = None
    async with trio.open_nursery() as nursery:
        feeds = FeedHub(
            runtime,
            nursery,
            instance=instance if instance is not None else secrets.token_hex(4),
            linger=linger,
        )
        server = Server(runtime, authenticate, feeds)
        server.host = host
        listening = trio.CancelScope()
        # Connections run in this nursery, not the listener's: shutting down stops accepting
        # first (a client that connects then is refused by the OS, not half-handshaken).
        server._ws_server = await nursery.start(
            _serve, server, host, port, max_frame_bytes, nursery, listening
        )
        try:
            yield server
        except Exception as exc:  # raised below, as itself rather than in the nursery's group
            failed = exc
        finally:
            listening.cancel()
            await server.close_connections()
            nursery.cancel_scope.cancel()
    if failed is not None:
        raise failed


async def _serve(
    server: Server,
    host: str,
    port: int,
    max_frame_bytes: int,
    handlers: trio.Nursery,
    listening: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[WebSocketServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    with listening:
        await serve_websocket(
            server.handle,
            host,
            port,
            ssl_context=None,
            handler_nursery=handlers,
            max_message_size=max_frame_bytes,
            task_status=task_status,
        )
