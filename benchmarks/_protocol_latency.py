"""The latency figures ``protocol_latency_*``; see :mod:`._protocol`."""

from __future__ import annotations

import functools
import gc
import sys
import tempfile
import time
from contextlib import AsyncExitStack
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

from pai_actors.client import PendingActionView, open_client

from ._durable_ours import APPROVE
from ._harness import Record, Target, fresh, method, time_record
from ._protocol import (
    TOKEN,
    check_completed,
    logged_errors,
    percentile,
    raise_fd_limit,
    serving,
    until_output,
    until_run,
)

LATENCY_TARGET = Target("<=", 5.0)
_ECHO_MESSAGE = "x" * 200
_PATTERNS = ("sequential", "concurrent")


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


_CONNECTING_AT_ONCE = 50
"""Watchers opening their connection at the same time: a thousand handshakes at once make the
later clients miss their connect timeout, which is not what the figures measure."""


async def _watcher(
    i: int, url: str, rounds: list[_Round], finished: trio.Event, connecting: trio.Semaphore
) -> None:
    async with AsyncExitStack() as stack:
        async with connecting:
            client = await stack.enter_async_context(open_client(url, token=TOKEN))
        thread = await client.create_thread()
        async with thread.watch() as updates:
            for done, r in enumerate(rounds, 1):
                run_id = await thread.send(f"refund {i}")
                await until_run(thread, updates, run_id, "waiting")
                [action] = thread.pending_actions()
                r.thread_ids[i] = thread.thread_id
                r.waiting += 1
                if r.waiting == r.n:
                    r.all_waiting.set()
                await until_output(thread, updates, action.ref.tool_call_id)
                r.seen[i] = time.perf_counter()
                await until_run(thread, updates, run_id, "completed")
                check_completed(thread, done)
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
    return percentile(out, 50), percentile(out, 99)


async def _latency_main(n: int, directory: Path) -> _Latency:
    rounds = [_Round(n) for _ in _PATTERNS]
    finished = trio.Event()
    ours: dict[str, tuple[float, float]] = {}
    echo: dict[str, tuple[float, float]] = {}
    async with serving(directory) as url, trio.open_nursery() as nursery:
        echo_server = await nursery.start(serve_websocket, _echo_handler, "127.0.0.1", 0, None)
        echo_url = f"ws://127.0.0.1:{echo_server.port}/"
        echoes = [await connect_websocket_url(nursery, echo_url) for _ in range(n)]
        for ws in echoes:  # one round trip each before any is timed
            await ws.send_message(_ECHO_MESSAGE)
            await ws.get_message()
        async with open_client(url, token=TOKEN) as submitter, trio.open_nursery() as watchers:
            connecting = trio.Semaphore(_CONNECTING_AT_ONCE)
            for i in range(n):
                watchers.start_soon(_watcher, i, url, rounds, finished, connecting)
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
                ours[pattern] = (percentile(latencies, 50), percentile(latencies, 99))
            finished.set()
        for ws in echoes:
            await ws.aclose()
        nursery.cancel_scope.cancel()
    return _Latency(ours, echo, None)


def measure_latency(n: int) -> dict[str, Any]:
    """One latency measurement (run in a fresh process by :func:`_latency`): ours and the
    echo's p50 and p99 by pattern, and what ``pai_actors`` logged as errors."""
    raise_fd_limit(4 * n + 256)  # each watcher and echo: a client and a server socket
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp, logged_errors() as errors:
        measured = trio.run(_latency_main, n, Path(tmp))
    return {
        "ours": measured.ours,
        "echo": measured.echo,
        "errors": errors.summary() if errors.records else None,
    }


@functools.lru_cache(maxsize=4)
def _latency(n: int, repeats: int) -> list[_Latency]:
    """``repeats`` measurements, each in a fresh process."""
    out = []
    for _ in range(repeats):
        data = fresh(measure_latency, n=n)
        if data["errors"] is not None:
            print(f"protocol latency ({n} watchers): {data['errors']}", file=sys.stderr)
        out.append(
            _Latency(
                {k: (v[0], v[1]) for k, v in data["ours"].items()},
                {k: (v[0], v[1]) for k, v in data["echo"].items()},
                data["errors"],
            )
        )
    return out


def _latency_figure(pattern: str, percentile: int, n: int, repeats: int) -> Record:
    measured = _latency(n, repeats)
    index = 0 if percentile == 50 else 1
    how = (
        "one at a time, each after the previous run completed"
        if pattern == "sequential"
        else "all at once from the submitting connection"
    )
    errors = next((m.errors for m in measured if m.errors is not None), None)
    return time_record(
        f"protocol_latency_p{percentile}_{pattern}",
        unit=f"s, p{percentile} from submit to the watcher seeing output-available "
        f"({n:,} watchers, one connection each; approvals {how}; SQLite)"
        + ("" if errors is None else f"; WARNING: {errors}"),
        seconds=[m.ours[pattern][index] for m in measured],
        baseline=f"trio-websocket echo round trip p{percentile}, {n:,} connections, "
        + ("one after another" if pattern == "sequential" else "all at once"),
        baseline_seconds=[m.echo[pattern][index] for m in measured],
        target=LATENCY_TARGET if percentile == 99 else None,
        n=n,
        method=method(
            repeats,
            "ours and the echo measured in the same process, the echo just before each "
            "pattern over the same loopback while the watchers are connected; percentiles "
            "nearest-rank",
            sides=1,
        ),
    )


def latency_p50_sequential(n: int = 1_000, *, repeats: int = 1) -> Record:
    """Median submit-to-seen latency, one approval at a time, vs the echo's; informational."""
    return _latency_figure("sequential", 50, n, repeats)


def latency_p99_sequential(n: int = 1_000, *, repeats: int = 1) -> Record:
    """p99 submit-to-seen latency, one approval at a time, vs the echo's. Target: <= 5x."""
    return _latency_figure("sequential", 99, n, repeats)


def latency_p50_concurrent(n: int = 1_000, *, repeats: int = 1) -> Record:
    """Median submit-to-seen latency, all approvals at once, vs the echo's; informational."""
    return _latency_figure("concurrent", 50, n, repeats)


def latency_p99_concurrent(n: int = 1_000, *, repeats: int = 1) -> Record:
    """p99 submit-to-seen latency, all approvals at once, vs the echo's. Target: <= 5x."""
    return _latency_figure("concurrent", 99, n, repeats)
