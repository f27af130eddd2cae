"""Watchers of threads that other nodes run, on a store several nodes share
(``PostgresStore(url, node_id=...)``): what a watcher here is shown of another node's work.

Two kinds of updates come from elsewhere, through the store's notifications
(``store.follow_other_nodes``), in the order the other nodes made them:

- **Changes** another node committed. A notice names the thread and the number of its last
  row in the store's update log then (``_store.postgres_updates``); the thread's watchers
  here are shown the logged rows up to it, one commit at a time, in order, this node's own
  rows left out (they were shown when committed). Rows they cannot be shown in order (gone
  from the log, or a store that keeps none) are shown as the difference between what they
  were shown and the thread read again (``WatchHub.catch_up``).
- **Live updates**, never stored: a model's text fragments and transient tool data. The
  node running a thread sends them (``store.send_live``) only while another node says it has
  watchers of that thread (``store.announce_watching``, said when a thread starts being
  followed and every third of a lease while it is), and before each of its commits of the
  thread it waits until those it made earlier were sent, so that they arrive before the
  commit's notice. A watcher here that connects during a model step gets the fragments
  from then on, not the step's text so far (which only the running node has).

Each thread's notices and live updates are queued here as they arrive and shown by one task
at a time, in arrival order, so a live update is never shown before a change committed
before it, nor after one committed after it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .._core.errors import PaiError
from .._core.state import ThreadState
from .._core.updates import ThreadUpdateOrDelta
from .watch import WatchHub

_log = logging.getLogger("pai_actors")

_EVERYTHING = -1
"""A notice that does not say which logged rows it stands for: show them all."""
_PURGE_AT = 1_024
"""Threads other nodes said they watch, past which those whose notice ran out are dropped."""


class Elsewhere:
    """What the watchers of this runtime are shown of other nodes' work (see the module's
    text). ``store`` is a store shared with other nodes; ``read_state`` reads a thread's
    state from it; ``nursery`` runs the tasks that show queued updates."""

    def __init__(
        self,
        store: Any,
        hub: WatchHub,
        read_state: Callable[[str], Awaitable[ThreadState]],
        nursery: trio.Nursery,
    ) -> None:
        self._store = store
        self._hub = hub
        self._read_state = read_state
        self._nursery = nursery
        self.logs = hasattr(store, "logged_since")  # it logs every change of a thread
        self.live = hasattr(store, "send_live")  # it sends what is never stored
        # thread -> what arrived for it and is not shown yet: notices (the last logged
        # row each stands for) and live updates, in arrival order
        self._queued: dict[str, list[int | ThreadUpdateOrDelta]] = {}
        self._locks: dict[str, trio.Lock] = {}
        # Live updates to send: the threads other nodes watch (until when), what waits to
        # be sent, and how many were queued and sent (``flush`` waits for the difference).
        self._watched: dict[str, float] = {}
        self._purge_at = _PURGE_AT
        self._outbox: list[ThreadUpdateOrDelta] = []
        self._queued_out = self._sent_out = 0
        self._outbox_filled = trio.Event()
        self._sent = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send the live updates other nodes' watchers get, and say which threads this
        node's watchers follow, until cancelled (nothing to do for a store without them)."""
        if not self.live:
            task_status.started()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_live)
            task_status.started()
            lease = self._store.lease
            while True:
                await trio.sleep(lease / 3)
                await self._announce(self._hub.followed_threads())

    # -- from the other nodes -----------------------------------------------------------------

    def changed(self, thread_id: str, logged: int | None = None) -> None:
        """Another node committed a change of ``thread_id``, logged up to row ``logged``
        (``None``: not said)."""
        self._queue(thread_id, _EVERYTHING if logged is None else logged)

    def received(self, update: ThreadUpdateOrDelta) -> None:
        """Another node sent its watchers ``update``, never stored."""
        self._queue(update.thread_id, update)

    def watching(self, thread_id: str) -> None:
        """Another node has watchers of ``thread_id``: send them its live updates for a
        lease (it says so again while they watch)."""
        now = trio.current_time()
        if len(self._watched) >= self._purge_at:  # forget the notices that ran out
            self._watched = {t: until for t, until in self._watched.items() if until >= now}
            self._purge_at = max(_PURGE_AT, 2 * len(self._watched))
        self._watched[thread_id] = now + self._store.lease

    def _queue(self, thread_id: str, what: int | ThreadUpdateOrDelta) -> None:
        if not self._hub.followed(thread_id):
            return
        queued = self._queued.setdefault(thread_id, [])
        queued.append(what)
        if len(queued) == 1:  # (else a task to show them is on its way)
            self._nursery.start_soon(self.catch_up, thread_id)

    async def catch_up(self, thread_id: str, *, everything: bool = False) -> None:
        """Show the watchers of ``thread_id`` what arrived for it, in order; with
        ``everything``, then every change logged since (before this runtime publishes a
        commit of its own: what other nodes committed before it is shown first)."""
        # One task at a time per thread, so that what its watchers are shown is in order.
        lock = self._locks.setdefault(thread_id, trio.Lock())
        async with lock:
            queued = self._queued.pop(thread_id, [])
            try:
                for index, what in enumerate(queued):
                    if isinstance(what, int):
                        if index + 1 < len(queued) and isinstance(queued[index + 1], int):
                            continue  # the next notice stands for these rows too
                        await self._show_changes(thread_id, None if what < 0 else what)
                    elif self._hub.followed(thread_id):
                        self._hub.publish((what,))
                if everything:
                    await self._show_changes(thread_id, None)
            except PaiError:  # the store failed: the next change reads it again
                _log.exception("showing %r's watchers another node's change failed", thread_id)
        if not lock.locked() and not lock.statistics().tasks_waiting:
            self._locks.pop(thread_id, None)

    async def _show_changes(self, thread_id: str, upto: int | None) -> None:
        if self._hub.followed(thread_id) and not await self._show_logged(thread_id, upto):
            self._hub.catch_up(*await self.read_followed(thread_id))

    async def _show_logged(self, thread_id: str, upto: int | None) -> bool:
        """Show a followed thread's watchers the changes logged after the last they were
        shown, up to row ``upto`` (``None``: all); ``False`` if what they were last shown
        is not known, or rows are missing."""
        seq = self._hub.logged(thread_id)
        if seq is None:
            return False
        if upto is not None and upto <= seq:
            return True  # shown already (a read for an earlier notice went further)
        logged = await self._store.logged_since(thread_id, seq)
        if logged and logged[0].prev != seq:
            return False
        own = self._store.node_id
        for change in logged:
            if upto is not None and change.seq > upto:
                break  # shown with its own notice, after what arrived before it
            self._hub.publish_logged(
                thread_id, change.seq, change.updates, own=change.node_id == own
            )
        return True

    async def read_followed(self, thread_id: str) -> tuple[ThreadState, int | None]:
        """The thread's state; and, where the store logs every change, the number of the
        last logged change it holds (``None``: unknown, as when one was committed while the
        state was read)."""
        if not self.logs:
            return await self._read_state(thread_id), None
        before = await self._store.last_logged(thread_id)
        state = await self._read_state(thread_id)
        after = await self._store.last_logged(thread_id)
        return state, before if before == after else None

    async def followed(self, thread_id: str) -> None:
        """This runtime's watchers began to follow ``thread_id``: say so to the others."""
        if self.live:
            await self._announce([thread_id])

    async def _announce(self, thread_ids: list[str]) -> None:
        if thread_ids:
            try:
                await self._store.announce_watching(thread_ids)
            except PaiError:
                _log.warning("telling the other nodes which threads are watched failed")

    # -- to the other nodes -------------------------------------------------------------------

    def watched(self, thread_id: str) -> bool:
        """Whether another node has watchers of ``thread_id`` (live updates go to them)."""
        return self._watched.get(thread_id, -math.inf) >= trio.current_time()

    def offer(self, update: ThreadUpdateOrDelta) -> None:
        """Send ``update`` (never stored) to the other nodes' watchers of its thread, if any."""
        if self.live and self.watched(update.thread_id):
            self._outbox.append(update)
            self._queued_out += 1
            self._outbox_filled.set()

    def flush(self) -> Awaitable[None] | None:
        """Before a commit: what waits until the live updates made so far are sent (they
        are then delivered before the commit's notice), or ``None`` when none waits."""
        if self._sent_out == self._queued_out:
            return None
        return self._wait_sent(self._queued_out)

    async def _wait_sent(self, count: int) -> None:
        while self._sent_out < count:
            await self._sent.wait()

    async def _send_live(self) -> None:
        while True:
            await self._outbox_filled.wait()
            self._outbox_filled = trio.Event()
            batch, self._outbox = self._outbox, []
            try:
                await self._store.send_live(batch)
            except PaiError:  # (dropped: the watchers elsewhere see the thread as stored)
                _log.warning("sending live updates to the other nodes failed", exc_info=True)
            finally:
                self._sent_out += len(batch)
                self._sent.set()
                self._sent = trio.Event()
