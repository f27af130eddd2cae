"""``pai-actors serve module:factory``: host an application's runtime over the protocol.

The store is a :class:`~pai_actors.SqliteStore` on ``--db`` (created if missing). The
command prints the URL it serves, then runs until SIGINT (Ctrl-C) or SIGTERM, and shuts
down gracefully: connections are closed (1001), running calls are cancelled and recorded,
and suspended calls stay in the database for the next ``serve``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

import trio

from .._server.application import build_application, load_factory
from .._server.server import open_server
from .._store.sqlite import SqliteStore


async def serve(
    spec: str,
    *,
    host: str,
    port: int,
    db: str,
    durability: str,
    say: Callable[[str], None],
) -> None:
    """Load ``spec``, open its runtime on ``db`` and serve it until a signal arrives."""
    factory = load_factory(spec)
    with SqliteStore(db, durability=durability) as store:  # type: ignore[arg-type]  # checked there
        app = await build_application(factory, store, spec)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with (
                app.runtime as rt,
                open_server(rt, authenticate=app.authenticate, host=host, port=port) as server,
            ):
                say(f"serving {spec} on {server.url} (database {db}); Ctrl-C stops")
                sys.stdout.flush()
                async for signum in signals:
                    say(f"{signal.Signals(signum).name}: shutting down")
                    break
    say("stopped; suspended calls stay in the database")
