"""Supervision of call actors (issue 15, item 4): a call actor that fails for a reason that is
not the tool's (here: a store that refuses writes on purpose) is restarted by its run's
``calls`` supervisor from the call's last durable record, with backoff and bounded intensity;
past the bound the run fails with an error that names the call; a tool's own exception stays
the call's outcome and is never a restart. And the call actor's protocol: an ``Abort`` takes
effect at once and overtakes the entry still queued."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    MemoryStore,
    SuspendPoint,
    ToolContext,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors._runtime.address import Abort, CallAddress, Start
from pai_actors._runtime.call import RESTART_INTENSITY, backoff
from pai_actors._store.base import PutCall, Write
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call
from supervisors import Cancelled, Mailbox, open_supervisor


class Query(BaseModel):
    n: int = 0


class Flaky(MemoryStore):
    """A MemoryStore whose commits fail with ``OSError('disk full')`` when ``refuse(writes)``
    holds, ``times`` times (``None``: every time); ``refused`` counts the failures."""

    def __init__(self, refuse: Callable[[list[Write]], bool], times: int | None = 1) -> None:
        super().__init__()
        self.refuse = refuse
        self.times = times
        self.refused = 0

    async def commit(self, writes: Any) -> None:
        if (self.times is None or self.refused < self.times) and self.refuse(list(writes)):
            self.refused += 1
            await trio.lowlevel.checkpoint()
            raise OSError("disk full")
        await super().commit(writes)


def calls_written(writes: list[Write]) -> list[PutCall]:
    return [w for w in writes if isinstance(w, PutCall)]


def starts_a_reentry(writes: list[Write]) -> bool:
    """The actor records that a re-entry (after a submission) begins ``execute``."""
    return any(
        w.call.revision > 0
        and w.stored.record.entry_started
        and not w.call.record.entry_started
        and w.stored.record.phase == "executing"
        for w in calls_written(writes)
    )


def finishes(tool_call_id: str) -> Callable[[list[Write]], bool]:
    """A commit of the call's actor that ends the call ``tool_call_id`` (not the run's
    recording it cancelled)."""

    def refuse(writes: list[Write]) -> bool:
        puts = calls_written(writes)
        return bool(puts) and all(
            w.stored.record.tool_call_id == tool_call_id
            and w.call.revision > 0
            and w.stored.record.phase == "done"
            and w.stored.record.cancelled is None
            for w in puts
        )

    return refuse


async def run_to_idle(agent: Any, model: ScriptedModel, store: MemoryStore | None = None) -> Any:
    """Send one message, wait until the thread is idle, return its state."""
    with trio.fail_after(600):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            return await rt.get_state(thread_id)


def parts(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]


def confirming(entries: list[str]) -> Any:
    def execute(ctx: ToolContext) -> Any:
        entries.append(ctx.entry.type)
        if ctx.entry.type == "resume":
            return {"confirmed": ctx.entry.resume.n}
        return ctx.suspend("confirm", {"n": ctx.input.n})

    return define_tool(
        id="t.confirm.v1",
        description="Confirm.",
        input_schema=Query,
        suspend={"confirm": SuspendPoint(suspend_schema=Query, resume_schema=Query)},
        execute=execute,
    )


async def test_a_resume_whose_start_could_not_be_recorded_is_restarted_and_runs_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entries: list[str] = []
    agent = define_agent(name="a", tools={"confirm": confirming(entries)})
    store = Flaky(starts_a_reentry, times=2)
    model = ScriptedModel([[tool_call("confirm", {"n": 7})], text("done")])
    with trio.fail_after(60):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            before = trio.current_time()
            assert (await action.submit({"n": 9})).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert store.refused == 2  # two failed attempts, then the third recorded its start
    assert trio.current_time() - before >= backoff(1) + backoff(2)  # it waited between them
    assert entries == ["initial", "resume"]  # the resume ran once, after the restarts
    [part] = parts(state)
    assert (part.state, part.output) == ("output-available", {"confirmed": 9})
    assert [r.status for r in state.runs] == ["completed"]


async def test_a_call_whose_outcome_could_not_be_recorded_is_not_run_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[int] = []

    def execute(ctx: ToolContext) -> int:
        ran.append(ctx.input.n)
        return ctx.input.n

    tool = define_tool(id="t.one.v1", description="One.", input_schema=Query, execute=execute)
    agent = define_agent(name="a", tools={"one": tool})
    model = ScriptedModel([[tool_call("one", {"n": 1}, id="c1")], text("done")])
    store = Flaky(finishes("c1"), times=1)
    state = await run_to_idle(agent, model, store)
    assert ran == [1]  # started once: the restart records it, never runs it again
    [part] = parts(state)
    assert (part.state, part.error_text) == (
        "output-error",
        "the tool call failed inside the runtime: OSError('disk full')",
    )
    assert [r.status for r in state.runs] == ["completed"]
    assert len(model.requests) == 2  # the model saw the error and answered


async def test_a_call_whose_registration_reruns_interrupted_calls_runs_again_after_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[int] = []

    def execute(ctx: ToolContext) -> int:
        ran.append(ctx.input.n)
        return ctx.input.n * 10

    tool = define_tool(id="t.one.v1", description="One.", input_schema=Query, execute=execute)
    agent = define_agent(name="a", tools={"one": ToolRegistration(tool, rerun_interrupted=True)})
    model = ScriptedModel([[tool_call("one", {"n": 2}, id="c1")], text("done")])
    store = Flaky(finishes("c1"), times=1)
    state = await run_to_idle(agent, model, store)
    assert ran == [2, 2]  # consented: run again from its durable record
    [part] = parts(state)
    assert (part.state, part.output) == ("output-available", 20)
    assert [r.status for r in state.runs] == ["completed"]


async def test_a_call_failing_past_the_restart_intensity_fails_the_run_naming_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: dict[str, Any] = {}
    ran: list[int] = []

    def one(ctx: ToolContext) -> int:
        ran.append(1)
        return 1

    async def two(ctx: ToolContext) -> int:
        try:
            await trio.sleep_forever()
        finally:
            seen["aborted"], seen["reason"] = ctx.signal.aborted, ctx.signal.reason
        raise AssertionError("unreachable")

    agent = define_agent(
        name="a",
        tools={
            "one": define_tool(id="t.one.v1", description="1.", input_schema=Query, execute=one),
            "two": define_tool(id="t.two.v1", description="2.", input_schema=Query, execute=two),
        },
    )
    model = ScriptedModel([[tool_call("one", {}, id="c1"), tool_call("two", {}, id="c2")]])
    store = Flaky(finishes("c1"), times=None)  # the store refuses call c1's writes for good
    state = await run_to_idle(agent, model, store)
    assert ran == [1]  # never run again
    assert store.refused == RESTART_INTENSITY + 1  # the first failure, then each restart's
    [run] = state.runs
    assert run.status == "failed"
    assert run.error is not None
    assert "'c1'" in run.error
    assert "OSError('disk full')" in run.error
    assert f"at most {RESTART_INTENSITY} times" in run.error
    # The other call was aborted (its signal with the reason) and recorded cancelled.
    assert seen == {"aborted": True, "reason": "the run failed"}
    one_part, two_part = parts(state)
    assert (two_part.state, two_part.error_text) == (
        "output-error",
        "The tool call was cancelled: the run failed",
    )
    assert one_part.state == "output-error"


async def test_a_tools_own_exception_is_its_outcome_never_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[int] = []

    def execute(ctx: ToolContext) -> int:
        ran.append(1)
        raise OSError("disk full")  # the same error a store raises, but the tool's own

    tool = define_tool(id="t.one.v1", description="One.", input_schema=Query, execute=execute)
    agent = define_agent(name="a", tools={"one": tool})
    model = ScriptedModel([[tool_call("one", {})], text("done")])
    state = await run_to_idle(agent, model)
    assert ran == [1]
    [part] = parts(state)
    assert (part.state, part.error_text) == ("output-error", "disk full")
    assert [r.status for r in state.runs] == ["completed"]


async def test_cancel_run_during_a_restart_backoff_records_the_call_cancelled_unrun(
    mock_clock: trio.testing.MockClock,
) -> None:
    """The clock stands still: the restarted actor waits in its backoff when cancel_run
    aborts it, and the resume never runs."""
    entries: list[str] = []
    agent = define_agent(name="a", tools={"confirm": confirming(entries)})
    store = Flaky(starts_a_reentry, times=None)
    model = ScriptedModel([[tool_call("confirm", {"n": 1})], text("done")])
    with trio.fail_after(60):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"n": 2})).status == "accepted"
            await trio.testing.wait_all_tasks_blocked()
            assert store.refused == 1  # failed once; the restart waits for its backoff
            cancelled = await rt.cancel_run(run_id, "stop")
            state = await rt.get_state(thread_id)
    assert cancelled.status == "cancelled"
    assert entries == ["initial"]
    [part] = parts(state)
    assert (part.state, part.error_text) == ("output-error", "The tool call was cancelled: stop")


async def test_an_abort_overtakes_the_queued_entry_and_takes_effect_at_once() -> None:
    received: list[Any] = []
    address = CallAddress("c1")
    async with open_supervisor(name="calls") as calls:

        async def actor(mailbox: Mailbox[Any]) -> None:
            received.append(await mailbox.receive())

        address.ref = calls.spawn(actor, restart="temporary", capacity=1)
        address.tell(Start({"n": 1}))
        child = CallAddress("c1/child.1")
        address.children.add(child)
        address.tell(Abort("stop"))  # before the actor ever ran
        # At once, in the same step: the signal (the call's and its child's) and the scope.
        assert address.controller.signal.aborted
        assert address.controller.signal.reason == "stop"
        assert child.controller.signal.reason == "stop"
        address.tell(Abort("later"))  # the first abort wins
        address.tell(Start({"n": 2}))  # an entry after an abort is dropped
    assert received == []  # its entry never reached it
    assert address.ref.exit_reason == Cancelled("stop")
    assert address.aborted == Abort("stop")
    assert address.controller.signal.reason == "stop"


async def test_a_call_actor_that_ended_leaves_no_reference_cycle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Whatever a call actor held is freed when it ends: a cycle through it (once: the
    # entry's sub-run starter and the call's driver, each holding the other) left a hundred
    # objects a call for the garbage collector, whose every pass then costs them again.
    agent = define_agent(name="a", tools={"confirm": confirming([])})
    script: list[Any] = [[tool_call("confirm", {"n": 1})], text("done")] * 3
    async with create_test_runtime(agent, model=ScriptedModel(script)) as rt:

        async def conversation() -> None:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"n": 2})).status == "accepted"
            await rt.wait_idle(thread_id)

        await conversation()  # (first uses made)
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept in gc.garbage
        try:
            await conversation()
            await conversation()
            gc.collect()
            ours = [
                type(o).__qualname__
                for o in gc.garbage
                if type(o).__module__.split(".")[0] in ("pai_actors", "supervisors", "trio")
            ]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert ours == []
