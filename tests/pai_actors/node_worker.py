"""A node of ``test_postgres_nodes``: a runtime on a shared PostgreSQL database, killed on cue.

Run from the repository root (``tests`` is a package)::

    .venv/bin/python -m tests.pai_actors.node_worker --db URL --node a

It opens ``PostgresStore(URL, node_id=NODE)``, starts a conversation whose tool ``work``
blocks until the process dies, prints the thread's id once the tool runs (its start is
committed), and waits: the test kills it with ``SIGKILL``, a node stopping mid-run.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import trio

from pai_actors import PostgresStore, ToolContext, define_agent, define_tool, json_schema
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


def agent(block: bool) -> Any:
    async def work(ctx: ToolContext) -> Any:
        if block:
            print(ctx.thread.thread_id, flush=True)  # (its start is committed by now)
            await trio.sleep_forever()
        return "worked"

    tool = define_tool(
        id="test.work.v1",
        description="Work.",
        input_schema=json_schema({"type": "object"}),
        execute=work,
    )
    return define_agent(name="worker", tools={"work": tool})


def model() -> ScriptedModel:
    def step(request: Any) -> Any:
        answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
        return text("done") if answered else [tool_call("work", {})]

    return ScriptedModel([step], repeat_last=True)


async def main(url: str, node: str) -> None:
    with PostgresStore(url, node_id=node) as store:
        async with create_test_runtime(agent(block=True), model=model(), store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "work")
            await trio.sleep_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--node", required=True)
    args = parser.parse_args()
    trio.run(main, args.db, args.node)
    sys.exit(0)
