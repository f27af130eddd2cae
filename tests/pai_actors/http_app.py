"""The application the HTTP (UI message stream) tests serve, and the helpers they share.

:class:`ChatApp`: an agent whose scripted model reads the user's message as a command:

- ``hello``: reasoning, then text, each in several deltas; after the first (``Think``)
  the model waits until the test releases it (:meth:`ChatApp.release_text`), so a stream
  that is open by then gets every later delta on its own;
- ``pay <amount>``: calls ``pay``, which needs the user's approval;
- ``ask <question>``: calls ``ask``, a tool without ``execute`` (the client supplies its
  output);
- ``ship <item>``: calls ``ship``, which writes stored progress, suspends at ``confirm``
  (``{"approved": bool, "note"?: str}``), and once confirmed writes transient progress, then
  waits until the test releases it (:meth:`ChatApp.release`) and writes its final status;
- ``boom``: calls ``boom``, which raises (``output-error``);
- ``stream``: calls ``pay`` with its input streamed in fragments; once the call started
  (its ``input-streaming`` part is stored) the model waits until the test releases it
  (:meth:`ChatApp.release_input`), so a stream that is open by then gets every fragment;
- anything else: ``echo: <text>``.

After tool results the model says ``done``. :func:`serving_http` serves a test runtime on
it over HTTP on loopback, port 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import h11
import trio
from pydantic import BaseModel

from pai_actors import (
    AgentDefinition,
    AgentRuntime,
    Finish,
    Model,
    ModelEvent,
    ModelRequest,
    ModelUserMessage,
    ReasoningDelta,
    ResumeEntry,
    Store,
    SuspendPoint,
    TextDelta,
    ToolContext,
    ToolInputStart,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors._http.server import HttpServer, open_http_server
from pai_actors.server import Identity
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

ALICE = "alice-token"
BOB = "bob-token"
SCOPES = {ALICE: "tenant-a", BOB: "tenant-b"}


def authenticate(token: str) -> Identity | None:
    """Alice and Bob, each in a scope of their own; any other token is refused."""
    scope = SCOPES.get(token)
    return None if scope is None else Identity(scope_key=scope, user_key=token.split("-")[0])


class Payment(BaseModel):
    amount: float


class Question(BaseModel):
    question: str


class Item(BaseModel):
    item: str


class Decision(BaseModel):
    approved: bool
    note: str = ""


class Nothing(BaseModel):
    pass


class ChatApp:
    """The agent and model of the HTTP tests (see the module docstring); one per trio run."""

    def __init__(self) -> None:
        self._gate, self._gate_receive = trio.open_memory_channel[None](math.inf)
        self._text_gate, self._text_gate_receive = trio.open_memory_channel[None](math.inf)
        self._input_gate, self._input_gate_receive = trio.open_memory_channel[None](math.inf)
        self.agent = self._define_agent()

    def release_text(self) -> None:
        """Let one ``hello`` step stream on after its first reasoning delta."""
        self._text_gate.send_nowait(None)

    def release_input(self) -> None:
        """Let one ``stream`` step stream its call's input after the call started."""
        self._input_gate.send_nowait(None)

    def release(self, count: int = 1) -> None:
        """Let ``count`` more confirmed ``ship`` calls finish."""
        for _ in range(count):
            self._gate.send_nowait(None)

    def _define_agent(self) -> AgentDefinition:
        async def pay(ctx: ToolContext) -> Any:
            return {"paid": ctx.input.amount}

        async def ship(ctx: ToolContext) -> Any:
            if isinstance(ctx.entry, ResumeEntry):
                if not ctx.entry.resume.approved:
                    return ctx.fail(f"not shipped: {ctx.entry.resume.note}")
                await ctx.data.write("progress", {"step": "packing"}, id="live", transient=True)
                await self._gate_receive.receive()
                await ctx.data.write("progress", {"step": "shipped"}, id="status")
                return {"shipped": ctx.input.item}
            await ctx.data.write("progress", {"step": "drafted"}, id="status")
            return ctx.suspend("confirm", ctx.input.model_dump())

        async def boom(ctx: ToolContext) -> Any:
            raise RuntimeError("the tool broke")

        progress = {"progress": dict[str, str]}
        return define_agent(
            name="chat-app",
            tools={
                "pay": ToolRegistration(
                    define_tool(
                        id="test.http.pay.v1",
                        description="Pay an amount, once the user approved it.",
                        input_schema=Payment,
                        execute=pay,
                    ),
                    needs_approval=True,
                ),
                "ask": define_tool(
                    id="test.http.ask.v1",
                    description="Ask the user; the client answers.",
                    input_schema=Question,
                    output_schema=dict[str, str],
                ),
                "ship": define_tool(
                    id="test.http.ship.v1",
                    description="Ship an item once confirmed.",
                    input_schema=Item,
                    data_schemas=progress,
                    suspend={"confirm": SuspendPoint(suspend_schema=Item, resume_schema=Decision)},
                    execute=ship,
                ),
                "boom": define_tool(
                    id="test.http.boom.v1",
                    description="Break.",
                    input_schema=Nothing,
                    execute=boom,
                ),
            },
        )

    @staticmethod
    def step(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if not isinstance(last, ModelUserMessage):
            return text("done")
        command, _, argument = last.text.partition(" ")
        if command == "hello":
            return [
                ReasoningDelta("Think"),
                ReasoningDelta("ing."),
                TextDelta("Hello "),
                TextDelta("there, "),
                TextDelta("friend."),
                Finish("stop"),
            ]
        if command == "pay":
            return [tool_call("pay", {"amount": float(argument or 1)})]
        if command == "stream":
            return [tool_call("pay", {"amount": 2.5}, stream=True)]
        if command == "ask":
            return [tool_call("ask", {"question": argument or "why?"})]
        if command == "ship":
            return [tool_call("ship", {"item": argument or "box"})]
        if command == "boom":
            return [tool_call("boom", {})]
        return text(f"echo: {last.text}")

    def model(self) -> Model:
        return _GatedModel(
            ScriptedModel([self.step] * 1000), self._text_gate_receive, self._input_gate_receive
        )


class _GatedModel:
    """A scripted model that waits for the test after a ``Think`` reasoning delta, and after
    a streamed call's start."""

    def __init__(
        self,
        inner: ScriptedModel,
        gate: trio.MemoryReceiveChannel[None],
        input_gate: trio.MemoryReceiveChannel[None],
    ) -> None:
        self._inner = inner
        self._gate = gate
        self._input_gate = input_gate

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async for event in self._inner.stream(request):
            yield event
            if isinstance(event, ReasoningDelta) and event.text == "Think":
                await self._gate.receive()
            elif isinstance(event, ToolInputStart):
                await self._input_gate.receive()


@dataclass(eq=False)
class ServedHttp:
    app: ChatApp
    rt: AgentRuntime
    http: HttpServer

    @property
    def url(self) -> str:
        return self.http.url


@asynccontextmanager
async def serving_http(
    *, store: Store | None = None, app: ChatApp | None = None, port: int = 0
) -> AsyncIterator[ServedHttp]:
    """A test runtime on :class:`ChatApp` (on ``store``), served over HTTP on loopback."""
    app = ChatApp() if app is None else app
    async with (
        create_test_runtime(app.agent, model=app.model(), store=store) as rt,
        open_http_server(rt, authenticate, port=port) as http,
    ):
        yield ServedHttp(app, rt, http)


# -- a minimal HTTP client (h11 over a trio stream) -------------------------------------------


@dataclass(eq=False)
class Reply:
    """An HTTP response: ``status``, ``headers`` (lower-case names) and the body's ``chunks``
    as they arrived (each ``receive_some``'s data)."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[Any]:
        """The server-sent events' data, decoded (``[DONE]`` as ``None``)."""
        out: list[Any] = []
        for block in self.body.decode().split("\n\n"):
            if block.startswith("data: "):
                data = block.removeprefix("data: ")
                out.append(None if data == "[DONE]" else json.loads(data))
        return out


@asynccontextmanager
async def open_request(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = ALICE,
    on_data: Callable[[bytes], None] | None = None,
) -> AsyncIterator[h11.Response]:
    """Send a request; yield its response head while the body is read by the caller's
    :func:`read_body` (so a test can act while a stream is open)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        conn = h11.Connection(h11.CLIENT)
        payload = b"" if body is None else json.dumps(body).encode()
        headers = [("host", f"{host}:{port}"), ("content-length", str(len(payload)))]
        if body is not None:
            headers.append(("content-type", "application/json"))
        if token is not None:
            headers.append(("authorization", f"Bearer {token}"))
        await stream.send_all(conn.send(h11.Request(method=method, target=path, headers=headers)))
        await stream.send_all(conn.send(h11.Data(data=payload)))
        await stream.send_all(conn.send(h11.EndOfMessage()))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some())
                continue
            assert isinstance(event, h11.Response), event
            break
        _connections[id(event)] = (conn, stream)
        try:
            yield event
        finally:
            del _connections[id(event)]


_connections: dict[int, tuple[h11.Connection, trio.SocketStream]] = {}


async def read_body(head: h11.Response, *, until: Callable[[bytes], bool] | None = None) -> bytes:
    """Read the body of ``head`` to its end (or until ``until(body so far)`` holds)."""
    conn, stream = _connections[id(head)]
    body = b""
    while until is None or not until(body):
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some())
        elif isinstance(event, h11.Data):
            body += bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            break
    return body


async def request(
    url: str, method: str, path: str, body: Any = None, *, token: str | None = ALICE
) -> Reply:
    """One whole request and its response."""
    async with open_request(url, method, path, body, token=token) as head:
        data = await read_body(head)
    headers = {name.decode().lower(): value.decode() for name, value in head.headers}
    return Reply(head.status_code, headers, data)


def user(text: str, message_id: str = "u1") -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def chat_body(chat_id: str, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": chat_id, "messages": list(messages), "trigger": "submit-message", **extra}
