"""One turn of a thread, followed through the protocol's frames (sans-IO).

:class:`TurnFeed` keeps a :class:`~pai_actors._protocol.replica.ThreadReplica` of the thread
(from a watch's snapshot frame, then its update frames) and the text and reasoning a model
step is streaming (its ``delta`` frames), and turns each frame into UI message stream chunks
through a :class:`~pai_actors._http.ui_stream.TurnWriter`. The turn is the assistant
messages after the last user (or system) message (or from the message a client continues);
its run is the one a request started, else the thread's latest. The stream is over
(:attr:`TurnFeed.done`) when that run is no longer running: it completed, failed or was
cancelled, or it waits on actions (other than those the request just answered).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core.json import JsonValue
from .._core.parts import message_steps
from .._protocol.replica import ThreadReplica
from .ui_stream import (
    Chunk,
    Key,
    StepKey,
    TurnWriter,
    sub_actions_by_call,
    tool_input_key,
    transient_chunk,
    turn_parts,
    turn_steps,
)

_OVER = ("completed", "failed", "cancelled")


class TurnFeed:
    """A turn's chunks from a watch's frames; see the module docstring. Not shared between
    tasks.

    The snapshot a feed hands a new watcher can be a little behind the store (the feed's
    task forwards the runtime's updates in order), so a stream says what it waits for:
    ``run_id``, the run a request just started (the turn starts when it shows up), and
    ``answered``, the actions a request just resolved (a ``waiting`` status that still
    shows only those is older than the answers).
    """

    def __init__(
        self,
        snapshot: Mapping[str, Any],
        shown: Sequence[tuple[Key, dict[str, JsonValue]]] = (),
        *,
        run_id: str | None = None,
        message_id: str | None = None,
        answered: frozenset[str] = frozenset(),
    ) -> None:
        self.replica = ThreadReplica.from_snapshot(dict(snapshot))
        self.thread_id = self.replica.thread_id
        self.run_id = run_id
        self._message_id = message_id
        self._answered = answered
        self._before: set[str] | None = None  # the ids of the messages before the turn
        self.streaming: dict[StepKey, dict[str, str]] = {}
        # Calls whose input was streaming before this feed began: their earlier input
        # fragments were live only, so the rest would not make the input; they get it whole.
        self._joined_mid_input = {
            part["toolCallId"]
            for message in self.replica.messages
            for part in message["parts"]
            if part.get("state") == "input-streaming"
        }
        self.writer = TurnWriter(self.thread_id, shown)
        # The sub-agent runs' pending actions, by the calling call's id, and the status the
        # turn's run had when its tree last settled (``None``: not since it last ran).
        self.sub_actions: dict[str, list[Mapping[str, Any]]] = {}
        self._settled: str | None = None
        self._locate()

    def _locate(self) -> None:
        """Find the turn once its run is known: the messages after the one the client
        continues, else after the last user (or system) message."""
        if self._before is not None:
            return
        runs = self.replica.runs
        if self.run_id is None:
            self.run_id = runs[-1]["runId"] if runs else None
        elif all(run["runId"] != self.run_id for run in runs):
            return
        ids = [message["id"] for message in self.replica.messages]
        if self._message_id in ids:
            anchor = ids.index(self._message_id)
        else:
            anchor = 0
            for index, message in enumerate(self.replica.messages):
                if message["role"] != "assistant":
                    anchor = index + 1
        self._before = set(ids[:anchor])

    @property
    def run(self) -> dict[str, Any] | None:
        """The turn's run, as the protocol shows it."""
        for run in self.replica.runs:
            if run["runId"] == self.run_id:
                return dict(run)
        return None

    @property
    def running(self) -> bool:
        """Whether the turn's run is still going (see the class docstring)."""
        self._locate()
        if self._before is None:
            return True  # the run the request started has not shown up yet
        run = self.run
        if run is None:
            return False
        status = run["status"]
        if status == "running":
            self._answered = frozenset()
            return True
        if status == "waiting" and self._awaits_agents():
            # Its sub-agents go on: over once the tree settled waiting (see ``settle``).
            return self._settled != "waiting"
        if status != "waiting" or not self._answered:
            return False
        pending = {action["ref"]["actionId"] for action in self.replica.pending.values()}
        return pending <= self._answered

    @property
    def needs_settling(self) -> bool:
        """Whether the turn's run waits on sub-agent runs whose tree has not settled since:
        the stream's owner then waits for the tree (``wait_idle``) and calls :meth:`settle`
        with its pending actions."""
        self._locate()
        run = self.run
        return (
            self._before is not None
            and run is not None
            and run["status"] == "waiting"
            and self._settled is None
            and self._awaits_agents()
        )

    def settle(self, status: str, actions: Sequence[Mapping[str, Any]]) -> list[Chunk]:
        """The tree of the turn's run settled: its run's ``status`` then, and the pending
        actions of the thread and of its sub-agents (the protocol's wire); the chunks."""
        self._settled = status
        self.sub_actions = sub_actions_by_call(self.thread_id, actions)
        return self.chunks()

    def _awaits_agents(self) -> bool:
        """Whether a call of the turn waits on the sub-agent runs it started."""
        return any(
            part.get("subThreads") and part.get("state") == "input-available"
            for message in self._messages()
            for part in message["parts"]
        )

    def _messages(self) -> list[Mapping[str, Any]]:
        before = self._before or set()
        return [
            message
            for message in self.replica.messages
            if message["id"] not in before and message["role"] == "assistant"
        ]

    @property
    def done(self) -> bool:
        return self.writer.finished

    def chunks(self) -> list[Chunk]:
        """The chunks that bring the client to the turn as it is now; the finishing ones
        once the run stopped."""
        running = self.running
        if self._before is None:
            return []
        messages = self._messages()
        live = {key: parts for key, parts in self.streaming.items() if parts}
        first = messages[0]["id"] if messages else next((k[0] for k in live), None)
        steps = turn_steps(messages)
        parts = turn_parts(steps, self.replica.pending, live, self.sub_actions)
        chunks = self.writer.update(first, parts)
        if not running:
            chunks.extend(self.writer.finish(self.run))
        return chunks

    def apply(self, frame: Mapping[str, Any]) -> list[Chunk]:
        """Take one frame of the watch (``update`` or ``delta``); the chunks it makes."""
        kind = frame.get("type")
        if kind == "delta":
            update = frame["update"]
            key = (update["messageId"], update.get("step", 0))
            fragments = self.streaming.setdefault(key, {})
            part = update["part"]
            if part == "tool-input" and update["toolCallId"] in self._joined_mid_input:
                return []
            if part == "tool-input":  # a call's raw input text, by call
                part = tool_input_key(update["toolCallId"])
            fragments[part] = fragments.get(part, "") + update["delta"]
            return self.chunks()
        if kind != "update":
            return []
        update = frame["update"]
        self.replica.apply(dict(frame))
        if update["type"] == "tool-data":
            return [transient_chunk(update), *self.chunks()]
        if update["type"] in ("message-appended", "message-replaced"):
            message = update["message"]  # its steps with text are stored: no longer live
            for n, parts in enumerate(message_steps(message["parts"])):
                if any(part["type"] in ("text", "reasoning") for part in parts):
                    self.streaming.pop((message["id"], n), None)
        elif update["type"] == "run-status" and update["run"]["status"] != "running":
            self.streaming.clear()
        elif update["type"] == "run-status":
            self._settled = None  # it runs again: its tree settles anew
        return self.chunks()
