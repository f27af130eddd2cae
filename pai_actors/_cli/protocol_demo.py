"""The first half of ``pai-actors demo``: a server and a client, live.

A server hosts ``pai_actors.demo_app`` (a billing agent whose ``sendInvoice`` tool drafts
an invoice with progress, waits for a person's approval, then sends it) on a SQLite file.
A client connects as ``alice``, asks for an invoice and watches the thread: the tool's
progress arrives live (a progress bar), then the pending approval with its answer schema.
An invalid answer is rejected and the action stays pending. The server then stops, as if
its process had been killed; the call waits in the file. A new server opens the same file
on the same port, and the client reconnects by itself. The approval is submitted, the call
resumes (more progress), and the model answers.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import trio

from .._client.client import open_client
from .._client.conversation import ClientThread, ThreadResynced
from .._core.parts import TextPart, ToolPart
from .._core.updates import RunStatusChanged, ThreadUpdate, ToolDataUpdated, ToolPartUpdated
from .._runtime.create import counter_ids
from .._server.server import open_server
from .._store.sqlite import SqliteStore
from ..demo_app import build
from .actions import schema_summary

Say = Callable[[str], None]


class _Stage:
    """The events the server task and the client side of the demo wait on."""

    def __init__(self) -> None:
        self.stop_first = trio.Event()
        self.first_down = trio.Event()
        self.second_up = trio.Event()
        self.done = trio.Event()


async def _host(
    path: Path, stage: _Stage, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    with SqliteStore(path) as store:
        app = build(store, new_id=counter_ids())
        async with (
            app.runtime as rt,
            open_server(rt, authenticate=app.authenticate, instance="first") as server,
        ):
            port = server.port
            task_status.started(port)
            await stage.stop_first.wait()
    stage.first_down.set()
    with SqliteStore(path) as store:
        app = build(store, new_id=counter_ids("g2_"))
        async with (
            app.runtime as rt,
            open_server(rt, authenticate=app.authenticate, port=port, instance="second"),
        ):
            stage.second_up.set()
            await stage.done.wait()


def bar(percent: int, width: int = 20) -> str:
    filled = width * percent // 100
    return f"[{'#' * filled}{'.' * (width - filled)}] {percent:3d}%"


async def _follow(
    thread: ClientThread,
    updates: object,
    say: Say,
    until: Callable[[ThreadUpdate], bool],
    progress: Say,
) -> None:
    """Say what the watch shows (progress as a bar) until ``until(update)``."""
    async for update in updates:  # type: ignore[attr-defined]
        if isinstance(update, ThreadResynced):
            say("   [live] resynced from a snapshot")
            continue
        if isinstance(update, ToolDataUpdated) and update.channel == "progress":
            value = update.item.value
            assert isinstance(value, dict)
            percent = value["percent"]
            assert isinstance(percent, int)
            progress(f"   [live] {value['step']:<9} {bar(percent)}")
        elif isinstance(update, ToolPartUpdated):
            part = update.part
            suspended = part.pending_suspension
            shown = f"waiting at {suspended.name!r}" if suspended is not None else part.state
            say(f"   [live] part {part.type}: {shown}")
        elif isinstance(update, RunStatusChanged):
            say(f"   [live] run {update.run.status}")
        if until(update):
            return


async def run_protocol_demo(say: Say = print, progress: Say | None = None) -> list[str]:
    """Run the demo, narrating through ``say`` (the progress bar's lines through
    ``progress``, ``say`` by default); return the thread's run statuses."""
    progress = say if progress is None else progress
    stage = _Stage()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "demo.db"
        async with trio.open_nursery() as nursery:
            port = await nursery.start(_host, path, stage)
            url = f"ws://127.0.0.1:{port}/"
            async with open_client(url, token="alice-token") as client:
                say(f"1. A server hosts the billing agent on {path.name} (SQLite); a client")
                say("   connects as alice, asks for an invoice and watches the thread:")
                thread = await client.create_thread()
                async with thread.watch() as updates:
                    await thread.send("Please invoice ACME for 120.")
                    await _follow(
                        thread,
                        updates,
                        say,
                        lambda u: (
                            isinstance(u, ToolPartUpdated) and u.part.pending_suspension is not None
                        ),
                        progress,
                    )
                [action] = thread.pending_actions()
                say(f"\n2. The pending action {action.name!r} (id {action.ref.action_id!r}):")
                say(f"   input:  {json.dumps(action.input)}")
                say(f"   answer: {schema_summary(action.resume_schema)} (its resume schema)")
                rejected = await action.submit({"approved": "yes please"})
                say(f"   an invalid answer is {rejected.status}; the action stays pending:")
                say(f"   {rejected.error}".replace("\n", "\n   "))

                say(
                    "\n3. The server stops, as if killed. Nothing runs; the call waits in the file."
                )
                stage.stop_first.set()
                await stage.first_down.wait()
                await stage.second_up.wait()
                [action] = await client.pending_actions()
                say("   A new server opens the file on the same port; the client reconnects")
                say(f"   by itself and finds the action still pending: {action.ref.action_id!r}")

                say("\n4. alice approves; the call resumes on the new server:")
                async with thread.watch() as updates:
                    accepted = await action.submit({"approved": True, "note": "checked"})
                    say(f"   the answer is {accepted.status}")
                    await _follow(
                        thread,
                        updates,
                        say,
                        lambda u: (
                            isinstance(u, RunStatusChanged)
                            and u.run.status in ("completed", "failed", "cancelled")
                        ),
                        progress,
                    )
                state = thread.get_state()
            stage.done.set()
    say("\n5. The thread as the client holds it:")
    for message in state.messages:
        for part in message.parts:
            if isinstance(part, TextPart):
                say(f"   {message.role}: {part.text!r}")
            elif isinstance(part, ToolPart):
                say(f"   {message.role}: {part.type} {part.state} output={part.output}")
    return [run.status for run in state.runs]
