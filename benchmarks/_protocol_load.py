"""The load figures ``protocol_load`` and ``protocol_load_memory``; see :mod:`._protocol`."""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from pai_actors.client import Client, open_client

from ._durable_ours import APPROVE
from ._harness import Record, Target, fresh, method, value_record
from ._protocol import (
    ROOT,
    TOKEN,
    check_completed,
    logged_errors,
    raise_fd_limit,
    serving,
    until_run,
)

MEMORY_TARGET = Target("<=", 1.25)
_METHOD = method(
    1,
    "one load run after a warm-up: the clients in a fresh process, the server in a fresh "
    "process of its own",
    sides=1,
    warmed=True,
)


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


def serve_for_load(linger: float, sample_every: float, clients: int) -> dict[str, Any]:
    """The load run's server process (a side: ``python -m benchmarks._side``). It prints its
    url; on a ``start`` line on stdin it starts sampling its memory, on ``stop`` it takes the
    last sample, on ``exit`` it closes the server and returns the samples and any errors
    logged (the runner prints them as the last line)."""
    raise_fd_limit(clients + 256)
    sampler = _Sampler(sample_every)

    async def main(directory: Path) -> None:
        async with serving(directory, linger=linger) as url:
            print(url, flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)  # start
            sampler.start()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sampler.run)
                await trio.to_thread.run_sync(sys.stdin.readline)  # stop
                nursery.cancel_scope.cancel()
            sampler.stop()
            await trio.to_thread.run_sync(sys.stdin.readline)  # exit

    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp, logged_errors() as errors:
        trio.run(main, Path(tmp))
    summary = errors.summary() if errors.records else None
    return {"samples": sampler.samples, "errors": summary}


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
        await until_run(thread, updates, run_id, "waiting")
        [action] = thread.pending_actions()
        result = await action.submit(APPROVE)
        if result.status != "accepted":
            raise AssertionError(f"submission not accepted: {result!r}")
        await until_run(thread, updates, run_id, "completed")
    check_completed(thread, 1)


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


def _side(function: str, popen: dict[str, Any], **kwargs: Any) -> subprocess.Popen[str]:
    """A fresh interpreter running ``function(**kwargs)`` of this module as a side
    (``python -m benchmarks._side``), talked to through its pipes."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "benchmarks._side", __name__, function, json.dumps(kwargs)]
    return subprocess.Popen(command, cwd=ROOT, env=env, text=True, **popen)


def run_load(
    warmup: float, seconds: float, clients: int, sample_every: float, linger: float
) -> dict[str, Any]:
    """The load run (a side, in a fresh process), with the clients in this process and the
    server in a fresh one of its own; returns what it measured. Raises if there was an
    error."""
    raise_fd_limit(clients + 256)
    sampler = _Sampler(sample_every)
    with tempfile.TemporaryFile("w+") as stderr:
        server = _side(
            "serve_for_load",
            {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": stderr},
            linger=linger,
            sample_every=sample_every,
            clients=clients,
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
            with logged_errors() as errors:
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
    return {
        "conversations": conversations,
        "seconds": seconds_taken,
        "server": report["samples"],
        "clients": sampler.samples,
    }


@functools.lru_cache(maxsize=4)
def _load(warmup: float, seconds: float, clients: int, sample_every: float, linger: float) -> _Load:
    """:func:`run_load` in a fresh process: the server in a process of its own (as in
    production), the clients in another, so that each one's memory samples are its own and
    not what figures run before left allocated."""
    data = fresh(
        run_load,
        warmup=warmup,
        seconds=seconds,
        clients=clients,
        sample_every=sample_every,
        linger=linger,
    )
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
    return value_record(
        "protocol_load",
        unit=f"conversations/s ({clients} clients, one connection each, for {seconds:g} s "
        f"after {warmup:g} s of warm-up: "
        "create, watch, send, submit the approval, wait for completion; 0 errors; server in "
        "its own process; SQLite)",
        samples=[measured.conversations / measured.seconds],
        baseline="none: informational",
        target=None,
        n=measured.conversations,
        method=_METHOD,
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
        samples=[last / first],
        baseline=f"server: first sample {_mib(first)} after {warmup:g} s of warm-up, last "
        f"{_mib(last)} at {last_at:.1f} s, "
        f"peak {_mib(max(rss for _, rss in measured.server))}; the clients' "
        f"process: {_mib(clients_first)} to {_mib(clients_last)} "
        f"(x{clients_last / clients_first:.2f})",
        target=MEMORY_TARGET,
        n=measured.conversations,
        method=_METHOD,
    )
