"""The sides of the sub-agent figures (issue 18): orchestrator runs fanning out to
sub-agents, each sub-agent with one approval a client submits, on a :class:`SqliteStore`.

One orchestrator conversation is one thread of the ``orchestrator`` agent: ``send`` starts
a run whose model (:class:`OrchestratorModel`) asks for one ``fan_out`` tool call; the tool
runs ``fanout`` sub-agents at once (``ctx.agents.run_all``), each a run of the
``specialist`` agent on a thread of its own, linked to the call. A specialist is exactly the
conversation of the W1 figures (:mod:`._durable_ours`): its model asks for one ``refund``
call, which suspends at its ``approval`` point. ``wait_idle`` on the orchestrator's thread
returns once the whole tree waits (the ``fan_out`` call waits for its sub-runs with no
task, every sub-agent's call waits on its approval); the client lists the ``fanout``
pending actions through the orchestrator's thread (``pending_actions`` lists the
sub-agents' with their origin chain), submits ``{"approved": true}`` to each, and waits for
the tree again: each refund returns, each specialist answers, ``fan_out`` is entered again
and gets every answer, and the orchestrator answers.

Each side runs in a fresh process (:func:`benchmarks._harness.fresh`); after its measured
part it closes the runtime and the store and reads every conversation back, untimed,
through a NEW ``SqliteStore`` on the same file and a new runtime: the orchestrator's run
completed with every answer, each sub-agent's run completed with the refund's result (or,
after the memory side's suspend, every sub-agent's approval pending under the orchestrator's
thread). The baselines are :func:`._durable_ours.w1` and
:func:`._durable_ours.memory_per_suspended_call`, top-level conversations of the same
specialist's work.
"""

from __future__ import annotations

import gc
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
    SqliteStore,
    TextDelta,
    ToolCallEvent,
    ToolContext,
    ToolPart,
    create_agent_runtime,
    create_pai,
    define_agent,
    define_tool,
)

from ._conversation import (
    APPROVE,
    PAYLOAD,
    TOOL_NAME,
    bookkeeping_bytes,
    new_db,
    order_of,
    remove_db,
    request,
    rss_bytes,
)
from ._durable_ours import ApprovalModel, check_completed, refund_tool

SCOPE = "bench-subagents"
ORCHESTRATOR = "orchestrator"
SPECIALIST = "specialist"
FAN_OUT = "fan_out"
ANSWER = "done"
"""What each specialist answers (:class:`ApprovalModel`), and the orchestrator too."""
WARM_UP = 5
"""Orchestrator conversations run (suspended and approved) before the memory side's first
reading (5 x 10 sub-agents: the 50 conversations of the W2 memory figures' warm-up)."""


class FanOut(BaseModel):
    first: int
    count: int


async def _fan_out(ctx: ToolContext[FanOut]) -> Any:
    """Run ``count`` specialists at once, on the orders ``first``, ``first + 1``, ...; entered
    again once they all ended, when ``run_all`` returns their answers."""
    orders = range(ctx.input.first, ctx.input.first + ctx.input.count)
    answers = await ctx.agents.run_all([(SPECIALIST, request(order)) for order in orders])
    return {"answers": [answer.text for answer in answers]}


fan_out_tool = define_tool(
    id="bench.fan-out.v1",
    description="Hand each order to a specialist, all at once.",
    input_schema=FanOut,
    execute=_fan_out,
)


def expected_output(fanout: int) -> dict[str, Any]:
    return {"answers": [ANSWER] * fanout}


class OrchestratorModel:
    """A fixed model: asks for one ``fan_out`` call over ``fanout`` orders, then answers
    ``done`` once it has the result. The orchestrator's number is read from the user's
    message (``"refund <i>"``): its orders are ``i * fanout`` to ``i * fanout + fanout - 1``."""

    def __init__(self, fanout: int) -> None:
        self.fanout = fanout

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            yield TextDelta(ANSWER)
            yield Finish("stop")
            return
        i = order_of(request.messages[-1].text)  # type: ignore[union-attr]
        yield ToolCallEvent(
            tool_call_id="call_1",
            tool_name=FAN_OUT,
            input={"first": i * self.fanout, "count": self.fanout},
        )
        yield Finish("tool-calls")


def runtime(store: SqliteStore, fanout: int) -> AgentRuntime:
    """The runtime a user would make: both agents in one Pai, every other setting at its
    default (``max_active_runs``, ``max_agent_depth``, ...)."""
    pai = create_pai(
        {
            ORCHESTRATOR: define_agent(
                name="orchestrator",
                tools={FAN_OUT: fan_out_tool},
                model=OrchestratorModel(fanout),
            ),
            SPECIALIST: define_agent(
                name="specialist", tools={TOOL_NAME: refund_tool}, model=ApprovalModel()
            ),
        }
    )
    return create_agent_runtime(pai, store=store)


async def start(rt: AgentRuntime, i: int) -> str:
    """Create orchestrator conversation ``i``, send its message and return once its whole
    tree waits (every sub-agent's call on its approval)."""
    thread_id = await rt.create_thread(scope_key=SCOPE, agent_id=ORCHESTRATOR)
    await rt.send(thread_id, request(i))
    await rt.wait_idle(thread_id)
    return thread_id


async def approve(rt: AgentRuntime, thread_id: str, fanout: int) -> None:
    """List the sub-agents' pending actions through the orchestrator's thread, submit
    ``{"approved": true}`` to each (one after another, as one client would), and wait until
    the whole tree is idle again."""
    actions = await rt.pending_actions(thread_id)
    if len(actions) != fanout:
        raise AssertionError(f"thread {thread_id}: {len(actions)} pending actions, not {fanout}")
    for action in actions:
        result = await action.submit(APPROVE)
        if result.status != "accepted":
            raise AssertionError(f"submission not accepted: {result!r}")
    await rt.wait_idle(thread_id)


