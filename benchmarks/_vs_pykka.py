"""Figures ``vs_pykka`` and ``vs_pykka_sequential``: actor lives (start, one ask, stop).

``vs_pykka`` (the targeted figure, throughput): ``n`` actors are started together, each is
asked once, concurrently, and all are stopped; pykka does the same with ``ThreadingActor``
(``start()`` for each, ``ask(..., block=False)`` futures gathered with ``pykka.get_all``, then
``stop(block=False)`` futures gathered). Both sides use the concurrency each offers, at the
same ``n`` (1,000 by default: a thousand threads is already a lot for pykka).

``vs_pykka_sequential`` (informational, no target): one actor's whole life after another,
``spawn``, ``await ask``, ``stop``, ``await wait_exit`` against pykka's blocking ``start``,
``ask``, ``stop``. This is the latency of a lifecycle: each trio lifecycle pays several
scheduler passes, so it shows trio's advantage far less than the concurrent figure.

pykka starts a thread per actor, so it runs fewer actors per repetition; the figures compare
throughputs.
"""

from __future__ import annotations

import time
from functools import partial

import pykka
import trio

from supervisors import ActorRef, Shutdown, open_supervisor

from ._ask import Ping, _echo
from ._harness import Record, Target, fresh, interleave, method, throughput_record

TARGET = Target(">=", 5.0)


class _PykkaEcho(pykka.ThreadingActor):
    def on_receive(self, message: int) -> int:
        return message


def _sequential(n: int) -> float:
    async def main() -> float:
        async with open_supervisor(name="bench") as sup:
            start = time.perf_counter()
            for i in range(n):
                ref = sup.spawn(_echo, restart="temporary")
                answer = await ref.ask(partial(Ping, i))
                ref.stop()
                reason = await ref.wait_exit()
                if answer != i or reason != Shutdown():
                    raise AssertionError(f"asked {i}, got {answer!r}, exit {reason}")
            return time.perf_counter() - start

    return trio.run(main)


def _sequential_pykka(n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        ref = _PykkaEcho.start()
        answer = ref.ask(i)
        ref.stop()
        if answer != i:
            raise AssertionError(f"asked {i}, got {answer!r}")
    return time.perf_counter() - start


def _concurrent(n: int) -> float:
    async def main() -> float:
        async with open_supervisor(name="bench") as sup:
            start = time.perf_counter()
            refs = [sup.spawn(_echo, restart="temporary") for _ in range(n)]
            answers = [-1] * n

            async def ask(i: int, ref: ActorRef[Ping]) -> None:
                answers[i] = await ref.ask(partial(Ping, i))

            async with trio.open_nursery() as nursery:
                for i, ref in enumerate(refs):
                    nursery.start_soon(ask, i, ref)
            for ref in refs:
                ref.stop()
            for ref in refs:
                if ref.exit_reason is None:
                    await ref.wait_exit()
            elapsed = time.perf_counter() - start
        if answers != list(range(n)) or any(ref.exit_reason != Shutdown() for ref in refs):
            raise AssertionError("an actor answered wrongly or did not shut down")
        return elapsed

    return trio.run(main)


def _concurrent_pykka(n: int) -> float:
    start = time.perf_counter()
    refs = [_PykkaEcho.start() for _ in range(n)]
    answers = pykka.get_all([ref.ask(i, block=False) for i, ref in enumerate(refs)])
    pykka.get_all([ref.stop(block=False) for ref in refs])
    elapsed = time.perf_counter() - start
    if answers != list(range(n)):
        raise AssertionError("a pykka actor answered wrongly")
    return elapsed


def vs_pykka(n: int = 1_000, *, pykka_n: int = 1_000, repeats: int = 5) -> Record:
    """Actor lives (start + ask + stop) per second, run concurrently: trio vs pykka."""
    seconds, baseline_seconds = interleave(
        repeats,
        lambda: float(fresh(_concurrent, n=n)),
        lambda: float(fresh(_concurrent_pykka, n=pykka_n)),
    )
    return throughput_record(
        "vs_pykka",
        unit="actors/s (start + ask + stop, concurrently)",
        baseline="pykka ThreadingActor start + ask + stop, concurrently",
        target=TARGET,
        n=n,
        baseline_n=pykka_n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(repeats, "both sides start n actors, ask each once concurrently, stop all"),
    )


def vs_pykka_sequential(n: int = 10_000, *, pykka_n: int = 1_000, repeats: int = 3) -> Record:
    """One actor life after another (latency, informational): trio vs pykka."""
    seconds, baseline_seconds = interleave(
        repeats,
        lambda: float(fresh(_sequential, n=n)),
        lambda: float(fresh(_sequential_pykka, n=pykka_n)),
    )
    return throughput_record(
        "vs_pykka_sequential",
        unit="actors/s (start + ask + stop, one after another)",
        baseline="pykka ThreadingActor start + ask + stop, one after another",
        target=None,
        n=n,
        baseline_n=pykka_n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(repeats, "one actor's whole life after another on both sides"),
    )
