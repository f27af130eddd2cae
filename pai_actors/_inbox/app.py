"""The inbox's ASGI application: the page, its static files, and its JSON API.

``inbox_app(rt, authenticate)`` is a Starlette application meant to be mounted at
``/inbox`` (``Mount("/inbox", app)``: its routes are relative to where it is mounted, and
the page's URLs are relative, so any prefix works). Routes, under the mount:

==========================  ====================================================================
``GET /``                   the page (``static/index.html``)
``GET /static/<name>``      its script and style sheet
``GET /api/session``        ``{"scopeKey", "userKey"}`` of the token (the page's sign-in check)
``GET /api/actions``        ``{"actions": [...]}``: the scope's pending actions, as the
                            protocol's ``listPendingActions`` shows them
``GET /api/events``         ``text/event-stream``: an ``actions`` event (``{"actions": [...]}``)
                            at once and each time the scope's actions change (see
                            :mod:`._inbox.feed`), a comment every 15 s to keep the stream open
``POST /api/actions``       a protocol request frame whose ``op`` is ``submitAction``,
                            ``cancelAction`` or ``failAction``; the answer is the protocol's
                            ``result`` frame (``{"actionResult"}``, HTTP 200; a rejection is an
                            outcome) or ``error`` frame (HTTP 400, 500 or 503)
==========================  ====================================================================

Every ``/api`` request carries ``Authorization: Bearer <token>``; the application's
``authenticate(token)`` turns it into an :class:`~pai_actors.server.Identity`, with the
statuses and bodies of the WebSocket handshake (401 without credentials or for a refused
token, 500 if ``authenticate`` fails). Scope rules are the protocol's: the requests name no
scope, and an action of another scope is rejected exactly as a missing one is.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .._core.actions import ActionResult
from .._core.errors import PaiError, RuntimeClosed, StoreError
from .._core.json import JsonValue
from .._protocol.frames import (
    MAX_FRAME_BYTES,
    CancelActionRequest,
    ErrorCode,
    FailActionRequest,
    FrameError,
    SubmitActionRequest,
    encode,
    error_frame,
    parse_request,
    result_frame,
)
from .._runtime.runtime import AgentRuntime
from .._server.feeds import view_wire
from .._server.server import Authenticate, Identity
from .._tools.registration import call_callback
from .feed import ScopeActions, ScopePokes

_log = logging.getLogger("pai_actors.inbox")

KEEPALIVE = 15.0
"""Seconds between the comments that keep an idle event stream open through proxies."""

_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "inbox.js": "text/javascript; charset=utf-8",
    "inbox.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = {
    # The page handles a bearer token: it runs its own script only, renders every value as
    # text, and may not be framed.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_ACTION_OPS = ("submitAction", "cancelAction", "failAction")
_STATUS: dict[ErrorCode, int] = {"internal": 500, "shutting-down": 503}


class _Refused(Exception):
    """A request answered with ``status`` and a plain-text ``message``."""

    def __init__(self, status: int, message: str, *, challenge: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.challenge = challenge

    def response(self) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if self.challenge else None
        return Response(self.message, self.status, headers=headers, media_type="text/plain")


@dataclass(frozen=True)
class _Inbox:
    """What the routes share: the runtime, the ``authenticate`` hook, the scopes' pokes."""

    rt: AgentRuntime
    authenticate: Authenticate
    pokes: ScopePokes
    interval: float

    async def identity(self, request: Request) -> Identity:
        """The request's identity, or :class:`_Refused` as the WebSocket handshake refuses."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _Refused(
                401,
                "credentials required: send the header 'Authorization: Bearer <token>'",
                challenge=True,
            )
        try:
            identity = await call_callback(self.authenticate, token)
        except Exception:
            _log.exception("authenticate() raised; refusing the request")
            raise _Refused(500, "the server could not check the credentials") from None
        if identity is None:
            raise _Refused(401, "the token was refused", challenge=True)
        if not isinstance(identity, Identity):
            _log.error("authenticate() returned %r, not an Identity or None", identity)
            raise _Refused(500, "the server could not check the credentials")
        return identity

    async def resolve(
        self,
        identity: Identity,
        request: SubmitActionRequest | CancelActionRequest | FailActionRequest,
    ) -> ActionResult:
        """Carry out an action request in the identity's scope, as the protocol server
        does: an action of another scope is rejected as a missing one is."""
        ref = request.ref
        if await self.rt.thread_scope(ref.thread_id) != identity.scope_key:
            return ActionResult.rejected(f"action {ref.action_id!r} is not in your scope")
        if isinstance(request, SubmitActionRequest):
            result = await self.rt.submit_action(ref, request.payload)
        elif isinstance(request, CancelActionRequest):
            result = await self.rt.cancel_action(ref, request.reason)
        else:
            result = await self.rt.fail_action(ref, request.error)
        if result.status == "accepted":
            self.pokes.poke(identity.scope_key)
        return result


def _json(body: dict[str, JsonValue], status: int = 200) -> Response:
    return Response(encode(body), status, media_type="application/json")


def _authenticated(
    endpoint: Callable[[_Inbox, Identity, Request], Awaitable[Response]], inbox: _Inbox
) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        try:
            identity = await inbox.identity(request)
        except _Refused as refused:
            return refused.response()
        return await endpoint(inbox, identity, request)

    return route


async def _session(inbox: _Inbox, identity: Identity, request: Request) -> Response:
    return _json({"scopeKey": identity.scope_key, "userKey": identity.user_key})


async def _actions(inbox: _Inbox, identity: Identity, request: Request) -> Response:
    try:
        views = await inbox.rt.scope_pending_actions(identity.scope_key)
    except RuntimeClosed as exc:
        return Response(str(exc), 503, media_type="text/plain")
    return _json({"actions": [view_wire(view) for view in views]})


async def _act(inbox: _Inbox, identity: Identity, request: Request) -> Response:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FRAME_BYTES:
            return Response(
                f"the request is larger than {MAX_FRAME_BYTES} bytes", 413, media_type="text/plain"
            )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return _json(error_frame("bad-frame", "the body is not UTF-8 text", None), 400)
    try:
        frame = parse_request(text)
    except FrameError as exc:
        return _json(error_frame(exc.code, exc.message, exc.request_id), 400)
    if not isinstance(frame, SubmitActionRequest | CancelActionRequest | FailActionRequest):
        message = f"this endpoint carries out {', '.join(_ACTION_OPS)}, not {frame.op!r}"
        return _json(error_frame("unknown-op", message, frame.id), 400)
    code: ErrorCode
    try:
        result = await inbox.resolve(identity, frame)
    except RuntimeClosed as exc:
        code, message = "shutting-down", str(exc)
    except StoreError:
        _log.exception("request %r failed in the store", frame.op)
        code, message = "internal", "the server failed to carry out this request; see its log"
    except (PaiError, ValueError, TypeError) as exc:
        code, message = "invalid-request", str(exc)
    else:
        return _json(result_frame(frame.id, {"actionResult": result.to_wire()}))
    return _json(error_frame(code, message, frame.id), _STATUS.get(code, 400))


async def _events(inbox: _Inbox, identity: Identity, request: Request) -> Response:
    return _EventStream(ScopeActions(inbox.rt, identity.scope_key, inbox.pokes, inbox.interval))


class _EventStream(Response):
    """``text/event-stream`` of a scope's actions: ``event: actions`` with ``{"actions"}``
    at once and at each change, ``event: end`` with ``{"message"}`` when the runtime
    closes. It stops when the client disconnects."""

    def __init__(self, actions: ScopeActions) -> None:
        # Not Response.__init__: it would declare an empty body (content-length: 0).
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),  # proxies such as nginx: do not buffer it
        ]
        self._actions = actions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_disconnect, receive, nursery.cancel_scope)
            await self._stream(send)
            nursery.cancel_scope.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream(self, send: Send) -> None:
        while True:
            with trio.move_on_after(KEEPALIVE) as idle:
                try:
                    actions = await self._actions.next()
                except (RuntimeClosed, StoreError) as exc:
                    await _send_event(send, "end", {"message": str(exc)})
                    return
            if idle.cancelled_caught:
                await send(
                    {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
                )
            else:
                await _send_event(send, "actions", {"actions": actions})


async def _send_event(send: Send, event: str, data: dict[str, JsonValue]) -> None:
    body = f"event: {event}\ndata: {encode(data)}\n\n".encode()
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _until_disconnect(receive: Receive, done: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    done.cancel()


def _static_files() -> dict[str, bytes]:
    folder = resources.files(__package__).joinpath("static")
    return {name: folder.joinpath(name).read_bytes() for name in _STATIC}


def _static(files: dict[str, bytes]) -> Callable[[Request], Awaitable[Response]]:
    async def serve(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        if name not in files:
            return Response("not found", 404, media_type="text/plain")
        return Response(files[name], headers=_SECURITY_HEADERS, media_type=_STATIC[name])

    return serve


def inbox_app(
    rt: AgentRuntime, authenticate: Authenticate, *, poll_interval: float = 1.0
) -> Starlette:
    """The browser inbox of ``rt``'s pending actions, as an ASGI application to mount at
    ``/inbox`` (see the module docstring for its routes).

    ``authenticate`` is the same hook the WebSocket server takes (``token -> Identity |
    None``, sync or async). Actions resolved through the inbox, or changed by any commit of
    ``rt``, show at once; ``poll_interval``: how often (seconds) an open page's event stream
    checks its scope for actions another process changed in the same store. The runtime
    must be open while the application serves requests.
    """
    if not isinstance(rt, AgentRuntime):
        raise TypeError(f"inbox_app(rt=...) must be an AgentRuntime, got {type(rt).__name__}")
    if not callable(authenticate):
        raise TypeError(
            "inbox_app(authenticate=...) must be a callable token -> Identity | None, "
            f"got {type(authenticate).__name__}"
        )
    if not poll_interval > 0:
        raise ValueError(f"inbox_app(poll_interval=...) must be positive, got {poll_interval!r}")
    inbox = _Inbox(rt, authenticate, ScopePokes(), poll_interval)
    rt.close_with(inbox.pokes.close)  # ends the event streams
    page = _static(_static_files())
    return Starlette(
        routes=[
            Route("/", page, methods=["GET"]),
            Route("/static/{name}", page, methods=["GET"]),
            Route("/api/session", _authenticated(_session, inbox), methods=["GET"]),
            Route("/api/actions", _authenticated(_actions, inbox), methods=["GET"]),
            Route("/api/actions", _authenticated(_act, inbox), methods=["POST"]),
            Route("/api/events", _authenticated(_events, inbox), methods=["GET"]),
        ]
    )
