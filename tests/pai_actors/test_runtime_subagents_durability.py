"""Sub-agent runs across restarts and SIGKILL, their cancellation through the tree, their
deadlines, and what a suspended one costs (see ``_runtime.subagents``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from pai_actors import (
    AgentRunError,
    ModelToolMessage,
    SqliteStore,
    ToolContext,
    ToolRegistration,
    create_pai,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

from .test_runtime_agents_run import City, Question, last_result, tool_parts

ROOT = Path(__file__).resolve().parents[2]


def last_output(request: Any) -> str:
    return str(last_result(request)["value"])


def answered(request: Any) -> bool:
    return any(isinstance(m, ModelToolMessage) for m in request.messages)


def tree_pai(
    events: list[str],
    *,
    specialists: int = 2,
    depth: int = 1,
    pay: Any = None,
    deadline: timedelta | None = None,
) -> Any:
    """``front`` fans out to ``specialists`` payers (with ``depth`` 2, each through a
    ``middle`` agent that runs one payer); a payer's ``pay`` needs an approval."""

    async def orchestrate(ctx: ToolContext) -> Any:
        try:
            results = await ctx.agents.run_all(
                [("middle" if depth == 2 else "payer", f"pay p{n}") for n in range(specialists)]
            )
        except AgentRunError as exc:
            events.append(f"front: {exc}")
            return "failed"
        return " + ".join(r.text for r in results)

    async def relay(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("payer", ctx.input.question)).text

    def default_pay(ctx: ToolContext) -> Any:
        events.append(f"pay {ctx.input.city}")
        return {"paid": ctx.input.city}

    ask = define_tool(id="t.ask.v1", description="Ask.", input_schema=Question, execute=orchestrate)
    relay_tool = define_tool(
        id="t.relay.v1", description="Relay.", input_schema=Question, execute=relay
    )
    pay_tool = define_tool(
        id="t.pay.v1", description="Pay.", input_schema=City, execute=pay or default_pay
    )
    extra: dict[str, Any] = {} if deadline is None else {"approval_deadline": deadline}
    return create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask}),
            "middle": define_agent(name="Middle", tools={"relay": relay_tool}),
            "payer": define_agent(
                name="Payer",
                tools={"pay": ToolRegistration(pay_tool, needs_approval=True, **extra)},
            ),
        }
    )


def tree_models() -> dict[str, Any]:
    def front(request: Any) -> Any:
        if answered(request):
            return text(last_output(request))
        return [tool_call("ask", {"question": "go"})]

    def middle(request: Any) -> Any:
        if answered(request):
            return text(last_output(request))
        return [tool_call("relay", {"question": request.messages[0].text})]

    def payer(request: Any) -> Any:
        if answered(request):
            return text(f"done: {last_output(request)}")
        return [tool_call("pay", {"city": request.messages[0].text.removeprefix("pay ")})]

    return {
        "front": ScriptedModel([front], repeat_last=True),
        "middle": ScriptedModel([middle], repeat_last=True),
        "payer": ScriptedModel([payer], repeat_last=True),
    }


async def all_calls(rt: Any, scope: str = "s") -> list[tuple[str, Any]]:
    return [
        (t.thread_id, c.record)
        for t in await rt.store.list_threads(scope)
        for c in await rt.store.list_calls(t.thread_id)
    ]


async def all_runs(rt: Any, scope: str = "s") -> dict[str, list[str]]:
    return {
        t.thread_id: [r.status for r in await rt.store.list_runs(t.thread_id)]
        for t in await rt.store.list_threads(scope)
    }


# -- cancellation ---------------------------------------------------------------------------


