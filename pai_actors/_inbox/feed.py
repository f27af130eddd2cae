"""The inbox's live feed: the pending actions of one scope, each time they change.

The runtime publishes updates per thread (``rt.watch(thread_id)``), and has no watch of a
whole scope; a scope's threads come and go. So a reader of a scope (one event stream of the
inbox page) follows it in two ways:

- **at once**, when the inbox itself resolved one of the scope's actions: the app *pokes*
  the scope (:class:`ScopePokes`), which wakes every reader of that scope;
- **within** :data:`GATHER` **seconds** when the runtime committed a change to a tool call
  (``rt.calls_written``: a new action, one resolved over the WebSocket protocol or the CLI,
  a deadline that passed): each reader then asks the store which actions of the scope are
  open (``Store.list_scope_pending_actions``, one query that reads no thread), and reads
  the views again (``rt.scope_pending_actions``) only when that set changed. A reader
  gathers the commits of ``GATHER`` seconds into one look, so a busy runtime costs an open
  page at most one query per ``GATHER``;
- **within ``interval`` seconds** for a change no commit of this runtime made (another
  process writing the same store).

An action's identity is its thread and ``action_id`` (a new episode of a suspension has a
new one); its name, input, schema and deadline never change, so a reader that saw the same
identities has nothing new to show.
"""

from __future__ import annotations

import trio

from .._core.errors import RuntimeClosed
from .._core.json import JsonValue
from .._runtime.runtime import AgentRuntime
from .._server.feeds import view_wire

GATHER = 0.05
"""How long a reader waits after the first commit that wrote a call before it looks: the
commits meanwhile are seen in the same look."""

ActionKey = tuple[str, str]
"""An action's identity in a scope: ``(thread_id, action_id)``."""


class ScopePokes:
    """Wakes the readers of a scope: :meth:`poke` counts a change of the scope and wakes
    every :meth:`wait` of it; :meth:`close` (the runtime closed) wakes them all for good. A
    reader passes the :meth:`count` it read before it last looked at the scope, so a poke
    made while it was not waiting is not lost. Only trio tasks of one run use it."""

    def __init__(self) -> None:
        self._events: dict[str, trio.Event] = {}
        self._counts: dict[str, int] = {}
        self.closed = False

    def count(self, scope_key: str) -> int:
        """How many times ``scope_key`` was poked."""
        return self._counts.get(scope_key, 0)

    def poke(self, scope_key: str) -> None:
        self._counts[scope_key] = self.count(scope_key) + 1
        event = self._events.pop(scope_key, None)
        if event is not None:
            event.set()

    def close(self) -> None:
        self.closed = True
        for event in self._events.values():
            event.set()
        self._events.clear()

    async def wait(self, scope_key: str, seen: int) -> None:
        """Return once ``scope_key`` was poked more than ``seen`` times (at once if it
        was already), or once closed."""
        while not self.closed and self.count(scope_key) == seen:
            await self._events.setdefault(scope_key, trio.Event()).wait()


class ScopeActions:
    """The pending actions of ``scope_key`` as they change, for one reader.

    :meth:`next` returns the scope's actions (the protocol's wire form, in the order of
    ``rt.scope_pending_actions``) the first time at once, and after that the next time the
    set of actions differs from the one it returned last. Cancelling :meth:`next` leaves
    the reader as it was (the next call waits for the same change).
    """

    def __init__(
        self, rt: AgentRuntime, scope_key: str, pokes: ScopePokes, interval: float
    ) -> None:
        if interval <= 0:
            raise ValueError(f"the poll interval must be positive, got {interval!r}")
        self._rt = rt
        self._scope_key = scope_key
        self._pokes = pokes
        self._interval = interval
        self._shown: frozenset[ActionKey] | None = None
        self._seen = 0  # the scope's pokes before the last look at it
        self._written = 0  # the runtime's commits that wrote a call, before that look

    async def next(self) -> list[JsonValue]:
        """The scope's actions, once they differ from those returned last;
        :class:`RuntimeClosed` once the runtime closed."""
        while True:
            if self._shown is not None:
                with trio.move_on_after(self._interval):
                    await self._change()
            if self._pokes.closed:
                raise RuntimeClosed("the runtime closed; the inbox shows no more changes")
            seen = self._pokes.count(self._scope_key)  # a poke from now on: look again
            self._written = self._rt.calls_written.count
            if self._shown is not None and await self._open_keys() == self._shown:
                self._seen = seen
                continue
            views = await self._rt.scope_pending_actions(self._scope_key)
            self._shown = frozenset((v.ref.thread_id, v.ref.action_id) for v in views)
            self._seen = seen
            return [view_wire(view) for view in views]

    async def _change(self) -> None:
        """Return once the scope was poked, or (:data:`GATHER` seconds after) the runtime
        committed a write of a call, since the last look."""
        async with trio.open_nursery() as nursery:

            async def poked() -> None:
                await self._pokes.wait(self._scope_key, self._seen)
                nursery.cancel_scope.cancel()

            async def written() -> None:
                await self._rt.calls_written.wait(self._written)
                await trio.sleep(GATHER)
                nursery.cancel_scope.cancel()

            nursery.start_soon(poked)
            nursery.start_soon(written)

    async def _open_keys(self) -> frozenset[ActionKey]:
        actions = await self._rt.store.list_scope_pending_actions(self._scope_key)
        return frozenset((a.ref.thread_id, a.ref.action_id) for a in actions)
