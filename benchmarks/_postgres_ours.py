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

Several nodes (:func:`w1_nodes`): the side's process starts one fresh process per node
(:func:`benchmarks._harness.started`), each a :func:`w1_node` with a ``PostgresStore`` of
its own given a ``node_id`` of its own, on the one database. Every node opens its store and
its runtime and says it is ready; once all are, they are told to begin together; each
times its share of the conversations with ``time.monotonic`` (the system-wide monotonic
clock, so the nodes' readings compare) and says when it is done, then keeps its
connections until told to exit, so that the server's CPU time of the timed part is read
(by :func:`w1_nodes`) while their backends still run. The timed part runs from the first
node's start to the last node's end.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import time
from typing import Any

import trio

from pai_actors import AgentRuntime, PaiError, PostgresStore, create_agent_runtime

from . import _durable_ours as ours
from . import _pg
from ._harness import started

__all__ = ["w1", "w1_node", "w1_nodes", "w2"]


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


async def _node_duties(
    rt: AgentRuntime,
    store: PostgresStore,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """What a node runs beside its runtime (the duties ``pai-actors serve`` gives a node,
    through the public API): ``store.keep_leases``, and every half lease the threads of
    nodes that stopped (``store.orphaned_threads``) loaded, which recovers them."""
    async with trio.open_nursery() as nursery:
        await nursery.start(store.keep_leases)
        task_status.started()
        while True:
            for thread_id in await store.orphaned_threads():
                with contextlib.suppress(PaiError):  # another node took it first
                    await rt.get_state(thread_id)
            await trio.sleep(store.lease / 2)


async def _read_line() -> str:
    return await trio.to_thread.run_sync(sys.stdin.readline)


def w1_node(conninfo: str, node_id: str, first: int, n: int) -> dict[str, Any]:
    """One node of :func:`w1_nodes` (started by it, talked to through its pipes): a
    ``PostgresStore(conninfo, node_id=node_id)`` at its defaults and a runtime, with the
    node's duties beside it (:func:`_node_duties`). It prints ``ready``; on a line on stdin
    it runs conversations ``first`` to ``first + n - 1`` all at once (``n`` trio tasks in a
    nursery), prints ``done``; on another line it closes. Returns the monotonic times of
    its start and end, its process's CPU seconds in between and its conversations."""

    async def main() -> dict[str, Any]:
        thread_ids: list[str] = []
        with PostgresStore(conninfo, node_id=node_id) as store:
            async with runtime(store) as rt, trio.open_nursery() as duties:
                await duties.start(_node_duties, rt, store)
                print("ready", flush=True)
                await _read_line()  # begin
                cpu = time.process_time()
                start = time.monotonic()
                async with trio.open_nursery() as nursery:
                    for i in range(first, first + n):
                        nursery.start_soon(_conversation, rt, i, thread_ids)
                end = time.monotonic()
                cpu = time.process_time() - cpu
                print("done", flush=True)
                await _read_line()  # exit: the server's CPU time was read
                duties.cancel_scope.cancel()
        _check_count(thread_ids, n)
        return {"start": start, "end": end, "process": cpu, "thread_ids": thread_ids}

    return trio.run(main)


def w1_nodes(conninfo: str, n: int, nodes: int) -> dict[str, Any]:
    """Seconds for ``n`` whole conversations split between ``nodes`` node processes on one
    database (:func:`w1_node`, ``node-1`` ... given the first, larger shares), all started
    together; each node's own seconds and process CPU seconds, the server's CPU split of the
    timed part (the database's backends: every node's) and the server's settings. Every
    conversation is read back afterwards, untimed, through a new store without a
    ``node_id`` and a new runtime."""
    database = _pg.database_of(conninfo)
    shares = [n // nodes + (k < n % nodes) for k in range(nodes)]
    firsts = [sum(shares[:k]) for k in range(nodes)]
    with contextlib.ExitStack() as stack:
        processes = [
            stack.enter_context(
                started(w1_node, conninfo=conninfo, node_id=f"node-{k + 1}", first=first, n=share)
            )
            for k, (first, share) in enumerate(zip(firsts, shares, strict=True))
        ]
        for process in processes:
            process.expect("ready")
        cpu, read_at = _pg.cpu_times(database), time.monotonic()
        for process in processes:
            process.tell("begin")
        for process in processes:
            process.expect("done")
        split = _pg.cpu_since(cpu, database)
        split["seconds"] = time.monotonic() - read_at
        for process in processes:
            process.tell("exit")
        results = [process.result() for process in processes]
    thread_ids = [t for r in results for t in r["thread_ids"]]
    _check_count(thread_ids, n)
    trio.run(functools.partial(_read_back, conninfo, thread_ids, waiting=False))
    return {
        "seconds": max(r["end"] for r in results) - min(r["start"] for r in results),
        "nodes": [
            {"n": share, "seconds": r["end"] - r["start"], "process": r["process"]}
            for share, r in zip(shares, results, strict=True)
        ],
        "cpu": split,
        "settings": _pg.settings(conninfo),
    }


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
