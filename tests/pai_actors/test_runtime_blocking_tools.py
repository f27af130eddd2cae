"""Blocking tools: a plain ``def`` execute runs in a worker thread under the runtime's limiter.

These tests run on trio's real clock under ``trio.fail_after``: a worker thread's work is
invisible to trio, so ``MockClock(autojump_threshold=0)`` would jump while it works (the
reason ``create_test_runtime`` runs plain defs inline by default). Threads are ordered with
``threading.Barrier`` and ``threading.Event``, never with sleeps, and nothing asserts a time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from pydantic import BaseModel

from pai_actors import (
    AbortSignal,
    MemoryStore,
    ModelRequest,
    ModelToolMessage,
    RuntimeConfigError,
    SuspendPoint,
    ToolContext,
    ToolPart,
    create_agent_runtime,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

TIMEOUT = 20  # seconds: a safety net for a hang, never an assertion about speed
WAIT = 10.0  # threading waits inside tools: a broken limiter breaks the barrier, not the test


class Item(BaseModel):
    n: int


def answer_after_tools(calls: list[Any]) -> ScriptedModel:
    """A model that asks for ``calls`` at once, then answers ``"done"``."""

    def step(request: ModelRequest) -> Any:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            return text("done")
        return calls

    return ScriptedModel([step], repeat_last=True)


def tool_parts(state: Any) -> list[ToolPart]:
    return [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]


class Recorder(logging.Handler):
    """Collects the discard records of the ``pai_actors`` logger; ``discarded`` is set at
    the first one (from the worker thread that logs it)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.discarded = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "discarded"):
            self.records.append(record)
            self.discarded.set()


@pytest.fixture
def discards() -> Iterator[Recorder]:
    recorder = Recorder()
    logger = logging.getLogger("pai_actors")
    logger.addHandler(recorder)
    try:
        yield recorder
    finally:
        logger.removeHandler(recorder)


async def wait_thread_event(event: threading.Event) -> None:
    """Wait in trio for a ``threading.Event`` (on a worker thread of the test's own)."""
    assert await trio.to_thread.run_sync(event.wait, WAIT), "the event never came"


async def test_blocking_tools_run_in_parallel_up_to_the_limit() -> None:
    limit = 3
    barrier = threading.Barrier(limit, timeout=WAIT)  # passes only with `limit` at once
    lock = threading.Lock()
    running = [0]
    most = [0]
    trio_thread = threading.current_thread()
    threads: set[threading.Thread] = set()

    def execute(ctx: ToolContext) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            threads.add(threading.current_thread())
        try:
            barrier.wait()  # inline on the trio thread, the first call would block them all
        finally:
            with lock:
                running[0] -= 1
        return int(ctx.input.n)

    tool = define_tool(
        id="test.block.v1", description="Blocks.", input_schema=Item, execute=execute
    )
    agent = define_agent(name="a", tools={"block": tool})
    model = answer_after_tools([tool_call("block", {"n": i}) for i in range(2 * limit)])
    with trio.fail_after(TIMEOUT):
        async with create_agent_runtime(agent, model=model, thread_limit=limit) as rt:
            assert rt.blocking_statistics().sync_tools == "thread"
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [(p.state, p.output) for p in tool_parts(state)] == [
        ("output-available", i) for i in range(2 * limit)
    ]
    assert most[0] == limit  # the barrier needs `limit` at once; the limiter allows no more
    assert trio_thread not in threads
    assert [r.status for r in state.runs] == ["completed"]


async def test_children_that_block_run_in_worker_threads_too() -> None:
    barrier = threading.Barrier(2, timeout=WAIT)

    def child(ctx: ToolContext) -> int:
        barrier.wait()
        return int(ctx.input.n) * 10

    child_tool = define_tool(id="test.child.v1", description="c", input_schema=Item, execute=child)

    async def parent(ctx: ToolContext) -> list[int]:
        results: list[int] = []
        async with trio.open_nursery() as nursery:
            for n in (1, 2):

                async def one(n: int = n) -> None:
                    results.append(await ctx.tools["child"].execute({"n": n}))

                nursery.start_soon(one)
        return sorted(results)

    parent_tool = define_tool(
        id="test.parent.v1",
        description="p",
        input_schema=Item,
        tools={"child": child_tool},
        execute=parent,
    )
    agent = define_agent(name="a", tools={"parent": parent_tool})
    model = answer_after_tools([tool_call("parent", {"n": 0})])
    with trio.fail_after(TIMEOUT):
        async with create_agent_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
    assert (part.state, part.output) == ("output-available", [10, 20])


