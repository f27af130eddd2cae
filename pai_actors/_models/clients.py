"""One SDK client per adapter and trio run, closed when the run ends.

An SDK client owns an HTTP connection pool whose sockets belong to the trio run that opened
them, while an adapter is usually made once, at import (``define_agent(model=...)``), and may
serve several runs (tests, :mod:`pai_actors.threaded`). So an adapter keeps its client in a
:class:`trio.lowlevel.RunVar`: made on the run's first step, reused by every step of that run
(connections are kept alive between steps), and closed by a system task when the run's main
task returns: trio cancels system tasks then, and the close runs shielded and bounded.

Concurrency contract: :func:`run_client` is synchronous, so two tasks of one run asking at
once get the same client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

_log = logging.getLogger("pai_actors.models")

CLOSE_SECONDS = 5.0

C = TypeVar("C")

_Closer = Callable[[Any], Awaitable[None]]
_clients: trio.lowlevel.RunVar[dict[object, tuple[Any, _Closer]]] = trio.lowlevel.RunVar(
    "pai_actors.models.clients"
)


def run_client(owner: object, make: Callable[[], C], close: Callable[[C], Awaitable[None]]) -> C:
    """``owner``'s client in the current trio run: ``make()`` on the first call of the run,
    the same object afterwards; ``close(client)`` runs when the run ends."""
    try:
        clients = _clients.get()
    except LookupError:
        clients = {}
        _clients.set(clients)
        trio.lowlevel.spawn_system_task(_close_at_exit, clients, name="pai_actors.models.clients")
    found = clients.get(owner)
    if found is None:
        client = make()
        clients[owner] = (client, close)
        return client
    existing: C = found[0]
    return existing


async def _close_at_exit(clients: dict[object, tuple[Any, _Closer]]) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_SECONDS):
            for client, close in clients.values():
                try:
                    await close(client)
                except Exception:  # a client that fails to close must not crash the run's end
                    _log.exception("closing a model client failed")
            clients.clear()
