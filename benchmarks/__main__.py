"""``python -m benchmarks [--quick | --check] [--only FIGURE ...]``: one JSON line per figure."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ._ask import ask_round_trip
from ._cancel_run import cancel_run
from ._durable import (
    reopen,
    w1_concurrent,
    w1_concurrent_pydantic_ai,
    w1_sequential,
    w1_sequential_pydantic_ai,
    w2_memory,
    w2_resume,
    w2_suspend,
)
from ._harness import Record
from ._protocol_latency import (
    latency_p50_concurrent,
    latency_p50_sequential,
    latency_p99_concurrent,
    latency_p99_sequential,
)
from ._protocol_load import load, load_memory
from ._spawn_exit import spawn_exit, spawn_exit_scoped
from ._teardown import tree_teardown
from ._threaded import threaded
from ._tool_calls import tool_calls, tool_calls_vs_pykka
from ._vs_pykka import vs_pykka, vs_pykka_sequential

Figure = Callable[[], Record]

# Full sizes, then quick ones (CI: the whole quick run takes a few seconds on 2 cores).
FULL: dict[str, Figure] = {
    "spawn_exit": lambda: spawn_exit(20_000, repeats=5),
    "spawn_exit_scoped": lambda: spawn_exit_scoped(20_000, repeats=5),
    "ask": lambda: ask_round_trip(50_000, repeats=5),
    "teardown": lambda: tree_teardown(4, 10, repeats=3),
    "vs_pykka": lambda: vs_pykka(1_000, pykka_n=1_000, repeats=5),
    "vs_pykka_sequential": lambda: vs_pykka_sequential(10_000, pykka_n=1_000, repeats=3),
    "tool_calls": lambda: tool_calls(10_000, repeats=3),
    # pykka starts a thread per actor: both sides at 1,000 calls at once.
    "tool_calls_vs_pykka": lambda: tool_calls_vs_pykka(1_000, pykka_n=1_000, repeats=3),
    "cancel_run": lambda: cancel_run(10_000, repeats=3),
    # Durable approvals on SQLite vs the peers (LangGraph, pydantic-ai: pip install .[bench]).
    "w1_sequential": lambda: w1_sequential(1_000, peer_n=1_000, repeats=3),
    "w1_concurrent": lambda: w1_concurrent(1_000, peer_n=1_000, repeats=3),
    "w1_sequential_pydantic_ai": lambda: w1_sequential_pydantic_ai(1_000, peer_n=1_000, repeats=3),
    "w1_concurrent_pydantic_ai": lambda: w1_concurrent_pydantic_ai(1_000, peer_n=1_000, repeats=3),
    # One measurement (cached) gives both W2 times; LangGraph takes tens of seconds per side.
    "w2_suspend": lambda: w2_suspend(10_000, repeats=1),
    "w2_resume": lambda: w2_resume(10_000, repeats=1),
    "w2_memory": lambda: w2_memory(10_000, repeats=1),
    "reopen_100k": lambda: reopen(100_000, repeats=3),
    # Approval round trips from 8 threads through pai_actors.threaded vs 8 trio tasks.
    "threaded": lambda: threaded(800, repeats=3),
    # The protocol over WebSocket, 1,000 watchers: one measurement gives the four latency
    # figures, one 60 s load run the two load figures.
    "protocol_latency_p50_sequential": lambda: latency_p50_sequential(1_000),
    "protocol_latency_p99_sequential": lambda: latency_p99_sequential(1_000),
    "protocol_latency_p50_concurrent": lambda: latency_p50_concurrent(1_000),
    "protocol_latency_p99_concurrent": lambda: latency_p99_concurrent(1_000),
    "protocol_load": lambda: load(60.0, warmup=10.0, clients=50, sample_every=5.0, linger=5.0),
    "protocol_load_memory": lambda: load_memory(
        60.0, warmup=10.0, clients=50, sample_every=5.0, linger=5.0
    ),
}
QUICK: dict[str, Figure] = {
    "spawn_exit": lambda: spawn_exit(2_000, repeats=3),
    "spawn_exit_scoped": lambda: spawn_exit_scoped(2_000, repeats=3),
    "ask": lambda: ask_round_trip(5_000, repeats=3),
    "teardown": lambda: tree_teardown(3, 10, repeats=3),
    "vs_pykka": lambda: vs_pykka(200, pykka_n=200, repeats=3),
    "vs_pykka_sequential": lambda: vs_pykka_sequential(1_000, pykka_n=50, repeats=3),
    "tool_calls": lambda: tool_calls(500, repeats=3),
    "tool_calls_vs_pykka": lambda: tool_calls_vs_pykka(200, pykka_n=200, repeats=3),
    "cancel_run": lambda: cancel_run(1_000, repeats=3),
    "w1_sequential": lambda: w1_sequential(20, peer_n=20, repeats=2),
    "w1_concurrent": lambda: w1_concurrent(20, peer_n=20, repeats=2),
    "w1_sequential_pydantic_ai": lambda: w1_sequential_pydantic_ai(20, peer_n=20, repeats=2),
    "w1_concurrent_pydantic_ai": lambda: w1_concurrent_pydantic_ai(20, peer_n=20, repeats=2),
    "w2_suspend": lambda: w2_suspend(100, repeats=1),
    "w2_resume": lambda: w2_resume(100, repeats=1),
    "w2_memory": lambda: w2_memory(500, repeats=1),
    "reopen_100k": lambda: reopen(1_000, repeats=1),
    "threaded": lambda: threaded(80, repeats=2),
    "protocol_latency_p50_sequential": lambda: latency_p50_sequential(20),
    "protocol_latency_p99_sequential": lambda: latency_p99_sequential(20),
    "protocol_latency_p50_concurrent": lambda: latency_p50_concurrent(20),
    "protocol_latency_p99_concurrent": lambda: latency_p99_concurrent(20),
    "protocol_load": lambda: load(2.0, warmup=1.0, clients=5, sample_every=0.5, linger=0.5),
    "protocol_load_memory": lambda: load_memory(
        2.0, warmup=1.0, clients=5, sample_every=0.5, linger=0.5
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=(
            "Benchmark supervisors against bare trio (and pykka), durable approvals "
            "against LangGraph and pydantic-ai, and the protocol server against a bare "
            "trio-websocket echo; one JSON line each."
        ),
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        action="store_true",
        help="small sizes for CI; always exits 0 (shared machines are too noisy to gate on)",
    )
    mode.add_argument("--check", action="store_true", help="exit 1 if any figure misses its target")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(FULL),
        metavar="FIGURE",
        help=f"run only these figures (of {', '.join(FULL)})",
    )
    args = parser.parse_args(argv)

    figures = QUICK if args.quick else FULL
    missed = []
    for name, figure in figures.items():
        if args.only and name not in args.only:
            continue
        record = figure()
        print(record.to_json(), flush=True)
        if record.met is False:
            missed.append(name)
    if args.check and missed:
        print(f"targets missed: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
