"""The server's thread feeds: one runtime watch per watched thread, numbered and fanned out.

A feed opens ``rt.watch(thread_id, snapshot=True)`` when the first connection watches the
thread, numbers each update (an :class:`UpdateLog` whose ``epoch`` is new for each feed),
keeps a :class:`ThreadReplica` of the thread, and hands every update frame to each
subscriber's bounded channel. A subscriber starts from a cursor: the frames after it when
the log still has them, else a snapshot (the replica's state at the current ``seq``), so a
watcher that reconnects misses nothing and sees nothing twice.

A subscriber that falls more than its capacity behind is dropped (``overflowed``) and its
connection tells the client, which watches again from its cursor. A feed with no subscriber
lingers for ``linger`` seconds, so that a client that reconnects soon gets the updates it
missed rather than a snapshot, then ends. A feed that itself fell behind the runtime, or
whose runtime closed, ends its subscribers (``ended``).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

import trio

from .._core.errors import WatchOverflow
from .._core.json import JsonValue
from .._core.parts import ToolPart, message_steps
from .._core.pending import PendingActionView
from .._core.state import ThreadState
from .._core.updates import (
    DeltaHold,
    MessageAppended,
    MessageDelta,
    MessageReplaced,
    RunStatusChanged,
    ThreadUpdate,
    ToolPartUpdated,
)
from .._protocol.frames import Cursor, action_wire, delta_frame, snapshot_frame
from .._protocol.replica import ThreadReplica, UpdateLog
from .._runtime.loading import pending_action_of_part
from .._runtime.runtime import AgentRuntime
from .._tools.agent import AgentDefinition

_RUNTIME_WATCH_CAPACITY = 4096
_log = logging.getLogger("pai_actors.server")


def view_wire(view: PendingActionView) -> dict[str, JsonValue]:
    """A pending action view as the protocol shows it."""
    return action_wire(
        view.name, view.input, view.ref, view.resume_schema, view.expires_at, view.origin_chain
    )


def state_actions(
    rt: AgentRuntime, state: ThreadState, feed: Feed | None = None
) -> list[JsonValue]:
    """The pending actions the parts of ``state`` show, in part order (with a ``feed``:
    from what it knows of the thread, see :func:`update_actions`)."""
    actions: list[JsonValue] = []
    for message in state.messages:
        for part in message.parts:
            if isinstance(part, ToolPart):
                action = _action(rt, message.id, part, feed)
                if action is not None:
                    actions.append(action)
    return actions


def update_actions(
    rt: AgentRuntime, update: ThreadUpdate, feed: Feed | None = None
) -> tuple[dict[str, JsonValue] | None, dict[str, JsonValue] | None]:
    """The pending actions an update frame carries (see ``update_frame``): for a tool part
    put, the action it shows; for a message appended or replaced, each tool part's. With a
    ``feed``, its thread's agent and message runs are used rather than the runtime's
    bounded indexes."""
    if isinstance(update, ToolPartUpdated):
        return _action(rt, update.message_id, update.part, feed), None
    if isinstance(update, MessageAppended | MessageReplaced):
        actions: dict[str, JsonValue] = {
            part.tool_call_id: _action(rt, update.message.id, part, feed)
            for part in update.message.parts
            if isinstance(part, ToolPart)
        }
        return None, actions
    return None, None


def _action(
    rt: AgentRuntime, message_id: str, part: ToolPart, feed: Feed | None
) -> dict[str, JsonValue] | None:
    if part.state == "input-streaming":  # no action yet (nor, perhaps, a stored call)
        return None
    where = agent = None
    if feed is not None:
        run_id = feed.runs.get(message_id)
        where = None if run_id is None else (feed.thread_id, run_id)
        agent = feed.agent
    view = pending_action_of_part(rt, message_id, part, where=where, agent=agent)
    return None if view is None else view_wire(view)


@dataclass(eq=False)
class Subscriber:
    """One connection's watch of a feed: frames arrive on ``receive``; when it ends,
    ``overflowed`` says it fell behind and ``reason`` why else it ended."""

    send: trio.MemorySendChannel[dict[str, JsonValue]]
    receive: trio.MemoryReceiveChannel[dict[str, JsonValue]]
    # with ``deltas``: how it takes the ``delta`` frames (else it gets none)
    deltas: DeltaHold[dict[str, JsonValue]] | None = None
    overflowed: bool = False

    def offer(self, frame: dict[str, JsonValue]) -> bool:
        """Queue an update frame; ``False`` if it does not fit (drop the watch)."""
        if self.deltas is not None and not self.deltas.flush(self.send, limit=None):
            return False
        try:
            self.send.send_nowait(frame)
        except trio.WouldBlock:
            return False
        return True

    def read_one(self) -> None:
        """A frame was forwarded: room for the delta frames held back."""
        if self.deltas is not None and self.deltas.held:
            self.deltas.flush(self.send, limit=self.deltas.room)

    reason: str | None = None


@dataclass(eq=False)
class Feed:
    thread_id: str
    ready: trio.Event = field(default_factory=trio.Event)
    failure: BaseException | None = None
    log: UpdateLog | None = None
    replica: ThreadReplica | None = None
    subscribers: set[Subscriber] = field(default_factory=set)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    idle_since: float | None = None
    agent: AgentDefinition | None = None  # the thread's agent
    runs: dict[str, str] = field(default_factory=dict)  # message id -> run id
    # The step a model is streaming: (message id, run id, step) -> part -> text so far
    streaming: dict[tuple[str, str, int], dict[str, str]] = field(default_factory=dict)


class FeedHub:
    """The server's feeds, by thread (see the module docstring)."""

    def __init__(
        self,
        runtime: AgentRuntime,
        nursery: trio.Nursery,
        *,
        instance: str,
        log_capacity: int = 1024,
        subscriber_capacity: int = 512,
        linger: float = 15.0,
    ) -> None:
        self._rt = runtime
        self._nursery = nursery
        self._instance = instance
        self._epochs = itertools.count(1)
        self._feeds: dict[str, Feed] = {}
        self._log_capacity = log_capacity
        self._subscriber_capacity = subscriber_capacity
        self._linger = linger

    @property
    def feeds(self) -> int:
        """How many feeds are open."""
        return len(self._feeds)

    async def subscribe(
        self, thread_id: str, cursor: Cursor | None, *, deltas: bool = False
    ) -> tuple[Subscriber, list[dict[str, JsonValue]]]:
        """Watch ``thread_id`` from ``cursor``: the subscriber and the frames it starts with
        (those after the cursor, or a snapshot; with ``deltas``, then the text and reasoning
        a model step has streamed so far, one ``delta`` frame each). Raises what the
        runtime's watch raises."""
        feed = self._feeds.get(thread_id)
        if feed is None:
            feed = Feed(thread_id)
            self._feeds[thread_id] = feed
            self._nursery.start_soon(self._run, feed)
        await feed.ready.wait()
        if feed.failure is not None:
            raise feed.failure
        assert feed.log is not None
        assert feed.replica is not None
        frames = None if cursor is None else feed.log.since(cursor)
        if frames is None:
            replica = feed.replica
            frames = [
                snapshot_frame(
                    thread_id,
                    feed.log.cursor,
                    replica.state_wire(),
                    list(replica.pending_actions()),
                )
            ]
        if deltas:
            frames = [*frames, *_so_far(feed)]
        send, receive = trio.open_memory_channel[dict[str, JsonValue]](self._subscriber_capacity)
        hold = DeltaHold(max(1, self._subscriber_capacity // 2), _frame_of) if deltas else None
        subscriber = Subscriber(send, receive, hold)
        feed.subscribers.add(subscriber)
        feed.idle_since = None
        return subscriber, frames

    def unsubscribe(self, thread_id: str, subscriber: Subscriber) -> None:
        feed = self._feeds.get(thread_id)
        subscriber.send.close()
        if feed is None or subscriber not in feed.subscribers:
            return
        feed.subscribers.discard(subscriber)
        if not feed.subscribers:
            feed.idle_since = since = trio.current_time()
            self._nursery.start_soon(self._expire, feed, since)

    async def _expire(self, feed: Feed, since: float) -> None:
        await trio.sleep(self._linger)
        if not feed.subscribers and feed.idle_since == since:
            feed.scope.cancel()

    async def _run(self, feed: Feed) -> None:
        reason = "closed"
        try:
            with feed.scope:
                async with self._rt.watch(
                    feed.thread_id, snapshot=True, capacity=_RUNTIME_WATCH_CAPACITY, deltas=True
                ) as updates:
                    assert updates.snapshot is not None
                    feed.agent = self._rt.agent_of(await self._rt.get_thread(feed.thread_id))
                    feed.runs.update(await self._rt.message_runs(feed.thread_id))
                    log = UpdateLog(
                        feed.thread_id,
                        f"{self._instance}.{next(self._epochs)}",
                        self._log_capacity,
                    )
                    feed.log = log
                    feed.replica = ThreadReplica.from_snapshot(
                        snapshot_frame(
                            feed.thread_id,
                            log.cursor,
                            updates.snapshot.to_wire(),
                            state_actions(self._rt, updates.snapshot, feed),
                        )
                    )
                    feed.ready.set()
                    try:
                        async for update in updates:
                            if isinstance(update, MessageDelta):
                                self._publish_delta(feed, update)
                                continue
                            await self._index(feed, update)
                            self._publish(feed, log, update)
                    except WatchOverflow:
                        reason = "overflow"
                    else:
                        reason = "shutting-down"
        except Exception as exc:
            if not feed.ready.is_set():
                feed.failure = exc
            else:  # never take the server down: end this feed's watchers, say why in the log
                _log.exception("the feed of thread %r failed", feed.thread_id)
                reason = "internal"
        finally:
            if self._feeds.get(feed.thread_id) is feed:
                del self._feeds[feed.thread_id]
            feed.ready.set()
            for subscriber in list(feed.subscribers):
                subscriber.reason = reason
                subscriber.send.close()
            feed.subscribers.clear()

    async def _index(self, feed: Feed, update: ThreadUpdate) -> None:
        """Learn what the feed needs to tell the pending actions ``update`` shows: the run of
        its message. The runtime's indexes are bounded (with more threads busy than they
        hold, an entry can be gone by the time its update is forwarded), so the feed keeps
        its own, from the runtime's index or else from the store (the thread's calls)."""
        if isinstance(update, ToolPartUpdated):
            message_id = update.message_id
        elif isinstance(update, MessageAppended | MessageReplaced) and any(
            isinstance(part, ToolPart) and part.state != "input-streaming"
            for part in update.message.parts
        ):
            message_id = update.message.id
        else:
            return
        if message_id in feed.runs:
            return
        where = self._rt.message_location(message_id)
        if where is not None:
            feed.runs[message_id] = where[1]
            return
        feed.runs.update(await self._rt.message_runs(feed.thread_id))

    def _publish_delta(self, feed: Feed, update: MessageDelta) -> None:
        """Keep the fragment (for subscribers that join mid-step) and send it to the
        subscribers that take deltas."""
        if update.part != "tool-input":  # (a joiner gets the input parsed so far, stored)
            key = (update.message_id, update.run_id, update.step)
            so_far = feed.streaming.setdefault(key, {})
            so_far[update.part] = so_far.get(update.part, "") + update.delta
        for subscriber in list(feed.subscribers):
            if subscriber.deltas is not None:
                try:
                    subscriber.deltas.offer(subscriber.send, update)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    feed.subscribers.discard(subscriber)

    def _publish(self, feed: Feed, log: UpdateLog, update: Any) -> None:
        if feed.streaming and isinstance(
            update, MessageAppended | MessageReplaced | RunStatusChanged
        ):
            _end_streaming(feed, update)
        action, actions = update_actions(self._rt, update, feed)
        frame = log.append(update.to_wire(), action, actions)
        assert feed.replica is not None
        feed.replica.apply(frame)
        self._send(feed, frame)

    def _send(self, feed: Feed, frame: dict[str, JsonValue]) -> None:
        for subscriber in list(feed.subscribers):
            try:
                fits = subscriber.offer(frame)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                feed.subscribers.discard(subscriber)
                continue
            if not fits:
                subscriber.overflowed = True
                feed.subscribers.discard(subscriber)
                subscriber.send.close()


def _frame_of(delta: MessageDelta) -> dict[str, JsonValue]:
    return delta_frame(delta.thread_id, delta.to_wire())


def _so_far(feed: Feed) -> list[dict[str, JsonValue]]:
    """The text and reasoning a model step of the feed's thread has streamed so far, as
    ``delta`` frames (reasoning first, as it streams first)."""
    frames: list[dict[str, JsonValue]] = []
    for (message_id, run_id, step), parts in feed.streaming.items():
        for part in ("reasoning", "text"):
            if parts.get(part):
                update = MessageDelta(
                    thread_id=feed.thread_id,
                    run_id=run_id,
                    message_id=message_id,
                    step=step,
                    part=part,
                    delta=parts[part],
                )
                frames.append(_frame_of(update))
    return frames


def _end_streaming(
    feed: Feed, update: MessageAppended | MessageReplaced | RunStatusChanged
) -> None:
    """Forget the streamed text of a step once it is stored (or its run stopped)."""
    if isinstance(update, RunStatusChanged):
        if update.run.status != "running":
            for key in [k for k in feed.streaming if k[1] == update.run.run_id]:
                del feed.streaming[key]
        return
    # (a step that streams a tool call's input stores its step-start early, without text)
    message = update.message
    if message.role != "assistant":
        return
    steps = message_steps(message.parts)
    for key in [k for k in feed.streaming if k[0] == message.id]:
        step = key[2]
        if len(steps) > step + 1 or (
            len(steps) == step + 1 and any(p.type in ("text", "reasoning") for p in steps[step])
        ):
            del feed.streaming[key]
