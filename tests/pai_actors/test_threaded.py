"""The synchronous facade (``pai_actors.threaded``): a runtime on its own thread, driven from
many others through pykka futures.

Plain (not trio) tests: the runtime's trio run is on the facade's thread, with the real
clock. Every wait is bounded (``future.get(timeout=...)``, ``Barrier(timeout=...)``) as a
safety net against a hang; nothing orders threads with sleeps and nothing asserts a time.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest
import trio
from pydantic import BaseModel

from pai_actors import (
    ModelRequest,
    ModelToolMessage,
    PaiError,
    ResumeEntry,
    RuntimeClosed,
    RuntimeConfigError,
    SqliteStore,
    SuspendPoint,
    ThreadBusy,
    ThreadNotFound,
    ToolContext,
    ToolPart,
    create_agent_runtime,
    define_agent,
    define_tool,
    threaded,
)
from pai_actors.testing import ScriptedModel, text, tool_call

T = 20.0  # seconds: a bound on every wait, never an assertion about speed


class Order(BaseModel):
    order: int


class Decision(BaseModel):
    approved: bool


def approval_agent(resumes: list[str], lock: threading.Lock) -> Any:
    """An agent whose ``refund`` tool (a plain def: it runs in a worker thread) suspends for
    approval and, resumed, returns the decision; ``resumes`` lists each resumed call."""

    def refund(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            with lock:
                resumes.append(f"{ctx.thread.thread_id}/{ctx.thread.tool_call_id}")
            return {"order": ctx.input.order, "approved": ctx.entry.resume.approved}
        return ctx.suspend("approval", {"order": ctx.input.order})

    tool = define_tool(
        id="test.refund.v1",
        description="Refund after approval.",
        input_schema=Order,
        suspend={"approval": SuspendPoint(suspend_schema=Order, resume_schema=Decision)},
        execute=refund,
    )
    return define_agent(name="shop", tools={"refund": tool})


def refund_model() -> ScriptedModel:
    """Asks for one ``refund`` of the order in the user's text, then answers ``"done"``."""

    def step(request: ModelRequest) -> Any:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            return text("done")
        order = int(request.messages[-1].text.rsplit(" ", 1)[1])  # type: ignore[union-attr]
        return [tool_call("refund", {"order": order})]

    return ScriptedModel([step], repeat_last=True, record=False)


def tool_parts(state: Any) -> list[ToolPart]:
    return [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]


def running_threads() -> set[threading.Thread]:
    """Live threads, except trio's worker threads: idle ones stay cached for 10 s, and one
    running a tool is named ``pai_actors tool <name> <call id>`` (a test that leaves a tool
    running looks for that name itself; a resume cancelled by a racing ``cancel_run`` may
    still be finishing its instant work here)."""
    return {
        t
        for t in threading.enumerate()
        if not t.name.startswith(("Trio thread ", "pai_actors tool "))
    }


def tool_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"pai_actors tool {name} ")]


