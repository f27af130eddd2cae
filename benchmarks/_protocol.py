"""Figures ``protocol_*``: the protocol server and its Python client, over WebSocket on loopback.

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

import functools
import gc
import json
import logging
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    connect_websocket_url,
    serve_websocket,
)

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
from pai_actors.client import (
    Client,
    ClientThread,
    ClientWatch,
    PendingActionView,
    ThreadResynced,
    open_client,
)
from pai_actors.server import Identity, open_server
from pai_actors.testing import ScriptedModel, ScriptedText, ScriptedToolCall, text, tool_call

from ._durable_ours import APPROVE, TOOL_NAME, refund_tool, tool_input
from ._harness import Record, Target, value_record

LATENCY_TARGET = Target("<=", 5.0)
MEMORY_TARGET = Target("<=", 1.25)
TOKEN = "bench"
_ECHO_MESSAGE = "x" * 200
_PATTERNS = ("sequential", "concurrent")
_ROOT = Path(__file__).resolve().parent.parent


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
async def _serving(directory: Path, *, linger: float = 60.0) -> AsyncIterator[str]:
    """A runtime on a new SQLite file in ``directory`` and a server for it; yields its url."""
    model = ScriptedModel([_step], repeat_last=True, record=False)
    with SqliteStore(directory / "protocol.db") as store:
        async with (
            create_agent_runtime(agent, model=model, store=store) as rt,
            open_server(rt, authenticate=_authenticate, linger=linger) as server,
        ):
            yield server.url


class _ErrorLog(logging.Handler):
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
def _logged_errors() -> Iterator[_ErrorLog]:
    logger = logging.getLogger("pai_actors")
    handler = _ErrorLog()
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _raise_fd_limit(needed: int) -> None:
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


def _percentile(values: list[float], p: float) -> float:
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


async def _until_run(thread: ClientThread, updates: ClientWatch, run_id: str, status: str) -> None:
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


async def _until_output(thread: ClientThread, updates: ClientWatch, tool_call_id: str) -> None:
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


def _check_completed(thread: ClientThread, conversations: int) -> None:
    state = thread.get_state()
    parts = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    runs = [r.status for r in state.runs]
    if (
        runs != ["completed"] * conversations
        or [p.output for p in parts] != [{"refunded": 500}] * conversations
    ):
        raise AssertionError(f"thread {thread.thread_id}: runs {runs!r}, parts {parts!r}")


# -- latency -------------------------------------------------------------------------------


@dataclass
class _Round:
    """One load pattern's approvals: every watcher's thread waiting, then its times."""

    n: int
    waiting: int = 0
    all_waiting: trio.Event = field(default_factory=trio.Event)
    thread_ids: dict[int, str] = field(default_factory=dict)
    submitted: dict[int, float] = field(default_factory=dict)
    seen: dict[int, float] = field(default_factory=dict)
    completed: dict[int, trio.Event] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.completed = {i: trio.Event() for i in range(self.n)}

    def latencies(self) -> list[float]:
        return [self.seen[i] - self.submitted[i] for i in range(self.n)]


@dataclass(frozen=True)
class _Latency:
    """Seconds, by pattern: ours and the echo's p50 and p99."""

    ours: dict[str, tuple[float, float]]
    echo: dict[str, tuple[float, float]]
    errors: str | None
    """What ``pai_actors`` logged as errors during the measurement (``None``: nothing)."""


async def _watcher(i: int, url: str, rounds: list[_Round], finished: trio.Event) -> None:
    async with open_client(url, token=TOKEN) as client:
        thread = await client.create_thread()
        async with thread.watch() as updates:
            for done, r in enumerate(rounds, 1):
                run_id = await thread.send(f"refund {i}")
                await _until_run(thread, updates, run_id, "waiting")
                [action] = thread.pending_actions()
                r.thread_ids[i] = thread.thread_id
                r.waiting += 1
                if r.waiting == r.n:
                    r.all_waiting.set()
                await _until_output(thread, updates, action.ref.tool_call_id)
                r.seen[i] = time.perf_counter()
                await _until_run(thread, updates, run_id, "completed")
                _check_completed(thread, done)
                r.completed[i].set()
            await finished.wait()  # stay connected until every watcher is done


