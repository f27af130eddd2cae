"""A local HTTP/1.1 server that plays back providers' answers, for the model adapters' tests.

Built on trio and h11 (the sans-IO HTTP/1.1 library under httpx and hypercorn), bound to
127.0.0.1 on port 0, inside the test's own trio run: each request takes the next
:class:`Reply` of the queue and the server records what it received (:attr:`requests`). A
reply is a status and a body: a JSON error body, or a server-sent-event stream sent one
event per HTTP chunk (so a client sees the events arrive one by one), which can also stop
early: ``hang_at`` waits, after the first event containing that text, until the client
closes the connection (and sets :attr:`ProviderServer.closed`); ``cut_after`` drops the
connection after that many events without ending the body; ``silent`` never answers.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import trio

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    """The text of ``tests/models/fixtures/<name>``."""
    return (FIXTURES / name).read_text()


def split_events(body: str) -> list[str]:
    """An SSE body's events, each with its blank-line terminator."""
    return [event + "\n\n" for event in body.split("\n\n") if event.strip()]


@dataclass
class Reply:
    """What the server answers to one request (see the module docs)."""

    body: str = ""
    status: int = 200
    content_type: str = "text/event-stream; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    hang_at: str | None = None
    cut_after: int | None = None
    silent: bool = False

    @classmethod
    def error(cls, status: int, body: object, **headers: str) -> Reply:
        """A JSON error answer."""
        return cls(
            body=json.dumps(body),
            status=status,
            content_type="application/json",
            headers=[(k.replace("_", "-"), v) for k, v in headers.items()],
        )


@dataclass
class Received:
    """A request the server received: its method, path, headers and JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class ProviderServer:
    """The server (see the module docs); :func:`open_provider_server` runs one."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.closed = trio.Event()

    def reply(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def _handle(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await self._read_request(stream, connection)
                if request is None:
                    return
                self.requests.append(request)
                reply = (
                    self.replies.popleft()
                    if self.replies
                    else Reply.error(500, {"error": "no reply left"})
                )
                if not await self._answer(stream, connection, reply):
                    return
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            return  # the client went away
        finally:
            await stream.aclose()

    async def _read_request(
        self, stream: trio.SocketStream, connection: h11.Connection
    ) -> Received | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return None
                connection.receive_data(data)
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                headers = {k.decode().lower(): v.decode() for k, v in head.headers}
                return Received(
                    head.method.decode(),
                    head.target.decode(),
                    headers,
                    json.loads(body) if body else None,
                )
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def _answer(
        self, stream: trio.SocketStream, connection: h11.Connection, reply: Reply
    ) -> bool:
        """Send ``reply``; whether the connection can take another request."""
        if reply.silent:
            await self._wait_closed(stream)
            return False
        headers = [("content-type", reply.content_type), *reply.headers]
        if reply.content_type == "application/json":
            headers.append(("content-length", str(len(reply.body.encode()))))
        await stream.send_all(
            connection.send(h11.Response(status_code=reply.status, headers=headers))
        )
        events = (
            split_events(reply.body)
            if reply.content_type.startswith("text/event-stream")
            else [reply.body]
        )
        for count, event in enumerate(events, 1):
            await stream.send_all(connection.send(h11.Data(data=event.encode())))
            if reply.hang_at is not None and reply.hang_at in event:
                await self._wait_closed(stream)
                return False
            if reply.cut_after is not None and count >= reply.cut_after:
                return False  # the body is never ended: the client sees the connection drop
        await stream.send_all(connection.send(h11.EndOfMessage()))
        return True

    async def _wait_closed(self, stream: trio.SocketStream) -> None:
        while await stream.receive_some(65536):
            pass  # whatever the client sends meanwhile, until it closes
        self.closed.set()


@asynccontextmanager
async def open_provider_server() -> AsyncIterator[ProviderServer]:
    """Run a :class:`ProviderServer` on 127.0.0.1 (port 0) for the ``async with`` block."""
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        server = ProviderServer(listeners[0].socket.getsockname()[1])
        nursery.start_soon(trio.serve_listeners, server._handle, listeners)
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