@pytest.fixture
def no_threads_left() -> Iterator[None]:
    before = running_threads()
    yield
    assert running_threads() == before


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Run ``target(i)`` on ``count`` threads at once; re-raise the first failure."""
    failures: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:
            failures.append(exc)

    workers = [
        threading.Thread(target=guarded, args=(i,), name=f"driver-{i}") for i in range(count)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(T * 3)
        assert not worker.is_alive(), f"{worker.name} hangs"
    if failures:
        raise failures[0]


@pytest.mark.usefixtures("no_threads_left")
def test_32_threads_drive_one_runtime_and_nothing_is_lost_or_duplicated() -> None:
    """16 conversations, two threads each: one starts it, then both race to resolve its
    approval (submit against submit, cancel, fail, or cancel_run). Exactly one resolution
    wins; the final state agrees with it; each call resumed at most once."""
    conversations = 16
    resumes: list[str] = []
    lock = threading.Lock()
    agent = approval_agent(resumes, lock)
    model = refund_model()
    started: dict[int, tuple[str, str, threaded.ThreadedPendingAction]] = {}
    ready = [threading.Event() for _ in range(conversations)]
    race = [threading.Barrier(2, timeout=T) for _ in range(conversations)]
    outcomes: dict[tuple[int, str], Any] = {}
    finals: dict[int, Any] = {}

    with threaded.start(lambda: create_agent_runtime(agent, model=model)) as rt:

        def drive(i: int) -> None:
            n, side = divmod(i, 2)
            if side == 0:
                thread_id = rt.create_thread(f"tenant-{n % 3}").get(timeout=T)
                run_id = rt.send(thread_id, f"refund {n}").get(timeout=T)
                rt.wait_idle(thread_id, timeout=T).get(timeout=T)
                [action] = rt.pending_actions(thread_id).get(timeout=T)
                started[n] = (thread_id, run_id, action)
                ready[n].set()
            assert ready[n].wait(T)
            thread_id, run_id, action = started[n]
            race[n].wait()  # both sides resolve at once
            kind = n % 4
            if side == 0:
                outcome: Any = action.submit({"approved": True}).get(timeout=T)
            elif kind == 0:
                outcome = rt.submit_action(action.ref, {"approved": False}).get(timeout=T)
            elif kind == 1:
                outcome = action.cancel("changed my mind").get(timeout=T)
            elif kind == 2:
                outcome = rt.fail_action(action.ref, "no stock").get(timeout=T)
            else:
                outcome = rt.cancel_run(run_id, "closed").get(timeout=T)
            outcomes[n, "ab"[side]] = outcome
            rt.wait_idle(thread_id, timeout=T).get(timeout=T)
            if side == 0:
                race[n].wait()  # the other side is done too
                finals[n] = rt.get_state(thread_id).get(timeout=T)
            else:
                race[n].wait()

        run_threads(2 * conversations, drive)

    assert len(resumes) == len(set(resumes))  # no call resumed twice
    for n in range(conversations):
        state = finals[n]
        [part] = tool_parts(state)
        assert state.messages[0].role == "user"
        assert len([m for m in state.messages if m.role == "user"]) == 1
        [run] = state.runs
        submitted = outcomes[n, "a"]
        other = outcomes[n, "b"]
        kind = n % 4
        if kind == 3:  # submit against cancel_run
            if submitted.status == "rejected":
                assert run.status == "cancelled"
                assert part.error_text == "The tool call was cancelled: closed"
            else:
                assert run.status in ("completed", "cancelled")
                assert part.state in ("output-available", "output-error")
            continue
        statuses = sorted([submitted.status, other.status])
        assert statuses == ["accepted", "rejected"], (n, submitted, other)
        assert run.status == "completed"
        if submitted.status == "accepted":
            assert part.output == {"order": n, "approved": True}
        elif kind == 0:
            assert part.output == {"order": n, "approved": False}
        elif kind == 1:
            assert part.error_text == "The tool call was cancelled: changed my mind"
        else:
            assert part.error_text == "no stock"
    resumed = {r.split("/")[0] for r in resumes}
    accepted = {
        finals[n].thread_id
        for n in range(conversations)
        if outcomes[n, "a"].status == "accepted"
        or (n % 4 == 0 and outcomes[n, "b"].status == "accepted")
    }
    completed = {
        finals[n].thread_id
        for n in range(conversations)
        if tool_parts(finals[n])[0].state == "output-available"
    }
    # Every output came from a resume, and only accepted submissions resumed. Against a
    # cancel_run, an accepted submission's resume may never start, or start and be
    # cancelled (a blocking resume's late result is then discarded and logged).
    assert completed <= resumed <= accepted
    racing_cancel_run = {finals[n].thread_id for n in range(conversations) if n % 4 == 3}
    assert resumed - racing_cancel_run == accepted - racing_cancel_run


@pytest.mark.usefixtures("no_threads_left")
def test_stop_cancels_running_calls_and_keeps_suspended_ones_durable(tmp_path: Path) -> None:
    path = tmp_path / "facade.db"
    entered = threading.Event()

    async def hang(ctx: ToolContext) -> None:
        entered.set()
        await trio.sleep_forever()

    def refund(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            return {"approved": ctx.entry.resume.approved}
        return ctx.suspend("approval", {"order": ctx.input.order})

    agent = define_agent(
        name="shop",
        tools={
            "refund": define_tool(
                id="test.refund.v1",
                description="r",
                input_schema=Order,
                suspend={"approval": SuspendPoint(suspend_schema=Order, resume_schema=Decision)},
                execute=refund,
            ),
            "hang": define_tool(
                id="test.hang.v1", description="h", input_schema=Order, execute=hang
            ),
        },
    )

    def step(request: ModelRequest) -> Any:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            return text("done")
        name = request.messages[-1].text  # type: ignore[union-attr]
        return [tool_call(name, {"order": 1})]

    model = ScriptedModel([step], repeat_last=True)

    def make() -> Any:
        return create_agent_runtime(agent, model=model, store=SqliteStore(path))

    rt = threaded.start(make)
    suspended = rt.create_thread("s").get(timeout=T)
    running = rt.create_thread("s").get(timeout=T)
    rt.send(suspended, "refund").get(timeout=T)
    rt.wait_idle(suspended, timeout=T).get(timeout=T)
    rt.send(running, "hang").get(timeout=T)
    assert entered.wait(T)
    in_flight = rt.wait_idle(running)  # never idle: the tool hangs
    rt.stop()
    assert not rt.is_alive()
    with pytest.raises(RuntimeClosed, match="stopped while this call was in flight"):
        in_flight.get(timeout=T)

    with threaded.start(make) as again:  # the same file, a new runtime
        [action] = again.pending_actions(suspended).get(timeout=T)
        assert action.name == "refund.approval"
        [hung] = tool_parts(again.get_state(running).get(timeout=T))
        assert (hung.state, hung.error_text) == (
            "output-error",
            "The tool call was cancelled: the runtime is closing",
        )
        assert action.submit({"approved": True}).get(timeout=T).status == "accepted"
        again.wait_idle(suspended, timeout=T).get(timeout=T)
        [part] = tool_parts(again.get_state(suspended).get(timeout=T))
        assert part.output == {"approved": True}


@pytest.mark.usefixtures("no_threads_left")
def test_errors_reach_the_caller_from_the_future() -> None:
    resumes: list[str] = []
    agent = approval_agent(resumes, threading.Lock())
    with threaded.start(lambda: create_agent_runtime(agent, model=refund_model())) as rt:
        with pytest.raises(ThreadNotFound, match="no thread 'nope'"):
            rt.get_state("nope").get(timeout=T)
        thread_id = rt.create_thread("s").get(timeout=T)
        rt.send(thread_id, "refund 1").get(timeout=T)
        with pytest.raises(ThreadBusy):
            rt.send(thread_id, "refund 2").get(timeout=T)
        rt.wait_idle(thread_id, timeout=T).get(timeout=T)
        [action] = rt.pending_actions(thread_id).get(timeout=T)
        rejected = action.submit({"approved": "maybe"}).get(timeout=T)
        assert rejected.status == "rejected"
        with pytest.raises(TypeError, match="expected a PendingActionRef"):
            rt.submit_action("call_1.1", {})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="wait_idle"):
            rt.wait_idle(thread_id, timeout=-1)
        futures = [rt.get_state(thread_id) for _ in range(5)]
        assert len(list(pykka.get_all(futures, timeout=T))) == 5  # pykka's helpers work

        def not_async(runtime: Any) -> Any:
            return runtime

        with pytest.raises(TypeError):
            rt.call(not_async).get(timeout=T)
    # stopped: every call fails at once, nothing hangs
    future = rt.get_state(thread_id)
    with pytest.raises(RuntimeClosed, match="stopped"):
        future.get(timeout=0)
    rt.stop()  # idempotent


def test_wait_idle_times_out_inside_the_runtime() -> None:
    async def hang(ctx: ToolContext) -> None:
        await trio.sleep_forever()

    tool = define_tool(id="test.hang.v1", description="h", input_schema=Order, execute=hang)
    agent = define_agent(name="a", tools={"hang": tool})
    model = ScriptedModel([[tool_call("hang", {"order": 1})], text("done")])
    with threaded.start(lambda: create_agent_runtime(agent, model=model)) as rt:
        thread_id = rt.create_thread("s").get(timeout=T)
        rt.send(thread_id, "go").get(timeout=T)
        with pytest.raises(TimeoutError, match=r"was not idle within 0\.05 s"):
            rt.wait_idle(thread_id, timeout=0.05).get(timeout=T)
        with pytest.raises(pykka.Timeout):
            rt.wait_idle(thread_id).get(timeout=0.01)  # the caller's bound: the call goes on


def test_get_on_the_runtime_thread_raises_instead_of_deadlocking() -> None:
    handle: list[threaded.ThreadedRuntime] = []

    async def peek(ctx: ToolContext) -> str:
        return str(handle[0].get_state(ctx.thread.thread_id).get(timeout=T))

    tool = define_tool(id="test.peek.v1", description="p", input_schema=Order, execute=peek)
    agent = define_agent(name="a", tools={"peek": tool})
    model = ScriptedModel([[tool_call("peek", {"order": 1})], text("done")])
    with threaded.start(lambda: create_agent_runtime(agent, model=model)) as rt:
        handle.append(rt)
        thread_id = rt.create_thread("s").get(timeout=T)
        rt.send(thread_id, "go").get(timeout=T)
        rt.wait_idle(thread_id, timeout=T).get(timeout=T)
        [part] = tool_parts(rt.get_state(thread_id).get(timeout=T))
    assert part.error_text is not None
    assert part.error_text.startswith("future.get() was called on the runtime's own thread")


class Boom(BaseException):
    """Not an Exception: it ends the runtime's trio run, as a bug in it would."""


