"""Figures ``spawn_exit`` and ``spawn_exit_unscoped``: spawning temporary actors that return
at once, until all exit.

Candidate: ``n`` ``sup.spawn(actor, restart="temporary")`` calls under one supervisor, timed
until the supervisor's block has seen them all exit. Baselines: ``n``
``nursery.start_soon(task)`` calls of a trivial task, timed until the nursery closes; for
``spawn_exit`` (the target, >= 0.5) each task enters its own ``trio.CancelScope``, as every
actor does (so that it can be cancelled, or given a stop deadline, alone); for
``spawn_exit_unscoped`` (informational) the tasks are bare. One measurement gives both: the
three sides interleaved, each repetition of each in a fresh process.
"""

from __future__ import annotations

import functools
import time

import trio

from supervisors import Mailbox, open_supervisor

from ._harness import Record, Target, fresh, interleave, method, throughput_record

TARGET = Target(">=", 0.5)


class _Counter:
    """Counts runs, so both sides prove they ran every task without keeping anything alive."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs = 0

    def check(self, n: int) -> None:
        if self.runs != n:
            raise AssertionError(f"expected {n} runs, got {self.runs}")


def candidate(n: int) -> float:
    counter = _Counter()

    async def returns_at_once(mailbox: Mailbox[object]) -> None:
        counter.runs += 1

    async def main() -> float:
        async with open_supervisor(name="bench") as sup:
            start = time.perf_counter()
            for _ in range(n):
                sup.spawn(returns_at_once, restart="temporary")
        elapsed = time.perf_counter() - start
        if sup.children():
            raise AssertionError(f"children still live after the block: {sup.children()!r}")
        return elapsed

    elapsed = trio.run(main)
    counter.check(n)
    return elapsed


def baseline(n: int, scoped: bool) -> float:
    counter = _Counter()

    async def returns_at_once(_: object) -> None:
        counter.runs += 1

    async def scoped_returns_at_once(_: object) -> None:
        # What every actor has: its own cancel scope. (No await inside, as in the candidate.)
        with trio.CancelScope():  # noqa: ASYNC100
            counter.runs += 1

    task = scoped_returns_at_once if scoped else returns_at_once

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            start = time.perf_counter()
            for _ in range(n):
                nursery.start_soon(task, None)
        return time.perf_counter() - start

    elapsed = trio.run(main)
    counter.check(n)
    return elapsed


@functools.lru_cache(maxsize=4)
def _measure(n: int, repeats: int) -> tuple[list[float], list[float], list[float]]:
    """Seconds of each repetition: the supervisor, scoped tasks, bare tasks."""
    actors, scoped, bare = interleave(
        repeats,
        lambda: float(fresh(candidate, n=n)),
        lambda: float(fresh(baseline, n=n, scoped=True)),
        lambda: float(fresh(baseline, n=n, scoped=False)),
    )
    return actors, scoped, bare


def spawn_exit(n: int = 20_000, *, repeats: int = 5) -> Record:
    """Actors spawned and exited per second under a supervisor vs ``start_soon`` tasks that
    each enter their own cancel scope."""
    seconds, baseline_seconds, _ = _measure(n, repeats)
    return throughput_record(
        "spawn_exit",
        unit="actors/s",
        baseline="trio nursery.start_soon, each task in its own CancelScope (as every actor)",
        target=TARGET,
        n=n,
        baseline_n=n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(repeats, "three sides interleaved (supervisor, scoped, bare tasks)"),
    )


def spawn_exit_unscoped(n: int = 20_000, *, repeats: int = 5) -> Record:
    """Informational: the same against bare ``start_soon`` tasks (no cancel scope each),
    which shows what an actor costs beyond its cancel scope."""
    seconds, _, baseline_seconds = _measure(n, repeats)
    return throughput_record(
        "spawn_exit_unscoped",
        unit="actors/s",
        baseline="trio nursery.start_soon of bare tasks",
        target=None,
        n=n,
        baseline_n=n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(repeats, "three sides interleaved (supervisor, scoped, bare tasks)"),
    )
