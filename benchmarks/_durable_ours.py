"""Our side of the durable-approval figures: ``pai_actors`` on a :class:`SqliteStore`.

One conversation is one thread. Its work: ``send`` starts a run whose model (one
:class:`ApprovalModel` for every thread, deciding from the request) asks for one ``refund``
tool call with a small JSON input; the tool suspends at its ``approval`` point with a small
payload (committed to the SQLite file before the run is ``waiting``); the client reads the
thread's pending action and submits ``{"approved": true}``; the tool runs again from the top
as a resume and returns; the model answers with text and the run completes.

Each side here is run by :func:`benchmarks._harness.fresh` in a fresh process: it opens its
own ``trio.run``, times its measured part, then closes the runtime and the store and reads
every conversation back, untimed, through a NEW ``SqliteStore`` on the same file and a new
runtime, and returns what it measured as JSON; ``_durable`` turns the numbers into records.
The store is ``SqliteStore(path)`` with its defaults (WAL, ``durability="normal"``, i.e.
``synchronous=NORMAL``: a commit that returned survives a crash of the process), or
``durability="full"`` (``synchronous=FULL``: also a power loss) where a figure says so.
"""

from __future__ import annotations

import gc
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import trio
from pydantic import BaseModel

from pai_actors import (
    AgentRuntime,
    Finish,
    ModelEvent,
    ModelRequest,
    ModelToolMessage,
    ResumeEntry,
    SqliteStore,
    SuspendPoint,
    TextDelta,
    ToolCallEvent,
    ToolContext,
    ToolPart,
    create_agent_runtime,
    define_agent,
    define_tool,
)

from ._conversation import (
    APPROVE,
    PAYLOAD,
    RESULT,
    TOOL_NAME,
    WARM_UP,
    bookkeeping_bytes,
    new_db,
    order_of,
    remove_db,
    request,
    rss_bytes,
    tool_input,
)

__all__ = ["APPROVE", "TOOL_NAME", "refund_tool", "tool_input"]

SCOPE = "bench"
Durability = Literal["normal", "full"]


class Refund(BaseModel):
    order: int
    cents: int


class Approval(BaseModel):
    cents: int


class Decision(BaseModel):
    approved: bool


async def _refund(ctx: ToolContext) -> Any:  # async: a plain def runs in a worker thread
    if isinstance(ctx.entry, ResumeEntry):
        decision: Decision = ctx.entry.resume
        return {"refunded": ctx.input.cents if decision.approved else 0}
    return ctx.suspend("approval", {"cents": ctx.input.cents})


refund_tool = define_tool(
    id="bench.refund.v1",
    description="Refund an order after a human approves it.",
    input_schema=Refund,
    suspend={"approval": SuspendPoint(suspend_schema=Approval, resume_schema=Decision)},
    execute=_refund,
)


class ApprovalModel:
    """A fixed model: asks for one ``refund`` call, then answers ``done`` once it has the
    result. The order number is read from the user's message (``"refund <i>"``)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            yield TextDelta("done")
            yield Finish("stop")
            return
        order = order_of(request.messages[-1].text)  # type: ignore[union-attr]
        yield ToolCallEvent(tool_call_id="call_1", tool_name=TOOL_NAME, input=tool_input(order))
        yield Finish("tool-calls")


agent = define_agent(name="bench", tools={TOOL_NAME: refund_tool}, model=ApprovalModel())


def runtime(store: SqliteStore) -> AgentRuntime:
    return create_agent_runtime(agent, store=store)


async def start(rt: AgentRuntime, i: int) -> str:
    """Create conversation ``i``, send its message and return once its call is suspended."""
    thread_id = await rt.create_thread(scope_key=SCOPE)
    await rt.send(thread_id, request(i))
    await rt.wait_idle(thread_id)
    return thread_id


async def approve(rt: AgentRuntime, thread_id: str) -> None:
    """Submit ``{"approved": true}`` to the thread's pending action; wait for the run to end."""
    [action] = await rt.pending_actions(thread_id)
    result = await action.submit(APPROVE)
    if result.status != "accepted":
        raise AssertionError(f"submission not accepted: {result!r}")
    await rt.wait_idle(thread_id)


