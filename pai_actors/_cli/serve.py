"""``pai-actors serve module:factory``: host an application's runtime over the protocol.

The store is a :class:`~pai_actors.SqliteStore` on ``--db`` (a file, created if missing),
or a :class:`~pai_actors.PostgresStore` when ``--db`` is a ``postgresql://`` URL. Beside
the WebSocket protocol, the AI SDK's UI message stream protocol is served over HTTP
(``pai_actors._http``; ``--http-port``, ``--no-http``). The command prints the URLs it
serves, then runs until SIGINT (Ctrl-C) or SIGTERM, and shuts down gracefully: connections
are closed (1001), open HTTP streams end (a client resumes them), running calls are
cancelled and recorded, and suspended calls stay in the database for the next ``serve``.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from .._core.errors import PaiError
from .._http.server import HttpServer, open_http_server
from .._inbox import inbox_app
from .._runtime.runtime import AgentRuntime
from .._server.application import ApplicationError, build_application, load_factory
from .._server.server import Authenticate, open_server
from .._store.postgres import PostgresStore
from .._store.sqlite import SqliteStore


async def serve(
    spec: str,
    *,
    host: str,
    port: int,
    http_port: int | None = None,
    db: str,
    durability: str,
    say: Callable[[str], None],
    node_id: str | None = None,
    lease: float = 10.0,
) -> None:
    """Load ``spec``, open its runtime on ``db`` and serve it until a signal arrives (over
    HTTP too on ``http_port``, unless it is ``None``). With ``node_id`` (PostgreSQL only),
    it is one node of several on the database: it keeps its leases and takes over the runs
    of nodes that stopped (see :func:`keep_node`)."""
    factory = load_factory(spec)
    with open_store(db, durability, node_id, lease) as store:
        app = await build_application(factory, store, spec)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with (
                app.runtime as rt,
                open_server(rt, authenticate=app.authenticate, host=host, port=port) as server,
                _maybe_http(rt, app.authenticate, host, http_port) as http,
                trio.open_nursery() as node,
            ):
                if isinstance(store, PostgresStore) and store.node_id is not None:
                    await node.start(keep_node, rt, store)
                shown = store.name if isinstance(store, PostgresStore) else db  # no password
                say(f"serving {spec} on {server.url} (database {shown}); Ctrl-C stops")
                if http is not None:
                    say(f"the AI SDK's useChat endpoint: {http.url}/api/chat")
                    say(f"the inbox of pending actions: {http.url}/inbox/")
                sys.stdout.flush()
                async for signum in signals:
                    say(f"{signal.Signals(signum).name}: shutting down")
                    break
                node.cancel_scope.cancel()
    say("stopped; suspended calls stay in the database")


_log = logging.getLogger("pai_actors.serve")

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_store(
    db: str, durability: str, node_id: str | None = None, lease: float = 10.0
) -> SqliteStore | PostgresStore:
    """The store ``--db`` names: a PostgreSQL database by URL, else a SQLite file
    (``durability`` is SQLite's; PostgreSQL's is the server's ``synchronous_commit``)."""
    if db.startswith(POSTGRES_SCHEMES):
        return PostgresStore(db, node_id=node_id, lease=lease)
    if node_id is not None:
        raise ApplicationError(
            "--node-id is for several processes on one PostgreSQL database; a SQLite file "
            "has one process: pass --db postgresql://... or leave --node-id out"
        )
    return SqliteStore(db, durability=durability)  # type: ignore[arg-type]  # checked there


async def keep_node(
    rt: AgentRuntime,
    store: PostgresStore,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A node's duties beside serving: keep its leases (``store.keep_leases``), and every
    half lease look for the runs of nodes that stopped (their leases expired while a run
    was running) and load them, which recovers them as a restart does; any number of nodes
    may look at once, the first to write a thread takes it."""
    async with trio.open_nursery() as nursery:
        await nursery.start(store.keep_leases)
        task_status.started()
        while True:
            try:
                orphaned = await store.orphaned_threads()
            except PaiError:  # the database failed this round: look again at the next
                _log.warning("looking for the runs of stopped nodes failed", exc_info=True)
                orphaned = []
            for thread_id in orphaned:
                try:
                    await rt.get_state(thread_id)
                except PaiError:  # another node took it first, or it cannot load here
                    _log.info("taking over thread %r failed", thread_id, exc_info=True)
            await trio.sleep(store.lease / 2)


@asynccontextmanager
async def _maybe_http(
    rt: AgentRuntime, authenticate: Authenticate, host: str, port: int | None
) -> AsyncIterator[HttpServer | None]:
    if port is None:
        yield None
        return
    inbox = inbox_app(rt, authenticate)  # the browser inbox of pending actions, at /inbox/
    async with open_http_server(
        rt, authenticate, host=host, port=port, mounts={"/inbox": inbox}
    ) as http:
        yield http
