"""Figures ``protocol_*``: the protocol server and its Python client, over WebSocket on loopback.

This module holds what the figures share (the application served, the waits on a watched
thread); :mod:`._protocol_latency` and :mod:`._protocol_load` measure.

The server is :func:`open_server` on ``127.0.0.1`` port 0, over a runtime on a
:class:`SqliteStore` in a temporary directory (its defaults: WAL, ``durability="normal"``);
every client is :func:`open_client`, one WebSocket connection each, with the same token (one
scope). The conversation is the durable-approval one of :mod:`._durable_ours`: ``send``
starts a run whose model asks for one ``refund`` call, the tool suspends at ``approval``, a
client submits ``{"approved": true}``, the tool resumes and returns, the model answers and the
run completes. The model is a :class:`~pai_actors.testing.ScriptedModel` with one callable
step repeated for every request, so every conversation on every thread gets the same script.

**Latency** (``protocol_latency_*``; one measurement, in one process and one ``trio.run``,
gives the four figures). ``n`` watchers each connect with their own client, create their own
thread, watch it and send; once every thread's run is ``waiting`` on its approval, a separate
submitting client (one more connection) submits the approvals. A watcher's latency runs from
just before its approval's ``submit`` is called until its watch yields the
``ToolPartUpdated`` whose part is ``output-available`` (or, if the server ended the watch and
the client resynced, the state that shows it). Two load patterns, in this order, every
watcher connected throughout (each thread gets a second conversation for the second):

- ``sequential``: one approval at a time; the next is submitted once the previous run
  completed (the latency of a lone request, nothing queued in front of it).
- ``concurrent``: all ``n`` approvals submitted at once from the submitting connection (a
  burst; the server answers one connection's requests in order, so later submissions queue
  behind earlier ones).

The baseline is a bare trio-websocket echo round trip, measured in the same run over the same
loopback while the watchers are connected, just before each pattern: ``n`` more connections
to an echo server, each sending one 200-byte text message and waiting for it to come back,
one connection after another (``sequential``) or all at once (``concurrent``). The ``p99``
figures have the target: ratio of times <= 5 (our p99 at most 5x the echo's); ``p50`` is
informational. Percentiles are nearest-rank; with few watchers (``--quick``) p99 is the
slowest. Errors that ``pai_actors`` logs meanwhile (the server logs the failures it survives)
are printed to stderr and appended to the figures' ``unit`` as a warning.

**Load** (``protocol_load``, ``protocol_load_memory``; one run). The server runs in a process
of its own, as it would in production, and the clients in another fresh one, so that each one's
memory samples are its own (not what figures run before left allocated). ``clients`` clients,
each its own connection, run whole conversations one after another for ``warmup`` then
``seconds``: create a thread, watch it, send, wait for the run to be ``waiting``, submit the
pending action the watched state shows, wait for the run to complete, check the tool's output,
stop watching. Any exception in a conversation, and any error ``pai_actors`` logs in either
process, is an error: the run raises at the end if there was one (errors must be 0).
``protocol_load`` reports the conversations started after the warm-up per second
(informational). Resident memory (``/proc/self/statm``) of both processes is sampled every
``sample_every`` seconds from the end of the warm-up to the deadline, under load;
``protocol_load_memory`` is the server's last sample over its first (target <= 1.25: flat,
allowing for allocator noise), and its ``baseline`` text gives the samples and the clients'
process's growth. The warm-up fills what the server keeps bounded (its runtime's indexes,
SQLite's page cache, the feeds that linger). The server runs with ``linger`` (how long a
thread's feed outlives its last watcher) well under the run's length, 5 s rather than the
default 60 s; with 60 s each conversation's feed would be held to the end of a 60 s run.
"""

from __future__ import annotations

import logging
import math
import resource
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from pai_actors import (
    ModelRequest,
    ModelUserMessage,
    RunStatusChanged,
    SqliteStore,
    ThreadState,
    ToolPart,
    ToolPartUpdated,
    create_agent_runtime,
    define_agent,
)
from pai_actors.client import ClientThread, ClientWatch, ThreadResynced
from pai_actors.server import Identity, open_server
from pai_actors.testing import ScriptedModel, ScriptedText, ScriptedToolCall, text, tool_call

from ._durable_ours import TOOL_NAME, refund_tool, tool_input

TOKEN = "bench"
"""The one bearer token every client presents (one identity, one scope)."""
ROOT = Path(__file__).resolve().parent.parent


