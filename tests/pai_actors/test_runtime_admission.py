"""``max_active_runs``: runs past the limit wait, stored, for a slot, in the order they came.

The slot bound, the FIFO queue and what the close leaves queued are properties of the pure
admission table, checked by ``AdmissionMachine`` in ``test_admission.py`` (each test's
docstring names the rule or invariant); these tests check the runtime around it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    Finish,
    MemoryStore,
    ModelEvent,
    ModelRequest,
    ModelToolMessage,
    ResumeEntry,
    RuntimeConfigError,
    SuspendPoint,
    TextDelta,
    ToolCallEvent,
    ToolContext,
    create_agent_runtime,
    define_agent,
    define_tool,
)
from pai_actors.testing import create_test_runtime


class Job(BaseModel):
    job: str


class Decision(BaseModel):
    approved: bool


class OneCallModel:
    """Asks for one call of ``tool`` with the user's text as the job, then answers ``done``."""

    def __init__(self, tool: str) -> None:
        self.tool = tool

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            yield TextDelta("done")
            yield Finish("stop")
            return
        job = request.messages[-1].text  # type: ignore[union-attr]
        yield ToolCallEvent(tool_call_id="call_1", tool_name=self.tool, input={"job": job})
        yield Finish("tool-calls")


class Gate:
    """A tool that records its job as started and returns once its job is released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.released: dict[str, trio.Event] = {}

    def release(self, job: str) -> None:
        self.released.setdefault(job, trio.Event()).set()

    async def execute(self, ctx: ToolContext) -> Any:
        self.started.append(ctx.input.job)
        await self.released.setdefault(ctx.input.job, trio.Event()).wait()
        return {"done": ctx.input.job}

    def agent(self) -> Any:
        tool = define_tool(
            id="t.gate.v1", description="Gate.", input_schema=Job, execute=self.execute
        )
        return define_agent(name="a", tools={"gate": tool})


async def _ask(ctx: ToolContext) -> Any:
    if isinstance(ctx.entry, ResumeEntry):
        return {"approved": ctx.entry.resume.approved}
    return ctx.suspend("approval", {"job": ctx.input.job})


ask_tool = define_tool(
    id="t.ask.v1",
    description="Ask.",
    input_schema=Job,
    suspend={"approval": SuspendPoint(suspend_schema=Job, resume_schema=Decision)},
    execute=_ask,
)


async def statuses(rt: Any, thread_ids: list[str]) -> list[str]:
    return [(await rt.get_state(t)).runs[-1].status for t in thread_ids]


@asynccontextmanager
async def one_running_one_queued(gate: Gate) -> AsyncIterator[tuple[Any, str, str, str]]:
    """A runtime with one slot: thread ``first``'s run holds it (its call waits at the gate
    for ``"j0"``), thread ``queued``'s run waits for it. Yields ``(rt, first, queued,
    queued_run_id)``."""
    async with create_test_runtime(
        gate.agent(), model=OneCallModel("gate"), max_active_runs=1
    ) as rt:
        first = await rt.create_thread("s")
        await rt.send(first, "j0")
        queued = await rt.create_thread("s")
        yield rt, first, queued, await rt.send(queued, "j1")


async def test_runs_past_the_limit_wait_stored_and_start_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The slot bound and the FIFO queue are properties of ``AdmissionMachine``
    (``slots_are_bounded``, and ``feed``: no start jumps the queue)."""
    gate = Gate()
    with trio.fail_after(10):
        async with create_test_runtime(
            gate.agent(), model=OneCallModel("gate"), max_active_runs=2
        ) as rt:
            threads = [await rt.create_thread("s") for _ in range(5)]
            for i, thread_id in enumerate(threads):
                await rt.send(thread_id, f"j{i}")
            await trio.testing.wait_all_tasks_blocked()
            assert gate.started == ["j0", "j1"]  # two active; three stored, waiting
            assert await statuses(rt, threads) == ["running"] * 5
            gate.release("j1")
            await rt.wait_idle(threads[1])
            await trio.testing.wait_all_tasks_blocked()
            assert gate.started == ["j0", "j1", "j2"]  # the slot went to the first queued
            gate.release("j0")  # each slot freed goes to the next queued run, in order
            await rt.wait_idle(threads[0])
            await trio.testing.wait_all_tasks_blocked()
            assert gate.started == ["j0", "j1", "j2", "j3"]
            for job in ("j2", "j3", "j4"):
                gate.release(job)
            for thread_id in threads:
                await rt.wait_idle(thread_id)  # waits for a queued run too
            assert gate.started == ["j0", "j1", "j2", "j3", "j4"]
            assert await statuses(rt, threads) == ["completed"] * 5


async def test_a_passivated_run_holds_no_slot(autojump_clock: trio.testing.MockClock) -> None:
    """A run's end frees its slot for the first queued activation: a property of
    ``AdmissionMachine`` (``run_ends``, ``slots_are_bounded``)."""
    gate = Gate()
    gate.release("j")
    agent = define_agent(name="a", tools={"ask": ask_tool, "gate": gate.agent().tools["gate"]})
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=OneCallModel("ask"), max_active_runs=1) as rt:
            waiting = [await rt.create_thread("s") for _ in range(3)]
            for thread_id in waiting:
                await rt.send(thread_id, "j")
            for thread_id in waiting:
                await rt.wait_idle(thread_id)
            assert await statuses(rt, waiting) == ["waiting"] * 3  # one slot served them all
            for thread_id in waiting:
                [action] = await rt.pending_actions(thread_id)
                assert (await action.submit({"approved": True})).status == "accepted"
            for thread_id in waiting:  # the resumes took the slot one after another
                await rt.wait_idle(thread_id)
            assert await statuses(rt, waiting) == ["completed"] * 3


