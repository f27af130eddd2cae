"""The sub-agent figures (issue 18): orchestrator runs fanning out to sub-agents, each
sub-agent with one approval submitted by a client, on ``SqliteStore``, against top-level
conversations of the same work measured in the same run.

The workload (:mod:`._subagents_ours`): ``orchestrators`` orchestrator conversations at once,
each one ``fan_out`` tool call running ``fanout`` sub-agents at once
(``ctx.agents.run_all``); each sub-agent is the W1 conversation of :mod:`._durable_ours` (one
``refund`` call suspending for approval), run as a sub-agent; the client lists the
approvals through the orchestrator's thread and submits each. The baselines are the same
number of top-level W1 conversations (``orchestrators * fanout``), all at once, on the same
store at the same settings: the same approvals, the same tool, the same model steps, minus
the orchestrators.

- ``subagents_conversations``: orchestrator conversations per second (all at once; each
  create, send, wait for the tree, submit its ``fanout`` approvals, wait for the tree to
  complete), against top-level W1 conversations per second at ``orchestrators * fanout`` at
  once. Informational: an orchestrator conversation holds ``fanout`` round trips, so parity
  per round trip is a ratio of ``1 / fanout``.
- ``subagents_round_trip``: milliseconds per sub-agent round trip (the same run's elapsed
  time over its ``orchestrators * fanout`` sub-agents, orchestrators included), against
  milliseconds per top-level W1 round trip (its elapsed time over its conversations).
  Target: ratio of times <= 1.5.
- ``subagents_memory``: resident bytes per suspended sub-agent (VmRSS in a fresh process
  after all the orchestrators, sent at once, wait with every sub-agent suspended, minus
  before, minus the workload's list of orchestrator thread ids, over the sub-agents;
  everything the tree keeps, orchestrators included, is charged to the sub-agents), against
  resident bytes per suspended top-level call measured the same way
  (``w2_memory_at_once``'s side at ``orchestrators * fanout`` conversations). Target: at
  most 2x, a cost ratio (baseline / ours) >= 0.5.
"""

from __future__ import annotations

import functools
import tempfile
from typing import Any

from . import _durable_ours as ours
from . import _subagents_ours as sub
from ._conversation import WARM_UP
from ._harness import (
    Record,
    Target,
    cost_record,
    fresh,
    interleave,
    method,
    throughput_record,
    time_record,
)

ROUND_TRIP_TARGET = Target("<=", 1.5)
MEMORY_TARGET = Target(">=", 0.5)
"""Ours at most 2x the suspended top-level call: baseline / ours >= 0.5."""

_STORE = 'SqliteStore(path) at its defaults (WAL, durability="normal": synchronous=NORMAL)'
_READ_BACK = (
    "every conversation read back after the measured part, untimed, from a fresh connection "
    "(a new SqliteStore on the file and a new runtime) and checked: each orchestrator's run "
    "completed with every answer and each sub-agent's with the refund's result (memory: "
    "every approval pending under its orchestrator, with its origin chain)"
)


def _workload(orchestrators: int, fanout: int) -> str:
    return (
        f"{orchestrators:,} orchestrator conversations at once (trio tasks in a nursery), "
        f"each one tool call running {fanout} sub-agents at once (ctx.agents.run_all), each "
        "sub-agent one refund call suspending for approval (the W1 conversation as a "
        f"sub-agent); the client lists the {fanout} approvals through the orchestrator's "
        "thread (pending_actions), submits each, waits for the tree (wait_idle)"
    )


def _baseline_workload(n: int) -> str:
    return (
        f"{n:,} top-level W1 conversations at once (the same agent, tool and approval, "
        "no orchestrator)"
    )


