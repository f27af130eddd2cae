"""Benchmarks for ``supervisors`` and ``pai_actors``: each figure against a baseline measured
in the same run.

Run ``python -m benchmarks`` (full sizes; ``--check`` exits 1 if a target is missed;
``--out FILE`` also writes the JSON lines to ``FILE``) or ``python -m benchmarks --quick``
(small sizes for CI, always exits 0); ``python -m benchmarks --markdown FILE`` renders such a
file as the Markdown table the docs quote (:func:`render_markdown`). Each figure prints one
JSON line (see :class:`Record`): ``value`` and ``baseline_value`` with their ``unit``, the
``ratio`` and its ``target``, ``met``, and ``method`` (how it was measured), ``samples`` and
``baseline_samples`` (every repetition's value).

Method (:mod:`benchmarks._harness`): each side of each repetition runs in a fresh Python
process (``python -m benchmarks._side``) that imports only that side; the sides alternate
(candidate, baseline, then baseline, candidate, ...) and a figure reports the MEDIAN of each
side's repetitions, with every repetition's value. The garbage collector keeps its defaults.
There is no warm-up (each side's first-use costs fall in its timed part, as in a freshly
started server) except where a figure's ``method`` says so (the memory figures read their
first VmRSS after a warm-up). Only the public API of ``pai_actors`` and ``supervisors`` is
used. The figures:

- ``spawn_exit``: temporary actors spawned and exited per second under a supervisor, vs
  ``nursery.start_soon`` of trivial tasks that each enter their own cancel scope, as every
  actor does. Target: ratio of throughputs >= 0.5.
- ``spawn_exit_unscoped``: the same against bare ``start_soon`` tasks; informational.
- ``ask``: ``ask`` round trips per second, vs a memory-channel ping-pong. Target: >= 0.5.
- ``teardown``: seconds to cancel a depth-4, fan-out-10 supervision tree (11,111 actors)
  from its root until every actor's exit is recorded, vs a nested-nursery tree of the same
  shape. Target: ratio of times <= 2.
- ``vs_pykka``: actor lifecycles (start + one ask + stop) per second, many at once, vs
  pykka's ``ThreadingActor`` doing the same. Target: ratio of throughputs >= 5.
- ``vs_pykka_sequential``: the same, one lifecycle after another; informational.
- ``tool_calls``: tool calls per second through the agent runtime (one run whose model asks
  for all the calls at once, memory store), vs ``nursery.start_soon`` tasks doing the same
  tool work. Target: >= 0.3.
- ``tool_calls_vs_pykka``: the same tool calls against a pykka ``ThreadingActor`` per call.
  Target: >= 5.
- ``cancel_run``: seconds for ``cancel_run`` to record every call of a run with many calls
  in flight as cancelled, vs cancelling a nursery of as many sleeping tasks. Target: <= 3.
- ``threaded``: approval round trips driven from 8 OS threads through ``pai_actors.threaded``,
  vs the same from 8 trio tasks in the runtime's own run. Target: >= 0.5.
- Durable approvals on SQLite (see :mod:`benchmarks._durable`), against LangGraph at its
  defaults (``synchronous=FULL``) unless the name says ``_equal_normal`` or ``_equal_full``
  (both sides at the same durability; informational) and against pydantic-ai
  (``pip install .[bench]``; without the peers the peer figures report our value and no
  ratio): ``w1_sequential`` (>= 5), ``w1_sequential_equal_normal``,
  ``w1_sequential_equal_full``, ``w1_concurrent`` (>= 8), ``w1_concurrent_equal_normal``,
  ``w1_concurrent_equal_full``, ``w1_concurrent_vs_sequential`` (ours at once over ours one
  after another, >= 1.5), ``w1_sequential_pydantic_ai``, ``w1_concurrent_pydantic_ai``,
  ``w2_suspend`` (time ratio <= 0.2), ``w2_resume`` (>= 5), ``w2_suspend_equal_normal``,
  ``w2_resume_equal_normal``, ``w2_memory`` and ``w2_memory_at_once`` (<= 1024 bytes per
  suspended conversation; LangGraph's, informational, as the baseline),
  ``cpu_per_conversation`` (CPU ms per conversation; the durable-write limit over ours
  >= 0.08) and ``reopen_100k`` (<= 1 s).
- ``protocol_latency_p50_sequential``, ``protocol_latency_p99_sequential``,
  ``protocol_latency_p50_concurrent``, ``protocol_latency_p99_concurrent``: seconds from a
  client submitting an approval until its watcher sees the output, with ``n`` watchers
  connected, vs a bare trio-websocket echo round trip measured in the same fresh process.
  Target (p99): ratio of times <= 5. See :mod:`benchmarks._protocol`.
- ``protocol_load`` (conversations per second through the server from many clients,
  informational; any error fails it) and ``protocol_load_memory`` (the server process's last
  over first RSS sample, target <= 1.25); the server and the clients in fresh processes.
- ``stream_cpu_per_token``: process CPU time per token of a model step streamed by
  ``OpenAIChatModel`` from a loopback server through the run to a watcher receiving every
  ``MessageDelta``, vs the ``openai`` SDK alone reading the same stream. Target: ours at
  most 1.5 times the SDK's (ratio of costs SDK / ours >= 0.667).
- ``stream_first_token_latency``: seconds from the adapter yielding a step's first token to
  a watcher receiving it, median over conversations. Target: <= 1 ms. See
  :mod:`benchmarks._streaming`.
- ``subagents_conversations`` (orchestrator conversations per second, each fanning out to
  10 sub-agents with one approval each, vs as many top-level W1 conversations as sub-agents;
  informational), ``subagents_round_trip`` (time per sub-agent round trip vs per top-level
  W1 round trip, target <= 1.5) and ``subagents_memory`` (resident bytes per suspended
  sub-agent vs per suspended top-level call, target: at most 2x). See
  :mod:`benchmarks._subagents`.
- Durable approvals on PostgreSQL (see :mod:`benchmarks._postgres`), ours on
  ``PostgresStore`` against LangGraph on ``AsyncPostgresSaver``, each side of each repetition
  on a new database of the same server, the CPU split between the process and the server in
  ``method``: ``w1_postgres`` (all at once, >= 5), ``w2_postgres_suspend`` (time ratio
  <= 0.2) and ``w2_postgres_resume`` (>= 5); ``w1_postgres_two_nodes``: W1 split between two
  node processes on one database vs one node doing all of it (>= 1.6 where the machine's
  cores allow). Without a reachable server they say so.
- How the PostgreSQL store runs psycopg under trio (see :mod:`benchmarks._postgres_driver`):
  ``postgres_driver``: W1 (as ``w1_postgres``) on ``PostgresStore`` as shipped (libpq's
  non-blocking calls driven by trio's socket waits) vs the same store with its connections
  replaced by psycopg's blocking ``Connection``, every call one ``trio.to_thread.run_sync``
  hop (>= 1); ``postgres_driver_same_calls``: the same against the store's own libpq calls
  made blocking in a worker thread (the hop alone; informational);
  ``postgres_driver_reads_sequential`` and ``postgres_driver_reads_concurrent``: single-read
  round trips (``get_thread``) from one task and from 8 at once, vs psycopg in threads
  (informational). Without a reachable server they say so.
- ``failover_short_lease`` (``--lease 2``) and ``failover_long_lease`` (``--lease 10``):
  seconds from ``SIGKILL`` of the ``pai-actors serve --node-id`` process running a run (one
  of 3 on one PostgreSQL database) until a watcher on another node sees the run completed,
  each kill a sample; the baseline is the same flow without a kill. Target: the median at
  most 1.5 x the lease. See :mod:`benchmarks._failover`.
- ``simulation_overhead``: approval conversations per CPU-second through
  ``pai_actors.testing.simulate`` (every tool instrumented, the invariants checked after
  every step) vs the same conversations through the plain test runtime (target: the
  harness costs at most 1.5x: ratio >= 0.667); ``simulation_faults``: the same simulation
  under faults, its faults injected per CPU-second in ``method``. See
  :mod:`benchmarks._simulation`.

Each figure is a function that takes its sizes, so a test can run it tiny. Timing lives
here, never in a test. This package's ``__init__`` imports the figures lazily, so that a side
process imports only its own side.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._ask import ask_round_trip as ask_round_trip
    from ._cancel_run import cancel_run as cancel_run
    from ._durable import cpu_per_conversation as cpu_per_conversation
    from ._durable import reopen as reopen
    from ._durable import w1_concurrent as w1_concurrent
    from ._durable import w1_concurrent_equal_full as w1_concurrent_equal_full
    from ._durable import w1_concurrent_equal_normal as w1_concurrent_equal_normal
    from ._durable import w1_concurrent_pydantic_ai as w1_concurrent_pydantic_ai
    from ._durable import w1_concurrent_vs_sequential as w1_concurrent_vs_sequential
    from ._durable import w1_sequential as w1_sequential
    from ._durable import w1_sequential_equal_full as w1_sequential_equal_full
    from ._durable import w1_sequential_equal_normal as w1_sequential_equal_normal
    from ._durable import w1_sequential_pydantic_ai as w1_sequential_pydantic_ai
    from ._durable import w2_memory as w2_memory
    from ._durable import w2_memory_at_once as w2_memory_at_once
    from ._durable import w2_resume as w2_resume
    from ._durable import w2_resume_equal_normal as w2_resume_equal_normal
    from ._durable import w2_suspend as w2_suspend
    from ._durable import w2_suspend_equal_normal as w2_suspend_equal_normal
    from ._failover import failover_long_lease as failover_long_lease
    from ._failover import failover_short_lease as failover_short_lease
    from ._harness import Record as Record
    from ._harness import Target as Target
    from ._harness import render_markdown as render_markdown
    from ._postgres import w1_postgres as w1_postgres
    from ._postgres import w1_postgres_two_nodes as w1_postgres_two_nodes
    from ._postgres import w2_postgres_resume as w2_postgres_resume
    from ._postgres import w2_postgres_suspend as w2_postgres_suspend
    from ._postgres_driver import postgres_driver as postgres_driver
    from ._postgres_driver import (
        postgres_driver_reads_concurrent as postgres_driver_reads_concurrent,
    )
    from ._postgres_driver import (
        postgres_driver_reads_sequential as postgres_driver_reads_sequential,
    )
    from ._postgres_driver import postgres_driver_same_calls as postgres_driver_same_calls
    from ._protocol_latency import latency_p50_concurrent as protocol_latency_p50_concurrent
    from ._protocol_latency import latency_p50_sequential as protocol_latency_p50_sequential
    from ._protocol_latency import latency_p99_concurrent as protocol_latency_p99_concurrent
    from ._protocol_latency import latency_p99_sequential as protocol_latency_p99_sequential
    from ._protocol_load import load as protocol_load
    from ._protocol_load import load_memory as protocol_load_memory
    from ._simulation import simulation_faults as simulation_faults
    from ._simulation import simulation_overhead as simulation_overhead
    from ._spawn_exit import spawn_exit as spawn_exit
    from ._spawn_exit import spawn_exit_unscoped as spawn_exit_unscoped
    from ._streaming import stream_cpu_per_token as stream_cpu_per_token
    from ._streaming import stream_first_token_latency as stream_first_token_latency
    from ._subagents import subagents_conversations as subagents_conversations
    from ._subagents import subagents_memory as subagents_memory
    from ._subagents import subagents_round_trip as subagents_round_trip
    from ._teardown import tree_size as tree_size
    from ._teardown import tree_teardown as tree_teardown
    from ._threaded import threaded as threaded
    from ._tool_calls import tool_calls as tool_calls
    from ._tool_calls import tool_calls_vs_pykka as tool_calls_vs_pykka
    from ._vs_pykka import vs_pykka as vs_pykka
    from ._vs_pykka import vs_pykka_sequential as vs_pykka_sequential

_LAZY = {
    "Record": ("_harness", "Record"),
    "Target": ("_harness", "Target"),
    "render_markdown": ("_harness", "render_markdown"),
    "ask_round_trip": ("_ask", "ask_round_trip"),
    "cancel_run": ("_cancel_run", "cancel_run"),
    "cpu_per_conversation": ("_durable", "cpu_per_conversation"),
    "reopen": ("_durable", "reopen"),
    "w1_concurrent": ("_durable", "w1_concurrent"),
    "w1_concurrent_equal_full": ("_durable", "w1_concurrent_equal_full"),
    "w1_concurrent_equal_normal": ("_durable", "w1_concurrent_equal_normal"),
    "w1_concurrent_pydantic_ai": ("_durable", "w1_concurrent_pydantic_ai"),
    "w1_concurrent_vs_sequential": ("_durable", "w1_concurrent_vs_sequential"),
    "w1_sequential": ("_durable", "w1_sequential"),
    "w1_sequential_equal_full": ("_durable", "w1_sequential_equal_full"),
    "w1_sequential_equal_normal": ("_durable", "w1_sequential_equal_normal"),
    "w1_sequential_pydantic_ai": ("_durable", "w1_sequential_pydantic_ai"),
    "w2_memory": ("_durable", "w2_memory"),
    "w2_memory_at_once": ("_durable", "w2_memory_at_once"),
    "w2_resume": ("_durable", "w2_resume"),
    "w2_resume_equal_normal": ("_durable", "w2_resume_equal_normal"),
    "w2_suspend": ("_durable", "w2_suspend"),
    "w2_suspend_equal_normal": ("_durable", "w2_suspend_equal_normal"),
    "failover_long_lease": ("_failover", "failover_long_lease"),
    "failover_short_lease": ("_failover", "failover_short_lease"),
    "w1_postgres": ("_postgres", "w1_postgres"),
    "w1_postgres_two_nodes": ("_postgres", "w1_postgres_two_nodes"),
    "w2_postgres_resume": ("_postgres", "w2_postgres_resume"),
    "w2_postgres_suspend": ("_postgres", "w2_postgres_suspend"),
    "postgres_driver": ("_postgres_driver", "postgres_driver"),
    "postgres_driver_same_calls": ("_postgres_driver", "postgres_driver_same_calls"),
    "postgres_driver_reads_sequential": ("_postgres_driver", "postgres_driver_reads_sequential"),
    "postgres_driver_reads_concurrent": ("_postgres_driver", "postgres_driver_reads_concurrent"),
    "protocol_latency_p50_concurrent": ("_protocol_latency", "latency_p50_concurrent"),
    "protocol_latency_p50_sequential": ("_protocol_latency", "latency_p50_sequential"),
    "protocol_latency_p99_concurrent": ("_protocol_latency", "latency_p99_concurrent"),
    "protocol_latency_p99_sequential": ("_protocol_latency", "latency_p99_sequential"),
    "protocol_load": ("_protocol_load", "load"),
    "protocol_load_memory": ("_protocol_load", "load_memory"),
    "simulation_faults": ("_simulation", "simulation_faults"),
    "simulation_overhead": ("_simulation", "simulation_overhead"),
    "spawn_exit": ("_spawn_exit", "spawn_exit"),
    "spawn_exit_unscoped": ("_spawn_exit", "spawn_exit_unscoped"),
    "stream_cpu_per_token": ("_streaming", "stream_cpu_per_token"),
    "stream_first_token_latency": ("_streaming", "stream_first_token_latency"),
    "subagents_conversations": ("_subagents", "subagents_conversations"),
    "subagents_memory": ("_subagents", "subagents_memory"),
    "subagents_round_trip": ("_subagents", "subagents_round_trip"),
    "tree_size": ("_teardown", "tree_size"),
    "tree_teardown": ("_teardown", "tree_teardown"),
    "threaded": ("_threaded", "threaded"),
    "tool_calls": ("_tool_calls", "tool_calls"),
    "tool_calls_vs_pykka": ("_tool_calls", "tool_calls_vs_pykka"),
    "vs_pykka": ("_vs_pykka", "vs_pykka"),
    "vs_pykka_sequential": ("_vs_pykka", "vs_pykka_sequential"),
}

__all__ = [
    "Record",
    "Target",
    "ask_round_trip",
    "cancel_run",
    "cpu_per_conversation",
    "failover_long_lease",
    "failover_short_lease",
    "postgres_driver",
    "postgres_driver_reads_concurrent",
    "postgres_driver_reads_sequential",
    "postgres_driver_same_calls",
    "protocol_latency_p50_concurrent",
    "protocol_latency_p50_sequential",
    "protocol_latency_p99_concurrent",
    "protocol_latency_p99_sequential",
    "protocol_load",
    "protocol_load_memory",
    "render_markdown",
    "reopen",
    "simulation_faults",
    "simulation_overhead",
    "spawn_exit",
    "spawn_exit_unscoped",
    "stream_cpu_per_token",
    "stream_first_token_latency",
    "subagents_conversations",
    "subagents_memory",
    "subagents_round_trip",
    "threaded",
    "tool_calls",
    "tool_calls_vs_pykka",
    "tree_size",
    "tree_teardown",
    "vs_pykka",
    "vs_pykka_sequential",
    "w1_concurrent",
    "w1_concurrent_equal_full",
    "w1_concurrent_equal_normal",
    "w1_concurrent_pydantic_ai",
    "w1_concurrent_vs_sequential",
    "w1_postgres",
    "w1_postgres_two_nodes",
    "w1_sequential",
    "w1_sequential_equal_full",
    "w1_sequential_equal_normal",
    "w1_sequential_pydantic_ai",
    "w2_memory",
    "w2_memory_at_once",
    "w2_postgres_resume",
    "w2_postgres_suspend",
    "w2_resume",
    "w2_resume_equal_normal",
    "w2_suspend",
    "w2_suspend_equal_normal",
]


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
