"""``python -m benchmarks [--quick | --check] [--only FIGURE ...] [--out FILE]``: one JSON line
per figure. ``python -m benchmarks --markdown FILE``: the Markdown table of such lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ._harness import Record, render_markdown

Figure = Callable[[], Record]


def _figures(quick: bool) -> dict[str, Figure]:
    """The figures at full sizes, or at quick ones (CI: the whole quick run takes a few
    minutes on 2 cores, most of it starting the side processes)."""
    from . import _durable as d
    from . import _postgres as pg
    from . import _postgres_driver as driver
    from ._ask import ask_round_trip
    from ._cancel_run import cancel_run
    from ._failover import failover_long_lease, failover_short_lease
    from ._protocol_latency import (
        latency_p50_concurrent,
        latency_p50_sequential,
        latency_p99_concurrent,
        latency_p99_sequential,
    )
    from ._protocol_load import load, load_memory
    from ._simulation import simulation_faults, simulation_overhead
    from ._spawn_exit import spawn_exit, spawn_exit_unscoped
    from ._streaming import stream_cpu_per_token, stream_first_token_latency
    from ._subagents import subagents_conversations, subagents_memory, subagents_round_trip
    from ._teardown import tree_teardown
    from ._threaded import threaded
    from ._tool_calls import tool_calls, tool_calls_vs_pykka
    from ._vs_pykka import vs_pykka, vs_pykka_sequential

    if not quick:
        w1, w2, mem, r = 1_000, 10_000, 10_000, 3
        return {
            # One measurement (cached) gives both spawn_exit figures.
            "spawn_exit": lambda: spawn_exit(20_000, repeats=5),
            "spawn_exit_unscoped": lambda: spawn_exit_unscoped(20_000, repeats=5),
            "ask": lambda: ask_round_trip(50_000, repeats=5),
            "teardown": lambda: tree_teardown(4, 10, repeats=3),
            "vs_pykka": lambda: vs_pykka(1_000, pykka_n=1_000, repeats=5),
            "vs_pykka_sequential": lambda: vs_pykka_sequential(10_000, pykka_n=1_000, repeats=3),
            "tool_calls": lambda: tool_calls(10_000, repeats=3),
            # pykka starts a thread per actor: both sides at 1,000 calls at once.
            "tool_calls_vs_pykka": lambda: tool_calls_vs_pykka(1_000, pykka_n=1_000, repeats=3),
            "cancel_run": lambda: cancel_run(10_000, repeats=3),
            # Approval round trips from 8 threads through pai_actors.threaded vs 8 trio tasks.
            "threaded": lambda: threaded(800, repeats=3),
            # Durable approvals on SQLite vs LangGraph (at its defaults, then at equal
            # durability) and pydantic-ai (pip install .[bench]).
            "w1_sequential": lambda: d.w1_sequential(w1, peer_n=w1, repeats=r),
            "w1_concurrent": lambda: d.w1_concurrent(w1, peer_n=w1, repeats=r),
            "w1_concurrent_vs_sequential": lambda: d.w1_concurrent_vs_sequential(w1, repeats=r),
            "w1_sequential_equal_normal": lambda: d.w1_sequential_equal_normal(
                w1, peer_n=w1, repeats=r
            ),
            "w1_concurrent_equal_normal": lambda: d.w1_concurrent_equal_normal(
                w1, peer_n=w1, repeats=r
            ),
            "w1_sequential_equal_full": lambda: d.w1_sequential_equal_full(
                w1, peer_n=w1, repeats=r
            ),
            "w1_concurrent_equal_full": lambda: d.w1_concurrent_equal_full(
                w1, peer_n=w1, repeats=r
            ),
            "w1_sequential_pydantic_ai": lambda: d.w1_sequential_pydantic_ai(
                w1, peer_n=w1, repeats=r
            ),
            "w1_concurrent_pydantic_ai": lambda: d.w1_concurrent_pydantic_ai(
                w1, peer_n=w1, repeats=r
            ),
            # One measurement (cached) gives both W2 figures of a setting.
            "w2_suspend": lambda: d.w2_suspend(w2, repeats=r),
            "w2_resume": lambda: d.w2_resume(w2, repeats=r),
            "w2_suspend_equal_normal": lambda: d.w2_suspend_equal_normal(w2, repeats=1),
            "w2_resume_equal_normal": lambda: d.w2_resume_equal_normal(w2, repeats=1),
            # One measurement (cached) gives both memory figures and LangGraph's baseline.
            "w2_memory": lambda: d.w2_memory(mem, repeats=r),
            "w2_memory_at_once": lambda: d.w2_memory_at_once(mem, repeats=r),
            "cpu_per_conversation": lambda: d.cpu_per_conversation(w1, repeats=r),
            "reopen_100k": lambda: d.reopen(100_000, repeats=r),
            # The protocol over WebSocket, 1,000 watchers: one measurement gives the four
            # latency figures, one 60 s load run the two load figures.
            "protocol_latency_p50_sequential": lambda: latency_p50_sequential(1_000),
            "protocol_latency_p99_sequential": lambda: latency_p99_sequential(1_000),
            "protocol_latency_p50_concurrent": lambda: latency_p50_concurrent(1_000),
            "protocol_latency_p99_concurrent": lambda: latency_p99_concurrent(1_000),
            "protocol_load": lambda: load(
                60.0, warmup=10.0, clients=50, sample_every=5.0, linger=5.0
            ),
            "protocol_load_memory": lambda: load_memory(
                60.0, warmup=10.0, clients=50, sample_every=5.0, linger=5.0
            ),
            # OpenAIChatModel's tokens from a loopback server through the run to a watcher,
            # vs the openai SDK alone reading the same stream.
            "stream_cpu_per_token": lambda: stream_cpu_per_token(2_000, repeats=5),
            "stream_first_token_latency": lambda: stream_first_token_latency(50, repeats=3),
            # Sub-agents (issue 18): 1,000 orchestrators x 10 sub-agents, each with one
            # approval, vs as many top-level W1 conversations; one measurement (cached)
            # gives both time figures, one the memory figure.
            "subagents_conversations": lambda: subagents_conversations(1_000, 10, repeats=3),
            "subagents_round_trip": lambda: subagents_round_trip(1_000, 10, repeats=3),
            "subagents_memory": lambda: subagents_memory(1_000, 10, repeats=3),
            # Durable approvals on PostgreSQL vs LangGraph's AsyncPostgresSaver, each side
            # of each repetition on a new database; one measurement (cached) gives both W2
            # figures.
            "w1_postgres": lambda: pg.w1_postgres(w1, peer_n=w1, repeats=r),
            # W1 split between two node processes on one database vs one node doing all.
            "w1_postgres_two_nodes": lambda: pg.w1_postgres_two_nodes(w1, repeats=r),
            "w2_postgres_suspend": lambda: pg.w2_postgres_suspend(w2, repeats=r),
            "w2_postgres_resume": lambda: pg.w2_postgres_resume(w2, repeats=r),
            # How the store runs psycopg under trio: W1 with its connections as shipped
            # (libpq driven by trio's socket waits) vs replaced by psycopg's blocking
            # Connection in worker threads, and vs its own libpq calls in worker threads (one
            # measurement, cached, gives both); then single-read round trips from 1 and 8 tasks.
            "postgres_driver": lambda: driver.postgres_driver(w1, repeats=5),
            "postgres_driver_same_calls": lambda: driver.postgres_driver_same_calls(w1, repeats=5),
            "postgres_driver_reads_sequential": lambda: driver.postgres_driver_reads_sequential(
                10_000, repeats=5
            ),
            "postgres_driver_reads_concurrent": lambda: driver.postgres_driver_reads_concurrent(
                10_000, repeats=5
            ),
            # Failover: SIGKILL of the node running a run (one of 3 `pai-actors serve --node-id`
            # processes on one database) until another completes it, vs the same flow
            # without a kill; each kill a sample.
            "failover_short_lease": lambda: failover_short_lease(2.0, 10),
            "failover_long_lease": lambda: failover_long_lease(10.0, 5),
            # The simulation kit (simulate, invariants checked after every step) vs the plain
            # test runtime on the same approval conversations; one measurement (cached) gives
            # both figures.
            "simulation_overhead": lambda: simulation_overhead(1_000, repeats=3),
            "simulation_faults": lambda: simulation_faults(1_000, repeats=3),
        }
    w1, w2, mem = 20, 100, 500
    return {
        "spawn_exit": lambda: spawn_exit(2_000, repeats=3),
        "spawn_exit_unscoped": lambda: spawn_exit_unscoped(2_000, repeats=3),
        "ask": lambda: ask_round_trip(5_000, repeats=3),
        "teardown": lambda: tree_teardown(3, 10, repeats=3),
        "vs_pykka": lambda: vs_pykka(200, pykka_n=200, repeats=3),
        "vs_pykka_sequential": lambda: vs_pykka_sequential(1_000, pykka_n=50, repeats=3),
        "tool_calls": lambda: tool_calls(500, repeats=3),
        "tool_calls_vs_pykka": lambda: tool_calls_vs_pykka(200, pykka_n=200, repeats=3),
        "cancel_run": lambda: cancel_run(1_000, repeats=3),
        "threaded": lambda: threaded(80, repeats=3),
        "w1_sequential": lambda: d.w1_sequential(w1, peer_n=w1, repeats=3),
        "w1_concurrent": lambda: d.w1_concurrent(w1, peer_n=w1, repeats=3),
        "w1_concurrent_vs_sequential": lambda: d.w1_concurrent_vs_sequential(w1, repeats=3),
        "w1_sequential_equal_normal": lambda: d.w1_sequential_equal_normal(
            w1, peer_n=w1, repeats=1
        ),
        "w1_concurrent_equal_normal": lambda: d.w1_concurrent_equal_normal(
            w1, peer_n=w1, repeats=1
        ),
        "w1_sequential_equal_full": lambda: d.w1_sequential_equal_full(w1, peer_n=w1, repeats=1),
        "w1_concurrent_equal_full": lambda: d.w1_concurrent_equal_full(w1, peer_n=w1, repeats=1),
        "w1_sequential_pydantic_ai": lambda: d.w1_sequential_pydantic_ai(w1, peer_n=w1, repeats=1),
        "w1_concurrent_pydantic_ai": lambda: d.w1_concurrent_pydantic_ai(w1, peer_n=w1, repeats=1),
        "w2_suspend": lambda: d.w2_suspend(w2, repeats=1),
        "w2_resume": lambda: d.w2_resume(w2, repeats=1),
        "w2_suspend_equal_normal": lambda: d.w2_suspend_equal_normal(w2, repeats=1),
        "w2_resume_equal_normal": lambda: d.w2_resume_equal_normal(w2, repeats=1),
        "w2_memory": lambda: d.w2_memory(mem, repeats=1),
        "w2_memory_at_once": lambda: d.w2_memory_at_once(mem, repeats=1),
        "cpu_per_conversation": lambda: d.cpu_per_conversation(w1, repeats=3),
        "reopen_100k": lambda: d.reopen(1_000, repeats=1),
        "protocol_latency_p50_sequential": lambda: latency_p50_sequential(20),
        "protocol_latency_p99_sequential": lambda: latency_p99_sequential(20),
        "protocol_latency_p50_concurrent": lambda: latency_p50_concurrent(20),
        "protocol_latency_p99_concurrent": lambda: latency_p99_concurrent(20),
        "protocol_load": lambda: load(2.0, warmup=1.0, clients=5, sample_every=0.5, linger=0.5),
        "protocol_load_memory": lambda: load_memory(
            2.0, warmup=1.0, clients=5, sample_every=0.5, linger=0.5
        ),
        "stream_cpu_per_token": lambda: stream_cpu_per_token(200, repeats=1),
        "stream_first_token_latency": lambda: stream_first_token_latency(5, repeats=1),
        "subagents_conversations": lambda: subagents_conversations(10, 10, repeats=1),
        "subagents_round_trip": lambda: subagents_round_trip(10, 10, repeats=1),
        "subagents_memory": lambda: subagents_memory(10, 10, repeats=1),
        "w1_postgres": lambda: pg.w1_postgres(w1, peer_n=w1, repeats=1),
        "w1_postgres_two_nodes": lambda: pg.w1_postgres_two_nodes(w1, repeats=1),
        "w2_postgres_suspend": lambda: pg.w2_postgres_suspend(w2, repeats=1),
        "w2_postgres_resume": lambda: pg.w2_postgres_resume(w2, repeats=1),
        "postgres_driver": lambda: driver.postgres_driver(w1, repeats=1),
        "postgres_driver_same_calls": lambda: driver.postgres_driver_same_calls(w1, repeats=1),
        "postgres_driver_reads_sequential": lambda: driver.postgres_driver_reads_sequential(
            500, repeats=1
        ),
        "postgres_driver_reads_concurrent": lambda: driver.postgres_driver_reads_concurrent(
            500, repeats=1
        ),
        "failover_short_lease": lambda: failover_short_lease(1.0, 3),
        "failover_long_lease": lambda: failover_long_lease(2.0, 1, nodes=2),
        "simulation_overhead": lambda: simulation_overhead(100, repeats=1),
        "simulation_faults": lambda: simulation_faults(100, repeats=1),
    }


FULL: dict[str, Figure] = _figures(quick=False)
QUICK: dict[str, Figure] = _figures(quick=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=(
            "Benchmark supervisors against bare trio (and pykka), durable approvals "
            "(SQLite, PostgreSQL) against LangGraph and pydantic-ai, the protocol server "
            "against a bare trio-websocket echo, token streaming against the openai SDK alone, and "
            "sub-agents against top-level conversations; one "
            "JSON line each. Each side of each repetition runs in a "
            "fresh process; figures are medians of interleaved repetitions."
        ),
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        action="store_true",
        help="small sizes for CI; always exits 0 (shared machines are too noisy to gate on)",
    )
    mode.add_argument("--check", action="store_true", help="exit 1 if any figure misses its target")
    mode.add_argument(
        "--markdown",
        metavar="RESULTS",
        type=Path,
        help="print the Markdown table of a results file (JSON lines a run printed) and exit",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(FULL),
        metavar="FIGURE",
        help=f"run only these figures (of {', '.join(FULL)})",
    )
    parser.add_argument(
        "--out", metavar="FILE", type=Path, help="also write the JSON lines to FILE"
    )
    args = parser.parse_args(argv)

    if args.markdown is not None:
        sys.stdout.write(render_markdown(args.markdown.read_text().splitlines()))
        return 0
    figures = QUICK if args.quick else FULL
    out = None if args.out is None else args.out.open("w")
    missed = []
    try:
        for name, figure in figures.items():
            if args.only and name not in args.only:
                continue
            record = figure()
            line = record.to_json()
            print(line, flush=True)
            if out is not None:
                out.write(line + "\n")
                out.flush()
            if record.met is False:
                missed.append(name)
    finally:
        if out is not None:
            out.close()
    if args.check and missed:
        print(f"targets missed: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