async def _submit(r: _Round, i: int, view: PendingActionView) -> None:
    r.submitted[i] = time.perf_counter()
    result = await view.submit(APPROVE)
    if result.status != "accepted":
        raise AssertionError(f"submission not accepted: {result!r}")


async def _echo_handler(request: WebSocketRequest) -> None:
    ws = await request.accept()
    try:
        while True:
            await ws.send_message(await ws.get_message())
    except ConnectionClosed:
        pass


async def _echo_once(ws: WebSocketConnection, out: list[float]) -> None:
    start = time.perf_counter()
    await ws.send_message(_ECHO_MESSAGE)
    if await ws.get_message() != _ECHO_MESSAGE:
        raise AssertionError("the echo server answered something else")
    out.append(time.perf_counter() - start)


async def _echo(echoes: list[WebSocketConnection], pattern: str) -> tuple[float, float]:
    gc.collect()
    out: list[float] = []
    if pattern == "sequential":
        for ws in echoes:
            await _echo_once(ws, out)
    else:
        async with trio.open_nursery() as nursery:
            for ws in echoes:
                nursery.start_soon(_echo_once, ws, out)
    return _percentile(out, 50), _percentile(out, 99)


async def _latency_main(n: int, directory: Path) -> _Latency:
    rounds = [_Round(n) for _ in _PATTERNS]
    finished = trio.Event()
    ours: dict[str, tuple[float, float]] = {}
    echo: dict[str, tuple[float, float]] = {}
    async with _serving(directory) as url, trio.open_nursery() as nursery:
        echo_server = await nursery.start(serve_websocket, _echo_handler, "127.0.0.1", 0, None)
        echo_url = f"ws://127.0.0.1:{echo_server.port}/"
        echoes = [await connect_websocket_url(nursery, echo_url) for _ in range(n)]
        for ws in echoes:  # one round trip each before any is timed
            await ws.send_message(_ECHO_MESSAGE)
            await ws.get_message()
        async with open_client(url, token=TOKEN) as submitter, trio.open_nursery() as watchers:
            for i in range(n):
                watchers.start_soon(_watcher, i, url, rounds, finished)
            for pattern, r in zip(_PATTERNS, rounds, strict=True):
                await r.all_waiting.wait()
                echo[pattern] = await _echo(echoes, pattern)
                views = {}
                for i in range(n):
                    [views[i]] = await submitter.pending_actions(r.thread_ids[i])
                gc.collect()
                if pattern == "sequential":
                    for i in range(n):
                        await _submit(r, i, views[i])
                        await r.completed[i].wait()
                else:
                    async with trio.open_nursery() as submits:
                        for i in range(n):
                            submits.start_soon(_submit, r, i, views[i])
                    for event in r.completed.values():
                        await event.wait()
                latencies = r.latencies()
                ours[pattern] = (_percentile(latencies, 50), _percentile(latencies, 99))
            finished.set()
        for ws in echoes:
            await ws.aclose()
        nursery.cancel_scope.cancel()
    return _Latency(ours, echo, None)


@functools.lru_cache(maxsize=4)
def _latency(n: int) -> _Latency:
    _raise_fd_limit(4 * n + 256)  # each watcher and echo: a client and a server socket
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp, _logged_errors() as errors:
        measured = trio.run(_latency_main, n, Path(tmp))
    if errors.records:
        print(f"protocol latency ({n} watchers): {errors.summary()}", file=sys.stderr)
        return _Latency(measured.ours, measured.echo, errors.summary())
    return measured


