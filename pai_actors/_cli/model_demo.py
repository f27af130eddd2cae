"""``pai-actors demo --model SPEC``: the demo's billing agent on a real model.

The server and client of the scripted demo (``_cli.protocol_demo``), with the model named on
the command line in place of the scripted one: a server hosts ``pai_actors.demo_app``'s
billing agent on a SQLite file, its ``sendInvoice`` tool offered to the model as it is, and a
client connects as alice, sends the prompt and prints the conversation as its watch shows
it: the model's text and reasoning as they stream in, each tool call with the input the
model wrote, the tool's progress and result, and the run's status. A real model decides for
itself: it may answer without calling the tool, call it twice, or ask a question back; the
demo shows what it does. When the run waits on pending actions (``sendInvoice`` waits for a
person's approval), the person at the terminal answers each one, asked field by field
against its resume schema as ``pai-actors actions submit`` asks, and the run goes on until
it ends.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import trio

from .._client.client import open_client
from .._client.conversation import ClientThread, ThreadResynced
from .._core.json import JsonValue
from .._core.model import Model
from .._core.parts import ReasoningPart, TextPart, ToolPart
from .._core.state import RunStatus
from .._core.updates import (
    MessageAppended,
    MessageDelta,
    MessageReplaced,
    RunStatusChanged,
    ThreadUpdateOrDelta,
    ToolDataUpdated,
    ToolPartUpdated,
)
from .._runtime.create import counter_ids
from .._server.server import open_server
from .._store.sqlite import SqliteStore
from ..demo_app import build
from .actions import Ask, Say, ask_payload, schema_summary
from .console import Console
from .protocol_demo import bar

PROMPT = "Please invoice ACME for 120."
ENDED: tuple[RunStatus, ...] = ("completed", "failed", "cancelled")
_NAMES = {"user": "alice", "assistant": "assistant", "system": "system"}
_LABELS = {"text": "assistant", "reasoning": "assistant (thinking)"}


class Transcript:
    """Prints a thread's conversation from its watch's updates: the model's text and
    reasoning as they stream in (through ``write``, when given; else each once the message
    is stored), each tool call when its state changes, the tool's progress (through
    ``progress``), each run status."""

    def __init__(self, say: Say, progress: Say, write: Say | None = None) -> None:
        self._say_line = say
        self._progress_line = progress
        self._write = write
        self._streamed: set[tuple[str, str]] = set()  # (message id, part type) written
        self._open: tuple[str, str] | None = None  # the streamed part whose line is open
        self._said: set[tuple[str, int]] = set()  # (message id, part index) already said
        self._calls: dict[str, tuple[str, str | None]] = {}  # call id: (state, waiting at)
        self._runs: dict[str, RunStatus] = {}

    def show(self, update: ThreadUpdateOrDelta | ThreadResynced) -> None:
        if isinstance(update, ThreadResynced):
            self.say("   (resynced from a snapshot)")
        elif isinstance(update, MessageDelta):
            self._delta(update)
        elif isinstance(update, MessageAppended | MessageReplaced):
            message = update.message
            for index, part in enumerate(message.parts):
                if isinstance(part, ToolPart):
                    self._call(part)
                elif isinstance(part, TextPart | ReasoningPart):
                    self._text(message.id, message.role, index, part)
        elif isinstance(update, ToolPartUpdated):
            self._call(update.part)
        elif isinstance(update, ToolDataUpdated) and update.channel == "progress":
            value = update.item.value
            percent = value.get("percent") if isinstance(value, dict) else None
            if isinstance(value, dict) and isinstance(percent, int):
                self._open = None
                self._progress_line(f"   {value.get('step')!s:<9} {bar(percent)}")
        elif isinstance(update, RunStatusChanged):
            run = update.run
            if self._runs.get(run.run_id) != run.status:
                self._runs[run.run_id] = run.status
                error = "" if run.error is None else f": {run.error}"
                self.say(f"   [run {run.status}{error}]")

    @property
    def streams(self) -> bool:
        """Whether it writes the text as it streams in (its watch asks for the deltas)."""
        return self._write is not None

    def say(self, line: str) -> None:
        """Say ``line`` on a line of its own (it ends a line the streamed text left open)."""
        self._open = None
        self._say_line(line)

    def _delta(self, update: MessageDelta) -> None:
        if self._write is None or update.part == "tool-input":
            return  # the text is said once the message is stored; a call, once it is
        key = (update.message_id, update.part)
        if self._open != key:
            if self._open is not None:
                self._write("\n")
            self._write(f"   {_LABELS[update.part]}: ")
            self._open = key
            self._streamed.add(key)
        self._write(update.delta)

    def _text(self, message_id: str, role: str, index: int, part: TextPart | ReasoningPart) -> None:
        if (message_id, index) in self._said:
            return
        self._said.add((message_id, index))
        if (message_id, part.type) in self._streamed:
            return  # already on the screen, as it streamed in
        label = _LABELS["reasoning"] if isinstance(part, ReasoningPart) else _NAMES[role]
        self.say(f"   {label}: {part.text}")

    def _call(self, part: ToolPart) -> None:
        waiting = part.pending_suspension.name if part.pending_suspension is not None else None
        before = self._calls.get(part.tool_call_id)
        if before == (part.state, waiting):
            return
        self._calls[part.tool_call_id] = (part.state, waiting)
        name = part.tool_name
        if waiting is not None:
            self.say(f"   {name} waits at {waiting!r}")
        elif part.state == "input-available" and before is not None and before[1] is not None:
            self.say(f"   {name} resumes")
        elif part.state == "input-available":
            self.say(f"   assistant calls {name} {_json(part.input)}")
        elif part.state == "approval-requested":
            self.say(f"   assistant calls {name} {_json(part.input)}; it needs an approval")
        elif part.state == "output-available":
            self.say(f"   {name} returned {_json(part.output)}")
        elif part.state == "output-error":
            self.say(f"   {name} failed: {part.error_text}")
        elif part.state == "output-denied":
            self.say(f"   {name} was denied")


async def run_model_demo(
    model: Model,
    prompt: str = PROMPT,
    *,
    ask: Ask = input,
    say: Say = print,
    progress: Say | None = None,
    write: Say | None = None,
) -> RunStatus:
    """Serve the billing agent on ``model``, send ``prompt`` as alice and print the
    conversation through ``say``, line by line (progress through ``progress``, ``say`` by
    default); the model's text and reasoning go to ``write`` as they stream in, fragment by
    fragment (without ``write``, each is said once its message is stored). Each pending
    action is answered through ``ask``, called in a worker thread so that the server keeps
    serving while the person types. Return the run's final status."""
    transcript = Transcript(say, say if progress is None else progress, write)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "demo.db"
        return await _converse(path, model, prompt, transcript, ask)


