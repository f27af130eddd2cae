"""What the inbox tests share: an application with every kind of pending action, served by
hypercorn under trio in a thread of its own, and a headless Chromium to drive the page.

- :func:`make_pai`: a ``desk`` agent whose scripted model reads the user's message as a
  command: ``refund <order> <cents>`` calls ``refund`` (suspends for a review whose schema has
  an enum, bounded numbers, a bounded note and a list; the note is also checked by a
  validator that JSON Schema cannot express, so only the server catches a card number in
  it), ``pay <cents>`` calls ``pay`` (registered with ``needs_approval``), ``pick`` calls
  ``pick`` (no ``execute``: the client supplies its output), ``profile`` calls ``profile``
  (likewise, with an hour's deadline, and an output schema with a nested model, an optional
  bounded number, a bounded list and a union the page shows as JSON), ``delegate <cents>`` runs the
  ``billing`` agent, whose ``pay`` call waits for an approval in its sub-agent thread.
- :class:`Served`: the runtime and the inbox, mounted at ``/inbox`` of a Starlette app as
  the HTTP server mounts it, on loopback port 0. The test (synchronous, as Selenium is)
  reaches the runtime with :meth:`Served.call`, which runs a coroutine in the server's trio
  run.
- :func:`open_browser`: headless Chromium through chromedriver (Debian's ``chromium`` and
  ``chromium-driver``); :func:`browser_missing` says how to install it when it cannot run.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any, Literal, TypeVar

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from pydantic import BaseModel, Field, field_validator
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

from pai_actors import (
    AgentRuntime,
    ModelRequest,
    ModelUserMessage,
    Pai,
    ResumeEntry,
    SuspendPoint,
    ToolContext,
    ToolRegistration,
    create_pai,
    define_agent,
    define_tool,
)
from pai_actors._inbox import inbox_app
from pai_actors.server import Identity
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

from .protocol_app import ALICE, BOB, authenticate

__all__ = ["ALICE", "BOB", "CHROMEDRIVER", "CHROMIUM", "Served", "make_pai", "serving"]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
T = TypeVar("T")


class Order(BaseModel):
    order: str
    cents: int


class Review(BaseModel):
    decision: Literal["refund", "partial", "deny"] = Field(description="what to do")
    cents: int = Field(ge=0, le=50_000, description="how much to refund, in cents")
    note: str = Field(min_length=3, max_length=200, description="why, for the customer's record")
    tags: list[str] = Field(default_factory=list, description="labels for the ledger")

    @field_validator("note")
    @classmethod
    def _no_card_number(cls, note: str) -> str:
        if re.search(r"\d{12,}", note):
            raise ValueError("a note may not hold a card number; leave it out")
        return note


class Payment(BaseModel):
    cents: int
    to: str


class Address(BaseModel):
    city: str
    zip: str = Field(pattern=r"^\d{5}$")


class Profile(BaseModel):
    name: str
    age: int | None = Field(default=None, ge=0, le=150)
    address: Address
    scores: list[int] = Field(default_factory=list, max_length=3)
    extra: dict[str, int] | int = 0


class Choice(BaseModel):
    options: list[str]


class Picked(BaseModel):
    option: str = Field(min_length=1)


def make_pai() -> Pai:
    async def refund(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            review = ctx.entry.resume
            return {"decision": review.decision, "cents": review.cents}
        return ctx.suspend("review", ctx.input.model_dump())

    async def delegate(ctx: ToolContext) -> Any:
        result = await ctx.agents.run("billing", f"pay {ctx.input.cents}")
        return result.text

    pay = define_tool(
        id="test.inbox.pay.v1",
        description="Pay a supplier.",
        input_schema=Payment,
        execute=lambda ctx: {"paid": ctx.input.cents},
    )
    return create_pai(
        {
            "desk": define_agent(
                name="Desk",
                tools={
                    "refund": define_tool(
                        id="test.inbox.refund.v1",
                        description="Refund an order once a person reviewed it.",
                        input_schema=Order,
                        suspend={
                            "review": SuspendPoint(suspend_schema=Order, resume_schema=Review)
                        },
                        execute=refund,
                    ),
                    "pay": ToolRegistration(pay, needs_approval=True),
                    "pick": define_tool(
                        id="test.inbox.pick.v1",
                        description="Ask the user to pick an option.",
                        input_schema=Choice,
                        output_schema=Picked,
                    ),
                    "profile": ToolRegistration(
                        define_tool(
                            id="test.inbox.profile.v1",
                            description="Ask the user for a profile.",
                            input_schema=Choice,
                            output_schema=Profile,
                        ),
                        output_deadline=timedelta(hours=1),
                    ),
                    "delegate": define_tool(
                        id="test.inbox.delegate.v1",
                        description="Have the billing agent pay.",
                        input_schema=Payment,
                        execute=delegate,
                    ),
                },
            ),
            "billing": define_agent(
                name="Billing", tools={"pay": ToolRegistration(pay, needs_approval=True)}
            ),
        }
    )


def _desk_step(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if not isinstance(last, ModelUserMessage):
        return text("done")
    command, *arguments = last.text.split()
    if command == "refund":
        order, cents = arguments
        return [tool_call("refund", {"order": order, "cents": int(cents)})]
    if command == "pay":
        return [tool_call("pay", {"cents": int(arguments[0]), "to": "ACME"})]
    if command == "pick":
        return [tool_call("pick", {"options": ["red", "green"]})]
    if command == "profile":
        return [tool_call("profile", {"options": ["short", "long"]})]
    if command == "delegate":
        return [tool_call("delegate", {"cents": int(arguments[0]), "to": "ACME"})]
    return text(f"echo: {last.text}")


def _billing_step(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if not isinstance(last, ModelUserMessage):
        return text("paid")
    return [tool_call("pay", {"cents": int(last.text.split()[1]), "to": "Globex"})]


@dataclass(eq=False)
class _Count:
    """ASGI middleware that counts the requests to the action endpoint (the page's POSTs)."""

    app: Any
    posts: int = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            self.posts += 1
        await self.app(scope, receive, send)


@dataclass(eq=False)
class Served:
    """The server of one test: ``url`` is the inbox page's, ``rt`` the runtime."""

    url: str
    rt: AgentRuntime
    _token: trio.lowlevel.TrioToken
    _counter: _Count
    _stop: trio.Event
    threads: dict[str, list[str]] = field(default_factory=dict)

    @property
    def posts(self) -> int:
        """How many POST requests the inbox received."""
        return self._counter.posts

    def call(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``function(*args)`` in the server's trio run and return its result."""
        return trio.from_thread.run(function, *args, trio_token=self._token)

    def start(self, token: str, command: str) -> str:
        """A new thread in ``token``'s scope, sent ``command``, idle (waiting on its
        actions); its id."""
        scope_key = SCOPES[token]

        async def go() -> str:
            thread_id = await self.rt.create_thread(scope_key)
            await self.rt.send(thread_id, command)
            await self.rt.wait_idle(thread_id)
            return thread_id

        thread_id = self.call(go)
        self.threads.setdefault(token, []).append(thread_id)
        return thread_id

    def pending(self, thread_id: str) -> list[Any]:
        return self.call(self.rt.pending_actions, thread_id)

    def request(
        self, method: str, path: str, *, token: str | None = None, body: object = None
    ) -> tuple[int, dict[str, str], bytes]:
        """An HTTP request to the inbox (``path`` relative to its page): status, headers,
        body."""
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, dict(error.headers), error.read()


SCOPES = {ALICE: "tenant-a", BOB: "tenant-b"}


@contextmanager
def serving(
    authenticate: Callable[[str], Identity | None] = authenticate,
) -> Iterator[Served]:
    """A test runtime on :func:`make_pai` with the inbox served at
    ``http://127.0.0.1:<port>/inbox/``, in a thread of its own (its own trio run)."""
    started: queue.Queue[Served | BaseException] = queue.Queue()

    async def main() -> None:
        models = {
            "desk": ScriptedModel([_desk_step] * 1000),
            "billing": ScriptedModel([_billing_step] * 1000),
        }
        async with create_test_runtime(make_pai(), model=models) as rt:
            counter = _Count(Starlette(routes=[Mount("/inbox", inbox_app(rt, authenticate))]))
            config = Config()
            config.bind = ["127.0.0.1:0"]
            config.graceful_timeout = 2.0
            config.errorlog = None
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(
                    partial(serve, counter, config, shutdown_trigger=stop.wait)
                )
                started.put(
                    Served(
                        f"{binds[0]}/inbox/",
                        rt,
                        trio.lowlevel.current_trio_token(),
                        counter,
                        stop,
                    )
                )

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:
            started.put(exc)

    thread = threading.Thread(target=run, name="inbox-server", daemon=True)
    thread.start()
    served = started.get(timeout=30)
    if isinstance(served, BaseException):
        raise served
    try:
        yield served
    finally:
        trio.from_thread.run_sync(served._stop.set, trio_token=served._token)
        thread.join(timeout=30)
        assert not thread.is_alive(), "the inbox server did not stop"
        if not started.empty():
            failed = started.get()
            assert not isinstance(failed, BaseException), failed


def browser_missing() -> str | None:
    """Why headless Chromium cannot be driven here (with what to do), or ``None``."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(path)]
    if missing:
        return (
            f"headless Chromium is missing ({', '.join(missing)}): run "
            "`bash scripts/install-browser` (as root: it installs Debian's chromium and "
            "chromium-driver)"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is missing: run `.venv/bin/pip install selenium`"
    if shutil.which(CHROMEDRIVER) is None:
        return f"{CHROMEDRIVER} is not executable: run `bash scripts/install-browser` again"
    return None


@contextmanager
def headless_chromium(*arguments: str) -> Iterator[Any]:
    """Debian's Chromium, headless, driven through its chromedriver (Selenium), with
    ``arguments`` besides the ones every browser test needs. Without it, the test is skipped
    saying how to install it, or, under ``CI=true``, fails."""
    import pytest

    missing = browser_missing()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}; CI=true, so the browser tests may not be skipped")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI containers run as root, where Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        *arguments,
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
