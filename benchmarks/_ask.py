"""Figure ``ask``: sequential ``ref.ask`` round trips to an actor that answers at once.

Candidate: ``await ref.ask(partial(Ping, i))`` ``n`` times; the actor calls
``msg.reply.send(msg.value)``. Baseline: a bare trio memory-channel ping-pong, two channels
and one task answering, with the request channel as large as the actor's mailbox.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import trio

from supervisors import Mailbox, Reply, open_supervisor

from ._harness import Record, Target, fresh, interleave, method, throughput_record

TARGET = Target(">=", 0.5)
CAPACITY = 64


@dataclass(frozen=True, slots=True)
class Ping:
    value: int
    reply: Reply[int]


async def _echo(mailbox: Mailbox[Ping]) -> None:
    async for message in mailbox:
        message.reply.send(message.value)


def _candidate(n: int) -> float:
    async def main() -> float:
        async with open_supervisor(name="bench") as sup:
            ref = sup.spawn(_echo, name="echo", capacity=CAPACITY)
            start = time.perf_counter()
            for i in range(n):
                answer = await ref.ask(partial(Ping, i))
                if answer != i:
                    raise AssertionError(f"asked {i}, got {answer!r}")
            elapsed = time.perf_counter() - start
            sup.shutdown()
        return elapsed

    return trio.run(main)


def _baseline(n: int) -> float:
    async def answer(
        requests: trio.MemoryReceiveChannel[int], replies: trio.MemorySendChannel[int]
    ) -> None:
        async for value in requests:
            await replies.send(value)

    async def main() -> float:
        request_send, request_receive = trio.open_memory_channel[int](CAPACITY)
        reply_send, reply_receive = trio.open_memory_channel[int](1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer, request_receive, reply_send)
            start = time.perf_counter()
            for i in range(n):
                await request_send.send(i)
                answer_ = await reply_receive.receive()
                if answer_ != i:
                    raise AssertionError(f"sent {i}, got {answer_!r}")
            elapsed = time.perf_counter() - start
            await request_send.aclose()
        return elapsed

    return trio.run(main)


def ask_round_trip(n: int = 50_000, *, repeats: int = 5) -> Record:
    """``ask`` round trips per second vs a bare memory-channel ping-pong."""
    seconds, baseline_seconds = interleave(
        repeats, lambda: float(fresh(_candidate, n=n)), lambda: float(fresh(_baseline, n=n))
    )
    return throughput_record(
        "ask",
        unit="round trips/s",
        baseline="trio memory-channel ping-pong",
        target=TARGET,
        n=n,
        baseline_n=n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(repeats, "sequential round trips, one actor (mailbox capacity 64)"),
    )
