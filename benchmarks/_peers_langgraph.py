"""The LangGraph peer of the durable-approval figures (needs ``pip install .[bench]``).

The imports of the peers carry ``type: ignore[import-not-found,unused-ignore]``: CI installs
only the ``test`` extra and type-checks this module without them.

The graph is LangGraph's own agent loop without an LLM: a ``model`` node (a fixed function,
like our side's ``ApprovalModel``) emits an ``AIMessage`` with one ``refund`` tool call whose
arguments are the same small JSON input; ``langgraph.prebuilt.ToolNode`` runs the tool, which
calls ``langgraph.types.interrupt({"cents": ...})`` to suspend for approval; the client reads
the interrupt, resumes with ``Command(resume={"approved": True})``; the tool returns, the
``model`` node answers ``done`` and the graph ends. Routing is ``tools_condition``.

Durability: the checkpointer is ``SqliteSaver`` (``AsyncSqliteSaver`` for the async API) on a
new temporary file, one ``thread_id`` per conversation, LangGraph's default durability (every
checkpoint is written; the run returns once they are). The connection is put in
``synchronous=NORMAL`` to match our :class:`~pai_actors.SqliteStore`'s default (both files
are in WAL mode; LangGraph leaves SQLite's default ``FULL``, which would charge it an fsync per
commit that our side does not pay).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import aiosqlite  # type: ignore[import-not-found,unused-ignore]
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # type: ignore[import-not-found,unused-ignore]
from langchain_core.tools import tool  # type: ignore[import-not-found,unused-ignore]
from langgraph.checkpoint.sqlite import SqliteSaver  # type: ignore[import-not-found,unused-ignore]
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver  # type: ignore[import-not-found,unused-ignore]
from langgraph.graph import START, MessagesState, StateGraph  # type: ignore[import-not-found,unused-ignore]
from langgraph.prebuilt import ToolNode, tools_condition  # type: ignore[import-not-found,unused-ignore]
from langgraph.types import Command, interrupt  # type: ignore[import-not-found,unused-ignore]

from ._durable_ours import APPROVE, TOOL_NAME, remove_db, tool_input

VERSION = version("langgraph")


def _refund(order: int, cents: int) -> dict[str, int]:
    """Refund an order after a human approves it."""
    decision = interrupt({"cents": cents})
    return {"refunded": cents if decision["approved"] else 0}


refund = tool(TOOL_NAME)(_refund)  # a call, not a decorator: mypy may not see langchain


def _model(state: MessagesState) -> dict[str, list[Any]]:
    messages = state["messages"]
    if isinstance(messages[-1], ToolMessage):
        return {"messages": [AIMessage("done")]}
    order = int(str(messages[-1].content).rsplit(" ", 1)[1])
    call = {"name": TOOL_NAME, "args": tool_input(order), "id": "call_1", "type": "tool_call"}
    return {"messages": [AIMessage("", tool_calls=[call])]}


def _builder() -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(MessagesState)
    builder.add_node("model", _model)
    builder.add_node("tools", ToolNode([refund]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder


def _config(i: int) -> Any:
    return {"configurable": {"thread_id": f"conversation-{i}"}}


def _check_suspended(result: dict[str, Any]) -> None:
    interrupts = result.get("__interrupt__")
    if not interrupts or interrupts[0].value != {"cents": 500}:
        raise AssertionError(f"expected the approval interrupt, got {result!r}")


def _check_completed(result: dict[str, Any]) -> None:
    messages = result["messages"]
    if messages[-1].content != "done" or '"refunded": 500' not in messages[-2].content:
        raise AssertionError(f"expected a completed run, got {messages!r}")


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


async def _aopen(path: Path) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path)
    await conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def round_trips_sequential(n: int, directory: Path) -> float:
    """Seconds for ``n`` conversations one after another (sync API, ``SqliteSaver``)."""
    path = directory / f"langgraph-w1s-{time.monotonic_ns()}.db"
    conn = _open(path)
    try:
        graph = _builder().compile(checkpointer=SqliteSaver(conn))
        start = time.perf_counter()
        for i in range(n):
            config = _config(i)
            _check_suspended(graph.invoke({"messages": [HumanMessage(f"refund {i}")]}, config))
            _check_completed(graph.invoke(Command(resume=APPROVE), config))
        return time.perf_counter() - start
    finally:
        conn.close()
        remove_db(path)


async def _one(graph: Any, i: int) -> None:
    config = _config(i)
    _check_suspended(await graph.ainvoke({"messages": [HumanMessage(f"refund {i}")]}, config))
    _check_completed(await graph.ainvoke(Command(resume=APPROVE), config))


def round_trips_concurrent(n: int, directory: Path) -> float:
    """Seconds for ``n`` conversations all in flight at once (async API, ``AsyncSqliteSaver``)."""
    path = directory / f"langgraph-w1c-{time.monotonic_ns()}.db"

    async def main() -> float:
        conn = await _aopen(path)
        try:
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            graph = _builder().compile(checkpointer=saver)
            start = time.perf_counter()
            await asyncio.gather(*(_one(graph, i) for i in range(n)))
            return time.perf_counter() - start
        finally:
            await conn.close()

    try:
        return asyncio.run(main())
    finally:
        remove_db(path)


def suspend_resume(n: int, directory: Path) -> tuple[float, float]:
    """Seconds to suspend ``n`` conversations (all at once, async API), then to resume them
    all (all at once) until every run completed."""
    path = directory / f"langgraph-w2-{time.monotonic_ns()}.db"

    async def suspend(graph: Any, i: int) -> None:
        _check_suspended(
            await graph.ainvoke({"messages": [HumanMessage(f"refund {i}")]}, _config(i))
        )

    async def resume(graph: Any, i: int) -> None:
        _check_completed(await graph.ainvoke(Command(resume=APPROVE), _config(i)))

    async def main() -> tuple[float, float]:
        conn = await _aopen(path)
        try:
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            graph = _builder().compile(checkpointer=saver)
            start = time.perf_counter()
            await asyncio.gather(*(suspend(graph, i) for i in range(n)))
            suspend_seconds = time.perf_counter() - start
            start = time.perf_counter()
            await asyncio.gather(*(resume(graph, i) for i in range(n)))
            return suspend_seconds, time.perf_counter() - start
        finally:
            await conn.close()

    try:
        return asyncio.run(main())
    finally:
        remove_db(path)
