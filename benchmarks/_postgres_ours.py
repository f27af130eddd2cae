"""Our side of the PostgreSQL figures: ``pai_actors`` on a :class:`PostgresStore`.

The conversation is exactly :mod:`._durable_ours`'s (the same agent, model, tool and client
steps: a user message, a ``refund`` call suspended for approval, ``{"approved": true}``
submitted, the tool resumed, the answer); only the store differs: ``PostgresStore(conninfo)``
at its defaults on a new database the harness created for this side of this repetition
(:func:`._pg.new_database`).

Each side runs in a fresh process (:func:`benchmarks._harness.fresh`): it opens its own
``trio.run``, times its measured part, reads the CPU split of that part
(:func:`._pg.cpu_times`: this process, the server's backends serving the database, the
server's background processes), closes the runtime and the store, then reads every
conversation back, untimed, through a NEW ``PostgresStore`` on the same database and a new
runtime, and returns what it measured as JSON.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import trio

from pai_actors import AgentRuntime, PostgresStore, create_agent_runtime

from . import _durable_ours as ours
from . import _pg

__all__ = ["w1", "w2"]


def runtime(store: PostgresStore) -> AgentRuntime:
    return create_agent_runtime(ours.agent, store=store)


def _check_count(thread_ids: list[str], n: int) -> None:
    if len(set(thread_ids)) != n:
        raise AssertionError(f"{len(set(thread_ids))} distinct conversations of {n}")


async def _conversation(rt: AgentRuntime, i: int, thread_ids: list[str]) -> None:
    thread_id = await ours.start(rt, i)
    await ours.approve(rt, thread_id)
    thread_ids.append(thread_id)


async def _suspend_into(rt: AgentRuntime, i: int, thread_ids: list[str]) -> None:
    thread_ids.append(await ours.start(rt, i))


async def _read_back(conninfo: str, thread_ids: list[str], *, waiting: bool) -> None:
    """Every conversation, read through a new store on the same database and a new
    runtime: completed with the refund's result, or (``waiting``) waiting with its pending
    action."""
    with PostgresStore(conninfo) as store:
        async with runtime(store) as rt:
            if waiting:
                await ours.check_waiting(rt, thread_ids)
            else:
                await ours.check_completed(rt, thread_ids)


def w1(conninfo: str, n: int) -> dict[str, Any]:
    """Seconds for ``n`` whole conversations all at once (``n`` trio tasks in a nursery) on
    a ``PostgresStore``, the CPU split of the timed part and the server's settings."""
    database = _pg.database_of(conninfo)

    async def main() -> dict[str, Any]:
        thread_ids: list[str] = []
        with PostgresStore(conninfo) as store:
            async with runtime(store) as rt:
                cpu = _pg.cpu_times(database)
                start_time = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        nursery.start_soon(_conversation, rt, i, thread_ids)
                elapsed = time.perf_counter() - start_time
                split = _pg.cpu_since(cpu, database)
        _check_count(thread_ids, n)
        await _read_back(conninfo, thread_ids, waiting=False)
        return {"seconds": elapsed, "cpu": split}

    return {**trio.run(main), "settings": _pg.settings(conninfo)}


def w2(conninfo: str, n: int) -> dict[str, Any]:
    """Seconds to suspend ``n`` conversations (all at once), then, in a new runtime on a new
    ``PostgresStore`` on the same database (after every conversation was read back waiting),
    to resume them all (all submissions at once, until every run completed); the CPU split
    of each timed part and the server's settings."""
    database = _pg.database_of(conninfo)

    async def main() -> dict[str, Any]:
        thread_ids: list[str] = []
        with PostgresStore(conninfo) as store:
            async with runtime(store) as rt:
                cpu = _pg.cpu_times(database)
                start_time = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        nursery.start_soon(_suspend_into, rt, i, thread_ids)
                suspend_seconds = time.perf_counter() - start_time
                suspend_cpu = _pg.cpu_since(cpu, database)
        _check_count(thread_ids, n)
        with PostgresStore(conninfo) as store:
            async with runtime(store) as rt:
                await ours.check_waiting(rt, thread_ids)
                gc.collect()
                cpu = _pg.cpu_times(database)
                start_time = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for thread_id in thread_ids:
                        nursery.start_soon(ours.approve, rt, thread_id)
                resume_seconds = time.perf_counter() - start_time
                resume_cpu = _pg.cpu_since(cpu, database)
        await _read_back(conninfo, thread_ids, waiting=False)
        return {
            "suspend": suspend_seconds,
            "suspend_cpu": suspend_cpu,
            "resume": resume_seconds,
            "resume_cpu": resume_cpu,
        }

    return {**trio.run(main), "settings": _pg.settings(conninfo)}
