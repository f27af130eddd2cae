"""The test runtime replays: the same inputs give byte-identical stored state, whatever order
trio runs concurrent threads and calls in, wherever the data lives; each agent may play a
script of its own."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel
from trio._core._run import _r as trio_scheduler_random  # to vary the order, not to fix it

from pai_actors import (
    ModelRequest,
    ModelToolMessage,
    PaiError,
    ResumeEntry,
    SqliteStore,
    SuspendPoint,
    ToolContext,
    create_pai,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Job(BaseModel):
    name: str


class Decision(BaseModel):
    approved: bool


async def _work(ctx: ToolContext) -> Any:
    if isinstance(ctx.entry, ResumeEntry):
        await ctx.data.write("progress", {"step": "approved"})
        return {"done": ctx.input.name}
    await ctx.data.write("progress", {"step": "started"})
    await trio.lowlevel.checkpoint()  # the threads' calls interleave here
    await ctx.data.write("progress", {"step": "drafted"})
    saved = await ctx.files.save(ctx.input.name.encode(), "text/plain", "draft.txt")
    return ctx.suspend("approval", {"name": saved.file_id})


WORK = define_tool(
    id="test.work.v1",
    description="Work, then ask.",
    input_schema=Job,
    data_schemas={"progress": dict},
    suspend={"approval": SuspendPoint(suspend_schema=Job, resume_schema=Decision)},
    execute=_work,
)


def _decide(request: ModelRequest) -> Any:
    """Each thread's model step from its own request: two calls, then an answer."""
    if isinstance(request.messages[-1], ModelToolMessage):
        return text("all done")
    return [tool_call("work", {"name": "a"}), tool_call("work", {"name": "b"})]


async def _scenario(threads: int, store: Any = None) -> str:
    """Create ``threads`` threads, then act on all of them at the same virtual instants:
    send, let their calls write data and files and suspend, submit every approval at once.
    Returns every thread's stored state, as JSON."""
    agent = define_agent(name="a", tools={"work": WORK})
    model = ScriptedModel([_decide] * (2 * threads))
    async with create_test_runtime(agent, model=model, store=store) as rt:
        tids = [await rt.create_thread(f"scope-{i}") for i in range(threads)]
        async with trio.open_nursery() as nursery:
            for tid in tids:
                nursery.start_soon(rt.send, tid, "go")
        for tid in tids:
            await rt.wait_idle(tid)
        async with trio.open_nursery() as nursery:
            for tid in tids:
                for action in await rt.pending_actions(tid):
                    nursery.start_soon(action.submit, {"approved": True})
        for tid in tids:
            await rt.wait_idle(tid)
        states = [(await rt.get_state(tid)).to_wire() for tid in tids]
    return json.dumps(states, sort_keys=True)


def _replay(seed: int, threads: int, store: Any = None) -> str:
    state = trio_scheduler_random.getstate()
    trio_scheduler_random.seed(seed)
    try:
        return trio.run(
            _scenario, threads, store, clock=trio.testing.MockClock(autojump_threshold=0)
        )
    finally:
        trio_scheduler_random.setstate(state)


@pytest.mark.parametrize("threads", [2, 16])
def test_concurrent_threads_replay_to_byte_identical_stored_state(threads: int) -> None:
    replays = {_replay(seed, threads) for seed in range(8)}
    assert len(replays) == 1
    [stored] = replays
    # The ids are numbered within their thread and call, and none repeats.
    assert '"runId": "run_1_1"' in stored
    assert '"id": "msg_2_1"' in stored
    assert "data_1_call_2_" in stored
    assert "file_1_call_1_1" in stored
    ids = [m["id"] for t in json.loads(stored) for m in t["messages"]]
    assert len(ids) == len(set(ids))


def test_a_fresh_database_gets_the_same_ids_wherever_it_lives(tmp_path: Path) -> None:
    def on(path: Path) -> str:
        store = SqliteStore(path)
        try:
            return _replay(random.randrange(1 << 30), 2, store)
        finally:
            store.close()

    first = on(tmp_path / "used.db")
    for name in ("used.db", "used.db-wal", "used.db-shm"):
        if (tmp_path / name).exists():
            os.remove(tmp_path / name)
    again = on(tmp_path / "used.db")  # a new file at a path used before: new data
    elsewhere = on(tmp_path / "other.db")
    assert first == again == elsewhere
    assert '"threadId": "thread_1"' in first