async def test_a_cancelled_blocking_call_is_recorded_at_once_and_its_late_result_discarded(
    discards: Recorder,
) -> None:
    entered = threading.Event()
    release = threading.Event()
    seen: list[bool] = []

    def execute(ctx: ToolContext) -> str:
        entered.set()
        release.wait(WAIT)
        seen.append(ctx.signal.aborted)  # a cooperative tool would stop here
        return "too late"

    tool = define_tool(id="test.slow.v1", description="Slow.", input_schema=Item, execute=execute)
    agent = define_agent(name="a", tools={"slow": tool})
    model = answer_after_tools([tool_call("slow", {"n": 1})])
    with trio.fail_after(TIMEOUT):
        async with create_agent_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await wait_thread_event(entered)
            await rt.cancel_run(run_id, "the user left")  # returns while the thread still runs
            state = await rt.get_state(thread_id)
            [part] = tool_parts(state)
            assert part.state == "output-error"
            assert part.error_text == "The tool call was cancelled: the user left"
            assert [r.status for r in state.runs] == ["cancelled"]
            statistics = rt.blocking_statistics()
            assert (statistics.running, statistics.abandoned, statistics.discarded) == (1, 1, 0)
            assert not discards.records

            release.set()
            await wait_thread_event(discards.discarded)
            assert seen == [True]
            statistics = rt.blocking_statistics()
            assert (statistics.running, statistics.abandoned, statistics.discarded) == (0, 0, 1)
            [record] = discards.records
            assert (record.tool_call_id, record.tool_name, record.discarded) == (  # type: ignore[attr-defined]
                part.tool_call_id,
                "slow",
                "returned",
            )
            assert "discarded" in record.getMessage()
            after = await rt.get_state(thread_id)
    assert tool_parts(after) == [part]  # the late result changed nothing


async def test_a_call_cancelled_while_waiting_for_a_thread_never_runs(discards: Recorder) -> None:
    entered = threading.Event()
    release = threading.Event()
    started: list[int] = []

    def execute(ctx: ToolContext) -> int:
        started.append(ctx.input.n)
        entered.set()
        release.wait(WAIT)
        return int(ctx.input.n)

    tool = define_tool(id="test.one.v1", description="One.", input_schema=Item, execute=execute)
    agent = define_agent(name="a", tools={"one": tool})
    model = answer_after_tools([tool_call("one", {"n": 1}), tool_call("one", {"n": 2})])
    with trio.fail_after(TIMEOUT):
        async with create_agent_runtime(agent, model=model, thread_limit=1) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await wait_thread_event(entered)
            await trio.testing.wait_all_tasks_blocked()  # the second call waits for the limiter
            await rt.cancel_run(run_id)
            parts = tool_parts(await rt.get_state(thread_id))
            release.set()
            await wait_thread_event(discards.discarded)
    assert [p.error_text for p in parts] == ["The tool call was cancelled."] * 2
    assert len(started) == 1  # the other never started: nothing of it ran, nothing to discard
    assert len(discards.records) == 1


async def test_closing_the_runtime_cancels_a_blocking_call_and_records_it(
    discards: Recorder,
) -> None:
    entered = threading.Event()
    release = threading.Event()

    def execute(ctx: ToolContext) -> None:
        entered.set()
        release.wait(WAIT)

    tool = define_tool(id="test.hang.v1", description="Hangs.", input_schema=Item, execute=execute)
    agent = define_agent(name="a", tools={"hang": tool})
    model = answer_after_tools([tool_call("hang", {"n": 1})])
    store = MemoryStore()
    with trio.fail_after(TIMEOUT):
        async with create_agent_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await wait_thread_event(entered)
        # the block exited without waiting for the thread
        async with create_agent_runtime(agent, model=model, store=store) as rt:
            [part] = tool_parts(await rt.get_state(thread_id))
        release.set()
        await wait_thread_event(discards.discarded)
    assert (part.state, part.error_text) == (
        "output-error",
        "The tool call was cancelled: the runtime is closing",
    )


