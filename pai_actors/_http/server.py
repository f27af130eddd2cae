"""``open_http_server``: the UI message stream endpoints (``app``) served by hypercorn under
trio, with the feeds their streams read."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.types import ASGIApp

from .._runtime.runtime import AgentRuntime
from .._server.feeds import FeedHub
from .._server.server import Authenticate
from .app import create_app

_log = logging.getLogger("pai_actors.http")
_GRACE = 2.0


@dataclass(eq=False)
class HttpServer:
    """A running HTTP server: ``url`` (``http://host:port``) and ``port``."""

    host: str
    port: int

    @property
    def url(self) -> str:
        """``http://host:port`` of the listening socket (no trailing slash)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@asynccontextmanager
async def open_http_server(
    runtime: AgentRuntime,
    authenticate: Authenticate,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    mounts: Mapping[str, ASGIApp] | None = None,
    linger: float = 15.0,
) -> AsyncIterator[HttpServer]:
    """Serve the UI message stream endpoints of ``runtime`` (open: inside its ``async
    with``) on ``host:port`` (``0``: a free port; read ``server.port``) until the block ends.
    Leaving the block ends the open streams (a client resumes them elsewhere), waits at most
    a short grace for the requests in flight, then cancels what is left."""
    failed: Exception | None = None
    async with trio.open_nursery() as nursery:
        hub = FeedHub(runtime, nursery, instance=secrets.token_hex(4), linger=linger)
        app, streams = create_app(runtime, authenticate, hub, mounts=mounts)
        config = Config()
        config.bind = [f"{host}:{port}"]
        config.graceful_timeout = _GRACE
        config.accesslog = None
        config.errorlog = _log
        stop = trio.Event()
        binds: list[str] = await nursery.start(_serve, app, config, stop.wait)
        bound = int(binds[0].rsplit(":", 1)[1])
        try:
            yield HttpServer(host, bound)
        except Exception as exc:  # raised below, as itself rather than in the nursery's group
            failed = exc
        finally:
            for stream in list(streams):  # a client resumes the stream it was reading
                stream.cancel()
            stop.set()
            nursery.cancel_scope.cancel()
    if failed is not None:
        raise failed


async def _serve(
    app: ASGIApp,
    config: Config,
    shutdown: Any,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    await serve(app, config, shutdown_trigger=shutdown, task_status=task_status)  # type: ignore[arg-type]
