"""Figure ``vs_pykka``: one actor's whole life (start, one ask, stop) vs pykka's.

Candidate: ``sup.spawn(echo)``, ``await ref.ask(...)``, ``ref.stop()`` and
``await ref.wait_exit()``, one actor after another. Baseline: pykka's
``ThreadingActor.start()``, ``ref.ask(...)`` and ``ref.stop()`` (which blocks until the actor's
thread has stopped), one after another. pykka starts a thread per actor, so it runs fewer
actors per repetition; the figure compares throughputs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import pykka
import trio

from supervisors import Mailbox, Reply, Shutdown, open_supervisor

from ._harness import Record, Target, best_of, throughput_record

TARGET = Target(">=", 5.0)


@dataclass(frozen=True, slots=True)
class Ping:
    value: int
    reply: Reply[int]


async def _echo(mailbox: Mailbox[Ping]) -> None:
    async for message in mailbox:
        message.reply.send(message.value)


class _PykkaEcho(pykka.ThreadingActor):
    def on_receive(self, message: int) -> int:
        return message


def _candidate(n: int) -> float:
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


def _baseline(n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        ref = _PykkaEcho.start()
        answer = ref.ask(i)
        ref.stop()
        if answer != i:
            raise AssertionError(f"asked {i}, got {answer!r}")
    return time.perf_counter() - start


def vs_pykka(n: int = 20_000, *, pykka_n: int = 1_000, repeats: int = 3) -> Record:
    """Actor lifecycles (start + ask + stop) per second: trio actors vs pykka threads."""
    seconds, baseline_seconds = best_of(repeats, lambda: _candidate(n), lambda: _baseline(pykka_n))
    return throughput_record(
        "vs_pykka",
        unit="actors/s (start + ask + stop)",
        baseline="pykka ThreadingActor start + ask + stop",
        target=TARGET,
        n=n,
        baseline_n=pykka_n,
        repeats=repeats,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
    )
