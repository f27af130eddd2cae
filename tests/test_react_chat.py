"""The React page of ``examples/react-chat`` (a stock ``useChat`` from ``@ai-sdk/react`` with
the SDK's ``DefaultChatTransport``), built with vite and served by the HTTP server beside
the UI message stream endpoint, in headless Chromium: a message, an approval granted by
clicking, one denied, and a reload that goes on from the stored conversation.

Every wait is an explicit wait for a DOM condition (nothing sleeps, nothing asserts a
duration). The page is built from its sources once per test session (``npm run build`` in
``examples/react-chat``; ``scripts/test`` installs its packages with ``npm ci``).
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from starlette.staticfiles import StaticFiles

from pai_actors import AgentRuntime, ToolPart
from pai_actors._http.server import open_http_server
from pai_actors.testing import create_test_runtime

from .pai_actors.http_app import ALICE, ChatApp, authenticate
from .pai_actors.inbox_support import headless_chromium

PAGE = Path(__file__).resolve().parent.parent / "examples" / "react-chat"
TIMEOUT = 20  # seconds an explicit wait may take before the test fails


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}; CI=true, so the useChat page's browser test may not be skipped")
    pytest.skip(why)


@pytest.fixture(scope="module")
def built() -> Path:
    """The page, built from its sources now (``dist/``)."""
    if shutil.which("npm") is None:
        _unavailable("npm is missing: install Node.js >= 20.19 with npm")
    if not (PAGE / "node_modules" / "vite").is_dir():
        _unavailable(
            "examples/react-chat/node_modules is missing: run bash scripts/test (or: npm ci "
            "--prefix examples/react-chat)"
        )
    done = subprocess.run(
        ["npm", "run", "build", "--silent"],
        cwd=PAGE,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return PAGE / "dist"


@dataclass(eq=False)
class Served:
    url: str
    rt: AgentRuntime
    token: trio.lowlevel.TrioToken

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run(function, *args, trio_token=self.token)


@pytest.fixture
def served(built: Path) -> Iterator[Served]:
    """A test runtime on the HTTP tests' chat app, served over HTTP on loopback with the
    built page at ``/chat/``, in a thread of its own (its own trio run)."""
    started: queue.Queue[Served | BaseException] = queue.Queue()
    stop: list[trio.Event] = []

    async def main() -> None:
        app = ChatApp()
        async with (
            create_test_runtime(app.agent, model=app.model()) as rt,
            open_http_server(
                rt, authenticate, mounts={"/chat": StaticFiles(directory=built, html=True)}
            ) as http,
        ):
            stop.append(trio.Event())
            started.put(Served(http.url, rt, trio.lowlevel.current_trio_token()))
            await stop[0].wait()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:
            started.put(exc)

    thread = threading.Thread(target=run, name="react-chat-server", daemon=True)
    thread.start()
    served = started.get(timeout=30)
    if isinstance(served, BaseException):
        raise served
    try:
        yield served
    finally:
        trio.from_thread.run_sync(stop[0].set, trio_token=served.token)
        thread.join(timeout=30)
        assert not thread.is_alive(), "the server did not stop"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as driver:
        yield driver


class Page:
    """The chat page in the browser, with explicit waits for what a person would see."""

    def __init__(self, driver: Any, served: Served, chat: str) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.wait = WebDriverWait(driver, TIMEOUT)
        driver.get(f"{served.url}/chat/?token={ALICE}&chat={chat}")
        self.until(lambda: self.css("p[data-status='ready']"), "the page is ready")

    def css(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, selector))

    def until(self, condition: Callable[[], Any], what: str) -> Any:
        return self.wait.until(lambda _: condition(), message=f"waited for {what}")

    def send(self, text: str) -> None:
        [field] = self.css("form input")
        field.send_keys(text)
        [button] = self.css("form button[type='submit']")
        button.click()

    def tool(self, state: str) -> Any:
        found = self.until(
            lambda: self.css(f"section.tool[data-tool='pay'][data-state='{state}']"),
            f"the pay call in state {state}",
        )
        return found[0]

    def click(self, within: Any, label: str) -> None:
        from selenium.webdriver.common.by import By

        [button] = [b for b in within.find_elements(By.TAG_NAME, "button") if b.text == label]
        button.click()

    def texts(self) -> list[str]:
        return [p.text for p in self.css("li[data-role='assistant'] p.text")]


def pay_part(served: Served, chat: str) -> ToolPart:
    state = served.call(served.rt.get_state, chat)
    [part] = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    return part


def test_an_approval_is_granted_by_clicking(served: Served, browser: Any) -> None:
    page = Page(browser, served, "react-approve")
    page.send("pay 30")
    asked = page.tool("approval-requested")
    assert '"amount":30' in asked.text
    page.click(asked, "Approve")  # sent once every approval is answered
    done = page.tool("output-available")
    assert '{"paid":30}' in done.find_element("css selector", "pre.output").text
    page.until(lambda: "done" in page.texts(), "the assistant's answer")
    part = pay_part(served, "react-approve")
    assert (part.state, part.output) == ("output-available", {"paid": 30.0})


def test_a_denied_approval_and_a_reload(served: Served, browser: Any) -> None:
    page = Page(browser, served, "react-deny")
    page.send("pay 40")
    page.click(page.tool("approval-requested"), "Deny")
    page.tool("output-denied")
    page.until(lambda: "done" in page.texts(), "the assistant's answer")
    assert pay_part(served, "react-deny").state == "output-denied"
    # the same chat, reloaded: useChat resumes (nothing runs: the endpoint says 204) and the
    # page sends a new message in the same conversation
    page = Page(browser, served, "react-deny")
    page.send("thanks")
    page.until(lambda: "echo: thanks" in page.texts(), "the echo")


def test_the_guide_shows_the_tested_page() -> None:
    guide = (Path(__file__).resolve().parent.parent / "docs" / "guides" / "react.md").read_text()
    page = (PAGE / "src" / "App.jsx").read_text()
    assert f"```jsx\n{page}```" in guide
