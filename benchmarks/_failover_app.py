"""The application of the failover figures' node processes (:mod:`._failover`)::

    pai-actors serve benchmarks._failover_app:factory --db postgresql://... --node-id n1 \\
        --lease 2 --port 0

One agent, ``worker``, with one tool, ``work``, that asks the user's approval before it runs
(``needs_approval=True``, nothing else set: an interrupted call is recorded interrupted, not
run again). The scripted model reads a request ``"work, report to port N"`` and calls
``work`` with ``{"port": N}``; once the result is in, it answers ``"done"``.

The tool's execution connects to the benchmark's driver on ``127.0.0.1:N``, writes one line
``"<thread id> <pid>\\n"`` (the driver now knows the call executes, in which process) and
waits for one byte: the driver releases it (the figure's baseline) or kills the process
(the figure). It returns ``"worked"``.

Like :mod:`._conversation` it is small and imports nothing of ``tests/``.
"""

from __future__ import annotations

import os
import re
from typing import Any

import trio
from pydantic import BaseModel

from pai_actors import (
    ModelRequest,
    ModelToolMessage,
    ModelUserMessage,
    Store,
    ToolContext,
    ToolRegistration,
    create_agent_runtime,
    define_agent,
    define_tool,
)
from pai_actors.server import Application, Identity
from pai_actors.testing import ScriptedModel, text, tool_call

TOKEN = "failover-bench-token"
SCOPE = "failover-bench"
ANSWER = "done"


class Work(BaseModel):
    port: int


def request(port: int) -> str:
    """The user's message that makes the model call ``work`` reporting to ``port``."""
    return f"work, report to port {port}"


async def _work(ctx: ToolContext) -> Any:
    stream = await trio.open_tcp_stream("127.0.0.1", ctx.input.port)
    async with stream:
        await stream.send_all(f"{ctx.thread.thread_id} {os.getpid()}\n".encode())
        await stream.receive_some(1)  # released (a byte) or the driver went away (EOF)
    return "worked"


async def _step(model_request: ModelRequest) -> Any:
    last = model_request.messages[-1]
    if isinstance(last, ModelUserMessage):
        found = re.fullmatch(r"work, report to port (\d+)", last.text)
        assert found is not None, f"not a request of this benchmark: {last.text!r}"
        return [tool_call("work", {"port": int(found.group(1))})]
    assert isinstance(last, ModelToolMessage), f"unexpected last message {last!r}"
    return text(ANSWER)


def _authenticate(token: str) -> Identity | None:
    return Identity(scope_key=SCOPE, user_key="driver") if token == TOKEN else None


def factory(store: Store) -> Application:
    """The application ``pai-actors serve`` hosts on ``store``."""
    work = define_tool(
        id="bench.failover.work.v1",
        description="Work until released (once a person approved it).",
        input_schema=Work,
        execute=_work,
    )
    agent = define_agent(name="worker", tools={"work": ToolRegistration(work, needs_approval=True)})
    model = ScriptedModel([_step], repeat_last=True, record=False)
    runtime = create_agent_runtime(agent, model=model, store=store)
    return Application(runtime=runtime, authenticate=_authenticate)