async def test_cancelling_the_outer_run_cancels_the_suspended_tree_and_records_every_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[str] = []
    with trio.fail_after(10):
        async with create_test_runtime(tree_pai(events, depth=2), model=tree_models()) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            assert len(await rt.pending_actions(thread_id)) == 2
            state = await rt.cancel_run(run_id, "the user left")
            # recorded before cancel_run returned: the whole tree
            calls = await all_calls(rt)
            runs = await all_runs(rt)
            assert await rt.pending_actions(thread_id) == []
    assert state.status == "cancelled"
    assert len(runs) == 5  # front, two middles, two payers
    assert all(statuses == ["cancelled"] for statuses in runs.values()), runs
    assert len(calls) == 5  # ask, two relays, two pays
    for where, record in calls:
        assert record.phase == "done", where
        assert record.cancelled is not None, where
        assert record.cancelled.reason == "the user left", where
    assert not [e for e in events if e.startswith("pay")]


async def test_cancelling_the_outer_run_aborts_a_running_tool_of_a_sub_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()
    aborted: list[Any] = []

    async def stuck(ctx: ToolContext) -> Any:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            aborted.append((ctx.signal.aborted, ctx.signal.reason))

    async def orchestrate(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("worker", "go")).text

    stuck_tool = define_tool(
        id="t.stuck.v1", description="Stuck.", input_schema=City, execute=stuck
    )
    ask = define_tool(id="t.ask.v1", description="Ask.", input_schema=Question, execute=orchestrate)
    pai = create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask}),
            "worker": define_agent(name="Worker", tools={"stuck": stuck_tool}),
        }
    )
    models = {
        "front": ScriptedModel([[tool_call("ask", {"question": "q"})]]),
        "worker": ScriptedModel([[tool_call("stuck", {"city": "x"})]]),
    }
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=models) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await entered.wait()
            await rt.cancel_run(run_id, "user left")
            calls = await all_calls(rt)
    assert aborted == [(True, "user left")]
    assert [(r.phase, r.cancelled.reason if r.cancelled else None) for _, r in calls] == [
        ("done", "user left"),
        ("done", "user left"),
    ]


async def test_cancelling_one_sub_run_fails_only_that_branch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancelling one sub-run cancels exactly its subtree: the caller's ctx.agents.run
    raises AgentRunError naming the reason, the sibling goes on and is answered."""
    events: list[str] = []
    with trio.fail_after(10):
        async with create_test_runtime(tree_pai(events), model=tree_models()) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            first, second = await rt.pending_actions(thread_id)
            [sub_run] = (await rt.get_state(first.ref.thread_id)).runs
            await rt.cancel_run(sub_run.run_id, "not needed")
            await second.submit({"approved": True})
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
            runs = await all_runs(rt)
    assert part.output == "failed"
    assert events == [
        "pay p1",
        f"front: the sub-agent run of 'payer' (thread {first.ref.thread_id!r}) was cancelled: "
        "not needed",
    ]
    assert runs[first.ref.thread_id] == ["cancelled"]
    assert runs[second.ref.thread_id] == ["completed"]
    assert runs[thread_id] == ["completed"]


async def test_a_calling_tool_that_ends_without_its_sub_run_cancels_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A tool that swallows the stop ``ctx.agents.run`` raises (it must not) and fails: the
    call ends with its error, and the sub-run it did not wait for is cancelled, saying
    why."""

    async def orchestrate(ctx: ToolContext) -> Any:
        try:
            await ctx.agents.run("payer", "pay p0")
        except BaseException:
            raise ValueError("the budget is gone") from None
        return "unreachable"

    events: list[str] = []
    pai = tree_pai(events)
    ask = define_tool(id="t.ask.v1", description="Ask.", input_schema=Question, execute=orchestrate)
    pai = create_pai({**pai.agents, "front": define_agent(name="Front", tools={"ask": ask})})
    with trio.fail_after(30):
        async with create_test_runtime(pai, model=tree_models()) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            await trio.testing.wait_all_tasks_blocked()  # (cancelled in a runtime task)
            calls = await all_calls(rt)
            runs = await all_runs(rt)
    outer = next(r for t, r in calls if t == thread_id)
    assert outer.error_text == "the budget is gone"
    [sub_thread] = outer.sub_threads
    assert runs[sub_thread] == ["cancelled"]
    [pay] = [r for t, r in calls if t == sub_thread]
    assert pay.cancelled is not None
    assert pay.cancelled.reason == (
        "the tool call that started this sub-agent run ended before it did"
    )