async def test_reopened_data_gets_the_next_generation_of_ids(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = define_agent(name="a", tools={})
    seen: list[tuple[str, str]] = []
    for _ in range(3):
        store = SqliteStore(tmp_path / "app.db")
        try:
            model = ScriptedModel([text("hi")])
            async with create_test_runtime(agent, model=model, store=store) as rt:
                tid = await rt.create_thread("s")
                seen.append((tid, await rt.send(tid, "hello")))
                await rt.wait_idle(tid)
        finally:
            store.close()
    assert seen == [
        ("thread_1", "run_1_1"),
        ("thread_g2_1", "run_g2_1_1"),
        ("thread_g3_1", "run_g3_1_1"),
    ]


async def test_a_caller_supplied_thread_id_names_the_thread_and_its_ids(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={})
    async with create_test_runtime(agent, model=ScriptedModel([text("hi")])) as rt:
        tid = await rt.create_thread("s", thread_id="alice")
        assert tid == "alice"
        assert await rt.send(tid, "hello") == "run_alice_1"
        await rt.wait_idle(tid)
        assert [m.id for m in (await rt.get_state(tid)).messages] == ["msg_alice_1", "msg_alice_2"]
        with pytest.raises(PaiError, match="a thread with that id exists already"):
            await rt.create_thread("s", thread_id="alice")
        with pytest.raises(PaiError, match="without leading or trailing whitespace"):
            await rt.create_thread("s", thread_id=" bob")


async def test_each_agent_of_a_pai_plays_its_own_script(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pai = create_pai(
        {"triage": define_agent(name="t", tools={}), "billing": define_agent(name="b", tools={})}
    )
    models = {
        "triage": ScriptedModel([text("triaged")]),
        "billing": ScriptedModel([text("billed")]),
    }
    async with create_test_runtime(pai, model=models) as rt:
        answers = {}
        for agent_id in ("billing", "triage"):
            tid = await rt.create_thread("s", agent_id=agent_id)
            await rt.send(tid, "hello")
            await rt.wait_idle(tid)
            answers[agent_id] = (await rt.get_state(tid)).messages[-1].parts[-1].text
    assert answers == {"triage": "triaged", "billing": "billed"}
    assert [len(m.requests) for m in models.values()] == [1, 1]


def test_a_model_mapping_naming_no_agent_is_refused() -> None:
    pai = create_pai({"triage": define_agent(name="t", tools={})})
    with pytest.raises(PaiError, match=r"'billing'.*names no agent of this runtime"):
        create_test_runtime(pai, model={"billing": ScriptedModel([])})
    with pytest.raises(PaiError, match=r"agent 'triage' has no model.*no entry for it"):
        create_test_runtime(
            create_pai(
                {"triage": define_agent(name="t", tools={}), "x": define_agent(name="x", tools={})}
            ),
            model={"x": ScriptedModel([])},
        )


async def _fan_out_scenario() -> str:
    """Four orchestrators at once, each fanning out in a nursery (no keys) to three
    sub-agents that write data and files and ask for approval; all approved at once.
    Returns every thread of the scope, sub-agents' included, as JSON."""

    async def orchestrate(ctx: ToolContext) -> Any:
        answers: list[str] = []

        async def one(name: str) -> None:
            answers.append((await ctx.agents.run("worker", f"do {name}")).text)

        async with trio.open_nursery() as nursery:
            for name in ("x", "y", "z"):
                nursery.start_soon(one, name)
        return sorted(answers)

    def worker_step(request: ModelRequest) -> Any:
        if isinstance(request.messages[-1], ModelToolMessage):
            return text("done")
        return [tool_call("work", {"name": request.messages[0].text})]

    def front_step(request: ModelRequest) -> Any:
        if isinstance(request.messages[-1], ModelToolMessage):
            return text("all done")
        return [tool_call("orchestrate", {"name": "go"})]

    orchestrate_tool = define_tool(
        id="test.orchestrate.v1", description="Fan out.", input_schema=Job, execute=orchestrate
    )
    pai = create_pai(
        {
            "front": define_agent(name="Front", tools={"orchestrate": orchestrate_tool}),
            "worker": define_agent(name="Worker", tools={"work": WORK}),
        }
    )
    models = {
        "front": ScriptedModel([front_step], repeat_last=True),
        "worker": ScriptedModel([worker_step], repeat_last=True),
    }
    async with create_test_runtime(pai, model=models) as rt:
        tids = [await rt.create_thread("s") for _ in range(4)]
        async with trio.open_nursery() as nursery:
            for tid in tids:
                nursery.start_soon(rt.send, tid, "go")
        for tid in tids:
            await rt.wait_idle(tid)
        async with trio.open_nursery() as nursery:
            for tid in tids:
                for action in await rt.pending_actions(tid):
                    nursery.start_soon(action.submit, {"approved": True})
        for tid in tids:
            await rt.wait_idle(tid)
        threads = [t.thread_id for t in await rt.store.list_threads("s")]
        states = [(await rt.get_state(tid)).to_wire() for tid in sorted(threads)]
    return json.dumps(states, sort_keys=True)


def test_sub_agents_fanned_out_at_once_replay_to_byte_identical_state() -> None:
    replays = set()
    for seed in range(6):
        state = trio_scheduler_random.getstate()
        trio_scheduler_random.seed(seed)
        try:
            replays.add(
                trio.run(_fan_out_scenario, clock=trio.testing.MockClock(autojump_threshold=0))
            )
        finally:
            trio_scheduler_random.setstate(state)
    assert len(replays) == 1
    [stored] = replays
    threads = json.loads(stored)
    assert len(threads) == 4 + 4 * 3
    assert all(t["runs"][-1]["status"] == "completed" for t in threads)