@functools.lru_cache(maxsize=4)
def _time(orchestrators: int, fanout: int, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds per repetition, interleaved: the orchestrators, then the same number of
    sub-agents as top-level W1 conversations, all at once; each side in a fresh process."""
    n = orchestrators * fanout
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:
        ours_seconds, baseline_seconds = interleave(
            repeats,
            lambda: float(
                fresh(sub.conversations, directory=tmp, orchestrators=orchestrators, fanout=fanout)
            ),
            lambda: float(fresh(ours.w1, directory=tmp, n=n, concurrent=True, durability="normal")),
        )
    return ours_seconds, baseline_seconds


def _time_method(orchestrators: int, fanout: int, repeats: int, *extra: str) -> str:
    return method(
        repeats,
        f"ours: {_workload(orchestrators, fanout)}",
        f"baseline: {_baseline_workload(orchestrators * fanout)}",
        f"both sides {_STORE}, every runtime setting at its default",
        *extra,
        _READ_BACK,
    )


def subagents_conversations(
    orchestrators: int = 1_000, fanout: int = 10, *, repeats: int = 3
) -> Record:
    """Orchestrator conversations per second, against top-level W1 conversations per
    second (as many as the sub-agents, all at once); informational."""
    seconds, baseline_seconds = _time(orchestrators, fanout, repeats)
    n = orchestrators * fanout
    return throughput_record(
        "subagents_conversations",
        unit=f"orchestrator conversations/s ({orchestrators:,} at once, each fanning out to "
        f"{fanout} sub-agents, each with one approval submitted by a client; SQLite)",
        baseline=f"top-level W1 conversations/s, {n:,} at once (one approval each; SQLite)",
        target=None,
        n=orchestrators,
        baseline_n=n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=_time_method(
            orchestrators,
            fanout,
            repeats,
            f"informational: an orchestrator conversation holds {fanout} approval round "
            f"trips, a W1 conversation one, so parity per round trip is a ratio of "
            f"{1 / fanout:g} (subagents_round_trip is that ratio, per round trip)",
        ),
    )


def subagents_round_trip(
    orchestrators: int = 1_000, fanout: int = 10, *, repeats: int = 3
) -> Record:
    """Milliseconds per sub-agent round trip, against milliseconds per top-level W1 round
    trip, measured in the same run; target: at most 1.5 times."""
    seconds, baseline_seconds = _time(orchestrators, fanout, repeats)
    n = orchestrators * fanout
    return time_record(
        "subagents_round_trip",
        unit=f"ms per sub-agent round trip (suspend, approve, resume, complete; "
        f"{orchestrators:,} orchestrators x {fanout} sub-agents at once, the run's elapsed time "
        f"over its {n:,} sub-agents; SQLite; the issue's bound: <= 1.5x a top-level W1 "
        "round trip)",
        baseline=f"ms per top-level W1 round trip: {n:,} conversations at once, elapsed time "
        "over n (SQLite)",
        target=ROUND_TRIP_TARGET,
        n=n,
        seconds=[s * 1000 / n for s in seconds],
        baseline_seconds=[s * 1000 / n for s in baseline_seconds],
        method=_time_method(
            orchestrators,
            fanout,
            repeats,
            "the orchestrators' own work (their runs, model steps and fan_out calls) is "
            "charged to the sub-agents' round trips",
        ),
    )


@functools.lru_cache(maxsize=4)
def _memory(
    orchestrators: int, fanout: int, repeats: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per repetition, interleaved: bytes per suspended sub-agent, then per suspended
    top-level call (as many, all sent at once), each in a fresh process."""
    n = orchestrators * fanout
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:
        mine, top = interleave(
            repeats,
            lambda: dict(
                fresh(
                    sub.memory_per_suspended_subagent,
                    directory=tmp,
                    orchestrators=orchestrators,
                    fanout=fanout,
                )
            ),
            lambda: dict(fresh(ours.memory_per_suspended_call, directory=tmp, n=n, at_once=True)),
        )
    return mine, top


def subagents_memory(orchestrators: int = 1_000, fanout: int = 10, *, repeats: int = 3) -> Record:
    """Resident bytes per suspended sub-agent, against a suspended top-level call measured
    the same way in the same run; target: at most 2 times."""
    mine, top = _memory(orchestrators, fanout, repeats)
    n = orchestrators * fanout
    bookkeeping = max(r["bookkeeping"] for r in mine)
    top_bookkeeping = max(r["bookkeeping"] for r in top)
    return cost_record(
        "subagents_memory",
        unit=f"bytes of VmRSS per suspended sub-agent ({orchestrators:,} orchestrators x "
        f"{fanout} sub-agents, all sent at once; SQLite; the issue's bound: <= 2x a "
        "suspended top-level call)",
        baseline=f"bytes of VmRSS per suspended top-level call: {n:,} W1 conversations sent "
        "at once and suspended (w2_memory_at_once's side), measured the same way",
        target=MEMORY_TARGET,
        n=n,
        baseline_n=n,
        samples=[r["bytes"] for r in mine],
        baseline_samples=[r["bytes"] for r in top],
        method=method(
            repeats,
            "both sides: VmRSS (/proc/self/status) in a fresh process after the conversations, "
            "all sent at once, wait with every approval pending and their call actors "
            "exited, minus VmRSS before (after a warm-up, suspended and approved, of "
            f"{sub.WARM_UP} orchestrators x {fanout} sub-agents, or {WARM_UP} W1 "
            "conversations, and gc.collect()), over the suspended sub-agents (calls)",
            "ours: everything the tree keeps is charged to its sub-agents (the orchestrator's "
            "thread, run and waiting fan_out call too)",
            "the workload's own bookkeeping subtracted: the list of thread-id strings "
            f"(ours: {bookkeeping:.0f} B per sub-agent, the orchestrators' ids; baseline: "
            f"{top_bookkeeping:.0f} B per call)",
            f"both sides {_STORE}, every runtime setting at its default",
            "ratio = baseline / ours (higher is better; 0.5 is twice the baseline)",
            _READ_BACK,
            warmed=True,
        ),
    )