# -- what a suspended sub-agent costs -----------------------------------------------------


def count_tasks() -> int:
    def count(task: Any) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    return count(trio.lowlevel.current_root_task())


async def test_a_suspended_tree_holds_no_task_and_no_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every level passivates: with one slot for active runs, five sub-agents each reach
    their approval one after another; once all wait, no task runs any of them."""
    events: list[str] = []
    with trio.fail_after(10):
        async with create_test_runtime(
            tree_pai(events, specialists=5), model=tree_models(), max_active_runs=1
        ) as rt:
            await trio.testing.wait_all_tasks_blocked()
            idle_tasks = count_tasks()
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            await trio.testing.wait_all_tasks_blocked()
            suspended_tasks = count_tasks()
            actions = await rt.pending_actions(thread_id)
            for action in actions:
                assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            runs = await all_runs(rt)
    assert len(actions) == 5
    assert suspended_tasks == idle_tasks
    assert all(statuses == ["completed"] for statuses in runs.values())
    assert sorted(events) == [f"pay p{n}" for n in range(5)]


# -- restarts -------------------------------------------------------------------------------


async def test_a_sub_agent_waiting_on_approval_survives_a_restart(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[str] = []
    path = str(tmp_path / "tree.db")
    with trio.fail_after(10):
        store = SqliteStore(path)
        async with create_test_runtime(
            tree_pai(events, depth=2), model=tree_models(), store=store
        ) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            before = [(a.ref, a.origin_chain) for a in await rt.pending_actions(thread_id)]
        store.close()
        store = SqliteStore(path)
        async with create_test_runtime(
            tree_pai(events, depth=2), model=tree_models(), store=store
        ) as rt:
            actions = await rt.pending_actions(thread_id)
            after = [(a.ref, a.origin_chain) for a in actions]
            for action in actions:
                await action.submit({"approved": True})
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
            runs = await all_runs(rt)
        store.close()
    assert after == before
    assert len(before[0][1]) == 2  # front's ask -> middle, middle's relay -> payer
    assert [link.agent_id for link in before[0][1]] == ["middle", "payer"]
    assert state.runs[-1].status == "completed"
    assert all(statuses[-1] == "completed" for statuses in runs.values()), runs
    assert sorted(events) == ["pay p0", "pay p1"]


def worker(db: Path, log: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.pai_actors.subagent_worker", "--db", str(db),
         "--log", str(log), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        timeout=120,
        check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode in (0, -9), done.stderr
    return {"rc": done.returncode, **(json.loads(lines[-1]) if lines else {})}


def pay_counts(log: Path) -> Counter[str]:
    if not log.exists():
        return Counter()
    return Counter(json.loads(line)["thread"] for line in log.read_text().splitlines())


def test_a_sub_agent_suspended_on_approval_survives_sigkill(tmp_path: Path) -> None:
    db, log = tmp_path / "w.db", tmp_path / "w.log"
    started = worker(db, log)
    assert started["rc"] == -9  # it killed itself once both sub-agents waited
    finished = worker(db, log, "--finish")
    assert finished["answer"] == "paid: {'paid': 'alice'} + paid: {'paid': 'bob'}"
    assert finished["pending"] == 0
    assert all(statuses == ["completed"] for statuses in finished["runs"].values())
    assert sorted(pay_counts(log).values()) == [1, 1]


def one_crash(directory: Path, start: list[str], finish: list[str]) -> list[str]:
    """Kill the first process at ``start``'s commit, a second at ``finish``'s, and let a
    third finish: what is wrong with the result (nothing, when it holds)."""
    directory.mkdir()
    db, log = directory / "w.db", directory / "w.log"
    worker(db, log, *start)
    if finish:
        worker(db, log, "--finish", *finish)
    result = worker(db, log, "--finish")
    problems = []
    runs = result["runs"]
    if runs.get("outer", [""])[-1] != "completed":
        problems.append(f"the orchestrator's run is {runs.get('outer')}")
    if any(s[-1] in ("running", "waiting") for s in runs.values()):
        problems.append(f"a run is still active: {runs}")
    if result["pending"]:
        problems.append(f"{result['pending']} pending actions left")
    twice = {t: n for t, n in pay_counts(log).items() if n > 1}
    if twice:
        problems.append(f"a payment ran twice: {twice}")
    return [f"{start} then {finish}: {p}" for p in problems]


def test_kill_at_every_commit_of_a_sub_agent_tree_and_reopen(tmp_path: Path) -> None:
    """SIGKILL at each commit of the orchestration (while it fans out, and while the
    approvals resume the sub-agents and then the caller): after reopening, the chain
    completes, no run is left active, no action pending, and no payment ran twice."""
    commits = worker(tmp_path / "probe.db", tmp_path / "probe.log")["commits"]
    cases: list[tuple[list[str], list[str]]] = [
        (["--kill-at", str(k), "--kill-when", when], [])
        for k in range(1, commits + 1)
        for when in ("before", "during", "after")
    ]
    cases += [([], ["--kill-at", str(k), "--kill-when", "after"]) for k in range(1, 16)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(
            lambda n_case: one_crash(tmp_path / f"case{n_case[0]}", *n_case[1]),
            enumerate(cases),
        )
        problems = [p for found in results for p in found]
    assert not problems, "\n".join(problems)


# -- deadlines --------------------------------------------------------------------------------


async def test_a_deadline_on_a_sub_agents_approval_fires_once_under_mockclock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[str] = []
    with trio.fail_after(10_000):
        async with create_test_runtime(
            tree_pai(events, specialists=1, deadline=timedelta(minutes=5)), model=tree_models()
        ) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            await trio.sleep(301)  # the clock passes the deadline
            await rt.wait_idle(thread_id)
            late = await action.submit({"approved": True})
            [part] = tool_parts(await rt.get_state(thread_id))
            [pay] = [r for t, r in await all_calls(rt) if t == action.ref.thread_id]
    assert action.expires_at is not None
    assert late.status == "rejected"
    assert pay.cancelled is not None  # cancelled at its deadline, once
    assert events == []  # never paid
    assert part.state == "output-available"  # the caller went on with the sub-agent's answer


async def test_a_deadline_that_passed_while_down_fires_when_the_runtime_opens(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[str] = []
    path = str(tmp_path / "tree.db")
    pai = tree_pai(events, specialists=1, deadline=timedelta(minutes=5))
    with trio.fail_after(10_000):
        store = SqliteStore(path)
        async with create_test_runtime(pai, model=tree_models(), store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
        store.close()
        autojump_clock.jump(600)  # down past the deadline
        store = SqliteStore(path)
        async with create_test_runtime(pai, model=tree_models(), store=store) as rt:
            await trio.sleep(1)  # the timer fires on open
            await rt.wait_idle(thread_id)
            runs = await all_runs(rt)
            calls = await all_calls(rt)
        store.close()
    assert all(statuses[-1] == "completed" for statuses in runs.values()), runs
    cancelled = [r for _, r in calls if r.cancelled is not None]
    assert [r.name for r in cancelled] == ["pay"]
    assert events == []


@pytest.mark.parametrize("agent_id", ["payer", "nobody"])
async def test_a_client_picks_the_agent_of_a_thread(
    agent_id: str, autojump_clock: trio.testing.MockClock
) -> None:
    from pai_actors import AgentNotFound

    async with create_test_runtime(tree_pai([]), model=tree_models()) as rt:
        if agent_id == "nobody":
            with pytest.raises(AgentNotFound, match="'front', 'middle', 'payer'"):
                await rt.create_thread("s", agent_id=agent_id)
            return
        thread_id = await rt.create_thread("s", agent_id=agent_id)
        await rt.send(thread_id, "pay direct")
        await rt.wait_idle(thread_id)
        [action] = await rt.pending_actions(thread_id)
    assert action.origin_chain == ()
    assert action.name == "pay"
