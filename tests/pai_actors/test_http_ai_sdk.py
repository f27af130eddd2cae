"""The UI message stream endpoint driven by the AI SDK itself (``tests/js/ui_stream.mjs``).

The script uses the ``ai`` package's own ``DefaultChatTransport`` and ``AbstractChat`` (as
``useChat`` does) against a server on loopback: text and reasoning streamed delta by delta,
an approval granted and one denied (``addToolApprovalResponse``), a call's input streamed
fragment by fragment, a client tool's output
(``addToolOutput``), a named suspension answered with the stock ``sendMessage``, a run
resumed (``resumeStream``) after the server restarted on the same SQLite file, and the
scope rules; then ``safeValidateUIMessages`` over every message the endpoint produced, with
and without the schemas ``js/pai-ai-sdk`` publishes. The script asks this test for what
only the server side can do (release a tool call, restart the server) over its stdin and
stdout.

Node and ``tests/js/node_modules`` are required (``bash scripts/test`` installs them):
without them the test fails, so CI must run it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from pai_actors import SqliteStore

from .http_app import ChatApp, ServedHttp, serving_http

JS = Path(__file__).parents[1] / "js"
SCRIPT = JS / "ui_stream.mjs"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: this test drives the endpoint with the AI SDK")
    if not (JS / "node_modules" / "ai7" / "package.json").is_file():
        pytest.fail("tests/js/node_modules is missing the AI SDK: run bash scripts/test")
    return node


class _Host:
    """The server the script talks to, restartable on the same database and port: it runs
    in a task of its own (:meth:`serve`), so each server's nurseries nest in it."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.served: ServedHttp | None = None
        self._restart = trio.Event()
        self._restarted = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        port, started = 0, False
        while True:
            with SqliteStore(self.db) as store:
                async with serving_http(store=store, app=ChatApp(), port=port) as served:
                    self.served, port = served, served.http.port
                    if not started:
                        task_status.started(served.url)
                        started = True
                    self._restarted.set()
                    await self._restart.wait()
                    self._restart = trio.Event()

    async def restart(self) -> None:
        """Stop the server (its runtime closes) and start a new one on the same file."""
        restarted = self._restarted = trio.Event()
        self._restart.set()
        await restarted.wait()


async def test_the_ai_sdk_drives_the_endpoint(tmp_path: Path) -> None:
    node = _node()
    host = _Host(tmp_path / "chat.db")
    result: dict[str, Any] | None = None
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(host.serve)
            process = await trio.lowlevel.open_process(
                [node, str(SCRIPT), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            assert process.stdin is not None
            assert process.stdout is not None
            try:
                buffer = b""
                while result is None:
                    data = await process.stdout.receive_some()
                    assert data, "the script ended without a result"
                    buffer += data
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        command = json.loads(line)
                        if command["op"] == "result":
                            result = command
                            break
                        if command["op"] == "release":
                            assert host.served is not None
                            host.served.app.release()
                        elif command["op"] == "release-text":
                            assert host.served is not None
                            host.served.app.release_text()
                        elif command["op"] == "release-input":
                            assert host.served is not None
                            host.served.app.release_input()
                        elif command["op"] == "restart":
                            await host.restart()
                        else:  # pragma: no cover
                            raise AssertionError(f"unknown command {command!r}")
                        await process.stdin.send_all(b"ok\n")
                await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
                    with trio.CancelScope(shield=True):
                        await process.wait()
                await process.stdin.aclose()
                await process.stdout.aclose()
            nursery.cancel_scope.cancel()
    assert result is not None
    assert result["failures"] == [], "\n\n".join(result["failures"])
    assert result["scenarios"] == [
        "text",
        "approval",
        "denial",
        "toolInput",
        "clientTool",
        "suspension",
        "restart",
        "scope",
    ]
    assert result["validated"] > 0
