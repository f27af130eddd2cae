"""Benchmarks for ``supervisors``: each figure against a bare baseline measured in the same run.

Run ``python -m benchmarks`` (full sizes; ``--check`` exits 1 if a target is missed) or
``python -m benchmarks --quick`` (small sizes for CI, always exits 0). Each figure prints one
JSON line (see :class:`Record`). The figures:

- ``spawn_exit``: temporary actors spawned and exited per second under a supervisor, vs
  ``nursery.start_soon`` of trivial tasks. Target: ratio of throughputs >= 0.5.
- ``spawn_exit_scoped``: the same against tasks that each enter their own cancel scope, as
  every actor does; informational, no target.
- ``ask``: ``ask`` round trips per second, vs a memory-channel ping-pong. Target: >= 0.5.
- ``teardown``: seconds to cancel a depth-4, fan-out-10 supervision tree (11,111 actors)
  from its root until every actor's exit is recorded, vs a nested-nursery tree of the same
  shape. Target: ratio of times <= 2.
- ``vs_pykka``: actor lifecycles (start + one ask + stop) per second, many at once, vs
  pykka's ``ThreadingActor`` doing the same. Target: ratio of throughputs >= 5.
- ``vs_pykka_sequential``: the same, one lifecycle after another (latency); informational,
  no target (``"target"`` and ``"met"`` are ``null``).
- ``tool_calls``: tool calls per second through the agent runtime (one run whose model asks
  for all the calls at once, memory store), vs ``nursery.start_soon`` tasks doing the same
  tool work (validating the input with the same pydantic model). Target: >= 0.3.
- ``tool_calls_vs_pykka``: the same tool calls against a pykka ``ThreadingActor`` per call
  (start, ask with the input, stop, many at once). Target: ratio of throughputs >= 5.
- ``cancel_run``: seconds for ``cancel_run`` to record every call of a run with many calls
  in flight as cancelled, vs cancelling a nursery of as many sleeping tasks. Target: ratio
  of times <= 3.
- ``w1_sequential``, ``w1_concurrent``, ``w1_*_pydantic_ai``, ``w2_suspend``, ``w2_resume``,
  ``w2_memory``, ``reopen_100k``: conversations whose tool call suspends for approval in a
  SQLite file, against LangGraph and pydantic-ai (``pip install .[bench]``; without them the
  peer figures report our value and no ratio). See :mod:`benchmarks._durable`.
- ``protocol_latency_p50_sequential``, ``protocol_latency_p99_sequential``,
  ``protocol_latency_p50_concurrent``, ``protocol_latency_p99_concurrent``: with ``n``
  watchers connected (one client connection each, each on its own thread waiting on an
  approval), seconds from a separate client submitting an approval until its watcher sees
  the tool part ``output-available``, one approval at a time or all at once, vs a bare
  trio-websocket echo round trip in the same pattern. Target (p99): ratio of times <= 5.
- ``protocol_load`` (conversations per second through the server from many clients for a
  while, informational; any error fails it) and ``protocol_load_memory`` (the server
  process's last over first RSS sample of that run, after a warm-up; target <= 1.25). See
  :mod:`benchmarks._protocol`.
- ``threaded``: approval round trips (a conversation whose call suspends for approval and
  is approved) driven from 8 OS threads through ``pai_actors.threaded``, vs the same from 8
  trio tasks in the runtime's own run. Target: ratio of throughputs >= 0.5.

Each figure is a function that takes its sizes, so a test can run it tiny. Timing lives
here, never in a test.
"""

from ._ask import ask_round_trip as ask_round_trip
from ._cancel_run import cancel_run as cancel_run
from ._durable import reopen as reopen
from ._durable import w1_concurrent as w1_concurrent
from ._durable import w1_concurrent_pydantic_ai as w1_concurrent_pydantic_ai
from ._durable import w1_sequential as w1_sequential
from ._durable import w1_sequential_pydantic_ai as w1_sequential_pydantic_ai
from ._durable import w2_memory as w2_memory
from ._durable import w2_resume as w2_resume
from ._durable import w2_suspend as w2_suspend
from ._harness import Record as Record
from ._harness import Target as Target
from ._protocol_latency import latency_p50_concurrent as protocol_latency_p50_concurrent
from ._protocol_latency import latency_p50_sequential as protocol_latency_p50_sequential
from ._protocol_latency import latency_p99_concurrent as protocol_latency_p99_concurrent
from ._protocol_latency import latency_p99_sequential as protocol_latency_p99_sequential
from ._protocol_load import load as protocol_load
from ._protocol_load import load_memory as protocol_load_memory
from ._spawn_exit import spawn_exit as spawn_exit
from ._spawn_exit import spawn_exit_scoped as spawn_exit_scoped
from ._teardown import tree_size as tree_size
from ._teardown import tree_teardown as tree_teardown
from ._threaded import threaded as threaded
from ._tool_calls import tool_calls as tool_calls
from ._tool_calls import tool_calls_vs_pykka as tool_calls_vs_pykka
from ._vs_pykka import vs_pykka as vs_pykka
from ._vs_pykka import vs_pykka_sequential as vs_pykka_sequential

__all__ = [
    "Record",
    "Target",
    "ask_round_trip",
    "cancel_run",
    "protocol_latency_p50_concurrent",
    "protocol_latency_p50_sequential",
    "protocol_latency_p99_concurrent",
    "protocol_latency_p99_sequential",
    "protocol_load",
    "protocol_load_memory",
    "reopen",
    "spawn_exit",
    "spawn_exit_scoped",
    "threaded",
    "tool_calls",
    "tool_calls_vs_pykka",
    "tree_size",
    "tree_teardown",
    "vs_pykka",
    "vs_pykka_sequential",
    "w1_concurrent",
    "w1_concurrent_pydantic_ai",
    "w1_sequential",
    "w1_sequential_pydantic_ai",
    "w2_memory",
    "w2_resume",
    "w2_suspend",
]