async def check_completed(rt: AgentRuntime, thread_ids: list[str]) -> None:
    for thread_id in thread_ids:
        state = await rt.get_state(thread_id)
        parts = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
        runs = [r.status for r in state.runs]
        if runs != ["completed"] or [p.output for p in parts] != [RESULT]:
            raise AssertionError(f"thread {thread_id}: runs {runs!r}, parts {parts!r}")


async def check_waiting(rt: AgentRuntime, thread_ids: list[str]) -> None:
    for thread_id in thread_ids:
        actions = await rt.pending_actions(thread_id)
        if [(a.name, a.input) for a in actions] != [(f"{TOOL_NAME}.approval", PAYLOAD)]:
            raise AssertionError(f"thread {thread_id}: pending actions {actions!r}")


def _check_count(thread_ids: list[str], n: int) -> None:
    if len(set(thread_ids)) != n:
        raise AssertionError(f"{len(set(thread_ids))} distinct conversations of {n}")


async def _read_back(
    path: Path, durability: Durability, thread_ids: list[str], *, waiting: bool
) -> None:
    """Every conversation, read through a new store on the same file and a new runtime:
    completed with the refund's result, or (``waiting``) waiting with its pending action."""
    with SqliteStore(path, durability=durability) as store:
        async with runtime(store) as rt:
            if waiting:
                await check_waiting(rt, thread_ids)
            else:
                await check_completed(rt, thread_ids)


async def _conversation(rt: AgentRuntime, i: int, thread_ids: list[str]) -> None:
    thread_id = await start(rt, i)
    await approve(rt, thread_id)
    thread_ids.append(thread_id)


async def _suspend_into(rt: AgentRuntime, i: int, thread_ids: list[str]) -> None:
    thread_ids.append(await start(rt, i))


def w1(directory: str, n: int, concurrent: bool, durability: Durability) -> float:
    """Seconds for ``n`` whole conversations on a new SQLite file in ``directory``: one
    after another (awaited one by one), or all at once (``n`` trio tasks in a nursery)."""
    path = new_db(directory, "ours-w1")

    async def main() -> float:
        thread_ids: list[str] = []
        with SqliteStore(path, durability=durability) as store:
            async with runtime(store) as rt:
                start_time = time.perf_counter()
                if concurrent:
                    async with trio.open_nursery() as nursery:
                        for i in range(n):
                            nursery.start_soon(_conversation, rt, i, thread_ids)
                else:
                    for i in range(n):
                        await _conversation(rt, i, thread_ids)
                elapsed = time.perf_counter() - start_time
        _check_count(thread_ids, n)
        await _read_back(path, durability, thread_ids, waiting=False)
        return elapsed

    try:
        return trio.run(main)
    finally:
        remove_db(path)


def cpu_per_conversation(directory: str, n: int) -> float:
    """Milliseconds of process CPU time (``time.process_time``: every thread of this
    process) per conversation, ``n`` conversations one after another on a
    ``SqliteStore(path)`` (``durability="normal"``)."""
    path = new_db(directory, "ours-cpu")

    async def main() -> float:
        thread_ids: list[str] = []
        with SqliteStore(path) as store:
            async with runtime(store) as rt:
                start_cpu = time.process_time()
                for i in range(n):
                    await _conversation(rt, i, thread_ids)
                cpu = time.process_time() - start_cpu
        _check_count(thread_ids, n)
        await _read_back(path, "normal", thread_ids, waiting=False)
        return cpu * 1000 / n

    try:
        return trio.run(main)
    finally:
        remove_db(path)


def w2(directory: str, n: int, durability: Durability) -> dict[str, float]:
    """Seconds to suspend ``n`` conversations (all at once), then, in a new runtime on a new
    store on the same file (after every conversation was read back waiting), to resume them
    all (all submissions at once, until every run completed)."""
    path = new_db(directory, "ours-w2")

    async def main() -> dict[str, float]:
        thread_ids: list[str] = []
        with SqliteStore(path, durability=durability) as store:
            async with runtime(store) as rt:
                start_time = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        nursery.start_soon(_suspend_into, rt, i, thread_ids)
                suspend_seconds = time.perf_counter() - start_time
        _check_count(thread_ids, n)
        with SqliteStore(path, durability=durability) as store:
            async with runtime(store) as rt:
                await check_waiting(rt, thread_ids)
                gc.collect()
                start_time = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for thread_id in thread_ids:
                        nursery.start_soon(approve, rt, thread_id)
                resume_seconds = time.perf_counter() - start_time
        await _read_back(path, durability, thread_ids, waiting=False)
        return {"suspend": suspend_seconds, "resume": resume_seconds}

    try:
        return trio.run(main)
    finally:
        remove_db(path)


