"""Figure ``threaded``: approval round trips driven from 8 OS threads through the synchronous
facade (``pai_actors.threaded``), against the same work driven by 8 trio tasks in the
runtime's own trio run. Target: throughput >= 0.5x.

One round trip is one conversation: ``create_thread``, ``send`` (the model asks for one
``refund`` call, which suspends for approval), ``wait_idle``, ``pending_actions``, ``submit``
``{"approved": true}`` (the call resumes and returns), ``wait_idle`` (the model answers and
the run completes): six calls into the runtime, each a crossing into trio and a future for
the facade. Each of the 8 drivers runs ``n // 8`` conversations one after another, so the
facade side pays every crossing on the critical path of its driver. The runtime is the
production one (``create_agent_runtime``, uuid ids) on a ``MemoryStore``, so the facade's
overhead is not hidden behind SQLite's commits (on a ``SqliteStore`` the ratio is closer to
1); the tool is ``async``, so no worker thread is measured on either side. Both sides check
afterwards that every conversation completed with the approved output.

The facade's runtime is started before timing and stopped after it; the trio side's runtime
is entered before timing too. Timing covers only the conversations.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import trio
from pydantic import BaseModel

from pai_actors import (
    AgentRuntime,
    Finish,
    MemoryStore,
    ModelEvent,
    ModelRequest,
    ModelToolMessage,
    ResumeEntry,
    SuspendPoint,
    TextDelta,
    ToolCallEvent,
    ToolContext,
    ToolPart,
    create_agent_runtime,
    define_agent,
    define_tool,
)
from pai_actors import threaded as facade

from ._harness import Record, Target, fresh, interleave, method, throughput_record

TARGET = Target(">=", 0.5)
DRIVERS = 8
APPROVE = {"approved": True}


class Refund(BaseModel):
    order: int


class Decision(BaseModel):
    approved: bool


async def _refund(ctx: ToolContext) -> Any:
    if isinstance(ctx.entry, ResumeEntry):
        return {"order": ctx.input.order, "approved": ctx.entry.resume.approved}
    return ctx.suspend("approval", {"order": ctx.input.order})


class _Model:
    """Asks for one ``refund`` call, then answers ``done`` once it has the result."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            yield TextDelta("done")
            yield Finish("stop")
            return
        yield ToolCallEvent(tool_call_id="call_1", tool_name="refund", input={"order": 1})
        yield Finish("tool-calls")


_agent = define_agent(
    name="bench",
    tools={
        "refund": define_tool(
            id="bench.threaded-refund.v1",
            description="Refund an order after approval.",
            input_schema=Refund,
            suspend={"approval": SuspendPoint(suspend_schema=Refund, resume_schema=Decision)},
            execute=_refund,
        )
    },
)


def _runtime() -> AgentRuntime:
    return create_agent_runtime(_agent, model=_Model(), store=MemoryStore())


def _check(state: Any) -> None:
    parts = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    runs = [r.status for r in state.runs]
    if runs != ["completed"] or [p.output for p in parts] != [{"order": 1, "approved": True}]:
        raise AssertionError(f"thread {state.thread_id}: runs {runs!r}, parts {parts!r}")


def _facade_side(n: int) -> float:
    per_driver = n // DRIVERS
    thread_ids: list[str] = []
    lock = threading.Lock()
    failures: list[BaseException] = []
    with facade.start(_runtime) as rt:
        gate = threading.Barrier(DRIVERS + 1)

        def drive() -> None:
            try:
                gate.wait()
                mine = []
                for _ in range(per_driver):
                    thread_id = rt.create_thread("bench").get()
                    rt.send(thread_id, "refund").get()
                    rt.wait_idle(thread_id).get()
                    [action] = rt.pending_actions(thread_id).get()
                    if action.submit(APPROVE).get().status != "accepted":
                        raise AssertionError("submission not accepted")
                    rt.wait_idle(thread_id).get()
                    mine.append(thread_id)
                with lock:
                    thread_ids.extend(mine)
            except BaseException as exc:
                failures.append(exc)

        drivers = [threading.Thread(target=drive) for _ in range(DRIVERS)]
        for driver in drivers:
            driver.start()
        gate.wait()
        begin = time.perf_counter()
        for driver in drivers:
            driver.join()
        seconds = time.perf_counter() - begin
        if failures:
            raise failures[0]
        for thread_id in thread_ids:
            _check(rt.get_state(thread_id).get())
    return seconds


def _trio_side(n: int) -> float:
    per_driver = n // DRIVERS

    async def main() -> float:
        thread_ids: list[str] = []
        async with _runtime() as rt:

            async def drive() -> None:
                for _ in range(per_driver):
                    thread_id = await rt.create_thread("bench")
                    await rt.send(thread_id, "refund")
                    await rt.wait_idle(thread_id)
                    [action] = await rt.pending_actions(thread_id)
                    if (await action.submit(APPROVE)).status != "accepted":
                        raise AssertionError("submission not accepted")
                    await rt.wait_idle(thread_id)
                    thread_ids.append(thread_id)

            begin = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(DRIVERS):
                    nursery.start_soon(drive)
            seconds = time.perf_counter() - begin
            for thread_id in thread_ids:
                _check(await rt.get_state(thread_id))
        return seconds

    return trio.run(main)


def threaded(n: int, *, repeats: int) -> Record:
    """``n`` conversations (a multiple of 8) from 8 threads through the facade, vs 8 trio
    tasks in the runtime's trio run; throughput in round trips per second."""
    if n < DRIVERS or n % DRIVERS:
        raise ValueError(f"n must be a positive multiple of {DRIVERS}, got {n!r}")
    seconds, baseline_seconds = interleave(
        repeats, lambda: float(fresh(_facade_side, n=n)), lambda: float(fresh(_trio_side, n=n))
    )
    return throughput_record(
        "threaded",
        unit="approval round trips/s",
        baseline=f"the same conversations from {DRIVERS} trio tasks in the runtime's trio run",
        target=TARGET,
        n=n,
        baseline_n=n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(
            repeats,
            f"{DRIVERS} drivers each running n/{DRIVERS} conversations one after another; "
            "MemoryStore; every conversation checked completed after the timed part",
        ),
    )
