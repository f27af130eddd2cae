"""The LangGraph peer of the durable-approval figures (needs ``pip install .[bench]``).

The imports of the peers carry ``type: ignore[import-not-found,unused-ignore]``: CI installs
only the ``test`` extra and type-checks this module without them. This module never imports
``pai_actors``: its side processes hold LangGraph only.

The graph is the lightest correct one: a ``StateGraph`` over a ``TypedDict`` that keeps the
conversation (the user's ``request`` and a ``messages`` list), with a single node ``agent``
that runs the tool itself (no model node, no ``ToolNode``, no ``MessagesState``): it reads
the order from the request and calls the ``refund`` tool function with the same small JSON
input as every side, which calls ``langgraph.types.interrupt({"cents": ...})`` to suspend for
approval. The client resumes with ``Command(resume={"approved": True})``; the node runs again
from the top, ``interrupt`` returns the decision, the tool returns and the node appends the
tool's result and the answer ``done`` to ``messages``; the graph ends. For the async API the
node and the tool are ``async def`` (nothing runs in a thread pool but what the checkpointer
itself does).

Durability: the checkpointer is ``SqliteSaver`` (``AsyncSqliteSaver`` for the async API) on a
new file, one ``thread_id`` per conversation, LangGraph's default ``durability="async"``
(checkpoints written in the background while the graph goes on, awaited before
``invoke``/``ainvoke`` returns). At its defaults (``synchronous=None``) the connection is
opened as ``from_conn_string`` opens it and no PRAGMA is set: the saver's ``setup`` puts the
file in WAL mode and SQLite keeps ``synchronous=FULL``; each side reads both back with PRAGMA
and reports them. ``synchronous="NORMAL"`` or ``"FULL"`` sets that PRAGMA on the connection
first (the equal-durability figures).

Every conversation is read back after the timed part, untimed, from a NEW ``SqliteSaver``
connection on the same file: ``graph.get_state(config)`` for every thread.
"""

from __future__ import annotations

import asyncio
import gc
import operator
import sqlite3
import time
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, TypedDict

import aiosqlite  # type: ignore[import-not-found,unused-ignore]
from langgraph.checkpoint.sqlite import SqliteSaver  # type: ignore[import-not-found,unused-ignore]
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver  # type: ignore[import-not-found,unused-ignore]
from langgraph.graph import END, START, StateGraph  # type: ignore[import-not-found,unused-ignore]
from langgraph.types import Command, interrupt  # type: ignore[import-not-found,unused-ignore]

from ._conversation import (
    APPROVE,
    PAYLOAD,
    RESULT,
    SYNCHRONOUS_NAMES,
    TOOL_NAME,
    WARM_UP,
    bookkeeping_bytes,
    new_db,
    order_of,
    remove_db,
    request,
    rss_bytes,
    sqlite_modes,
    tool_input,
)

VERSION = version("langgraph")


class Conversation(TypedDict):
    request: str
    messages: Annotated[list[dict[str, Any]], operator.add]


def _input(i: int) -> dict[str, Any]:
    return {"request": request(i), "messages": [{"role": "user", "content": request(i)}]}


def _answer(args: dict[str, Any], result: dict[str, int]) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "tool", "name": TOOL_NAME, "args": args, "content": result},
            {"role": "assistant", "content": "done"},
        ]
    }


def refund(order: int, cents: int) -> dict[str, int]:
    """Refund an order after a human approves it."""
    decision = interrupt({"cents": cents})
    return {"refunded": cents if decision["approved"] else 0}


async def arefund(order: int, cents: int) -> dict[str, int]:
    """Refund an order after a human approves it."""
    decision = interrupt({"cents": cents})
    return {"refunded": cents if decision["approved"] else 0}


def agent(state: Conversation) -> dict[str, Any]:
    args = tool_input(order_of(state["request"]))
    return _answer(args, refund(**args))


async def aagent(state: Conversation) -> dict[str, Any]:
    args = tool_input(order_of(state["request"]))
    return _answer(args, await arefund(**args))


def _graph(checkpointer: Any, *, is_async: bool) -> Any:
    builder: StateGraph[Any] = StateGraph(Conversation)
    builder.add_node("agent", aagent if is_async else agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=checkpointer)


def _config(i: int) -> Any:
    return {"configurable": {"thread_id": f"conversation-{i}"}}


def _check_suspended(result: dict[str, Any]) -> None:
    interrupts = result.get("__interrupt__")
    if not interrupts or [i.value for i in interrupts] != [PAYLOAD]:
        raise AssertionError(f"expected the approval interrupt, got {result!r}")


def _check_completed(result: dict[str, Any]) -> None:
    messages = result["messages"]
    if (
        len(messages) != 3
        or messages[1]["content"] != RESULT
        or messages[2]["content"] != "done"
        or "__interrupt__" in result
    ):
        raise AssertionError(f"expected a completed run, got {result!r}")


def _read_back(path: Path, n: int, *, waiting: bool) -> None:
    """Every conversation through a new connection: ``graph.get_state`` of every thread."""
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        graph = _graph(SqliteSaver(conn), is_async=False)
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
    finally:
        conn.close()


def _open(path: Path, synchronous: str | None) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)  # as SqliteSaver.from_conn_string
    if synchronous is not None:
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


async def _aopen(path: Path, synchronous: str | None) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path)  # as AsyncSqliteSaver.from_conn_string
    if synchronous is not None:
        await conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