def _time_figure(
    figure: str,
    *,
    unit: str,
    seconds: float,
    baseline: str,
    baseline_seconds: float,
    target: Target | None,
    n: int,
) -> Record:
    ratio = seconds / baseline_seconds
    return Record(
        figure=figure,
        unit=unit,
        value=seconds,
        baseline=baseline,
        baseline_value=baseline_seconds,
        ratio=ratio,
        ratio_of="time",
        target=None if target is None else str(target),
        met=None if target is None else target.met_by(ratio),
        n=n,
        baseline_n=n,
        repeats=1,
    )


def _latency_figure(pattern: str, percentile: int, n: int) -> Record:
    measured = _latency(n)
    index = 0 if percentile == 50 else 1
    how = (
        "one at a time, each after the previous run completed"
        if pattern == "sequential"
        else "all at once from the submitting connection"
    )
    return _time_figure(
        f"protocol_latency_p{percentile}_{pattern}",
        unit=f"s, p{percentile} from submit to the watcher seeing output-available "
        f"({n:,} watchers, one connection each; approvals {how}; SQLite)"
        + ("" if measured.errors is None else f"; WARNING: {measured.errors}"),
        seconds=measured.ours[pattern][index],
        baseline=f"trio-websocket echo round trip p{percentile}, {n:,} connections, "
        + ("one after another" if pattern == "sequential" else "all at once"),
        baseline_seconds=measured.echo[pattern][index],
        target=LATENCY_TARGET if percentile == 99 else None,
        n=n,
    )


def latency_p50_sequential(n: int = 1_000) -> Record:
    """Median submit-to-seen latency, one approval at a time, vs the echo's; informational."""
    return _latency_figure("sequential", 50, n)


def latency_p99_sequential(n: int = 1_000) -> Record:
    """p99 submit-to-seen latency, one approval at a time, vs the echo's. Target: <= 5x."""
    return _latency_figure("sequential", 99, n)


def latency_p50_concurrent(n: int = 1_000) -> Record:
    """Median submit-to-seen latency, all approvals at once, vs the echo's; informational."""
    return _latency_figure("concurrent", 50, n)


def latency_p99_concurrent(n: int = 1_000) -> Record:
    """p99 submit-to-seen latency, all approvals at once, vs the echo's. Target: <= 5x."""
    return _latency_figure("concurrent", 99, n)


# -- load ----------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Sampler:
    """Resident memory of this process, from :meth:`start`: one sample then, one every
    ``every`` seconds while :meth:`run` runs, one at :meth:`stop` (after a collection)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.samples: list[tuple[float, int]] = []
        self._start = 0.0

    def start(self) -> None:
        gc.collect()
        self._start = time.perf_counter()
        self.samples.append((0.0, _rss_bytes()))

    async def run(self) -> None:
        while True:
            await trio.sleep(self.every)
            self.samples.append((time.perf_counter() - self._start, _rss_bytes()))

    def stop(self) -> None:
        gc.collect()
        self.samples.append((time.perf_counter() - self._start, _rss_bytes()))


def serve_for_load(linger: float, sample_every: float, clients: int) -> None:
    """The load run's server process. It prints its url; on a ``start`` line on stdin it
    starts sampling its memory, on ``stop`` it takes the last sample, on ``exit`` it closes
    the server and prints the samples and any errors logged as one JSON line."""
    _raise_fd_limit(clients + 256)
    sampler = _Sampler(sample_every)

    async def main(directory: Path) -> None:
        async with _serving(directory, linger=linger) as url:
            print(url, flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)  # start
            sampler.start()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sampler.run)
                await trio.to_thread.run_sync(sys.stdin.readline)  # stop
                nursery.cancel_scope.cancel()
            sampler.stop()
            await trio.to_thread.run_sync(sys.stdin.readline)  # exit

    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp, _logged_errors() as errors:
        trio.run(main, Path(tmp))
    summary = errors.summary() if errors.records else None
    print(json.dumps({"samples": sampler.samples, "errors": summary}), flush=True)


@dataclass
class _LoadState:
    measure_from: float
    """Conversations that start from here (after the warm-up) are counted..."""
    deadline: float
    """... until here; none starts after it."""
    conversations: int = 0
    errors: list[BaseException] = field(default_factory=list)


@dataclass(frozen=True)
class _Load:
    conversations: int
    seconds: float
    server: list[tuple[float, int]]
    """The server process's ``(seconds since the start, resident bytes)``, first to last."""
    clients: list[tuple[float, int]]
    """The same for the clients' process."""


