"""The child process of ``test_runtime_subagents_durability``'s crash tests: an orchestrator
whose tool fans out to two sub-agents, each asking for an approval, on a SQLite file.

Run from the repository root (``tests`` is a package)::

    .venv/bin/python -m tests.pai_actors.subagent_worker --db x.db --log x.log \\
        [--kill-at N --kill-when before|during|after] [--finish]

Without ``--finish`` it creates the thread ``outer``, sends the request and waits until the
tree is idle (both sub-agents waiting on their approvals), then kills itself with
``SIGKILL`` (or dies at commit ``--kill-at`` before that). With ``--finish`` it opens the
file again (dying at commit ``--kill-at`` when given), submits every pending action of
``outer`` (approving it) until none is left and the tree is idle, and prints the outcome
as one JSON line. Each execution of the payment tool appends a line to ``--log``
(``O_APPEND``: a kill cannot lose it), so the parent counts how often each ran.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Literal

import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    ModelToolMessage,
    SqliteStore,
    ToolContext,
    ToolRegistration,
    create_pai,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

from .crash_worker import KillingStore, die

THREAD = "outer"


class Question(BaseModel):
    question: str


class Payee(BaseModel):
    payee: str


def pai(log: str) -> Any:
    async def orchestrate(ctx: ToolContext) -> Any:
        results = await ctx.agents.run_all([("payer", "pay alice"), ("payer", "pay bob")])
        return " + ".join(r.text for r in results)

    def pay(ctx: ToolContext) -> Any:
        line = json.dumps({"thread": ctx.thread.thread_id, "call": ctx.thread.tool_call_id})
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        return {"paid": ctx.input.payee}

    ask = define_tool(
        id="t.orchestrate.v1",
        description="Orchestrate.",
        input_schema=Question,
        execute=orchestrate,
    )
    pay_tool = define_tool(id="t.pay.v1", description="Pay.", input_schema=Payee, execute=pay)
    return create_pai(
        {
            # safe to run again after a crash: its sub-runs are found again by their keys
            "front": define_agent(
                name="Front",
                tools={"orchestrate": ToolRegistration(ask, rerun_interrupted=True)},
            ),
            "payer": define_agent(
                name="Payer", tools={"pay": ToolRegistration(pay_tool, needs_approval=True)}
            ),
        }
    )


def last_output(request: Any) -> str:
    [*_, result] = [p for m in request.messages if isinstance(m, ModelToolMessage) for p in m.parts]
    return str(result.output["value"])


def models() -> dict[str, Any]:
    def payer(request: Any) -> Any:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            return text(f"paid: {last_output(request)}")
        payee = request.messages[0].text.removeprefix("pay ")
        return [tool_call("pay", {"payee": payee})]

    def front(request: Any) -> Any:
        if any(isinstance(m, ModelToolMessage) for m in request.messages):
            return text(last_output(request))
        return [tool_call("orchestrate", {"question": "pay both"})]

    return {
        "front": ScriptedModel([front], repeat_last=True),
        "payer": ScriptedModel([payer], repeat_last=True),
    }


async def start(
    db: str, log: str, kill_at: int | None, kill_when: Literal["before", "during", "after"]
) -> None:
    store = KillingStore(db, kill_at=kill_at, kill_when=kill_when)
    async with create_test_runtime(pai(log), model=models(), store=store) as rt:
        await rt.create_thread("s", thread_id=THREAD)
        await rt.send(THREAD, "pay both")
        await rt.wait_idle(THREAD)
        print(json.dumps({"commits": store.commits}), flush=True)
        die()


async def finish(
    db: str, log: str, kill_at: int | None, kill_when: Literal["before", "during", "after"]
) -> None:
    store = (
        SqliteStore(db)
        if kill_at is None
        else KillingStore(db, kill_at=kill_at, kill_when=kill_when)
    )
    try:
        async with create_test_runtime(pai(log), model=models(), store=store) as rt:
            threads = [t.thread_id for t in await rt.store.list_threads("s")]
            if THREAD not in threads:  # killed before the thread was created
                await rt.create_thread("s", thread_id=THREAD)
            state = await rt.get_state(THREAD)
            if not state.messages:  # killed before the request was stored
                await rt.send(THREAD, "pay both")
            for _ in range(10):
                await rt.wait_idle(THREAD)
                actions = await rt.pending_actions(THREAD)
                if not actions:
                    break
                for action in actions:
                    await action.submit({"approved": True})
            await rt.wait_idle(THREAD)
            state = await rt.get_state(THREAD)
            runs = {
                t.thread_id: [r.status for r in await rt.store.list_runs(t.thread_id)]
                for t in await rt.store.list_threads("s")
            }
            answer = state.messages[-1].parts[-1] if state.messages else None
            print(
                json.dumps(
                    {
                        "runs": runs,
                        "answer": getattr(answer, "text", None),
                        "pending": len(await rt.pending_actions(THREAD)),
                    }
                ),
                flush=True,
            )
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--kill-when", default="after", choices=("before", "during", "after"))
    parser.add_argument("--finish", action="store_true")
    args = parser.parse_args()
    clock = trio.testing.MockClock(autojump_threshold=0)
    if args.finish:
        trio.run(finish, args.db, args.log, args.kill_at, args.kill_when, clock=clock)
    else:
        trio.run(start, args.db, args.log, args.kill_at, args.kill_when, clock=clock)


if __name__ == "__main__":
    main()