async def _amodes(conn: aiosqlite.Connection) -> dict[str, str]:
    modes: dict[str, str] = {}
    for pragma in ("journal_mode", "synchronous"):
        async with conn.execute(f"PRAGMA {pragma}") as cursor:
            row = await cursor.fetchone()
        assert row is not None
        value = row[0]
        modes[pragma] = SYNCHRONOUS_NAMES[int(value)] if pragma == "synchronous" else str(value)
    return modes


def w1_sequential(directory: str, n: int, synchronous: str | None) -> dict[str, Any]:
    """Seconds for ``n`` conversations one after another (sync ``invoke``, ``SqliteSaver``),
    and the connection's SQLite modes."""
    path = new_db(directory, "langgraph-w1s")
    try:
        conn = _open(path, synchronous)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            graph = _graph(saver, is_async=False)
            start = time.perf_counter()
            for i in range(n):
                config = _config(i)
                _check_suspended(graph.invoke(_input(i), config))
                _check_completed(graph.invoke(Command(resume=APPROVE), config))
            seconds = time.perf_counter() - start
            modes = sqlite_modes(conn)
        finally:
            conn.close()
        _read_back(path, n, waiting=False)
        return {"seconds": seconds, **modes}
    finally:
        remove_db(path)


async def _one(graph: Any, i: int) -> None:
    config = _config(i)
    _check_suspended(await graph.ainvoke(_input(i), config))
    _check_completed(await graph.ainvoke(Command(resume=APPROVE), config))


async def _asaver(path: Path, synchronous: str | None) -> tuple[aiosqlite.Connection, Any]:
    conn = await _aopen(path, synchronous)
    saver = AsyncSqliteSaver(conn)
    await saver.setup()
    return conn, saver


def w1_concurrent(directory: str, n: int, synchronous: str | None) -> dict[str, Any]:
    """Seconds for ``n`` conversations all in flight at once (``ainvoke`` under
    ``asyncio.gather``, ``AsyncSqliteSaver``), and the connection's SQLite modes."""
    path = new_db(directory, "langgraph-w1c")

    async def main() -> dict[str, Any]:
        conn, saver = await _asaver(path, synchronous)
        try:
            graph = _graph(saver, is_async=True)
            start = time.perf_counter()
            await asyncio.gather(*(_one(graph, i) for i in range(n)))
            seconds = time.perf_counter() - start
            return {"seconds": seconds, **await _amodes(conn)}
        finally:
            await conn.close()

    try:
        result = asyncio.run(main())
        _read_back(path, n, waiting=False)
        return result
    finally:
        remove_db(path)


async def _suspend(graph: Any, i: int) -> None:
    _check_suspended(await graph.ainvoke(_input(i), _config(i)))


async def _resume(graph: Any, i: int) -> None:
    _check_completed(await graph.ainvoke(Command(resume=APPROVE), _config(i)))


def w2(directory: str, n: int, synchronous: str | None) -> dict[str, Any]:
    """Seconds to suspend ``n`` conversations (all at once, ``ainvoke``), then, on a new
    connection (after every conversation was read back waiting), to resume them all (all
    at once) until every run completed; and the connection's SQLite modes."""
    path = new_db(directory, "langgraph-w2")

    async def suspend_all() -> dict[str, Any]:
        conn, saver = await _asaver(path, synchronous)
        try:
            graph = _graph(saver, is_async=True)
            start = time.perf_counter()
            await asyncio.gather(*(_suspend(graph, i) for i in range(n)))
            return {"suspend": time.perf_counter() - start, **await _amodes(conn)}
        finally:
            await conn.close()

    async def resume_all() -> float:
        conn, saver = await _asaver(path, synchronous)
        try:
            graph = _graph(saver, is_async=True)
            gc.collect()
            start = time.perf_counter()
            await asyncio.gather(*(_resume(graph, i) for i in range(n)))
            return time.perf_counter() - start
        finally:
            await conn.close()

    try:
        result = asyncio.run(suspend_all())
        _read_back(path, n, waiting=True)
        result["resume"] = asyncio.run(resume_all())
        _read_back(path, n, waiting=False)
        return result
    finally:
        remove_db(path)


def memory_per_suspended_conversation(directory: str, n: int) -> dict[str, float]:
    """Resident bytes per suspended conversation, all ``n`` suspended at once (``ainvoke``
    under ``asyncio.gather``, LangGraph at its defaults): VmRSS after minus before, minus the
    workload's bookkeeping (the list of thread ids and its strings), over ``n``. Run it in a
    fresh process."""
    path = new_db(directory, "langgraph-mem")

    async def main() -> dict[str, float]:
        conn, saver = await _asaver(path, None)
        try:
            graph = _graph(saver, is_async=True)
            for i in range(-WARM_UP, 0):
                await _one(graph, i)
            gc.collect()
            before = rss_bytes()
            thread_ids: list[str] = []

            async def suspend(i: int) -> None:
                config = _config(i)
                _check_suspended(await graph.ainvoke(_input(i), config))
                thread_ids.append(config["configurable"]["thread_id"])

            await asyncio.gather(*(suspend(i) for i in range(n)))
            gc.collect()
            after = rss_bytes()
            bookkeeping = bookkeeping_bytes(thread_ids)
        finally:
            await conn.close()
        return {"bytes": (after - before - bookkeeping) / n, "bookkeeping": bookkeeping / n}

    try:
        result = asyncio.run(main())
        _read_back(path, n, waiting=True)
        return result
    finally:
        remove_db(path)
