"""A request that reaches a node which does not run the thread (``_runtime.forwarding``):
it is stored, the owner applies it and answers; an owner that stopped has it applied by the
node that takes the thread over.

Node a runs a conversation whose step calls two tools: ``approve`` waits for an approval and
``slow`` runs until the test releases it, so a's run stays running (a holds the thread's
lease) while the approval is pending. Node b is asked to resolve it, or to cancel the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

from pai_actors import (
    PaiError,
    PostgresStore,
    ToolContext,
    ToolRegistration,
    create_pai,
    define_agent,
    define_tool,
    json_schema,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

from .node_worker import agent as worker_agent
from .node_worker import model as worker_model
from .postgres_support import connect

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def owner(url: str, thread_id: str) -> str | None:
    with connect(url) as db:
        row = db.execute(
            "SELECT node_id FROM pai_thread_owners WHERE thread_id = %s AND expires_at > now()",
            (thread_id,),
        ).fetchone()
    return None if row is None else str(row[0])


def requests_left(url: str) -> int:
    with connect(url) as db:
        return int(db.execute("SELECT count(*) FROM pai_requests").fetchone()[0])


def payer(release: trio.Event) -> Any:
    approve = define_tool(
        id="test.approve.v1",
        description="Pay once approved.",
        input_schema=json_schema({"type": "object"}),
        execute=lambda ctx: "paid",
    )

    async def slow(ctx: ToolContext) -> str:
        await release.wait()
        return "slow done"

    work = define_tool(
        id="test.slow.v1",
        description="Work until released.",
        input_schema=json_schema({"type": "object"}),
        execute=slow,
    )
    return define_agent(
        name="payer",
        tools={"approve": ToolRegistration(approve, needs_approval=True), "slow": work},
    )


def model() -> ScriptedModel:
    def step(request: Any) -> Any:
        answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
        return text("done") if answered else [tool_call("approve", {}), tool_call("slow", {})]

    return ScriptedModel([step], repeat_last=True)


async def started(rt: Any, thread_id: str) -> None:
    """Until the thread's approval is pending and its slow tool runs."""
    async with rt.watch(thread_id, snapshot=True) as updates:
        state = updates.snapshot
        while not (
            state is not None
            and state.messages
            and {p.state for p in state.messages[-1].tool_parts}
            == {"approval-requested", "input-available"}
        ):
            await anext(aiter(updates))
            state = await rt.get_state(thread_id)


async def test_a_submission_on_another_node_is_applied_by_the_owner(database: str) -> None:
    release = trio.Event()
    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a") as store_a,
        PostgresStore(database, node_id="b") as store_b,
    ):
        async with (
            create_test_runtime(payer(release), model=model(), store=store_a) as a,
            create_test_runtime(payer(release), model=model(), store=store_b) as b,
        ):
            thread_id = await a.create_thread("s")
            await a.send(thread_id, "pay")
            await started(a, thread_id)
            assert owner(database, thread_id) == "a"  # its run is running there
            [action] = await b.pending_actions(thread_id)

            # An invalid answer is rejected by the owner, and the action stays pending.
            rejected = await b.submit_action(action.ref, {"approved": "yes"})
            assert rejected.status == "rejected"
            assert rejected.error is not None
            assert "approved" in rejected.error
            assert [v.ref for v in await a.pending_actions(thread_id)] == [action.ref]

            accepted = await b.submit_action(action.ref, {"approved": True})
            assert accepted.status == "accepted"
            again = await b.submit_action(action.ref, {"approved": True})
            assert again.status == "rejected"  # an action resolves once
            release.set()
            await a.wait_idle(thread_id)
            state = await a.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    parts = {p.tool_name: p for p in state.messages[-1].tool_parts}
    assert parts["approve"].state == "output-available"
    assert parts["approve"].output == "paid"
    assert parts["slow"].output == "slow done"
    assert requests_left(database) == 0  # each answer was read and its request deleted


async def test_a_run_cancelled_on_another_node_is_cancelled_by_the_owner(database: str) -> None:
    release = trio.Event()
    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a") as store_a,
        PostgresStore(database, node_id="b") as store_b,
    ):
        async with (
            create_test_runtime(payer(release), model=model(), store=store_a) as a,
            create_test_runtime(payer(release), model=model(), store=store_b) as b,
        ):
            thread_id = await a.create_thread("s")
            run_id = await a.send(thread_id, "pay")
            await started(a, thread_id)
            cancelled = await b.cancel_run(run_id, "stop")
            assert cancelled.status == "cancelled"
            state = await a.get_state(thread_id)  # recorded before the answer came back
            with pytest.raises(PaiError, match="no run 'nope'"):
                await b.cancel_run("nope")
    assert [r.status for r in state.runs] == ["cancelled"]
    for part in state.messages[-1].tool_parts:
        assert part.state == "output-error"
        assert "stop" in (part.error_text or "")
    assert owner(database, thread_id) is None  # its run is over: a gave the thread up