async def _conversation(client: Client, order: int) -> None:
    thread = await client.create_thread()
    async with thread.watch() as updates:
        run_id = await thread.send(f"refund {order}")
        await _until_run(thread, updates, run_id, "waiting")
        [action] = thread.pending_actions()
        result = await action.submit(APPROVE)
        if result.status != "accepted":
            raise AssertionError(f"submission not accepted: {result!r}")
        await _until_run(thread, updates, run_id, "completed")
    _check_completed(thread, 1)


async def _load_client(w: int, url: str, state: _LoadState) -> None:
    async with open_client(url, token=TOKEN) as client:
        i = 0
        while (started := trio.current_time()) < state.deadline:
            try:
                await _conversation(client, w * 1_000_000 + i)
            except Exception as exc:
                state.errors.append(exc)
            else:
                if started >= state.measure_from:
                    state.conversations += 1
            i += 1


async def _load_clients(
    url: str,
    warmup: float,
    seconds: float,
    clients: int,
    sampler: _Sampler,
    tell_server: Callable[[str], None],
) -> tuple[int, float]:
    """Run the clients against ``url`` for ``warmup`` then ``seconds``, sampling both
    processes' memory from the end of the warm-up to the deadline (under load); return the
    conversations started after the warm-up and the seconds until the last one finished."""
    now = trio.current_time()
    state = _LoadState(measure_from=now + warmup, deadline=now + warmup + seconds)
    async with trio.open_nursery() as nursery:
        for w in range(clients):
            nursery.start_soon(_load_client, w, url, state)
        await trio.sleep_until(state.measure_from)
        tell_server("start")
        sampler.start()
        async with trio.open_nursery() as sampling:
            sampling.start_soon(sampler.run)
            await trio.sleep_until(state.deadline)
            sampling.cancel_scope.cancel()
        sampler.stop()
        tell_server("stop")
    if state.errors:
        raise AssertionError(
            f"{len(state.errors)} conversations failed under load; the first: {state.errors[0]!r}"
        )
    return state.conversations, trio.current_time() - state.measure_from


