"""Watching a thread: the update objects and the per-watcher channels behind ``watch``.

``async with rt.watch(thread_id) as updates: async for update in updates: ...`` An async
context manager rather than an async generator: trio gives async generators no timely
cleanup, and the block says exactly when a watcher is connected (from entering it to leaving
it), which is what decides who receives transient tool data.

Where updates come from: every store transaction the runtime commits is published after it
committed (nothing of an aborted or conflicting transaction is seen), as one update per
write that a client sees: a message appended or replaced, a tool part put, a run's status.
Transient tool data (``ctx.data.write(..., transient=True)``) is never stored; it is
published directly to the watchers connected at that moment.

Slow watchers: each watcher has a bounded trio memory channel (``capacity`` updates).
Publishing never waits. A model's text fragments (``MessageDelta``) fill at most half of a
watcher's channel; the rest are held for that watcher, joined per message part, and
delivered in order as it reads (a model may stream faster than a watcher reads: the
fragments it gets are then longer), so the other half stays free for the updates that are
stored. When one of those does not fit, that watcher is dropped, and its
next receive (after the updates already buffered) raises :class:`WatchOverflow`. Dropping
the oldest update instead would leave the client with a silently wrong view; after the error
it reads ``get_state`` again and opens a new watch. Closing the runtime ends every watch: its
iteration stops (``StopAsyncIteration``) after the buffered updates.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Generic, cast

import trio
from typing_extensions import TypeVar

from .._core.errors import WatchOverflow
from .._core.parts import Message, ToolPart
from .._core.state import RunState, ThreadState
from .._core.updates import (
    DeltaHold,
    MessageAppended,
    MessageDelta,
    MessageReplaced,
    RunStatusChanged,
    ThreadUpdate,
    ThreadUpdateOrDelta,
    ToolPartUpdated,
)
from .._store.base import PutCall, Store, Transaction
from .._store.updates import threads_shown, updates_of

DEFAULT_WATCH_CAPACITY = 256

U = TypeVar("U", default=ThreadUpdate)
"""What a :class:`ThreadWatch` yields: :data:`ThreadUpdate`, or with ``deltas=True``
:data:`ThreadUpdateOrDelta`."""


def _as_is(delta: MessageDelta) -> ThreadUpdateOrDelta:
    return delta


@dataclass(eq=False)
class Watcher:
    thread_id: str
    send: trio.MemorySendChannel[ThreadUpdateOrDelta]
    # with ``deltas=True``: how it takes MessageDelta updates (else it gets none)
    deltas: DeltaHold[ThreadUpdateOrDelta] | None = None
    overflowed: bool = False
    dirty: bool = False  # a commit for its thread began since it was added
    # the number of the last logged change its snapshot holds (``WatchHub.publish_logged``)
    logged: int = 0

    def offer(self, update: ThreadUpdateOrDelta) -> bool:
        """Give the watcher ``update``; ``False`` if it does not fit (an update the watch
        must not miss: the watcher is to be dropped). Deltas never drop it (:class:`DeltaHold`)."""
        deltas = self.deltas
        if isinstance(update, MessageDelta):
            if deltas is not None:
                deltas.offer(self.send, update)
            return True
        if deltas is not None and not deltas.flush(self.send, limit=None):
            return False
        try:
            self.send.send_nowait(update)
        except trio.WouldBlock:
            return False
        return True

    def read_one(self) -> None:
        """The reader took an update: room for the deltas held back."""
        deltas = self.deltas
        if deltas is not None and deltas.held:
            try:
                deltas.flush(self.send, limit=deltas.room)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                deltas.held.clear()  # the watch ended meanwhile


class Pulse:
    """A count of events that tasks can wait on: :meth:`beat` counts one and wakes every
    :meth:`wait`. A waiter passes the :attr:`count` it read before it last looked, so a beat
    between its look and its wait is not lost. Only trio tasks of one run use it."""

    def __init__(self) -> None:
        self.count = 0
        self._event: trio.Event | None = None

    def beat(self) -> None:
        self.count += 1
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self, seen: int) -> None:
        """Return once :attr:`count` is past ``seen`` (at once if it already is)."""
        while self.count == seen:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()


@dataclass(eq=False)
class Baseline:
    """What the watchers of a thread have been shown of it: its messages by id (in order)
    and its runs by id, as the updates published to them left it; and, where the store logs
    every change (``_store.postgres_updates``), the number of the last logged change shown
    (``None``: not known, the next change is shown as a difference)."""

    messages: dict[str, Message]
    runs: dict[str, RunState]
    logged: int | None = None

    def apply(self, update: ThreadUpdateOrDelta) -> None:
        if isinstance(update, (MessageAppended, MessageReplaced)):
            self.messages[update.message.id] = update.message
        elif isinstance(update, ToolPartUpdated):
            message = self.messages.get(update.message_id)
            if message is not None:
                parts = [
                    update.part
                    if isinstance(p, ToolPart) and p.tool_call_id == update.part.tool_call_id
                    else p
                    for p in message.parts
                ]
                self.messages[message.id] = message.model_copy(update={"parts": tuple(parts)})
        elif isinstance(update, RunStatusChanged):
            self.runs[update.run.run_id] = update.run

    def updates_to(self, state: ThreadState) -> list[ThreadUpdate]:
        """The updates that bring the watchers from this baseline to ``state`` (read from
        the store after another process changed the thread): messages appended or
        replaced, then runs whose status changed."""
        thread_id = state.thread_id
        updates: list[ThreadUpdate] = []
        for message in state.messages:
            shown = self.messages.get(message.id)
            if shown is None:
                updates.append(MessageAppended(thread_id=thread_id, message=message))
            elif shown != message:
                updates.append(MessageReplaced(thread_id=thread_id, message=message))
        for run in state.runs:
            if self.runs.get(run.run_id) != run:
                updates.append(RunStatusChanged(thread_id=thread_id, run=run))
        return updates


@dataclass(eq=False)
class WatchHub:
    """The runtime's watchers, by thread. Publishing is synchronous and never blocks.

    It also knows which threads have a commit in flight (begun, not yet published), so that
    a watch can take a snapshot that is exactly the state before its first update.
    """

    _watchers: dict[str, set[Watcher]] = field(default_factory=dict)
    _delta_watchers: dict[str, int] = field(default_factory=dict)  # by thread, how many
    _in_flight: dict[str, int] = field(default_factory=dict)
    _quiet: dict[str, trio.Event] = field(default_factory=dict)
    # Beats once per committed transaction that wrote a tool call: a pending action may have
    # opened, changed or closed (what a live view of a scope's actions waits for).
    calls_written: Pulse = field(default_factory=Pulse)
    # by thread: what its watchers were shown, for the threads another process may change
    # (see ``follow``)
    _baselines: dict[str, Baseline] = field(default_factory=dict)
    # Where other processes log their changes: shows a followed thread's watchers those
    # committed before this runtime's own, which it publishes next (see
    # ``PublishingTransaction``).
    catch_up_first: Callable[[str], Awaitable[None]] | None = None
    # Where updates never stored are sent to other nodes: before a commit, what waits until
    # those made before it are sent, if any (they reach the other nodes before its notice).
    before_commit: Callable[[], Awaitable[None] | None] | None = None

    def follow(self, state: ThreadState, logged: int | None = None) -> None:
        """Keep what the watchers of ``state``'s thread are shown from ``state`` on (their
        snapshot, which holds the logged changes up to ``logged``), so that a change another
        process makes can be shown as updates (:meth:`catch_up`, :meth:`publish_logged`).
        Kept while the thread has watchers."""
        if state.thread_id not in self._baselines and state.thread_id in self._watchers:
            self._baselines[state.thread_id] = Baseline(
                {m.id: m for m in state.messages}, {r.run_id: r for r in state.runs}, logged
            )

    def catch_up(self, state: ThreadState, logged: int | None = None) -> None:
        """Show the watchers of a followed thread what changed from what they were shown
        to ``state`` (read from the store, holding the logged changes up to ``logged``)."""
        baseline = self._baselines.get(state.thread_id)
        if baseline is not None:
            self.publish(baseline.updates_to(state))
            baseline.logged = logged

    def logged(self, thread_id: str) -> int | None:
        """The number of the last logged change the watchers of a followed thread were
        shown (``None``: not known)."""
        baseline = self._baselines.get(thread_id)
        return None if baseline is None else baseline.logged

    def publish_logged(
        self, thread_id: str, seq: int, updates: Sequence[ThreadUpdate], *, own: bool
    ) -> None:
        """Show a followed thread's watchers its logged change ``seq`` (the one after the
        last they were shown): ``updates``, unless ``own`` (this runtime committed it, and
        published it then); a watcher whose snapshot holds it already is skipped."""
        baseline = self._baselines.get(thread_id)
        if baseline is None:
            return
        if not own:
            self.publish(updates, logged=seq)
        baseline.logged = seq

    def followed(self, thread_id: str) -> bool:
        return thread_id in self._baselines

    def followed_threads(self) -> list[str]:
        return list(self._baselines)

    def begin(self, thread_ids: Iterable[str]) -> None:
        """A commit showing writes of ``thread_ids`` begins (its updates are not published)."""
        for thread_id in thread_ids:
            self._in_flight[thread_id] = self._in_flight.get(thread_id, 0) + 1
            for watcher in self._watchers.get(thread_id, ()):
                watcher.dirty = True

    def end(self, thread_ids: Iterable[str]) -> None:
        """That commit was published (or failed)."""
        for thread_id in thread_ids:
            left = self._in_flight[thread_id] - 1
            if left:
                self._in_flight[thread_id] = left
            else:
                del self._in_flight[thread_id]
                quiet = self._quiet.pop(thread_id, None)
                if quiet is not None:
                    quiet.set()

    async def wait_quiet(self, thread_id: str) -> None:
        """Return once no commit showing writes of ``thread_id`` is in flight."""
        while thread_id in self._in_flight:
            quiet = self._quiet.get(thread_id)
            if quiet is None:
                quiet = self._quiet[thread_id] = trio.Event()
            await quiet.wait()

    def add(
        self, thread_id: str, capacity: int, *, deltas: bool = False
    ) -> tuple[Watcher, trio.MemoryReceiveChannel[ThreadUpdateOrDelta]]:
        send, receive = trio.open_memory_channel[ThreadUpdateOrDelta](capacity)
        hold = DeltaHold[ThreadUpdateOrDelta](max(1, capacity // 2), _as_is) if deltas else None
        watcher = Watcher(thread_id, send, hold)
        self._watchers.setdefault(thread_id, set()).add(watcher)
        if deltas:
            self._delta_watchers[thread_id] = self._delta_watchers.get(thread_id, 0) + 1
        return watcher, receive

    def remove(self, watcher: Watcher) -> None:
        thread_id = watcher.thread_id
        watchers = self._watchers.get(thread_id)
        if watchers is not None and watcher in watchers:
            watchers.discard(watcher)
            if not watchers:
                del self._watchers[thread_id]
            if watcher.deltas is not None:
                left = self._delta_watchers[thread_id] - 1
                if left:
                    self._delta_watchers[thread_id] = left
                else:
                    del self._delta_watchers[thread_id]
        watcher.send.close()
        if thread_id not in self._watchers:
            self._baselines.pop(thread_id, None)

    def watched_for_deltas(self, thread_id: str) -> bool:
        """Whether ``thread_id`` has a watcher that receives :class:`MessageDelta` updates."""
        return thread_id in self._delta_watchers

    def send_to(self, watcher: Watcher, updates: Sequence[ThreadUpdateOrDelta]) -> None:
        """Send ``updates`` to one watcher only (what it must see first), as :meth:`publish`
        does: a watcher they do not fit is dropped."""
        for update in updates:
            if not watcher.offer(update):
                watcher.overflowed = True
                self.remove(watcher)
                return

    @property
    def watching(self) -> bool:
        """Whether any thread has a watcher (else updates need not even be made)."""
        return bool(self._watchers)

    def publish(self, updates: Sequence[ThreadUpdateOrDelta], *, logged: int = 0) -> None:
        """Hand ``updates`` to their threads' watchers (with ``logged``: the updates of that
        logged change, which the watchers whose snapshot holds it do not get)."""
        for update in updates:
            delta = isinstance(update, MessageDelta)
            baseline = None if delta else self._baselines.get(update.thread_id)
            if baseline is not None:
                baseline.apply(update)
            for watcher in list(self._watchers.get(update.thread_id, ())):
                if (delta and watcher.deltas is None) or (logged and watcher.logged >= logged):
                    continue
                try:
                    fits = watcher.offer(update)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    self.remove(watcher)
                    continue
                if not fits:  # a slow watcher: drop it (see the module docstring)
                    watcher.overflowed = True
                    self.remove(watcher)

    def close(self) -> None:
        """End every watch (the runtime is closing)."""
        for watchers in list(self._watchers.values()):
            for watcher in list(watchers):
                self.remove(watcher)


class ThreadWatch(Generic[U]):
    """What ``async with rt.watch(thread_id) as updates`` gives: an async iterator of
    :data:`ThreadUpdate` (see the module docstring for overflow and closing)."""

    def __init__(
        self,
        watcher: Watcher,
        receive: trio.MemoryReceiveChannel[ThreadUpdateOrDelta],
        snapshot: ThreadState | None = None,
    ) -> None:
        self._watcher = watcher
        self._receive = receive
        self.snapshot = snapshot
        """With ``watch(..., snapshot=True)``: the thread's state just before the first
        update this watch yields (no update is in it twice, none is missing); else ``None``."""

    @property
    def thread_id(self) -> str:
        return self._watcher.thread_id

    def __aiter__(self) -> AsyncIterator[U]:
        return self

    async def __anext__(self) -> U:
        try:
            update = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise self._ended() from None
        self._watcher.read_one()
        return cast(U, update)

    async def receive(self) -> U:
        """The next update; :class:`StopAsyncIteration` once the watch ended."""
        return await self.__anext__()

    def receive_nowait(self) -> U:
        """The next update if one is buffered, else ``trio.WouldBlock``;
        :class:`StopAsyncIteration` once the watch ended (:class:`WatchOverflow` if dropped).

        The runtime hands an update to its watchers as soon as it is committed (a transient
        item: as soon as it is written), so after ``wait_idle`` returns every update up to
        that point is buffered.
        """
        try:
            update = self._receive.receive_nowait()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise self._ended() from None
        self._watcher.read_one()
        return cast(U, update)

    def _ended(self) -> Exception:
        if self._watcher.overflowed:
            return WatchOverflow(
                f"this watch of thread {self.thread_id!r} fell more than its capacity of "
                "updates behind and was dropped; read get_state() again and open a new watch"
            )
        return StopAsyncIteration()


class PublishingTransaction(Transaction):
    """A transaction whose writes are published to the watchers once it committed, and
    whose calls' deadlines (``CallRecord.expires_at``) are given to ``deadline`` then (the
    runtime's deadline timer)."""

    __slots__ = ("_deadline", "_hub")

    def __init__(
        self, store: Store, hub: WatchHub, deadline: Callable[[datetime], None] | None = None
    ) -> None:
        super().__init__(store)
        self._hub = hub
        self._deadline = deadline

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        writes = self._end()
        before = self._hub.before_commit
        if exc_type is None and before is not None and (sent := before()) is not None:
            await sent
        shown = threads_shown(writes) if exc_type is None else ()
        self._hub.begin(shown)
        try:
            # (the store's commit awaited here rather than through ``Transaction.__aexit__``:
            # one coroutine fewer, alive for the whole commit, with every commit)
            if exc_type is None and writes:
                await self._store.commit(writes)
            if exc_type is None:
                if self._hub.watching:
                    await self._catch_up_first(shown)
                    self._hub.publish(updates_of(writes))
                deadline = self._deadline
                calls = False
                for write in writes:
                    if isinstance(write, PutCall):
                        calls = True
                        at = write.stored.record.expires_at
                        if at is not None and deadline is not None:
                            deadline(at)
                if calls:
                    self._hub.calls_written.beat()
        finally:
            self._hub.end(shown)

    async def _catch_up_first(self, shown: Sequence[str]) -> None:
        """Where other processes log their changes of a thread this commit shows a change of
        (and that has watchers here): show those committed before it first, so that its
        watchers see every change in the order committed. Shielded: the commit is written
        and its updates must be published."""
        catch_up = self._hub.catch_up_first
        if catch_up is not None:
            followed = sorted(t for t in shown if self._hub.followed(t))
            if followed:
                with trio.CancelScope(shield=True):
                    for thread_id in followed:
                        await catch_up(thread_id)
