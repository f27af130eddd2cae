"""Figures ``simulation_overhead`` and ``simulation_faults``: what the simulation kit
(``pai_actors.testing.simulate``) costs over the plain runtime.

The workload, both sides: ``n`` approval conversations at once on a
:class:`~pai_actors.MemoryStore` under ``trio.testing.MockClock(autojump_threshold=0)``. Each
conversation creates its thread, sends a message; the model (one scripted step for every
request) calls ``pay``, which needs an approval; the client waits until its thread is idle,
approves, and waits until it is idle again (``pay`` sleeps one virtual second, the model
answers with a text). Timed: the CPU seconds of the whole trio run (``time.process_time``),
each side in a fresh process.

- ``simulation_overhead``: the candidate is ``simulate`` with the invariant checker on after
  every step and at the end (the tools instrumented, every conversation's client a
  ``Workload`` that only approves and always waits for idle); the baseline is the same
  conversations driven through ``create_test_runtime`` by plain trio tasks, no harness.
  Conversations per CPU-second; target: the harness costs at most 1.5x the plain runtime
  (its throughput >= 1/1.5 of the baseline's).
- ``simulation_faults``: faults injected per CPU-second by a simulation of the same
  conversations under ``Faults(crash_rate=0.002, commit_failure_rate=0.01,
  model_error_rate=0.05, model_stall_rate=0.05)`` (each conversation's client still only
  approves); its ratio is its conversations per CPU-second against the fault-free
  simulation's, measured in the same run: what the faults and the recoveries cost.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import ToolContext, ToolRegistration, define_agent, define_tool
from pai_actors.testing import (
    Faults,
    ScriptedModel,
    Workload,
    create_test_runtime,
    simulate,
    text,
    tool_call,
)

from ._harness import Record, Target, fresh, interleave, median, method, throughput_record

TARGET = Target(">=", 1 / 1.5)
FAULTS = {
    "crash_rate": 0.002,
    "commit_failure_rate": 0.01,
    "model_error_rate": 0.05,
    "model_stall_rate": 0.05,
}


class Invoice(BaseModel):
    amount: int


async def _pay(ctx: ToolContext[Invoice]) -> dict[str, int]:
    await trio.sleep(1)
    return {"paid": ctx.input.amount}


def _agent() -> Any:
    pay = define_tool(id="bench.pay", description="Pay.", input_schema=Invoice, execute=_pay)
    return define_agent(name="bench", tools={"pay": ToolRegistration(pay, needs_approval=True)})


def _step(request: Any) -> Any:
    if type(request.messages[-1]).__name__ == "ModelToolMessage":
        return text("Paid.")
    return [tool_call("pay", {"amount": 42})]


def harness_side(n: int, faults: bool = False) -> dict[str, Any]:
    """One simulation of ``n`` conversations; its CPU seconds and what it injected."""
    logging.disable(logging.CRITICAL)  # a crashed runtime logs what it could not write
    workload = Workload(threads=n, behaviours={"approve": 1.0}, think=(0.0,), settle=1.0)
    start = time.process_time()
    result = simulate(
        _agent(),
        model=_step,
        workload=workload,
        seed=1,
        faults=Faults(**FAULTS) if faults else None,  # type: ignore[arg-type]
    )
    seconds = time.process_time() - start
    if result.violations:
        raise AssertionError(f"the simulation broke invariants: {result.violations[:3]}")
    return {"seconds": seconds, "faults": len(result.faults), "commits": result.commits}


def plain_side(n: int) -> dict[str, Any]:
    """The same conversations through the plain test runtime, no harness."""

    async def conversation(rt: Any, number: int) -> None:
        thread_id = await rt.create_thread("simulation", thread_id=f"sim-{number}")
        await rt.send(thread_id, "Hello")
        await rt.wait_idle(thread_id)
        [action] = await rt.pending_actions(thread_id)
        result = await rt.submit_action(action.ref, {"approved": True})
        assert result.status == "accepted", result
        await rt.wait_idle(thread_id)
        state = await rt.get_state(thread_id)
        assert state.runs[-1].status == "completed", state.runs

    async def main() -> None:
        async with (
            create_test_runtime(_agent(), model=ScriptedModel([_step], repeat_last=True)) as rt,
            trio.open_nursery() as nursery,
        ):
            for number in range(1, n + 1):
                nursery.start_soon(conversation, rt, number)

    start = time.process_time()
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return {"seconds": time.process_time() - start}


def _runs(n: int, repeats: int) -> tuple[list[dict[str, Any]], ...]:
    harness, plain, faulty = interleave(
        repeats,
        lambda: fresh(harness_side, n=n),
        lambda: fresh(plain_side, n=n),
        lambda: fresh(harness_side, n=n, faults=True),
    )
    return harness, plain, faulty


_cache: dict[tuple[int, int], tuple[list[dict[str, Any]], ...]] = {}


def _measured(n: int, repeats: int) -> tuple[list[dict[str, Any]], ...]:
    key = (n, repeats)
    if key not in _cache:
        _cache[key] = _runs(n, repeats)
    return _cache[key]


def simulation_overhead(n: int = 1_000, *, repeats: int = 3) -> Record:
    harness, plain, _faulty = _measured(n, repeats)
    return throughput_record(
        "simulation_overhead",
        unit="approval conversations per CPU-second (simulate, invariant checker on)",
        baseline="the same conversations through create_test_runtime, no harness",
        target=TARGET,
        n=n,
        baseline_n=n,
        seconds=[r["seconds"] for r in harness],
        baseline_seconds=[r["seconds"] for r in plain],
        method=method(
            repeats,
            f"{n} conversations at once on a MemoryStore under MockClock(autojump_threshold=0)"
            ", CPU seconds of the whole trio run (time.process_time); each conversation: "
            "create, send, wait idle, approve the pay tool's approval, wait idle (pay sleeps "
            "one virtual second); candidate: simulate() with every tool instrumented and the "
            "invariants checked after every client step and at the end, clients that only "
            "approve and always wait for idle; baseline: plain trio tasks driving "
            "create_test_runtime; sides interleaved with a third (the faulty simulation of "
            "simulation_faults)",
            sides=3,
        ),
    )


def simulation_faults(n: int = 1_000, *, repeats: int = 3) -> Record:
    harness, _plain, faulty = _measured(n, repeats)
    per_second = [r["faults"] / r["seconds"] for r in faulty]
    record = throughput_record(
        "simulation_faults",
        unit="approval conversations per CPU-second of a simulation under faults",
        baseline="the same simulation without faults",
        target=None,
        n=n,
        baseline_n=n,
        seconds=[r["seconds"] for r in faulty],
        baseline_seconds=[r["seconds"] for r in harness],
        method=method(
            repeats,
            f"{n} conversations as in simulation_overhead, under Faults({FAULTS}); faults "
            f"injected per CPU-second: median {median(per_second):.1f} (of "
            f"{median([float(r['faults']) for r in faulty]):.0f} faults, "
            f"{median([float(r['commits']) for r in faulty]):.0f} commits a run)",
            sides=3,
        ),
    )
    return record
