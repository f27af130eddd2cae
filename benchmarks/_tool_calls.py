"""Figures ``tool_calls`` and ``tool_calls_vs_pykka``: tool calls run through the agent runtime.

The candidate is the production path: ``create_agent_runtime(agent, model=..., store=
MemoryStore())`` (uuid ids). The agent has one tool whose ``execute`` returns its validated
input (a pydantic model); the model is a :class:`~pai_actors.testing.ScriptedModel` whose first
step asks for ``n`` calls at once (``n`` ``tool_call(...)`` events in one step) and whose
second step answers with text. The thread is created before timing; the time runs from
``send`` until ``wait_idle`` returns, so it covers both model steps, ``n`` tool-call actors
(each with its transitions committed to the store) and the run's completion. Afterwards
``get_state`` must show every call ``output-available`` with its own input as output.

``tool_calls`` (target: throughput >= 0.3x): the baseline is ``n`` bare trio tasks started
with ``nursery.start_soon``, each doing the same tool work: validate the input with the same
pydantic model and store the result in a list.

``tool_calls_vs_pykka`` (target: throughput >= 5x): the baseline is a pykka
``ThreadingActor`` per call: all are started, each is asked with its input
(``ask(..., block=False)`` futures gathered with ``pykka.get_all``) and validates it with the
same model, then all are stopped (``stop(block=False)`` futures gathered), as in
``vs_pykka``. pykka starts a thread per actor, so it may run fewer calls per repetition; the
figure compares throughputs.

Sizes (``python -m benchmarks``): ``tool_calls`` runs 10,000 calls in one run,
``tool_calls_vs_pykka`` 1,000 on both sides (pykka starts a thread per actor). The
runtime's own work per call is constant (a store commit costs what it writes, whatever the
store holds), but CPython's cyclic garbage collector is not: each full collection walks
every live object, and 10,000 live call actors with their records make it a large part of
the time (about 140 us per call with the collector off at every size; with it on, about
140 us at 500 calls and 300 at 10,000). Compare figures only at the same ``n``.
"""

from __future__ import annotations

import time
from typing import Any

import pykka
import trio
from pydantic import BaseModel

from pai_actors import (
    MemoryStore,
    ToolContext,
    ToolPart,
    create_agent_runtime,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, text, tool_call

from ._harness import Record, Target, fresh, interleave, method, throughput_record

TARGET = Target(">=", 0.3)
PYKKA_TARGET = Target(">=", 5.0)
TOOL_NAME = "echo"
_TIMED = (
    "ours timed from send until wait_idle (two model steps, n tool-call actors, the run's "
    "completion), every call's output checked after"
)


class EchoInput(BaseModel):
    n: int
    word: str


def _input(i: int) -> dict[str, Any]:
    return {"n": i, "word": f"w{i}"}


async def _execute(ctx: ToolContext) -> EchoInput:  # async: a plain def runs in a thread
    result: EchoInput = ctx.input
    return result


echo_tool = define_tool(
    id="bench.echo.v1",
    description="Return the input.",
    input_schema=EchoInput,
    output_schema=EchoInput,
    execute=_execute,
)
agent = define_agent(name="bench", tools={TOOL_NAME: echo_tool})


def _candidate(n: int) -> float:
    model = ScriptedModel([[tool_call(TOOL_NAME, _input(i)) for i in range(n)], text("done")])

    async def main() -> float:
        async with create_agent_runtime(agent, model=model, store=MemoryStore()) as rt:
            thread_id = await rt.create_thread(scope_key="bench")
            start = time.perf_counter()
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            elapsed = time.perf_counter() - start
            state = await rt.get_state(thread_id)
        parts = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
        outputs = [p.output for p in parts if p.state == "output-available"]
        if outputs != [_input(i) for i in range(n)] or [r.status for r in state.runs] != [
            "completed"
        ]:
            raise AssertionError(
                f"expected {n} calls output-available with their inputs; got "
                f"{[(p.state, p.output, p.error_text) for p in parts[:3]]!r} ... and runs "
                f"{[r.status for r in state.runs]!r}"
            )
        return elapsed

    return trio.run(main)


def _baseline(n: int) -> float:
    inputs = [_input(i) for i in range(n)]
    results: list[EchoInput] = []

    async def work(value: dict[str, Any]) -> None:
        results.append(EchoInput.model_validate(value))

    async def main() -> float:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for value in inputs:
                nursery.start_soon(work, value)
        return time.perf_counter() - start

    elapsed = trio.run(main)
    if sorted(r.n for r in results) != list(range(n)):
        raise AssertionError("a bare task lost its result")
    return elapsed


class _PykkaEcho(pykka.ThreadingActor):
    def on_receive(self, message: dict[str, Any]) -> EchoInput:
        return EchoInput.model_validate(message)


def _pykka(n: int) -> float:
    inputs = [_input(i) for i in range(n)]
    start = time.perf_counter()
    refs = [_PykkaEcho.start() for _ in range(n)]
    answers = pykka.get_all(
        [ref.ask(value, block=False) for ref, value in zip(refs, inputs, strict=True)]
    )
    pykka.get_all([ref.stop(block=False) for ref in refs])
    elapsed = time.perf_counter() - start
    if [a.model_dump() for a in answers] != inputs:
        raise AssertionError("a pykka actor answered wrongly")
    return elapsed


def tool_calls(n: int = 10_000, *, repeats: int = 3) -> Record:
    """Tool calls per second through the runtime vs bare trio tasks doing the same work."""
    seconds, baseline_seconds = interleave(
        repeats, lambda: float(fresh(_candidate, n=n)), lambda: float(fresh(_baseline, n=n))
    )
    return throughput_record(
        "tool_calls",
        unit="tool calls/s (one run, all calls at once, memory store)",
        baseline="nursery.start_soon tasks validating the input with the same pydantic model",
        target=TARGET,
        n=n,
        baseline_n=n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(repeats, _TIMED),
    )


def tool_calls_vs_pykka(n: int = 1_000, *, pykka_n: int = 1_000, repeats: int = 3) -> Record:
    """Tool calls per second through the runtime vs a pykka actor per call."""
    seconds, baseline_seconds = interleave(
        repeats, lambda: float(fresh(_candidate, n=n)), lambda: float(fresh(_pykka, n=pykka_n))
    )
    return throughput_record(
        "tool_calls_vs_pykka",
        unit="tool calls/s (one run, all calls at once, memory store)",
        baseline="pykka ThreadingActor per call: start + ask (validate) + stop, concurrently",
        target=PYKKA_TARGET,
        n=n,
        baseline_n=pykka_n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(repeats, _TIMED),
    )
