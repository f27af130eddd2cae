"""A thread's state rebuilt from the protocol's frames (sans-IO): what a watcher knows.

Both ends use it. The server keeps one per watched thread (the snapshot a new watcher gets
is the replica's state at the stream's current ``seq``), and each client thread keeps one
(``thread.get_state()``). Applying the update frames after a snapshot, in ``seq`` order,
gives exactly the thread's state; a frame from another epoch, or one that skips a ``seq``,
is a **gap**, and the replica must be replaced by a new snapshot (the client watches again
from its cursor and gets the missing updates, or a snapshot).

Transient tool data (``tool-data`` updates) is kept apart from the stored state: it shows
in :meth:`ThreadReplica.state_wire` with ``live=True`` (the client's view) and never in a
snapshot the server sends. The latest write of an item wins: a transient item shows over
the stored item of the same id until a durable write of that item arrives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from .._core.json import JsonValue
from .frames import Cursor, update_frame

Applied = Literal["applied", "duplicate", "gap"]


@dataclass(eq=False)
class ThreadReplica:
    """The state of one thread as a watcher has it: wire dicts, updated in place."""

    thread_id: str
    cursor: Cursor
    messages: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    # tool call id -> the pending action its part shows (the protocol's action wire)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (tool call id, channel) -> item id -> item: transient tool data, live only
    live: dict[tuple[str, str], dict[str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def from_snapshot(cls, frame: dict[str, Any]) -> ThreadReplica:
        """A replica from a ``snapshot`` frame."""
        state = frame["state"]
        replica = cls(
            thread_id=frame["threadId"],
            cursor=Cursor.model_validate(frame["cursor"]),
            messages=[dict(message) for message in state["messages"]],
            runs=list(state["runs"]),
        )
        for action in frame["pendingActions"]:
            replica.pending[action["ref"]["toolCallId"]] = action
        return replica

    def state_wire(self, *, live: bool = False) -> dict[str, JsonValue]:
        """The thread as ``ThreadState.to_wire()`` shows it; ``live=True`` adds the transient
        tool data received since the snapshot to its parts' ``data``."""
        messages: list[JsonValue] = list(self.messages)
        if live and self.live:
            messages = [self._with_live(message) for message in self.messages]
        return {
            "version": 1,
            "threadId": self.thread_id,
            "messages": messages,
            "runs": list(self.runs),
        }

    def pending_actions(self) -> list[dict[str, Any]]:
        """The pending actions, in the order their parts appear in the thread."""
        ordered = [
            self.pending[part["toolCallId"]]
            for message in self.messages
            for part in message["parts"]
            if part.get("toolCallId") in self.pending
        ]
        return ordered

    def apply(self, frame: dict[str, Any]) -> Applied:
        """Apply an ``update`` frame: ``"applied"``; ``"duplicate"`` if its ``seq`` is at or
        before the cursor (nothing changes); ``"gap"`` if it comes from another epoch or
        skips a ``seq`` (nothing changes; a new snapshot is needed)."""
        cursor = frame["cursor"]
        if cursor["epoch"] != self.cursor.epoch:
            return "gap"
        seq = cursor["seq"]
        if seq <= self.cursor.seq:
            return "duplicate"
        if seq != self.cursor.seq + 1:
            return "gap"
        self._apply_update(
            frame["update"], frame.get("pendingAction"), frame.get("pendingActions") or {}
        )
        self.cursor = Cursor(epoch=self.cursor.epoch, seq=seq)
        return "applied"

    def _apply_update(
        self,
        update: dict[str, Any],
        action: dict[str, Any] | None,
        actions: dict[str, dict[str, Any] | None],
    ) -> None:
        kind = update["type"]
        if kind == "message-appended":
            self._supersede((), update["message"]["parts"])
            self.messages.append(dict(update["message"]))
            self._put_actions((), update["message"]["parts"], actions)
        elif kind == "message-replaced":
            message = update["message"]
            for index, existing in enumerate(self.messages):
                if existing["id"] == message["id"]:
                    self._supersede(existing["parts"], message["parts"])
                    self.messages[index] = dict(message)
                    self._put_actions(existing["parts"], message["parts"], actions)
                    break
        elif kind == "tool-part-updated":
            old = self._put_part(update["messageId"], update["part"])
            self._supersede(() if old is None else (old,), (update["part"],))
            call_id = update["part"]["toolCallId"]
            if action is None:
                self.pending.pop(call_id, None)
            else:
                self.pending[call_id] = action
        elif kind == "run-status":
            run = update["run"]
            for index, existing in enumerate(self.runs):
                if existing["runId"] == run["runId"]:
                    self.runs[index] = run
                    break
            else:
                self.runs.append(run)
        elif kind == "tool-data":
            items = self.live.setdefault((update["toolCallId"], update["channel"]), {})
            items[update["item"]["id"]] = update["item"]

    def _put_actions(
        self,
        before: Iterable[dict[str, Any]],
        after: Iterable[dict[str, Any]],
        actions: dict[str, dict[str, Any] | None],
    ) -> None:
        """The pending actions of a message's tool parts, now ``after`` (replacing
        ``before``): each part's from ``actions`` (none if absent), and none for a part
        the message no longer holds."""
        kept = set()
        for part in after:
            call_id = part.get("toolCallId")
            if call_id is None:
                continue
            kept.add(call_id)
            action = actions.get(call_id)
            if action is None:
                self.pending.pop(call_id, None)
            else:
                self.pending[call_id] = action
        for part in before:
            call_id = part.get("toolCallId")
            if call_id is not None and call_id not in kept:
                self.pending.pop(call_id, None)

    def _put_part(self, message_id: str, part: dict[str, Any]) -> dict[str, Any] | None:
        """Put ``part`` into its message; return the part it replaced, if any."""
        for index, message in enumerate(self.messages):
            if message["id"] != message_id:
                continue
            parts = list(message["parts"])
            old = None
            for at, existing in enumerate(parts):
                if existing.get("toolCallId") == part["toolCallId"]:
                    old, parts[at] = existing, part
                    break
            else:
                parts.append(part)
            self.messages[index] = {**message, "parts": parts}
            return old
        return None

    def _supersede(self, before: Iterable[dict[str, Any]], after: Iterable[dict[str, Any]]) -> None:
        """Drop the live items that a durable write in ``after`` (parts replacing the parts
        ``before``) superseded: a stored item that is new or changed was written after them."""
        if not self.live:
            return
        old = {part.get("toolCallId"): part for part in before}
        for part in after:
            call_id = part.get("toolCallId")
            if call_id is None:
                continue
            stored = (old.get(call_id) or {}).get("data") or {}
            for channel, items in (part.get("data") or {}).items():
                live = self.live.get((call_id, channel))
                if not live:
                    continue
                previous = {item["id"]: item for item in stored.get(channel, ())}
                for item in items:
                    if previous.get(item["id"]) != item:
                        live.pop(item["id"], None)
                if not live:
                    del self.live[(call_id, channel)]

    def _with_live(self, message: dict[str, Any]) -> dict[str, Any]:
        parts: list[Any] = []
        changed = False
        for part in message["parts"]:
            call_id = part.get("toolCallId")
            channels = {key[1]: items for key, items in self.live.items() if key[0] == call_id}
            if call_id is None or not channels:
                parts.append(part)
                continue
            data = {channel: list(stored) for channel, stored in (part.get("data") or {}).items()}
            for channel, items in channels.items():
                merged = {item["id"]: item for item in data.get(channel, [])}
                merged.update(items)
                data[channel] = list(merged.values())
            parts.append({**part, "data": data})
            changed = True
        return {**message, "parts": parts} if changed else message