async def test_a_blocking_tool_may_build_results_and_reach_trio_through_from_thread() -> None:
    class Progress(BaseModel):
        done: int

    def execute(ctx: ToolContext) -> Any:
        trio.from_thread.run(ctx.data.write, "progress", {"done": 1})
        items = trio.from_thread.run(ctx.data.list, "progress")
        if ctx.input.n == 0:
            return ctx.fail(f"{len(items)} item, and a deliberate failure")
        return ctx.suspend("ask", {"n": ctx.input.n})

    tool = define_tool(
        id="test.mixed.v1",
        description="Mixed.",
        input_schema=Item,
        data_schemas={"progress": Progress},
        suspend={"ask": SuspendPoint(suspend_schema=Item, resume_schema=Item)},
        execute=execute,
    )
    agent = define_agent(name="a", tools={"mixed": tool})
    model = answer_after_tools([tool_call("mixed", {"n": 0}), tool_call("mixed", {"n": 5})])
    with trio.fail_after(TIMEOUT):
        async with create_agent_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            failed, suspended = tool_parts(await rt.get_state(thread_id))
            [action] = await rt.pending_actions(thread_id)
    assert (failed.state, failed.error_text) == (
        "output-error",
        "1 item, and a deliberate failure",
    )
    assert [i.value for i in failed.data["progress"]] == [{"done": 1}]
    assert suspended.pending_suspension is not None
    assert (action.name, action.input) == ("mixed.ask", {"n": 5})


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (lambda ctx: ctx.data.write("progress", {"done": 1}), "ctx.data.write()"),
        (lambda ctx: ctx.data.list("progress"), "ctx.data.list()"),
        (lambda ctx: ctx.files.save(b"x", "text/plain", "x.txt"), "ctx.files.save()"),
        (lambda ctx: ctx.agents.run("a", "hi"), "ctx.agents.run()"),
        (lambda ctx: ctx.trigger("wake up"), "ctx.trigger()"),
        (lambda ctx: ctx.signal.wait(), "ctx.signal.wait()"),
        (lambda ctx: ctx.tools.child.execute({"n": 1}), "ctx.tools.child.execute()"),
    ],
    ids=["data.write", "data.list", "files.save", "agents.run", "trigger", "signal.wait", "tools"],
)
async def test_async_ctx_methods_called_from_a_worker_thread_fail_clearly(
    call: Any, what: str
) -> None:
    def execute(ctx: ToolContext) -> Any:
        return call(ctx)

    async def child_execute(ctx: ToolContext) -> int:
        return 1

    child = define_tool(id="test.c.v1", description="c", input_schema=Item, execute=child_execute)
    tool = define_tool(
        id="test.misuse.v1",
        description="Misuse.",
        input_schema=Item,
        tools={"child": child},
        execute=execute,
    )
    agent = define_agent(name="a", tools={"misuse": tool})
    model = answer_after_tools([tool_call("misuse", {"n": 1})])
    with trio.fail_after(TIMEOUT):
        async with create_agent_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
    assert part.state == "output-error"
    assert part.error_text is not None
    assert part.error_text.startswith(f"{what} was called outside the trio thread")
    assert "trio.from_thread.run(" in part.error_text
    assert "make execute `async def`" in part.error_text


async def test_inline_runs_plain_defs_on_the_trio_thread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    threads: list[threading.Thread] = []

    def execute(ctx: ToolContext) -> int:
        threads.append(threading.current_thread())
        return 1

    tool = define_tool(id="test.inline.v1", description="i", input_schema=Item, execute=execute)
    agent = define_agent(name="a", tools={"inline": tool})
    model = answer_after_tools([tool_call("inline", {"n": 1})])
    with trio.fail_after(TIMEOUT):
        async with create_test_runtime(agent, model=model) as rt:  # inline by default
            assert rt.blocking_statistics().sync_tools == "inline"
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
    assert threads == [threading.current_thread()]


async def test_a_plain_def_returning_an_awaitable_is_awaited_on_the_trio_thread() -> None:
    async def later(n: int) -> int:
        await trio.lowlevel.checkpoint()
        return n + 1

    tool = define_tool(
        id="test.lambda.v1",
        description="l",
        input_schema=Item,
        execute=lambda ctx: later(ctx.input.n),
    )
    agent = define_agent(name="a", tools={"later": tool})
    model = answer_after_tools([tool_call("later", {"n": 1})])
    with trio.fail_after(TIMEOUT):
        async with create_agent_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
    assert part.output == 2


def test_abort_signal_aborts_once() -> None:
    signal = AbortSignal()
    signal._abort("first")
    signal._abort("second")
    assert (signal.aborted, signal.reason) == (True, "first")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sync_tools": "threads"}, "sync_tools must be 'thread'"),
        ({"thread_limit": 0}, "thread_limit must be an int >= 1"),
        ({"thread_limit": True}, "thread_limit must be an int >= 1"),
        ({"thread_limit": 2.5}, "thread_limit must be an int >= 1"),
    ],
)
def test_bad_options_fail_at_creation(options: dict[str, Any], message: str) -> None:
    agent = define_agent(name="a", tools={})
    with pytest.raises(RuntimeConfigError, match=message):
        create_agent_runtime(agent, model=ScriptedModel([text("hi")]), **options)