async def _conversation(rt: AgentRuntime, i: int, fanout: int, thread_ids: list[str]) -> None:
    thread_id = await start(rt, i)
    await approve(rt, thread_id, fanout)
    thread_ids.append(thread_id)


async def _suspend_into(rt: AgentRuntime, i: int, thread_ids: list[str]) -> None:
    thread_ids.append(await start(rt, i))


def _fan_out_part(state: Any) -> ToolPart:
    parts = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    if len(parts) != 1 or parts[0].tool_name != FAN_OUT:
        raise AssertionError(f"thread {state.thread_id}: tool parts {parts!r}")
    return parts[0]


async def check_completed_tree(rt: AgentRuntime, thread_ids: list[str], fanout: int) -> None:
    """Each orchestrator's run completed with every specialist's answer, and each of its
    ``fanout`` sub-agent threads completed with the refund's result."""
    for thread_id in thread_ids:
        state = await rt.get_state(thread_id)
        part = _fan_out_part(state)
        runs = [r.status for r in state.runs]
        if runs != ["completed"] or part.output != expected_output(fanout):
            raise AssertionError(f"thread {thread_id}: runs {runs!r}, output {part.output!r}")
        if len(set(part.sub_threads)) != fanout:
            raise AssertionError(f"thread {thread_id}: sub-threads {part.sub_threads!r}")
        await check_completed(rt, list(part.sub_threads))


async def check_waiting_tree(rt: AgentRuntime, thread_ids: list[str], fanout: int) -> None:
    """Each orchestrator lists ``fanout`` pending approvals, one per sub-agent thread, each
    with the orchestrator's ``fan_out`` call as its origin."""
    for thread_id in thread_ids:
        actions = await rt.pending_actions(thread_id)
        shown = [(a.name, a.input) for a in actions]
        origins = [[o.thread_id for o in a.origin_chain] for a in actions]
        if (
            shown != [(f"{TOOL_NAME}.approval", PAYLOAD)] * fanout
            or origins != [[thread_id]] * fanout
            or len({a.ref.thread_id for a in actions}) != fanout
        ):
            raise AssertionError(f"thread {thread_id}: pending actions {actions!r}")


def _check_count(thread_ids: list[str], n: int) -> None:
    if len(set(thread_ids)) != n:
        raise AssertionError(f"{len(set(thread_ids))} distinct conversations of {n}")


async def _read_back(path: Path, thread_ids: list[str], fanout: int, *, waiting: bool) -> None:
    with SqliteStore(path) as store:
        async with runtime(store, fanout) as rt:
            if waiting:
                await check_waiting_tree(rt, thread_ids, fanout)
            else:
                await check_completed_tree(rt, thread_ids, fanout)


def conversations(directory: str, orchestrators: int, fanout: int) -> float:
    """Seconds for ``orchestrators`` whole orchestrator conversations, all at once
    (``orchestrators`` trio tasks in a nursery), on a new SQLite file in ``directory``
    (``SqliteStore(path)``: WAL, ``durability="normal"``). No warm-up."""
    path = new_db(directory, "ours-subagents")

    async def main() -> float:
        thread_ids: list[str] = []
        with SqliteStore(path) as store:
            async with runtime(store, fanout) as rt:
                start_time = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(orchestrators):
                        nursery.start_soon(_conversation, rt, i, fanout, thread_ids)
                elapsed = time.perf_counter() - start_time
        _check_count(thread_ids, orchestrators)
        await _read_back(path, thread_ids, fanout, waiting=False)
        return elapsed

    try:
        return trio.run(main)
    finally:
        remove_db(path)


def memory_per_suspended_subagent(
    directory: str, orchestrators: int, fanout: int
) -> dict[str, float]:
    """Resident bytes per suspended sub-agent: VmRSS after ``orchestrators`` conversations,
    all sent at once, wait with every sub-agent suspended on its approval, minus VmRSS before
    (after a warm-up and ``gc.collect()``), minus the workload's own list of orchestrator
    thread ids (:func:`bookkeeping_bytes`), over the ``orchestrators * fanout`` sub-agents.
    Everything the tree keeps is charged to its sub-agents: the orchestrator's thread, run
    and waiting ``fan_out`` call too. Run it in a fresh process."""
    path = new_db(directory, "ours-subagents-mem")
    n = orchestrators * fanout

    async def main() -> dict[str, float]:
        with SqliteStore(path) as store:
            async with runtime(store, fanout) as rt:
                # Warm up: imports, caches, pydantic validators and SQLite's page cache are
                # paid before the first reading, not charged to the suspended sub-agents.
                warm_ids = [await start(rt, -1 - i) for i in range(WARM_UP)]
                for thread_id in warm_ids:
                    await approve(rt, thread_id, fanout)
                del warm_ids
                gc.collect()
                before = rss_bytes()
                thread_ids: list[str] = []
                async with trio.open_nursery() as nursery:
                    for i in range(orchestrators):
                        nursery.start_soon(_suspend_into, rt, i, thread_ids)
                gc.collect()
                after = rss_bytes()
                bookkeeping = bookkeeping_bytes(thread_ids)
        _check_count(thread_ids, orchestrators)
        await _read_back(path, thread_ids, fanout, waiting=True)
        return {"bytes": (after - before - bookkeeping) / n, "bookkeeping": bookkeeping / n}

    try:
        return trio.run(main)
    finally:
        remove_db(path)
