"""Figure ``cancel_run``: cancelling a run with ``n`` tool calls in flight.

The candidate is the production path: ``create_agent_runtime(agent, model=..., store=
MemoryStore())``. The agent has one tool whose ``execute`` counts itself started and then
awaits ``trio.sleep_forever()``; the model (a :class:`~pai_actors.testing.ScriptedModel`)
asks for ``n`` calls at once in its first step. Once every call's ``execute`` has started
(the count reaches ``n`` and sets a ``trio.Event``) and the harness has waited until every
task is blocked and collected the setup's garbage, only ``await rt.cancel_run(run_id)`` is
timed: it returns once every call, then the run, is recorded as cancelled. Afterwards
``get_state`` must show the run ``cancelled`` and every tool part ``output-error`` with an
``errorText`` starting "The tool call was cancelled".

The baseline is a bare trio nursery of ``n`` tasks each awaiting ``trio.sleep_forever()``,
timed from ``nursery.cancel_scope.cancel()`` until the nursery block exits. The figure is a
ratio of times (lower is better).

Sizes: 10,000 calls (``python -m benchmarks``), as the issue sets. The run records every
cancellation in one transaction. CPython's cyclic garbage collector weighs on both sides
but more on the runtime's, which holds more live objects per call (its full collections
took about a third of the time at 10,000 calls).
"""

from __future__ import annotations

import gc
import time

import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    MemoryStore,
    ToolContext,
    ToolPart,
    create_agent_runtime,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, tool_call

from ._harness import Record, Target, fresh, interleave, method, time_record

TARGET = Target("<=", 3.0)
TOOL_NAME = "wait"
REASON = "benchmark cancel"
CANCELLED = "The tool call was cancelled"


class WaitInput(BaseModel):
    n: int


def _candidate(n: int) -> float:
    started = 0
    all_started = trio.Event()

    async def execute(ctx: ToolContext) -> None:
        nonlocal started
        started += 1
        if started == n:
            all_started.set()
        await trio.sleep_forever()

    tool = define_tool(
        id="bench.wait.v1",
        description="Wait until cancelled.",
        input_schema=WaitInput,
        execute=execute,
    )
    agent = define_agent(name="bench", tools={TOOL_NAME: tool})
    model = ScriptedModel([[tool_call(TOOL_NAME, {"n": i}) for i in range(n)]])

    async def main() -> float:
        async with create_agent_runtime(agent, model=model, store=MemoryStore()) as rt:
            thread_id = await rt.create_thread(scope_key="bench")
            run_id = await rt.send(thread_id, "go")
            await all_started.wait()
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()  # the setup's garbage is the setup's cost, not the cancel's
            start = time.perf_counter()
            await rt.cancel_run(run_id, REASON)
            elapsed = time.perf_counter() - start
            state = await rt.get_state(thread_id)
        parts = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
        cancelled = [
            p
            for p in parts
            if p.state == "output-error" and (p.error_text or "").startswith(CANCELLED)
        ]
        runs = [r.status for r in state.runs]
        if len(parts) != n or len(cancelled) != n or runs != ["cancelled"]:
            raise AssertionError(
                f"expected {n} calls recorded as cancelled and a cancelled run; got "
                f"{len(cancelled)} of {len(parts)} calls cancelled "
                f"({[(p.state, p.error_text) for p in parts[:3]]!r} ...), runs {runs!r}"
            )
        return elapsed

    return trio.run(main)


def _baseline(n: int) -> float:
    async def main() -> float:
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(trio.sleep_forever)
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            start = time.perf_counter()
            nursery.cancel_scope.cancel(REASON)
        return time.perf_counter() - start

    return trio.run(main)


def cancel_run(n: int = 10_000, *, repeats: int = 3) -> Record:
    """Seconds to cancel a run of ``n`` calls in flight vs a nursery of ``n`` sleeping tasks."""
    seconds, baseline_seconds = interleave(
        repeats, lambda: float(fresh(_candidate, n=n)), lambda: float(fresh(_baseline, n=n))
    )
    return time_record(
        "cancel_run",
        baseline="trio nursery of sleeping tasks cancelled",
        target=TARGET,
        n=n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(
            repeats,
            "only the cancel timed, after every call started, every task is blocked and "
            "gc.collect(); every call checked recorded as cancelled",
        ),
    )
