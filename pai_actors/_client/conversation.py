"""A thread seen through the protocol client: :class:`ClientThread` and its watches.

A client thread keeps a :class:`ThreadReplica` of the thread (``get_state()``): read once
when opened, then kept current from the server's snapshot and numbered update frames while
it is watched (the connection is the :class:`~pai_actors.client.Client`'s; see
``_client.client``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, Protocol, cast, overload

import trio
from pydantic import TypeAdapter
from pydantic.alias_generators import to_camel
from typing_extensions import TypeVar

from .._core.client_tool import ClientTool
from .._core.deadlines import on_deadline_to_json
from .._core.errors import WatchOverflow
from .._core.json import JsonValue
from .._core.model import ModelSettings
from .._core.parts import FilePart, Message, ToolPart
from .._core.pending import PendingActionView
from .._core.state import RunState, ThreadState
from .._core.updates import DeltaHold, MessageDelta, ThreadUpdate, ThreadUpdateOrDelta
from .._protocol.replica import ThreadReplica
from .errors import ClientError, ConnectionLost, ServerError

_UPDATE: TypeAdapter[ThreadUpdateOrDelta] = TypeAdapter(ThreadUpdateOrDelta)


@dataclass(frozen=True)
class ThreadResynced:
    """Yielded by a client watch when the thread's state was replaced by a snapshot (the
    server could not replay what the client missed); ``state`` is the new state.

    ``type`` is ``"resynced"``, so ``update.type == ...`` tells it from the
    :data:`~pai_actors.ThreadUpdate` classes a watch yields beside it (and narrows the type).
    """

    type: ClassVar[Literal["resynced"]] = "resynced"
    thread_id: str
    state: ThreadState


class Connection(Protocol):
    """What a :class:`ClientThread` needs of its client (a :class:`~pai_actors.client.Client`,
    whose module imports this one): requests, and whether it is connected or has given up."""

    @property
    def _ws(self) -> object: ...

    @property
    def _failure(self) -> Exception | None: ...

    async def request(self, op: str, **fields: Any) -> dict[str, Any]: ...

    async def _request(
        self,
        op: str,
        fields: Mapping[str, Any],
        on_result: Callable[[dict[str, Any]], None] | None,
    ) -> dict[str, Any]: ...

    async def cancel_run(self, run_id: str, reason: str | None = None) -> RunState: ...

    def action_view(self, action: Mapping[str, Any]) -> PendingActionView: ...


_Event = ThreadUpdateOrDelta | ThreadResynced  # what a thread's watch channels carry


def _as_is(delta: MessageDelta) -> _Event:
    return delta


W = TypeVar("W", default=ThreadUpdate | ThreadResynced)
"""What a :class:`ClientWatch` yields (with ``deltas=True``, :class:`MessageDelta` too)."""


def _client_tool_wire(tool: ClientTool) -> JsonValue:
    """A client tool as ``send`` offers it (with its deadline, in seconds, if it has one)."""
    wire: dict[str, JsonValue] = {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
    }
    if tool.deadline is not None:
        wire["deadline"] = tool.deadline.total_seconds()
        wire["onDeadline"] = on_deadline_to_json(tool.on_deadline)
    return wire


class ClientThread:
    """A thread seen through a client: ``get_state()`` (kept current while watched),
    ``refresh()``, ``watch()``, ``send()`` and its pending actions."""

    def __init__(self, client: Connection, thread_id: str) -> None:
        self._client = client
        self.thread_id = thread_id
        self._replica: ThreadReplica | None = None
        self._state: ThreadState | None = None
        self._watchers: set[trio.MemorySendChannel[_Event]] = set()
        # the watches that asked for MessageDelta updates, each with how it takes them, and
        # whether the server was asked for them
        self._delta_watchers: dict[trio.MemorySendChannel[_Event], DeltaHold[_Event]] = {}
        self._deltas_asked = False
        # why the client ended a watch: it fell behind, the server refused it, the client gave up
        self._endings: dict[trio.MemorySendChannel[_Event], Exception] = {}
        self._first_snapshot = False  # the next snapshot starts a watch (no ThreadResynced)

    @property
    def watching(self) -> bool:
        return bool(self._watchers)

    def get_state(self) -> ThreadState:
        """The thread as this client knows it (synchronous): as last read, plus every update
        received since (transient tool data included, while watched)."""
        if self._state is None:
            assert self._replica is not None
            self._state = ThreadState.model_validate(self._replica.state_wire(live=True))
        return self._state

    async def refresh(self) -> ThreadState:
        """Read the thread's state from the server again, and return it."""
        if self.watching:
            await self.rewatch(fresh=True)
        else:
            result = await self._client.request("getState", threadId=self.thread_id)
            self._replica = ThreadReplica.from_snapshot(
                {
                    "threadId": self.thread_id,
                    "cursor": {"epoch": "", "seq": 0},
                    "state": result["state"],
                    "pendingActions": result["pendingActions"],
                }
            )
            self._state = None
        return self.get_state()

    async def send(
        self,
        text: str,
        *,
        client_data: JsonValue = None,
        client_tools: Sequence[ClientTool] = (),
        files: Sequence[FilePart] = (),
        model_settings: ModelSettings | None = None,
    ) -> str:
        """Send the user's ``text`` (and ``files``, :class:`FilePart` values; and the run's
        ``model_settings``, over the agent's) and return the run's id."""
        tools: list[JsonValue] = [_client_tool_wire(t) for t in client_tools]
        fields: dict[str, JsonValue] = {}
        if files:
            fields["files"] = [file.to_wire() for file in files]
        if model_settings is not None:
            fields["modelSettings"] = {
                to_camel(name): value for name, value in model_settings.to_json().items()
            }
        result = await self._client.request(
            "send",
            threadId=self.thread_id,
            text=text,
            clientData=client_data,
            clientTools=tools,
            **fields,
        )
        return str(result["runId"])

    async def cancel_run(self, run_id: str, reason: str | None = None) -> RunState:
        """Cancel a run of this thread (see :meth:`Client.cancel_run`)."""
        return await self._client.cancel_run(run_id, reason)

    def pending_actions(self) -> list[PendingActionView]:
        """The pending actions the thread's parts show, in part order (from the local state)."""
        assert self._replica is not None
        return [self._client.action_view(action) for action in self._replica.pending_actions()]

    def get_pending_action(
        self, message: Message | Mapping[str, Any], part: ToolPart | Mapping[str, Any]
    ) -> PendingActionView | None:
        """The pending action ``part`` of ``message`` (from ``get_state()``) shows, or
        ``None`` (synchronous)."""
        message_id = message.id if isinstance(message, Message) else message["id"]
        call_id = part.tool_call_id if isinstance(part, ToolPart) else part.get("toolCallId")
        assert self._replica is not None
        action = self._replica.pending.get(str(call_id))
        if action is None or action["ref"]["messageId"] != message_id:
            return None
        return self._client.action_view(action)

    @overload
    def watch(
        self, *, capacity: int = ..., deltas: Literal[False] = ...
    ) -> AbstractAsyncContextManager[ClientWatch[ThreadUpdate | ThreadResynced]]: ...

    @overload
    def watch(
        self, *, capacity: int = ..., deltas: bool
    ) -> AbstractAsyncContextManager[ClientWatch[ThreadUpdateOrDelta | ThreadResynced]]: ...

    def watch(
        self, *, capacity: int = 256, deltas: bool = False
    ) -> AbstractAsyncContextManager[ClientWatch[Any]]:
        """Watch the thread: ``async with thread.watch() as updates: async for u in updates``.
        Each update is applied to ``get_state()`` before it is yielded. ``deltas=True`` also
        yields the model's text and reasoning as they stream (:class:`MessageDelta`; live
        only, not in ``get_state()``; fragments sent while the connection was down are not
        replayed, the stored message arrives complete)."""
        return self._watch(capacity, deltas)

    @asynccontextmanager
    async def _watch(self, capacity: int, deltas: bool) -> AsyncIterator[ClientWatch[Any]]:
        send, receive = trio.open_memory_channel[ThreadUpdateOrDelta | ThreadResynced](capacity)
        first = not self._watchers
        self._watchers.add(send)
        if deltas:
            self._delta_watchers[send] = DeltaHold[_Event](max(1, capacity // 2), _as_is)
        try:
            if first:
                self._first_snapshot = True
                await self.rewatch(fresh=True)
            elif deltas and not self._deltas_asked:  # from the cursor: nothing lost
                await self.rewatch()
            async with receive:
                yield ClientWatch(
                    self.thread_id,
                    receive,
                    lambda: self._ended(send),
                    lambda: self._read_one(send),
                )
        finally:
            self._watchers.discard(send)
            self._delta_watchers.pop(send, None)
            self._endings.pop(send, None)
            send.close()
            if not self._watchers and self._client._ws is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    try:
                        await self._client.request("unwatch", threadId=self.thread_id)
                    except ClientError:
                        pass

    async def rewatch(self, *, fresh: bool = False) -> None:
        """(Re)subscribe: from the cursor (missed updates replayed), or ``fresh``."""
        cursor = (
            None
            if fresh or self._replica is None or not self._replica.cursor.epoch
            else self._replica.cursor
        )
        fields: dict[str, JsonValue] = {"threadId": self.thread_id}
        if cursor is not None:
            fields["cursor"] = cursor.to_wire()
        self._deltas_asked = bool(self._delta_watchers)
        if self._deltas_asked:
            fields["deltas"] = True
        try:
            await self._client._request("watch", fields, self._on_watch_result)
        except ConnectionLost:
            if self._client._failure is not None:
                raise  # there is no next connection: the client gave up
            # else the next connection watches again

    async def resubscribe(self) -> None:
        """:meth:`rewatch` from the client's own tasks (a reconnection, a gap, a watch the
        server ended): an error frame (the thread is gone from this scope, the server shuts
        down) ends this thread's watches with that :class:`ServerError`, not the client."""
        try:
            await self.rewatch()
        except ServerError as exc:
            self._end_watches(exc)

    def _on_watch_result(self, result: dict[str, Any]) -> None:
        for frame in result["frames"]:
            if frame["type"] == "snapshot":
                self.on_snapshot(frame)
            elif frame["type"] == "delta":
                self.on_delta(frame)
            else:
                self.on_update(frame)

    def on_snapshot(self, frame: dict[str, Any]) -> None:
        resynced = (
            not self._first_snapshot
            and self._replica is not None
            and self._replica.cursor.epoch != ""
        )
        self._first_snapshot = False
        self._replica = ThreadReplica.from_snapshot(frame)
        self._state = None
        if resynced:
            self._emit(ThreadResynced(self.thread_id, self.get_state()))

    def on_update(self, frame: dict[str, Any]) -> str:
        if self._replica is None:
            return "gap"
        applied = self._replica.apply(frame)
        if applied == "applied":
            self._state = None
            self._emit(_UPDATE.validate_python(frame["update"]))
        return applied

    def on_delta(self, frame: dict[str, Any]) -> None:
        """A ``delta`` frame: to the watches that asked for deltas (nothing is applied)."""
        self._emit(_UPDATE.validate_python(frame["update"]), deltas_only=True)

    def _emit(
        self, event: ThreadUpdateOrDelta | ThreadResynced, *, deltas_only: bool = False
    ) -> None:
        for send in list(self._delta_watchers if deltas_only else self._watchers):
            deltas = self._delta_watchers.get(send)
            try:
                if isinstance(event, MessageDelta):
                    if deltas is not None:
                        deltas.offer(send, event)
                    continue
                if deltas is not None and not deltas.flush(send, limit=None):
                    raise trio.WouldBlock
                send.send_nowait(event)
            except trio.WouldBlock:
                self._watchers.discard(send)
                self._delta_watchers.pop(send, None)
                self._endings[send] = WatchOverflow(
                    f"this watch of thread {self.thread_id!r} fell more than its capacity of "
                    "updates behind and was dropped; its get_state() stays current: watch again"
                )
                send.close()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._watchers.discard(send)  # that watch's block has ended
                self._delta_watchers.pop(send, None)

    def _read_one(self, send: trio.MemorySendChannel[_Event]) -> None:
        """A watch's reader took an event: room for the deltas held back for it."""
        deltas = self._delta_watchers.get(send)
        if deltas is not None and deltas.held:
            try:
                deltas.flush(send, limit=deltas.room)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                deltas.held.clear()

    def _ended(self, send: trio.MemorySendChannel[_Event]) -> Exception:
        """What the watch fed by ``send`` raises once it has ended."""
        return self._endings.get(send) or StopAsyncIteration()

    def _end_watches(self, error: Exception) -> None:
        """End every watch of this thread: each raises ``error`` after its buffered updates."""
        for send in list(self._watchers):
            self._watchers.discard(send)
            self._delta_watchers.pop(send, None)
            self._endings[send] = error
            send.close()


class ClientWatch(Generic[W]):
    """What ``thread.watch()`` gives: an async iterator of :data:`ThreadUpdate` and
    :class:`ThreadResynced`. One that falls ``capacity`` behind ends with
    :class:`WatchOverflow` (the thread's ``get_state()`` stays current regardless); one the
    server refuses when the client watches again after reconnecting, with that
    :class:`ServerError`; and when the client gives up (a refused token, or a dropped
    connection with ``reconnect=False``), every watch ends with that error
    (:class:`AuthenticationFailed`, :class:`ConnectionLost`)."""

    def __init__(
        self,
        thread_id: str,
        receive: trio.MemoryReceiveChannel[_Event],
        ended: Callable[[], Exception],
        received: Callable[[], object] = lambda: None,
    ) -> None:
        self.thread_id = thread_id
        self._receive = receive
        self._ended = ended
        self._received = received

    def __aiter__(self) -> AsyncIterator[W]:
        return self

    async def __anext__(self) -> W:
        try:
            event = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise self._ended() from None
        self._received()  # room for the deltas held back
        return cast(W, event)

    async def receive(self) -> W:
        return await self.__anext__()