async def _converse(
    path: Path, model: Model, prompt: str, transcript: Transcript, ask: Ask
) -> RunStatus:
    say = transcript.say
    with SqliteStore(path) as store:
        app = build(store, new_id=counter_ids(), model=model)
        async with (
            app.runtime as rt,
            open_server(rt, authenticate=app.authenticate) as server,
            open_client(f"ws://127.0.0.1:{server.port}/", token="alice-token") as client,
        ):
            say(f"The billing agent on {model!r},")
            say(f"served from {path.name} (SQLite); alice connects, asks, and watches the thread:")
            say("")
            thread = await client.create_thread()
            async with thread.watch(deltas=transcript.streams) as updates:
                run_id = await thread.send(prompt)
                while True:
                    update = await updates.receive()
                    transcript.show(update)
                    if not isinstance(update, RunStatusChanged) or update.run.run_id != run_id:
                        continue
                    if update.run.status in ENDED:
                        return update.run.status
                    if update.run.status == "waiting":
                        await _answer(thread, ask, say)


async def _answer(thread: ClientThread, ask: Ask, say: Say) -> None:
    """Ask the person for each pending action's answer and submit it, until accepted."""
    for action in thread.pending_actions():
        say("")
        say(f"   the pending action {action.name!r} waits for your answer:")
        say(f"   input:  {_json(action.input)}")
        say(f"   answer: {schema_summary(action.resume_schema)}")
        while True:
            answer = await trio.to_thread.run_sync(
                ask_payload,
                action.resume_schema,
                lambda prompt: ask(f"   {prompt}"),
                say,
                abandon_on_cancel=True,
            )
            result = await action.submit(answer)
            say(f"   the answer is {result.status}")
            if result.status == "accepted":
                break
            say(f"   {result.error}".replace("\n", "\n   "))
        say("")


def _json(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False)


def main(model: Model, prompt: str | None = None) -> RunStatus:
    """Run the demo on the terminal (``prompt``: :data:`PROMPT` by default); return the
    run's final status."""
    console = Console()
    status: RunStatus = trio.run(
        lambda: run_model_demo(
            model,
            PROMPT if prompt is None else prompt,
            say=console.say,
            progress=console.progress,
            write=console.write,
        )
    )
    return status