def test_a_request_for_a_stopped_owner_is_applied_by_the_node_that_takes_over(
    database: str,
) -> None:
    """Node a is killed while its run runs. b is asked to cancel the run: the request waits
    for a, which cannot answer; once a's lease ran out b takes the thread over and applies
    the request itself."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.pai_actors.node_worker", "--db", database, "--node", "a"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert worker.stdout is not None
    try:
        thread_id = worker.stdout.readline().strip()  # its tool runs (its start is committed)
        assert thread_id, "the node printed no thread: see its stderr"
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.communicate(timeout=20)
    assert owner(database, thread_id) == "a"  # its lease lives on for a while

    async def ask_b() -> Any:
        # (b looks at the owner every third of its own lease)
        with trio.fail_after(30), PostgresStore(database, node_id="b", lease=0.3) as b:
            async with create_test_runtime(
                worker_agent(False), model=worker_model(), store=b
            ) as rt:
                state = await rt.get_state(thread_id)  # a owns it: nothing is recovered yet
                [run] = state.runs
                assert run.status == "running"
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(expire_once_requested, database, thread_id)
                    cancelled = await rt.cancel_run(run.run_id, "stop")
                return cancelled, await rt.get_state(thread_id)

    cancelled, state = trio.run(ask_b)
    assert cancelled.status == "cancelled"
    [part] = state.messages[-1].tool_parts
    # a's death left it running: b records it cancelled by the request (as one process
    # restarted would, asked to cancel the run before anything loaded the thread)
    assert part.state == "output-error"
    assert part.error_text is not None
    assert part.error_text.endswith("cancelled: stop")
    assert requests_left(database) == 0


async def eventually(check: Callable[[], Awaitable[T]]) -> T:
    """``check()``'s first truthy result (a condition another process makes true)."""
    while True:
        if found := await check():
            return found
        await trio.sleep(0.01)


async def expire_once_requested(url: str, thread_id: str) -> None:
    """Once a request for ``thread_id`` is stored, let its owner's lease run out (what a
    dead node's lease does after ``lease`` seconds)."""
    while True:
        with connect(url) as db:
            if db.execute("SELECT count(*) FROM pai_requests").fetchone()[0]:
                db.execute(
                    "UPDATE pai_thread_owners SET expires_at = now() - interval '1 second'"
                    " WHERE thread_id = %s",
                    (thread_id,),
                )
                return
        await trio.sleep(0.05)  # (a condition polled, not an order imposed)


async def test_a_sub_agent_ending_on_another_node_has_its_caller_settled_by_the_owner(
    database: str,
) -> None:
    """The front agent's step calls ``ask`` (which runs the payer agent as a sub-agent) and
    ``slow``: its run keeps running on node a while the payer waits for an approval. The
    approval submitted on node b resumes the payer there (its thread is free); its end must
    settle ``ask`` on a's thread, which b cannot write: a does it, asked by b."""
    release = trio.Event()
    paid: list[str] = []

    def pai() -> Any:
        async def ask(ctx: ToolContext) -> str:
            return (await ctx.agents.run("payer", "Pay the invoice.")).text

        def pay(ctx: ToolContext) -> str:
            paid.append(ctx.thread.thread_id)
            return "paid"

        async def slow(ctx: ToolContext) -> str:
            await release.wait()
            return "slow done"

        def tool(id: str, execute: Any) -> Any:
            return define_tool(
                id=id, description=id, input_schema=json_schema({"type": "object"}), execute=execute
            )

        return create_pai(
            {
                "front": define_agent(
                    name="Front", tools={"ask": tool("t.ask", ask), "slow": tool("t.slow", slow)}
                ),
                "payer": define_agent(
                    name="Payer",
                    tools={"pay": ToolRegistration(tool("t.pay", pay), needs_approval=True)},
                ),
            }
        )

    def models() -> dict[str, ScriptedModel]:
        def front(request: Any) -> Any:
            answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
            return text("done") if answered else [tool_call("ask", {}), tool_call("slow", {})]

        def payer(request: Any) -> Any:
            answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
            return text("invoice paid") if answered else [tool_call("pay", {})]

        return {
            "front": ScriptedModel([front], repeat_last=True),
            "payer": ScriptedModel([payer], repeat_last=True),
        }

    with (
        trio.fail_after(30),
        PostgresStore(database, node_id="a") as store_a,
        PostgresStore(database, node_id="b") as store_b,
    ):
        async with (
            create_test_runtime(pai(), model=models(), store=store_a) as a,
            create_test_runtime(pai(), model=models(), store=store_b) as b,
        ):
            thread_id = await a.create_thread("s")
            await a.send(thread_id, "pay")
            # (conditions polled: the payer's step runs on a; a settles ask)
            [action] = await eventually(lambda: b.pending_actions(thread_id))
            assert owner(database, thread_id) == "a"  # slow runs there
            assert (await b.submit_action(action.ref, {"approved": True})).status == "accepted"
            sub_thread_id = action.ref.thread_id
            assert sub_thread_id != thread_id
            await b.wait_idle(sub_thread_id)  # the payer completed on b ...

            async def ask_settled() -> bool:
                state = await a.get_state(thread_id)
                return state.messages[-1].tool_parts[0].state == "output-available"

            await eventually(ask_settled)  # ... and a settled ask, asked by b
            release.set()
            await a.wait_idle(thread_id)
            state = await a.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    ask_part, slow_part = state.messages[-1].tool_parts
    assert (ask_part.output, slow_part.output) == ("invoice paid", "slow done")
    assert paid == [sub_thread_id]  # the approved payment ran once
    assert requests_left(database) == 0