async def test_a_submission_past_the_limit_resumes_once_a_slot_is_free(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An activation past the limit is queued and taken in order as slots free: a property of
    ``AdmissionMachine`` (``request_activation``, ``feed``, ``slots_are_bounded``)."""
    gate = Gate()
    agent = define_agent(name="a", tools={"ask": ask_tool, "gate": gate.agent().tools["gate"]})

    class Router:  # thread "ask" asks for approval; thread "gate" blocks in the gate
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            job = next(m.text for m in request.messages if m.role == "user")
            async for event in OneCallModel(job).stream(request):
                yield event

    with trio.fail_after(10):
        async with create_test_runtime(agent, model=Router(), max_active_runs=1) as rt:
            asking = await rt.create_thread("s")
            await rt.send(asking, "ask")
            await rt.wait_idle(asking)
            blocking = await rt.create_thread("s")
            await rt.send(blocking, "gate")
            await trio.testing.wait_all_tasks_blocked()
            assert gate.started == ["gate"]
            [action] = await rt.pending_actions(asking)
            assert (await action.submit({"approved": True})).status == "accepted"
            await trio.testing.wait_all_tasks_blocked()
            # Accepted and stored; its resume waits for the slot the gate holds.
            [call] = await rt.store.list_calls(asking)
            assert call.record.phase != "done"
            gate.release("gate")
            await rt.wait_idle(asking)
            assert await statuses(rt, [asking, blocking]) == ["completed", "completed"]


async def test_cancelling_a_queued_run_records_it_and_it_never_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A queued run being cancelled never starts and is dropped once recorded, and ``wait_idle``
    waits for it: properties of ``AdmissionMachine`` (``cancel_ends``, ``started``,
    ``idle_means_nothing_in_flight``)."""
    gate = Gate()
    with trio.fail_after(10):
        async with one_running_one_queued(gate) as (rt, first, queued, run_id):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.wait_idle, queued)  # waits for the run, queued...
                await trio.testing.wait_all_tasks_blocked()
                await rt.cancel_run(run_id)  # ...and returns once it is cancelled
            gate.release("j0")
            await rt.wait_idle(first)
            await trio.testing.wait_all_tasks_blocked()
            assert gate.started == ["j0"]
            assert await statuses(rt, [first, queued]) == ["completed", "cancelled"]


async def test_queued_runs_left_by_a_closed_runtime_go_on_in_the_next(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """What the close leaves unstarted, to park, is a property of ``AdmissionMachine``
    (``table_agrees_with_the_shell``: ``unstarted()``; ``closed``)."""
    gate = Gate()
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(
            gate.agent(), model=OneCallModel("gate"), store=store, max_active_runs=1
        ) as rt:
            threads = [await rt.create_thread("s") for _ in range(3)]
            for i, thread_id in enumerate(threads):
                await rt.send(thread_id, f"j{i}")
            await trio.testing.wait_all_tasks_blocked()
            assert gate.started == ["j0"]
        # Nothing is left said to be running: the first run's call is recorded cancelled,
        # and the queued runs, never started, wait for the next runtime.
        assert [(await store.list_runs(t))[-1].status for t in threads] == ["waiting"] * 3
        for job in ("j0", "j1", "j2"):
            gate.release(job)
        async with create_test_runtime(
            gate.agent(), model=OneCallModel("gate"), store=store.reopen(), max_active_runs=1
        ) as rt:
            for thread_id in threads:
                await rt.wait_idle(thread_id)
            assert await statuses(rt, threads) == ["completed"] * 3
    assert gate.started == ["j0", "j1", "j2"]  # the cancelled call is not run again


async def test_wait_idle_on_a_queued_run_returns_when_the_runtime_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``Closed`` drops the queue and wakes its threads: a property of ``AdmissionMachine``
    (``closed``)."""
    gate = Gate()
    returned: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with one_running_one_queued(gate) as (rt, first, queued, _):

                async def wait(thread_id: str) -> None:
                    await rt.wait_idle(thread_id)
                    returned.append(thread_id)

                nursery.start_soon(wait, first)
                nursery.start_soon(wait, queued)
                await trio.testing.wait_all_tasks_blocked()
                assert returned == []  # one run holds the slot, the other waits for it
    # The close stopped the first run and left the queued one to the next runtime: neither
    # thread has anything running here any more, so neither wait is left hanging.
    assert sorted(returned) == sorted([first, queued])


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "8"])
def test_a_bad_limit_is_refused_at_creation(value: Any) -> None:
    agent = define_agent(name="a", tools={"ask": ask_tool})
    with pytest.raises(RuntimeConfigError, match="max_active_runs must be an int >= 1"):
        create_agent_runtime(agent, model=OneCallModel("ask"), max_active_runs=value)


def test_the_default_limit_and_no_limit() -> None:
    agent = define_agent(name="a", tools={"ask": ask_tool})
    model = OneCallModel("ask")
    assert create_agent_runtime(agent, model=model).max_active_runs == 256
    assert create_agent_runtime(agent, model=model, max_active_runs=None).max_active_runs is None
