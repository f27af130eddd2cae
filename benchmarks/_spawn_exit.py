"""Figure ``spawn_exit``: spawning temporary actors that return at once, until all exit.

Candidate: ``n`` ``sup.spawn(actor, restart="temporary")`` calls under one supervisor, timed
until the supervisor's block has seen them all exit. Baseline: ``n``
``nursery.start_soon(task)`` calls of a trivial task, timed until the nursery closes.
"""

from __future__ import annotations

import time

import trio

from supervisors import Mailbox, open_supervisor

from ._harness import Record, Target, best_of, throughput_record

TARGET = Target(">=", 0.5)


class _Counter:
    """Counts runs, so both sides prove they ran every task without keeping anything alive."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs = 0

    def check(self, n: int) -> None:
        if self.runs != n:
            raise AssertionError(f"expected {n} runs, got {self.runs}")


def _candidate(n: int) -> float:
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


def _baseline(n: int, *, scoped: bool = False) -> float:
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


def spawn_exit(n: int = 20_000, *, repeats: int = 5) -> Record:
    """Actors spawned and exited per second under a supervisor vs bare ``start_soon``."""
    seconds, baseline_seconds = best_of(repeats, lambda: _candidate(n), lambda: _baseline(n))
    return throughput_record(
        "spawn_exit",
        unit="actors/s",
        baseline="trio nursery.start_soon",
        target=TARGET,
        n=n,
        baseline_n=n,
        repeats=repeats,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
    )


def spawn_exit_scoped(n: int = 20_000, *, repeats: int = 5) -> Record:
    """Informational: the same, against tasks that each enter their own cancel scope.

    Every actor has its own cancel scope (so it can be cancelled, or given a stop deadline,
    alone); this baseline pays for that too, which shows what the rest of an actor costs.
    """
    seconds, baseline_seconds = best_of(
        repeats, lambda: _candidate(n), lambda: _baseline(n, scoped=True)
    )
    return throughput_record(
        "spawn_exit_scoped",
        unit="actors/s",
        baseline="trio nursery.start_soon, each task in its own CancelScope",
        target=None,
        n=n,
        baseline_n=n,
        repeats=repeats,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
    )