@pytest.mark.usefixtures("no_threads_left")
def test_when_the_runtime_thread_dies_every_open_future_fails() -> None:
    async def hang(ctx: ToolContext) -> None:
        await trio.sleep_forever()

    tool = define_tool(id="test.hang.v1", description="h", input_schema=Order, execute=hang)
    agent = define_agent(name="a", tools={"hang": tool})
    model = ScriptedModel([[tool_call("hang", {"order": 1})], text("done")])
    rt = threaded.start(lambda: create_agent_runtime(agent, model=model))
    thread_id = rt.create_thread("s").get(timeout=T)
    rt.send(thread_id, "go").get(timeout=T)
    waiting = [rt.wait_idle(thread_id) for _ in range(3)]

    async def crash(runtime: Any) -> None:
        raise Boom("a bug in the runtime's thread")

    crashed = rt.call(crash)
    for future in [*waiting, crashed]:
        with pytest.raises(RuntimeClosed, match="ended before this call finished") as info:
            future.get(timeout=T)
        assert isinstance(info.value.__cause__, BaseException)
    with pytest.raises(RuntimeClosed, match="its thread failed"):
        rt.get_state(thread_id).get(timeout=0)
    with pytest.raises(RuntimeClosed, match="the runtime's thread failed") as stopped:
        rt.stop()
    assert isinstance(stopped.value.__cause__, BaseExceptionGroup | Boom)
    rt.stop()  # reported once; stopping again is quiet