def _python(code: str, *args: object, **popen: Any) -> subprocess.Popen[str]:
    """A fresh interpreter running ``code`` (which imports from ``benchmarks``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], cwd=_ROOT, env=env, text=True, **popen
    )


def run_load(
    warmup: float, seconds: float, clients: int, sample_every: float, linger: float
) -> str:
    """The load run, with the clients in this process and the server in one of its own;
    returns what it measured as JSON. Raises if there was an error."""
    _raise_fd_limit(clients + 256)
    code = (
        "import sys\n"
        "from benchmarks._protocol import serve_for_load\n"
        "serve_for_load(float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]))\n"
    )
    sampler = _Sampler(sample_every)
    with tempfile.TemporaryFile("w+") as stderr:
        server = _python(
            code,
            linger,
            sample_every,
            clients,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        assert server.stdin is not None
        assert server.stdout is not None

        def tell_server(line: str) -> None:
            assert server.stdin is not None
            server.stdin.write(line + "\n")
            server.stdin.flush()

        def failed(what: str) -> RuntimeError:
            stderr.seek(0)
            return RuntimeError(f"the load run's server process {what}:\n{stderr.read()}")

        try:
            url = server.stdout.readline().strip()
            if not url:
                raise failed("did not start")
            with _logged_errors() as errors:
                conversations, seconds_taken = trio.run(
                    _load_clients, url, warmup, seconds, clients, sampler, tell_server
                )
            tell_server("exit")
            out, _ = server.communicate(timeout=60)
            if server.returncode != 0:
                raise failed(f"exited with {server.returncode}")
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    report = json.loads(out.strip().splitlines()[-1])
    if errors.records:
        raise AssertionError(f"the load run completed, but the clients had {errors.summary()}")
    if report["errors"] is not None:
        raise AssertionError(f"the load run completed, but the server had {report['errors']}")
    return json.dumps(
        {
            "conversations": conversations,
            "seconds": seconds_taken,
            "server": report["samples"],
            "clients": sampler.samples,
        }
    )


@functools.lru_cache(maxsize=4)
def _load(warmup: float, seconds: float, clients: int, sample_every: float, linger: float) -> _Load:
    """:func:`run_load` in a fresh process: the server in a process of its own (as in
    production), the clients in another, so that each one's memory samples are its own and
    not what figures run before left allocated."""
    code = (
        "import sys\n"
        "from benchmarks._protocol import run_load\n"
        "a = sys.argv\n"
        "print(run_load(float(a[1]), float(a[2]), int(a[3]), float(a[4]), float(a[5])))\n"
    )
    with tempfile.TemporaryFile("w+") as stderr:
        done = _python(
            code,
            warmup,
            seconds,
            clients,
            sample_every,
            linger,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        out, _ = done.communicate()
        if done.returncode != 0:
            stderr.seek(0)
            raise RuntimeError(f"the protocol load run failed:\n{stderr.read()}")
    data = json.loads(out.strip().splitlines()[-1])
    return _Load(
        data["conversations"],
        data["seconds"],
        [(t, rss) for t, rss in data["server"]],
        [(t, rss) for t, rss in data["clients"]],
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def load(
    seconds: float = 60.0,
    *,
    warmup: float = 10.0,
    clients: int = 50,
    sample_every: float = 5.0,
    linger: float = 5.0,
) -> Record:
    """Whole conversations per second through the server for ``seconds``; informational."""
    measured = _load(warmup, seconds, clients, sample_every, linger)
    return Record(
        figure="protocol_load",
        unit=f"conversations/s ({clients} clients, one connection each, for {seconds:g} s "
        f"after {warmup:g} s of warm-up: "
        "create, watch, send, submit the approval, wait for completion; 0 errors; server in "
        "its own process; SQLite)",
        value=measured.conversations / measured.seconds,
        baseline="none: informational",
        baseline_value=None,
        ratio=None,
        ratio_of="value",
        target=None,
        met=None,
        n=measured.conversations,
        baseline_n=0,
        repeats=1,
    )


def load_memory(
    seconds: float = 60.0,
    *,
    warmup: float = 10.0,
    clients: int = 50,
    sample_every: float = 5.0,
    linger: float = 5.0,
) -> Record:
    """The server process's resident memory at the end of the load run over its first
    sample. Target: <= 1.25."""
    measured = _load(warmup, seconds, clients, sample_every, linger)
    (_, first), (last_at, last) = measured.server[0], measured.server[-1]
    (_, clients_first), (_, clients_last) = measured.clients[0], measured.clients[-1]
    return value_record(
        "protocol_load_memory",
        unit=f"last / first RSS sample of the server process over the {seconds:g} s load run "
        f"(every {sample_every:g} s, under load; server linger {linger:g} s)",
        value=last / first,
        baseline=f"server: first sample {_mib(first)} after {warmup:g} s of warm-up, last "
        f"{_mib(last)} at {last_at:.1f} s, "
        f"peak {_mib(max(rss for _, rss in measured.server))}; the clients' "
        f"process: {_mib(clients_first)} to {_mib(clients_last)} "
        f"(x{clients_last / clients_first:.2f})",
        target=MEMORY_TARGET,
        n=measured.conversations,
        repeats=1,
    )
