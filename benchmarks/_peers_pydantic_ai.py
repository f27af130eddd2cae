"""The pydantic-ai peer of the durable-approval figures (needs ``pip install .[bench]``).

pydantic-ai's deferred tools: the agent's tool raises ``ApprovalRequired(metadata={"cents":
...})`` (the small approval payload) unless ``ctx.tool_call_approved``; the run then ends
with a ``DeferredToolRequests`` output (``output_type=[str, DeferredToolRequests]``). The
model is a ``FunctionModel`` (no LLM), the counterpart of our side's ``ApprovalModel``: it
asks for one ``refund`` call with the same small JSON input, then answers ``done``.

The imports of the peers carry ``type: ignore[import-not-found,unused-ignore]``: CI installs
only the ``test`` extra and type-checks this module without them. This module never imports
``pai_actors``: its side processes hold pydantic-ai only.

pydantic-ai keeps no state between runs: durability is the application's. Here each
conversation's message history (``result.all_messages_json()``) is written to a SQLite table
keyed by conversation (WAL, ``synchronous=NORMAL``, as our store) when the run suspends; the
client's ``{"approved": true}`` reads it back (``ModelMessagesTypeAdapter``) and starts the
second run with ``deferred_tool_results=DeferredToolResults(approvals={call id: True})``;
the tool runs again, approved, and returns, and the final history is written too. pydantic-ai
has no storage of its own, hence no default durability: the table is at the same durability as
our store's default (equal durability). After the timed part every stored history is read back,
untimed, from a new connection, and checked: the tool's result and the answer ``done``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from pydantic_ai import (  # type: ignore[import-not-found,unused-ignore]
    Agent,
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessagesTypeAdapter,
    RunContext,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # type: ignore[import-not-found,unused-ignore]
from pydantic_ai.models.function import AgentInfo, FunctionModel  # type: ignore[import-not-found,unused-ignore]

from ._conversation import (
    PAYLOAD,
    RESULT,
    TOOL_NAME,
    new_db,
    order_of,
    remove_db,
    request,
    tool_input,
)

VERSION = version("pydantic-ai-slim")


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                return ModelResponse(parts=[TextPart("done")])
    order = order_of(str(messages[-1].parts[-1].content))  # type: ignore[union-attr,unused-ignore]
    return ModelResponse(parts=[ToolCallPart(TOOL_NAME, tool_input(order), tool_call_id="call_1")])


agent: Agent[None, str | DeferredToolRequests] = Agent(
    FunctionModel(_model), output_type=[str, DeferredToolRequests]
)


def refund(ctx: RunContext[None], order: int, cents: int) -> dict[str, int]:
    """Refund an order after a human approves it."""
    if not ctx.tool_call_approved:
        raise ApprovalRequired(metadata={"cents": cents})
    return {"refunded": cents}


agent.tool(name=TOOL_NAME)(refund)  # a call, not a decorator: mypy may not see pydantic-ai


def _open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS history (conversation TEXT PRIMARY KEY, json BLOB)")
    return db


def _save(db: sqlite3.Connection, conversation: str, history: bytes) -> None:
    db.execute("INSERT OR REPLACE INTO history VALUES (?, ?)", (conversation, history))


def _read(db: sqlite3.Connection, conversation: str) -> list[ModelMessage]:
    row = db.execute("SELECT json FROM history WHERE conversation = ?", (conversation,)).fetchone()
    history: list[ModelMessage] = ModelMessagesTypeAdapter.validate_json(row[0])
    return history


def _suspended(output: Any) -> str:
    if not isinstance(output, DeferredToolRequests) or len(output.approvals) != 1:
        raise AssertionError(f"expected one approval request, got {output!r}")
    [call] = output.approvals
    if output.metadata.get(call.tool_call_id) != PAYLOAD:
        raise AssertionError(f"expected the approval payload, got {output.metadata!r}")
    call_id: str = call.tool_call_id
    return call_id


def _completed(output: Any) -> None:
    if output != "done":
        raise AssertionError(f"expected a completed run, got {output!r}")


async def _start(db: sqlite3.Connection, i: int) -> None:
    result = await agent.run(request(i))
    _suspended(result.output)
    _save(db, f"conversation-{i}", result.all_messages_json())


async def _approve(db: sqlite3.Connection, i: int) -> None:
    conversation = f"conversation-{i}"
    history = _read(db, conversation)
    request = history[-1].parts[-1]
    assert isinstance(request, ToolCallPart)
    results = DeferredToolResults(approvals={request.tool_call_id: True})
    result = await agent.run(message_history=history, deferred_tool_results=results)
    _completed(result.output)
    _save(db, conversation, result.all_messages_json())


async def _one(db: sqlite3.Connection, i: int) -> None:
    await _start(db, i)
    await _approve(db, i)


def _read_back(path: Path, n: int) -> None:
    """Every stored history through a new connection: the tool returned the refund's result
    and the model answered ``done``."""
    db = sqlite3.connect(path)
    try:
        for i in range(n):
            history = _read(db, f"conversation-{i}")
            returns = [p.content for m in history for p in m.parts if isinstance(p, ToolReturnPart)]
            last = history[-1].parts[-1]
            if returns != [RESULT] or not isinstance(last, TextPart) or last.content != "done":
                raise AssertionError(f"conversation {i}: history {history!r}")
    finally:
        db.close()


def w1(directory: str, n: int, concurrent: bool) -> float:
    """Seconds for ``n`` conversations, one after another or all at once (``agent.run``
    under ``asyncio.gather``)."""
    path = new_db(directory, "pydantic-ai-w1")

    async def main() -> float:
        start = time.perf_counter()
        if concurrent:
            await asyncio.gather(*(_one(db, i) for i in range(n)))
        else:
            for i in range(n):
                await _one(db, i)
        return time.perf_counter() - start

    try:
        db = _open(path)
        try:
            seconds = asyncio.run(main())
        finally:
            db.close()
        _read_back(path, n)
        return seconds
    finally:
        remove_db(path)
