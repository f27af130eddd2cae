"""The application of ``test_postgres_failover``'s node processes::

    PAI_FAILOVER_LOG=x.log python -m pai_actors._cli serve \\
        tests.pai_actors.failover_app:factory --db postgresql://... --node-id n1 --lease 1

One agent, ``jobs``, with two tools that ask the user's approval before they run: ``job`` (a
call whose node stopped while it ran is recorded interrupted, never run twice) and
``rerunJob`` (registered ``rerun_interrupted=True``: such a call runs again). The scripted
model reads a request such as ``"jobs: once rerun"`` and calls, in one step, one tool per word
(``once``: ``job``, ``rerun``: ``rerunJob``); once every result is in, it answers
:func:`answer` of their call ids. Each step is decided from the request alone, so a step done
again after a takeover is the same step.

**The execution log.** Each execution of a job takes a moment, appends one JSON line
``{"thread", "call", "pid"}`` to the file ``PAI_FAILOVER_LOG`` names, takes another moment
and returns ``{"job", "pid"}``. The line is written with ``os.write`` on an ``O_APPEND``
descriptor: it is in the kernel once ``write`` returns, so a ``SIGKILL`` cannot lose it, and it
is independent of the store: the test counts executions from it.

**The trace.** With ``PAI_FAILOVER_TRACE``, the process also appends, the same way, when each
model step and each execution starts and ends (``{"event", "pid", ...}``): what a killed
process was doing, for the test's report of where its kills landed.

``PAI_FAILOVER_PACE`` (seconds, default 0.1) bounds each pause: a model step's, and each half
of an execution's; every pause is drawn at random below it, so kills meet them at all points.
"""

from __future__ import annotations

import json
import logging
import os
import random
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

LOG_ENV = "PAI_FAILOVER_LOG"
TRACE_ENV = "PAI_FAILOVER_TRACE"
PACE_ENV = "PAI_FAILOVER_PACE"
TOKEN = "failover-token"
SCOPE = "failover"
TOOLS = {"once": "job", "rerun": "rerunJob"}
"""The kind of a job (a word of the request) -> the registration name of its tool."""


class Job(BaseModel):
    job: str


def append_line(path: str, entry: dict[str, Any]) -> None:
    """Append ``entry`` as one JSON line; in the kernel on return (``SIGKILL`` cannot lose it)."""
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        assert written == len(line), "a short write to an append-only log"
    finally:
        os.close(fd)


def read_lines(path: str) -> list[dict[str, Any]]:
    """Every line of a log :func:`append_line` wrote (none if there is no file). A torn line
    fails loudly: it would hide an execution."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file.read().splitlines()]


def _trace(event: str, **fields: Any) -> None:
    path = os.environ.get(TRACE_ENV)
    if path:
        append_line(path, {"event": event, "pid": os.getpid(), **fields})


async def _pause() -> None:
    await trio.sleep(random.uniform(0, float(os.environ.get(PACE_ENV, "0.1"))))


async def _execute(ctx: ToolContext) -> Any:
    where = {"thread": ctx.thread.thread_id, "call": ctx.thread.tool_call_id}
    _trace("tool-start", **where)
    await _pause()
    append_line(os.environ[LOG_ENV], {**where, "pid": os.getpid()})
    await _pause()
    _trace("tool-end", **where)
    return {"job": ctx.input.job, "pid": os.getpid()}


def _job_tool(tool_id: str) -> Any:
    return define_tool(
        id=tool_id,
        description="Run a job (once a person approved it).",
        input_schema=Job,
        execute=_execute,
    )


def jobs_of(request: str) -> list[str]:
    """The kinds of job a request asks for: ``"jobs: once rerun"`` -> ``["once", "rerun"]``."""
    match = re.fullmatch(r"jobs: ((?:once|rerun)(?: (?:once|rerun))*)", request)
    assert match is not None, f"not a request of this test: {request!r}"
    return match.group(1).split()


def answer(call_ids: list[str]) -> str:
    """The model's answer once the calls ``call_ids`` have their results."""
    return "done: " + " ".join(sorted(call_ids))


async def _step(request: ModelRequest) -> Any:
    _trace("model-start")
    await _pause()
    last = request.messages[-1]
    step: Any
    if isinstance(last, ModelUserMessage):
        kinds = jobs_of(last.text)
        step = [tool_call(TOOLS[kind], {"job": f"{kind}-{n}"}) for n, kind in enumerate(kinds)]
    else:
        assert isinstance(last, ModelToolMessage), f"unexpected last message {last!r}"
        step = text(answer([part.tool_call_id for part in last.parts]))
    _trace("model-end")
    return step


def _authenticate(token: str) -> Identity | None:
    return Identity(scope_key=SCOPE, user_key="driver") if token == TOKEN else None


def factory(store: Store) -> Application:
    """The application ``pai-actors serve`` hosts on ``store``. With ``PAI_FAILOVER_TRACE``
    set, the library's INFO logs go to stderr too (what a failed test shows)."""
    if os.environ.get(TRACE_ENV):
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s"
        )
    agent = define_agent(
        name="jobs",
        tools={
            "job": ToolRegistration(_job_tool("failover.job.v1"), needs_approval=True),
            "rerunJob": ToolRegistration(
                _job_tool("failover.rerun-job.v1"), needs_approval=True, rerun_interrupted=True
            ),
        },
    )
    model = ScriptedModel([_step], repeat_last=True, record=False)
    runtime = create_agent_runtime(agent, model=model, store=store)
    return Application(runtime=runtime, authenticate=_authenticate)
