"""The application the protocol tests serve, and the helpers they share.

- :class:`App`: an agent whose scripted model reads the user's message as a command:
  ``invoice <customer>`` calls ``approve`` (stored progress, then a suspension for a
  person's decision; on approval, transient upload progress and a stored final status),
  ``report <name>`` calls ``report`` (saves a file with ``ctx.files.save``), ``tick <n>``
  calls ``tick`` (writes ``n`` stored progress items, each after the test releases it with
  :meth:`App.tick`), anything else gets a text answer. After a tool result the model says
  ``"done"``.
- :func:`serving`: a test runtime on that app with a server on loopback, port 0.
- :func:`open_raw`: a bare trio-websocket connection (to send frames a client never would),
  with :func:`request` / :func:`next_answer` to speak the protocol by hand.
- :class:`Relay`: a TCP relay between a client and a server, so a test can cut every
  connection abruptly (as a network failure would) and point the client at another server.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
import trio
from pydantic import BaseModel
from trio_websocket import WebSocketConnection, open_websocket_url

from pai_actors import (
    AgentDefinition,
    AgentRuntime,
    ModelRequest,
    ModelUserMessage,
    ResumeEntry,
    Store,
    SuspendPoint,
    ThreadState,
    ToolContext,
    ToolPart,
    define_agent,
    define_tool,
)
from pai_actors.server import MAX_FRAME_BYTES, Identity, Server, open_server
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

UNCLOSED_CLIENT_SOCKETS = pytest.mark.filterwarnings(
    "ignore:unclosed <socket.socket:ResourceWarning"
)
"""For the test modules' ``pytestmark``: trio-websocket 0.12.2 never closes a client's TCP
stream when the server refuses the handshake, closes the connection or the connection drops
(the client's reader stops at the end of the stream, and ``aclose()`` returns early as the
connection is already closed); the socket is closed only when it is collected, with a
``ResourceWarning``. ``pai_actors.client`` opens and closes its TCP stream itself for that
reason, but the tests provoke it with raw ``open_websocket_url`` connections, so they ignore
that warning, and :func:`collect_sockets` collects
the sockets in the teardown of each test that provokes it (it asks for the fixture), so
the warning never lands in another test."""


@pytest.fixture
def collect_sockets() -> Iterator[None]:
    """Collect the sockets a test left to the garbage collector, in its own teardown (see
    :data:`UNCLOSED_CLIENT_SOCKETS`)."""
    yield
    gc.collect()


ALICE = "alice-token"
BOB = "bob-token"
SCOPES = {ALICE: "tenant-a", BOB: "tenant-b"}


def authenticate(token: str) -> Identity | None:
    """Alice and Bob, each in a scope of their own; any other token is refused."""
    scope = SCOPES.get(token)
    return None if scope is None else Identity(scope_key=scope, user_key=token.split("-")[0])


class Invoice(BaseModel):
    customer: str
    amount: float


class Decision(BaseModel):
    approved: bool
    note: str = ""


class Report(BaseModel):
    name: str


class Ticks(BaseModel):
    n: int


class App:
    """The agent and model of the protocol tests (see the module docstring); one per test
    (its ``tick`` channel belongs to the test's trio run)."""

    def __init__(self) -> None:
        self._ticks, self._tick_receive = trio.open_memory_channel[None](math.inf)
        self.agent = self._define_agent()

    def tick(self, count: int = 1) -> None:
        """Let the running ``tick`` calls write ``count`` more items (in total)."""
        for _ in range(count):
            self._ticks.send_nowait(None)

    def _define_agent(self) -> AgentDefinition:
        async def approve(ctx: ToolContext) -> Any:
            if isinstance(ctx.entry, ResumeEntry):
                decision = ctx.entry.resume
                if not decision.approved:
                    return ctx.fail(f"declined: {decision.note}")
                for percent in (50, 100):
                    await ctx.data.write(
                        "progress", {"step": f"upload {percent}%"}, id="upload", transient=True
                    )
                await ctx.data.write("progress", {"step": "sent"}, id="status")
                return {"sent": ctx.input.customer}
            await ctx.data.write("progress", {"step": "drafted"}, id="status")
            return ctx.suspend("approval", ctx.input.model_dump())

        async def report(ctx: ToolContext) -> Any:
            saved = await ctx.files.save(
                f"name,total\n{ctx.input.name},12\n".encode(),
                "text/csv",
                "report.csv",
                metadata={"rows": 1},
            )
            return {"fileId": saved.file_id}

        async def tick(ctx: ToolContext) -> Any:
            for i in range(ctx.input.n):
                await self._tick_receive.receive()
                await ctx.data.write("progress", {"step": f"tick {i}"}, id=f"t{i}")
            return {"ticks": ctx.input.n}

        progress = {"progress": dict[str, str]}
        return define_agent(
            name="protocol-app",
            tools={
                "approve": define_tool(
                    id="test.protocol.approve.v1",
                    description="Send an invoice once a person approved it.",
                    input_schema=Invoice,
                    data_schemas=progress,
                    suspend={
                        "approval": SuspendPoint(suspend_schema=Invoice, resume_schema=Decision)
                    },
                    execute=approve,
                ),
                "report": define_tool(
                    id="test.protocol.report.v1",
                    description="Write a report file.",
                    input_schema=Report,
                    execute=report,
                ),
                "tick": define_tool(
                    id="test.protocol.tick.v1",
                    description="Write progress as the test releases it.",
                    input_schema=Ticks,
                    data_schemas=progress,
                    execute=tick,
                ),
            },
        )

    @staticmethod
    def step(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if not isinstance(last, ModelUserMessage):
            return text("done")
        command, _, argument = last.text.partition(" ")
        if command == "invoice":
            return [tool_call("approve", {"customer": argument or "ACME", "amount": 120.0})]
        if command == "report":
            return [tool_call("report", {"name": argument or "north"})]
        if command == "tick" and argument.isdigit():
            return [tool_call("tick", {"n": int(argument)})]
        return text(f"echo: {last.text}")

    def model(self) -> ScriptedModel:
        return ScriptedModel([self.step] * 1000)


@dataclass(eq=False)
class Served:
    app: App
    rt: AgentRuntime
    server: Server

    @property
    def url(self) -> str:
        return self.server.url


@asynccontextmanager
async def serving(
    *,
    store: Store | None = None,
    authenticate: Callable[[str], Identity | Awaitable[Identity | None] | None] = authenticate,
    max_frame_bytes: int = MAX_FRAME_BYTES,
    linger: float = 60.0,
    app: App | None = None,
) -> AsyncIterator[Served]:
    """A test runtime on :class:`App` (on ``store``), served on loopback, port 0."""
    app = App() if app is None else app
    async with create_test_runtime(app.agent, model=app.model(), store=store) as rt:
        async with open_server(
            rt, authenticate=authenticate, max_frame_bytes=max_frame_bytes, linger=linger
        ) as server:
            yield Served(app, rt, server)


def tool_parts(state: ThreadState) -> list[ToolPart]:
    return [part for m in state.messages for part in m.parts if isinstance(part, ToolPart)]


# -- raw connections ---------------------------------------------------------------------------


@asynccontextmanager
async def open_raw(
    url: str, token: str | None = ALICE, *, headers: list[tuple[bytes, bytes]] | None = None
) -> AsyncIterator[WebSocketConnection]:
    """A bare WebSocket connection, with ``Authorization: Bearer <token>`` unless ``token``
    is ``None`` (or ``headers`` replaces the headers)."""
    if headers is None:
        headers = [] if token is None else [(b"Authorization", f"Bearer {token}".encode())]
    async with open_websocket_url(url, extra_headers=headers) as ws:
        yield ws


async def next_answer(ws: WebSocketConnection) -> dict[str, Any]:
    """The next ``result`` or ``error`` frame (watch frames in between are skipped)."""
    while True:
        frame: dict[str, Any] = json.loads(await ws.get_message())
        if frame["type"] in ("result", "error"):
            return frame


async def request(
    ws: WebSocketConnection, request_id: int, op: str, **fields: Any
) -> dict[str, Any]:
    """Send one request and return its answer frame."""
    await ws.send_message(json.dumps({"v": 1, "id": request_id, "op": op, **fields}))
    answer = await next_answer(ws)
    assert answer["id"] == request_id, answer
    return answer


# -- a relay between client and server ---------------------------------------------------------


@dataclass(eq=False)
class Relay:
    """Relays TCP connections from ``port`` to the server on ``target`` (both loopback).

    :meth:`sever` cuts every relayed connection at once, without a WebSocket close (the
    client and the server each see their socket end); while :meth:`hold` is in effect,
    new connections wait before the relay connects them on to the target.
    """

    target: int
    port: int = 0
    connections: int = 0
    _scopes: set[trio.CancelScope] = field(default_factory=set)
    _open: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        self._open.set()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def hold(self) -> None:
        """Keep new connections waiting until :meth:`release`."""
        if self._open.is_set():
            self._open = trio.Event()

    def release(self) -> None:
        self._open.set()

    def sever(self) -> None:
        """Cut every connection the relay carries now."""
        for scope in list(self._scopes):
            scope.cancel()

    async def _handle(self, downstream: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                await self._open.wait()
                upstream = await trio.open_tcp_stream("127.0.0.1", self.target)
                self.connections += 1
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_pump, downstream, upstream, nursery.cancel_scope)
                        nursery.start_soon(_pump, upstream, downstream, nursery.cancel_scope)
                finally:
                    await trio.aclose_forcefully(upstream)
            finally:
                self._scopes.discard(scope)
                await trio.aclose_forcefully(downstream)


async def _pump(source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some():
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    done.cancel()


@asynccontextmanager
async def open_relay(target: int) -> AsyncIterator[Relay]:
    relay = Relay(target)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, relay._handle, 0, host="127.0.0.1"))
        relay.port = listeners[0].socket.getsockname()[1]
        yield relay
        nursery.cancel_scope.cancel()


async def wait_for(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds: for network effects only (a peer's socket closing,
    a reconnection), never to order events; the caller's ``fail_after`` bounds it."""
    while not condition():  # noqa: ASYNC110  # no event to wait on: the peer is across a socket
        await trio.sleep(0.01)