IN_FLIGHT = 100
"""Conversations in flight at a time in ``w2_memory`` (``w2_memory_at_once``: all)."""


def memory_per_suspended_call(directory: str, n: int, at_once: bool) -> dict[str, float]:
    """Resident bytes per suspended call: VmRSS after ``n`` conversations are suspended
    (their call and run actors passivated), ``IN_FLIGHT`` at a time or all at once, minus
    VmRSS before, minus the workload's own bookkeeping (the list of thread ids and its
    strings, :func:`bookkeeping_bytes`), over ``n``. Run it in a fresh process."""
    path = new_db(directory, "ours-mem")

    async def main() -> dict[str, float]:
        with SqliteStore(path) as store:
            async with runtime(store) as rt:
                # Warm up: imports, caches, pydantic validators and SQLite's page cache are
                # paid before the first reading, not charged to the suspended calls.
                warm_ids = [await start(rt, -1 - i) for i in range(WARM_UP)]
                for thread_id in warm_ids:
                    await approve(rt, thread_id)
                del warm_ids
                gc.collect()
                before = rss_bytes()
                thread_ids: list[str] = []
                if at_once:
                    async with trio.open_nursery() as nursery:
                        for i in range(n):
                            nursery.start_soon(_suspend_into, rt, i, thread_ids)
                else:
                    # A server admits a bounded number of requests at once: IN_FLIGHT
                    # conversations at a time, so the figure is what a suspended call keeps
                    # after passivation, not the peak of n model steps running together.
                    for first in range(0, n, IN_FLIGHT):
                        async with trio.open_nursery() as nursery:
                            for i in range(first, min(n, first + IN_FLIGHT)):
                                nursery.start_soon(_suspend_into, rt, i, thread_ids)
                gc.collect()
                after = rss_bytes()
                bookkeeping = bookkeeping_bytes(thread_ids)
        _check_count(thread_ids, n)
        await _read_back(path, "normal", thread_ids, waiting=True)
        return {"bytes": (after - before - bookkeeping) / n, "bookkeeping": bookkeeping / n}

    try:
        return trio.run(main)
    finally:
        remove_db(path)


def build_suspended_store(path: str, n: int, count: int, batch: int = 5_000) -> list[str]:
    """Fill a new SQLite file with ``n`` suspended conversations through the runtime (in
    batches, each in its own runtime, so that no process holds ``n`` live runs); return the
    ids of ``count`` threads from the middle of the file to submit to."""

    async def main() -> list[str]:
        chosen: list[str] = []
        with SqliteStore(path) as store:
            done = 0
            while done < n:
                size = min(batch, n - done)
                ids: list[str] = []
                async with runtime(store) as rt:
                    async with trio.open_nursery() as nursery:
                        for i in range(done, done + size):
                            nursery.start_soon(_suspend_into, rt, i, ids)
                if done <= n // 2 < done + size:
                    chosen = ids[:count]
                done += size
        if len(chosen) != count:
            raise AssertionError(f"{n} conversations cannot give {count} to submit to")
        return chosen

    return trio.run(main)


def reopen_until_first_submission(path: str, thread_id: str) -> float:
    """Seconds from opening the store (and a runtime on it) until the runtime accepted a
    submission to ``thread_id``'s pending action (then the call resumes and its run
    completes, untimed, and is read back: submit to another thread next time)."""

    async def main() -> float:
        start_time = time.perf_counter()
        with SqliteStore(path) as store:
            async with runtime(store) as rt:
                [action] = await rt.pending_actions(thread_id)
                result = await action.submit(APPROVE)
                elapsed = time.perf_counter() - start_time
                if result.status != "accepted":
                    raise AssertionError(f"submission not accepted: {result!r}")
                await rt.wait_idle(thread_id)
                await check_completed(rt, [thread_id])
        return elapsed

    return trio.run(main)