def test_start_refuses_a_runtime_and_raises_startup_errors_as_raised() -> None:
    agent = define_agent(name="a", tools={})
    model = ScriptedModel([text("hi")])
    with pytest.raises(TypeError, match="not the runtime"):
        threaded.start(create_agent_runtime(agent, model=model))  # type: ignore[arg-type]

    def bad() -> Any:
        return create_agent_runtime(agent, model=model, thread_limit=0)

    with pytest.raises(RuntimeConfigError, match="thread_limit"):
        threaded.start(bad)
    with pytest.raises(TypeError, match="returning an AgentRuntime"):
        threaded.start(lambda: "not a runtime")  # type: ignore[arg-type, return-value]


def test_errors_are_pai_errors_or_builtins() -> None:
    assert issubclass(RuntimeClosed, PaiError)
    assert threaded.ThreadedRuntime.__module__ == "pai_actors.threaded"
    assert set(threaded.__all__) == {
        "ThreadedFuture",
        "ThreadedPendingAction",
        "ThreadedRuntime",
        "start",
    }


def test_importing_pai_actors_does_not_import_pykka() -> None:
    code = (
        "import sys, pai_actors, pai_actors.testing\n"
        "assert 'pykka' not in sys.modules, sorted(m for m in sys.modules if 'pykka' in m)\n"
        "import pai_actors.threaded\n"
        "assert 'pykka' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr


def test_stop_does_not_wait_for_a_blocking_tool_and_its_late_result_is_discarded(
    tmp_path: Path,
) -> None:
    path = tmp_path / "blocking.db"
    entered = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    def slow(ctx: ToolContext) -> str:  # a plain def: a worker thread
        entered.set()
        release.wait(T)
        finished.set()
        return "late"

    tool = define_tool(id="test.slow.v1", description="s", input_schema=Order, execute=slow)
    agent = define_agent(name="a", tools={"slow": tool})
    model = ScriptedModel([[tool_call("slow", {"order": 1})], text("done")], repeat_last=True)

    def make() -> Any:
        return create_agent_runtime(agent, model=model, store=SqliteStore(path))

    before = running_threads()
    assert not tool_threads("slow")
    rt = threaded.start(make)
    thread_id = rt.create_thread("s").get(timeout=T)
    rt.send(thread_id, "go").get(timeout=T)
    assert entered.wait(T)
    assert rt.blocking_statistics().running == 1
    rt.stop()  # returns while the tool's thread still blocks
    assert rt.blocking_statistics().abandoned == 1
    assert not finished.is_set()
    assert running_threads() == before  # the runtime's thread is gone
    assert len(tool_threads("slow")) == 1  # the abandoned tool runs on
    with threaded.start(make) as again:
        [part] = tool_parts(again.get_state(thread_id).get(timeout=T))
    assert (part.state, part.error_text) == (
        "output-error",
        "The tool call was cancelled: the runtime is closing",
    )
    discarded = threading.Event()
    records: list[logging.LogRecord] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)
            discarded.set()

    logger = logging.getLogger("pai_actors")
    handler = Handler(logging.WARNING)
    logger.addHandler(handler)
    try:
        release.set()
        assert discarded.wait(T)  # logged by the worker thread as execute returns
    finally:
        logger.removeHandler(handler)
    assert [getattr(r, "discarded", None) for r in records] == ["returned"]
    assert rt.blocking_statistics().discarded == 1
    assert getattr(records[0], "tool_call_id", None) == part.tool_call_id


def test_a_sub_agents_action_through_the_facade_keeps_its_origin_chain() -> None:
    from .test_runtime_subagents_durability import tree_models, tree_pai

    events: list[str] = []
    pai = tree_pai(events, specialists=1)
    with threaded.start(lambda: create_agent_runtime(pai, model=tree_models())) as rt:
        thread_id = rt.create_thread("s").get(timeout=T)
        rt.send(thread_id, "go").get(timeout=T)
        rt.wait_idle(thread_id, timeout=T).get(timeout=T)
        [action] = rt.pending_actions(thread_id).get(timeout=T)
        assert [link.agent_id for link in action.origin_chain] == ["payer"]
        assert action.origin_chain[0].thread_id == thread_id
        assert action.expires_at is None
        assert action.submit({"approved": True}).get(timeout=T).status == "accepted"
        rt.wait_idle(thread_id, timeout=T).get(timeout=T)
        state = rt.get_state(thread_id).get(timeout=T)
    assert state.runs[-1].status == "completed"
    assert events == ["pay p0"]