def _step(request: ModelRequest) -> ScriptedToolCall | ScriptedText:
    """The model's one step: a user message asks for a refund of its order; anything else
    (the tool's result) is answered with text."""
    last = request.messages[-1]
    if isinstance(last, ModelUserMessage):
        return tool_call(TOOL_NAME, tool_input(int(last.text.rsplit(" ", 1)[1])))
    return text("done")


agent = define_agent(name="bench", tools={TOOL_NAME: refund_tool})


def _authenticate(token: str) -> Identity | None:
    return Identity(scope_key="bench") if token == TOKEN else None


@asynccontextmanager
async def serving(directory: Path, *, linger: float = 60.0) -> AsyncIterator[str]:
    """A runtime on a new SQLite file in ``directory`` and a server for it; yields its url."""
    model = ScriptedModel([_step], repeat_last=True, record=False)
    with SqliteStore(directory / "protocol.db") as store:
        async with (
            create_agent_runtime(agent, model=model, store=store) as rt,
            open_server(rt, authenticate=_authenticate, linger=linger) as server,
        ):
            yield server.url


class ErrorLog(logging.Handler):
    """Keeps the error records logged under ``pai_actors`` (the server logs the failures it
    survives, such as a thread feed that failed, rather than raise them)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def summary(self) -> str:
        first = self.records[0]
        reason = f": {first.exc_info[1]!r}" if first.exc_info and first.exc_info[1] else ""
        return (
            f"{len(self.records)} errors logged by pai_actors; the first: "
            f"{first.getMessage()}{reason}"
        )


@contextmanager
def logged_errors() -> Iterator[ErrorLog]:
    logger = logging.getLogger("pai_actors")
    handler = ErrorLog()
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def raise_fd_limit(needed: int) -> None:
    """Raise the soft limit on open files towards the hard limit when ``needed`` exceeds it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        new = hard if hard == resource.RLIM_INFINITY else max(soft, min(hard, needed * 2))
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise RuntimeError(
            f"the benchmark needs about {needed} open files but the hard limit is {hard}; "
            "raise it (ulimit -Hn) or run fewer watchers"
        )


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile ``p`` (0-100) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _run_status(state: ThreadState, run_id: str) -> str | None:
    return next((run.status for run in state.runs if run.run_id == run_id), None)


def _output_seen(state: ThreadState, tool_call_id: str) -> bool:
    return any(
        isinstance(p, ToolPart) and p.tool_call_id == tool_call_id and p.state == "output-available"
        for m in state.messages
        for p in m.parts
    )


def _reached(run_id: str, status: str | None, wanted: str) -> bool:
    if status in ("failed", "cancelled"):
        raise AssertionError(f"run {run_id} {status} while waiting for it to be {wanted!r}")
    return status == wanted


async def until_run(thread: ClientThread, updates: ClientWatch, run_id: str, status: str) -> None:
    """Return once run ``run_id`` is ``status``: already in the thread's state, or as an
    update (or a resync, after the server ended a watch) shows it."""
    if _reached(run_id, _run_status(thread.get_state(), run_id), status):
        return
    async for update in updates:
        if isinstance(update, RunStatusChanged) and update.run.run_id == run_id:
            if _reached(run_id, update.run.status, status):
                return
        elif isinstance(update, ThreadResynced):
            if _reached(run_id, _run_status(update.state, run_id), status):
                return
    raise AssertionError(f"the watch ended before run {run_id} was {status!r}")


async def until_output(thread: ClientThread, updates: ClientWatch, tool_call_id: str) -> None:
    """Return once the tool part of ``tool_call_id`` is ``output-available``."""
    if _output_seen(thread.get_state(), tool_call_id):
        return
    async for update in updates:
        if isinstance(update, ToolPartUpdated):
            part = update.part
            if part.tool_call_id == tool_call_id and part.state == "output-available":
                return
        elif isinstance(update, ThreadResynced) and _output_seen(update.state, tool_call_id):
            return
    raise AssertionError(f"the watch ended before call {tool_call_id}'s output was seen")


def check_completed(thread: ClientThread, conversations: int) -> None:
    state = thread.get_state()
    parts = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    runs = [r.status for r in state.runs]
    if (
        runs != ["completed"] * conversations
        or [p.output for p in parts] != [{"refunded": 500}] * conversations
    ):
        raise AssertionError(f"thread {thread.thread_id}: runs {runs!r}, parts {parts!r}")
