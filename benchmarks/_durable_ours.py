"""Our side of the durable-approval figures: ``pai_actors`` on a :class:`SqliteStore`.

One conversation is one thread. Its work: ``send`` starts a run whose model (one
:class:`ApprovalModel` for every thread, deciding from the request) asks for one ``refund``
tool call with a small JSON input; the tool suspends at its ``approval`` point with a small
payload (committed to the SQLite file before the run is ``waiting``); the client reads the
thread's pending action and submits ``{"approved": true}``; the tool runs again from the top
as a resume and returns; the model answers with text and the run completes.

Each function here opens its own ``trio.run`` and returns what it measured; ``_durable``
turns the numbers into records. The store is ``SqliteStore(path)`` with its defaults (WAL,
``synchronous=NORMAL``: a commit that returned survives a crash of the process).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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

TOOL_NAME = "refund"
APPROVE: dict[str, Any] = {"approved": True}
SCOPE = "bench"


class Refund(BaseModel):
    order: int
    cents: int


class Approval(BaseModel):
    cents: int


class Decision(BaseModel):
    approved: bool


def tool_input(i: int) -> dict[str, Any]:
    """The small JSON input of conversation ``i``'s tool call (the same on every side)."""
    return {"order": i, "cents": 500}


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
        order = int(request.messages[-1].text.rsplit(" ", 1)[1])  # type: ignore[union-attr]
        yield ToolCallEvent(tool_call_id="call_1", tool_name=TOOL_NAME, input=tool_input(order))
        yield Finish("tool-calls")


agent = define_agent(name="bench", tools={TOOL_NAME: refund_tool}, model=ApprovalModel())


def runtime(store: SqliteStore) -> AgentRuntime:
    return create_agent_runtime(agent, store=store)


async def start(rt: AgentRuntime, i: int) -> str:
    """Create conversation ``i``, send its message and return once its call is suspended."""
    thread_id = await rt.create_thread(scope_key=SCOPE)
    await rt.send(thread_id, f"refund {i}")
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
        if runs != ["completed"] or [p.output for p in parts] != [{"refunded": 500}]:
            raise AssertionError(f"thread {thread_id}: runs {runs!r}, parts {parts!r}")


async def check_waiting(rt: AgentRuntime, thread_ids: list[str]) -> None:
    for thread_id in thread_ids:
        actions = await rt.pending_actions(thread_id)
        if [a.name for a in actions] != [f"{TOOL_NAME}.approval"]:
            raise AssertionError(f"thread {thread_id}: pending actions {actions!r}")


def round_trips(n: int, directory: Path, *, concurrent: bool) -> float:
    """Seconds for ``n`` whole conversations on a new SQLite file in ``directory``."""
    path = directory / f"ours-w1-{time.monotonic_ns()}.db"

    async def one(rt: AgentRuntime, i: int, thread_ids: list[str]) -> None:
        thread_id = await start(rt, i)
        await approve(rt, thread_id)
        thread_ids.append(thread_id)

    async def main() -> float:
        thread_ids: list[str] = []
        with SqliteStore(path) as store:
            async with runtime(store) as rt:
                start_time = time.perf_counter()
                if concurrent:
                    async with trio.open_nursery() as nursery:
                        for i in range(n):
                            nursery.start_soon(one, rt, i, thread_ids)
                else:
                    for i in range(n):
                        await one(rt, i, thread_ids)
                elapsed = time.perf_counter() - start_time
                await check_completed(rt, thread_ids)
        if len(thread_ids) != n:
            raise AssertionError(f"{len(thread_ids)} of {n} conversations finished")
        return elapsed

    try:
        return trio.run(main)
    finally:
        remove_db(path)


def suspend_resume(n: int, directory: Path) -> tuple[float, float]:
    """Seconds to suspend ``n`` conversations (all at once), then to resume them all (all
    submissions at once, until every run completed)."""
    path = directory / f"ours-w2-{time.monotonic_ns()}.db"

    async def main() -> tuple[float, float]:
        thread_ids: list[str] = []

        async def suspend_one(rt: AgentRuntime, i: int) -> None:
            thread_ids.append(await start(rt, i))

        with SqliteStore(path) as store:
            async with runtime(store) as rt:
                start_time = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        nursery.start_soon(suspend_one, rt, i)
                suspend_seconds = time.perf_counter() - start_time
                await check_waiting(rt, thread_ids[:: max(1, n // 100)])
                gc.collect()
                start_time = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for thread_id in thread_ids:
                        nursery.start_soon(approve, rt, thread_id)
                resume_seconds = time.perf_counter() - start_time
                await check_completed(rt, thread_ids[:: max(1, n // 100)])
        return suspend_seconds, resume_seconds

    try:
        return trio.run(main)
    finally:
        remove_db(path)


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


_IN_FLIGHT = 100


def memory_per_suspended_call(n: int, directory: str) -> float:
    """Resident bytes per suspended call: VmRSS after ``n`` conversations are suspended (their
    call and run actors passivated), ``_IN_FLIGHT`` at a time, minus VmRSS before, over
    ``n``. Run it in a fresh process."""
    path = Path(directory) / f"ours-mem-{time.monotonic_ns()}.db"
    warm = 50

    async def main() -> float:
        with SqliteStore(path) as store:
            async with runtime(store) as rt:
                # Warm up: imports, caches, pydantic validators and SQLite's page cache are
                # paid before the first reading, not charged to the suspended calls.
                warm_ids = [await start(rt, -1 - i) for i in range(warm)]
                for thread_id in warm_ids:
                    await approve(rt, thread_id)
                gc.collect()
                before = _rss_bytes()
                thread_ids: list[str] = []

                async def suspend_one(i: int) -> None:
                    thread_ids.append(await start(rt, i))

                # A server admits a bounded number of requests at once: 100 conversations
                # in flight at a time, so the figure is what a suspended call keeps after
                # passivation, not the peak of 10,000 model steps running together.
                for first in range(0, n, _IN_FLIGHT):
                    async with trio.open_nursery() as nursery:
                        for i in range(first, min(n, first + _IN_FLIGHT)):
                            nursery.start_soon(suspend_one, i)
                gc.collect()
                after = _rss_bytes()
                await check_waiting(rt, thread_ids[:: max(1, n // 100)])
        return (after - before) / n

    try:
        return trio.run(main)
    finally:
        remove_db(path)


async def _suspend_into(rt: AgentRuntime, i: int, thread_ids: list[str]) -> None:
    thread_ids.append(await start(rt, i))


def build_suspended_store(path: Path, n: int, *, count: int, batch: int = 5_000) -> list[str]:
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


def reopen_until_first_submission(path: Path, thread_id: str) -> float:
    """Seconds from opening the store (and a runtime on it) until the runtime accepted a
    submission to ``thread_id``'s pending action (then the call resumes and its run
    completes, untimed: submit to another thread next time)."""

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
        return elapsed

    return trio.run(main)


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass
