"""The LangGraph peer of the PostgreSQL figures (needs ``pip install .[bench]``).

The graph, its nodes and the checks of each result are :mod:`._peers_langgraph`'s, the
same as its concurrent side on SQLite (one node whose ``refund`` tool calls
``interrupt()``, resumed with ``Command(resume={"approved": True})``, ``ainvoke`` under
``asyncio.gather``); only the checkpointer differs: ``AsyncPostgresSaver`` opened as LangGraph
documents it, ``AsyncPostgresSaver.from_conn_string(conninfo)`` (one ``psycopg``
connection, autocommit, each checkpoint write a statement of its own under the saver's
lock), its ``setup()`` called once before the timed part, LangGraph's default
``durability="async"``. The database is a new one the harness created for this side of this
repetition (:func:`._pg.new_database`); nothing is set on the session, so the server's
settings apply (read back with ``SHOW`` and reported).

Every conversation is read back after the timed part, untimed, from a NEW connection
(``PostgresSaver.from_conn_string``, ``graph.get_state(config)`` for every thread). Like
:mod:`._peers_langgraph`, this module never imports ``pai_actors``.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from langgraph.checkpoint.postgres import PostgresSaver  # type: ignore[import-not-found,unused-ignore]
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver  # type: ignore[import-not-found,unused-ignore]

from . import _pg
from ._conversation import PAYLOAD
from ._peers_langgraph import _check_completed, _config, _graph, _one, _resume, _suspend

__all__ = ["w1", "w2"]


def _read_back(conninfo: str, n: int, *, waiting: bool) -> None:
    """Every conversation through a new connection: ``graph.get_state`` of every thread."""
    with PostgresSaver.from_conn_string(conninfo) as saver:
        graph = _graph(saver, is_async=False)
        for i in range(n):
            state = graph.get_state(_config(i))
            if waiting:
                pending = [x.value for task in state.tasks for x in task.interrupts]
                if state.next != ("agent",) or pending != [PAYLOAD]:
                    raise AssertionError(f"conversation {i} is not waiting: {state!r}")
            else:
                if state.next != ():
                    raise AssertionError(f"conversation {i} did not complete: {state!r}")
                _check_completed(state.values)


def w1(conninfo: str, n: int) -> dict[str, Any]:
    """Seconds for ``n`` conversations all in flight at once (``ainvoke`` under
    ``asyncio.gather``, ``AsyncPostgresSaver``), the CPU split of the timed part
    (:func:`._pg.cpu_times`) and the server's settings."""
    database = _pg.database_of(conninfo)

    async def main() -> dict[str, Any]:
        async with AsyncPostgresSaver.from_conn_string(conninfo) as saver:
            await saver.setup()
            graph = _graph(saver, is_async=True)
            cpu = _pg.cpu_times(database)
            start = time.perf_counter()
            await asyncio.gather(*(_one(graph, i) for i in range(n)))
            seconds = time.perf_counter() - start
            return {"seconds": seconds, "cpu": _pg.cpu_since(cpu, database)}

    result = asyncio.run(main())
    _read_back(conninfo, n, waiting=False)
    return {**result, "settings": _pg.settings(conninfo)}


def w2(conninfo: str, n: int) -> dict[str, Any]:
    """Seconds to suspend ``n`` conversations (all at once, ``ainvoke``), then, on a new
    connection (after every conversation was read back waiting), to resume them all (all
    at once) until every run completed; the CPU split of each timed part and the server's
    settings."""
    database = _pg.database_of(conninfo)

    async def suspend_all() -> dict[str, Any]:
        async with AsyncPostgresSaver.from_conn_string(conninfo) as saver:
            await saver.setup()
            graph = _graph(saver, is_async=True)
            cpu = _pg.cpu_times(database)
            start = time.perf_counter()
            await asyncio.gather(*(_suspend(graph, i) for i in range(n)))
            seconds = time.perf_counter() - start
            return {"suspend": seconds, "suspend_cpu": _pg.cpu_since(cpu, database)}

    async def resume_all() -> dict[str, Any]:
        async with AsyncPostgresSaver.from_conn_string(conninfo) as saver:
            graph = _graph(saver, is_async=True)
            gc.collect()
            cpu = _pg.cpu_times(database)
            start = time.perf_counter()
            await asyncio.gather(*(_resume(graph, i) for i in range(n)))
            seconds = time.perf_counter() - start
            return {"resume": seconds, "resume_cpu": _pg.cpu_since(cpu, database)}

    result = asyncio.run(suspend_all())
    _read_back(conninfo, n, waiting=True)
    result.update(asyncio.run(resume_all()))
    _read_back(conninfo, n, waiting=False)
    return {**result, "settings": _pg.settings(conninfo)}