@dataclass(eq=False)
class UpdateLog:
    """A thread's numbered stream of update frames, with the last ``capacity`` kept so a
    watcher that reconnects from a cursor gets exactly what it missed (sans-IO)."""

    thread_id: str
    epoch: str
    capacity: int = 1024
    seq: int = 0
    _frames: deque[dict[str, JsonValue]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"UpdateLog(capacity=...) must be at least 1, got {self.capacity!r}")

    @property
    def cursor(self) -> Cursor:
        return Cursor(epoch=self.epoch, seq=self.seq)

    def append(
        self,
        update: dict[str, JsonValue],
        pending_action: dict[str, JsonValue] | None,
        pending_actions: dict[str, JsonValue] | None = None,
    ) -> dict[str, JsonValue]:
        """Number ``update`` (the next ``seq``), keep it, and return its frame (see
        :func:`update_frame` for the pending actions it carries)."""
        self.seq += 1
        frame = update_frame(self.thread_id, self.cursor, update, pending_action, pending_actions)
        self._frames.append(frame)
        if len(self._frames) > self.capacity:
            self._frames.popleft()
        return frame

    def since(self, cursor: Cursor) -> list[dict[str, JsonValue]] | None:
        """The frames after ``cursor``, or ``None`` if they cannot be replayed exactly (another
        epoch, a ``seq`` this stream never reached, or frames no longer kept): a snapshot
        is needed then."""
        if cursor.epoch != self.epoch or cursor.seq > self.seq:
            return None
        missed = self.seq - cursor.seq
        if missed > len(self._frames):
            return None
        return list(self._frames)[len(self._frames) - missed :] if missed else []
