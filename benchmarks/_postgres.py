"""The durable-approval figures on PostgreSQL: W1 and W2 of :mod:`._durable`, ours on
``PostgresStore`` against LangGraph on ``AsyncPostgresSaver``, both on the same server.

The conversation is the one of the SQLite figures (:mod:`._durable_ours`,
:mod:`._peers_langgraph`): a user message, a ``refund`` call suspended for approval,
``{"approved": true}`` submitted, the tool resumed, the answer. Ours is
``PostgresStore(conninfo)`` at its defaults (:mod:`._postgres_ours`); LangGraph's is the
graph of its concurrent SQLite side on ``AsyncPostgresSaver.from_conn_string(conninfo)``,
``setup()`` called once before the timed part (:mod:`._peers_langgraph_postgres`). Each
side of each repetition runs in a fresh process, on a NEW database that the harness creates
on the server before the side starts and drops (``WITH (FORCE)``) after it ended
(:func:`._pg.new_database`), the sides interleaved; figures are medians. After its timed
part every side reads EVERY conversation back, untimed, from a new connection (ours: a new
``PostgresStore`` on the database and a new runtime; LangGraph: ``graph.get_state`` through
a new ``PostgresSaver``) and checks it.

The runtime process and the PostgreSQL server share the machine's cores: each record's
``method`` gives the CPU split of the timed part, medians of each side's repetitions: the
side's own process, the server's backends serving its database, the server's background
processes, and the machine's busy time (:func:`._pg.cpu_times`).

- ``w1_postgres``: whole conversations per second, all ``n`` in flight at once (ours: ``n``
  trio tasks in a nursery; LangGraph: ``ainvoke`` under ``asyncio.gather``). Target: >= 5x.
- ``w1_postgres_two_nodes``: the same ``n`` conversations split half and half between two
  node processes on one database (each a ``PostgresStore`` with a ``node_id`` of its own),
  vs one such node doing all ``n``, in the same run. Target: >= 1.6x, where the machine's
  cores allow: the nodes and the server share them, and ``method`` gives the split.
- ``w2_postgres_suspend``: seconds until ``n`` conversations (all started at once) are
  suspended, vs LangGraph. Target: ratio of times <= 0.2, as ``w2_suspend``.
- ``w2_postgres_resume``: resumes per second with all ``n`` submissions at once, until every
  run completed, in a new runtime on a new store (LangGraph: a new connection) after every
  conversation was read back waiting. Target: >= 5x, as ``w2_resume``.

Without ``psycopg`` or PostgreSQL nothing can be measured: the figure says why in
``baseline`` and reports no samples. Without LangGraph's checkpointer (``pip install
.[bench]`` installs it), it reports our value with ``baseline`` saying so, and no ratio.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import statistics
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from . import _pg
from ._harness import (
    RatioOf,
    Record,
    Target,
    fresh,
    interleave,
    method,
    throughput_record,
    time_record,
    unavailable_record,
)

W1_POSTGRES_TARGET = Target(">=", 5.0)
W1_POSTGRES_TWO_NODES_TARGET = Target(">=", 1.6)
W2_POSTGRES_SUSPEND_TARGET = Target("<=", 0.2)
"""The target of ``w2_suspend`` on SQLite."""
W2_POSTGRES_RESUME_TARGET = Target(">=", 5.0)
"""The target of ``w2_resume`` on SQLite."""
UNAVAILABLE = "unavailable (pip install .[bench])"

_OURS = "benchmarks._postgres_ours"
_LANGGRAPH = "benchmarks._peers_langgraph_postgres"
_OURS_LABEL = (
    "ours: PostgresStore(conninfo) at its defaults (group commits of up to 128, two in flight "
    "on two connections; reads on a pool of 1 to 4; mirror=True), nothing set on the session"
)
_READ_BACK = (
    "every conversation read back after the timed part, untimed, from a new connection "
    "(ours: a new PostgresStore on the database and a new runtime; LangGraph: "
    "graph.get_state through a new PostgresSaver) and checked"
)
_DATABASES = (
    "each side of each repetition on a new database of the same server, created by the "
    "harness before the side's process starts and dropped (WITH (FORCE)) after it ended"
)


def langgraph_installed() -> bool:
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("langgraph", "langgraph.checkpoint.postgres", "psycopg_pool")
    )


def _langgraph_label(what: str) -> str:
    return (
        f"LangGraph {version('langgraph')} {what} (langgraph-checkpoint-postgres "
        f"{version('langgraph-checkpoint-postgres')}): from_conn_string, one connection in "
        "autocommit, setup() before the timed part, nothing set on the session; "
        "durability='async' (its default); one node calling interrupt() in the tool"
    )


def _why_not() -> str | None:
    """Why no side can be measured (no psycopg, or no server), or ``None``."""
    if not _pg.psycopg_installed():
        return f"psycopg {UNAVAILABLE}"
    return _pg.unreachable()


def _not_measured(
    figure: str, *, unit: str, why: str, ratio_of: RatioOf, target: Target | None, n: int
) -> Record:
    """The record of a figure neither side of which could run: no samples, ``value`` 0,
    ``baseline`` saying why."""
    return Record(
        figure=figure,
        unit=f"{unit}; not measured",
        value=0.0,
        baseline=f"not measured: {why}",
        baseline_value=None,
        ratio=None,
        ratio_of=ratio_of,
        target=str(target) if target is not None else None,
        met=None,
        n=n,
        baseline_n=0,
        repeats=0,
        method="not run: " + why,
        samples=(),
        baseline_samples=(),
    )


def _on_new_database(side: str, what: str, **kwargs: Any) -> Callable[[], dict[str, Any]]:
    """One side of one repetition: a new database, the side in a fresh process on it, the
    database dropped."""

    def run() -> dict[str, Any]:
        with _pg.new_database(what) as conninfo:
            return dict(fresh(side, conninfo=conninfo, **kwargs))

    return run


def _cpu_split(name: str, results: list[dict[str, Any]], cpu: str, wall: str) -> str:
    def med(key: str) -> float:
        return float(statistics.median(r[cpu][key] for r in results))

    cores = os.cpu_count() or 1
    available = statistics.median(r[wall] for r in results) * cores
    return (
        f"{name}: its process {med('process'):.2f}, its database's PostgreSQL backends "
        f"{med('backends'):.2f}, the server's background processes {med('background'):.2f}, "
        f"the whole machine busy {med('machine'):.2f} of {available:.2f} ({cores} cores x "
        "the timed part)"
    )


def _cpu_method(
    ours: list[dict[str, Any]], peer: list[dict[str, Any]] | None, cpu: str, wall: str
) -> str:
    sides = [_cpu_split("ours", ours, cpu, wall)]
    if peer is not None:
        sides.append(_cpu_split("LangGraph", peer, cpu, wall))
    return (
        "CPU seconds in the timed part, medians of each side's repetitions (process: "
        "time.process_time(); server processes: utime + stime from /proc/PID/stat, read "
        "before and after; machine: /proc/stat): " + "; ".join(sides)
    )


def w1_postgres(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Conversations per second, all in flight at once, ours on ``PostgresStore`` vs
    LangGraph on ``AsyncPostgresSaver``."""
    figure = "w1_postgres"
    unit = "conversations/s (all at once; suspend, approve, resume, complete; PostgreSQL)"
    why = _why_not()
    if why is not None:
        return _not_measured(
            figure, unit=unit, why=why, ratio_of="throughput", target=W1_POSTGRES_TARGET, n=n
        )
    drive = (
        "all n at once through async APIs (ours: n trio tasks in a nursery; LangGraph: "
        "ainvoke under asyncio.gather)"
    )
    candidate = _on_new_database(f"{_OURS}:w1", "ours_w1", n=n)
    if not langgraph_installed():
        [ours] = interleave(repeats, candidate)
        return unavailable_record(
            figure,
            unit=unit,
            samples=[n / r["seconds"] for r in ours],
            baseline=f"langgraph-checkpoint-postgres {UNAVAILABLE}",
            ratio_of="throughput",
            target=W1_POSTGRES_TARGET,
            n=n,
            method=method(
                repeats,
                drive,
                _OURS_LABEL,
                _pg.describe_settings(ours),
                _DATABASES,
                _READ_BACK,
                _cpu_method(ours, None, "cpu", "seconds"),
                sides=1,
            ),
        )
    baseline = _on_new_database(f"{_LANGGRAPH}:w1", "langgraph_w1", n=peer_n)
    ours, peer = interleave(repeats, candidate, baseline)
    return throughput_record(
        figure,
        unit=unit,
        baseline=_langgraph_label("ainvoke + AsyncPostgresSaver"),
        target=W1_POSTGRES_TARGET,
        n=n,
        baseline_n=peer_n,
        seconds=[r["seconds"] for r in ours],
        baseline_seconds=[r["seconds"] for r in peer],
        method=method(
            repeats,
            drive,
            _OURS_LABEL,
            _pg.describe_settings(ours + peer),
            _DATABASES,
            _READ_BACK,
            _cpu_method(ours, peer, "cpu", "seconds"),
        ),
    )


_NODE_LABEL = (
    "each node a fresh process: PostgresStore(conninfo, node_id='node-K') at its defaults "
    "(lease 10 s, mirror=True, reads on a pool of 1 to 4) and a runtime, with the duties "
    "`pai-actors serve` runs beside a node, through the public API (store.keep_leases(); "
    "every half lease, store.orphaned_threads() loaded with get_state)"
)
_NODES_HOW = (
    "the n conversations split between the nodes (node-1 first), all of a node's at once "
    "(n trio tasks in a nursery); the node processes started together and, once each had "
    "opened its store and runtime, told to begin at once; the timed part from the first "
    "node's start to the last node's end (time.monotonic, the system-wide clock); after it, "
    "every conversation read back, untimed, through a new PostgresStore without a node_id "
    "and a new runtime, and checked; the baseline the same with one node doing all n "
    "(w1_postgres is one process without a node_id)"
)


def _nodes_cpu_split(name: str, results: list[dict[str, Any]]) -> str:
    def med(values: Any) -> float:
        return float(statistics.median(values))

    cores = os.cpu_count() or 1
    available = med(r["cpu"]["seconds"] for r in results) * cores
    nodes = [
        f"node-{k + 1}'s process {med(r['nodes'][k]['process'] for r in results):.2f} "
        f"({results[0]['nodes'][k]['n']} conversations in "
        f"{med(r['nodes'][k]['seconds'] for r in results):.2f} s)"
        for k in range(len(results[0]["nodes"]))
    ]
    ours = [sum(node["process"] for node in r["nodes"]) + r["cpu"]["backends"] for r in results]
    other = med(
        r["cpu"]["machine"] - mine - r["cpu"]["background"]
        for r, mine in zip(results, ours, strict=True)
    )
    per_conversation = med(
        1000 * mine / sum(node["n"] for node in r["nodes"])
        for r, mine in zip(results, ours, strict=True)
    )
    return (
        f"{name}: {', '.join(nodes)}, the database's PostgreSQL backends (all its nodes') "
        f"{med(r['cpu']['backends'] for r in results):.2f} (the nodes and their backends: "
        f"{per_conversation:.1f} ms per conversation), the server's background "
        f"processes {med(r['cpu']['background'] for r in results):.2f}, anything else on "
        f"the machine (the harness, other users' processes, the kernel) {other:.2f}, the "
        f"whole machine busy {med(r['cpu']['machine'] for r in results):.2f} of "
        f"{available:.2f} ({cores} cores x the interval between the two readings)"
    )


def w1_postgres_two_nodes(n: int = 1_000, *, repeats: int = 3) -> Record:
    """Conversations per second, all in flight at once, split between two node processes
    sharing one database, vs one node doing all ``n``."""
    figure = "w1_postgres_two_nodes"
    unit = (
        "conversations/s (all at once, half on each of two node processes on one database; "
        "suspend, approve, resume, complete; PostgreSQL)"
    )
    target = W1_POSTGRES_TWO_NODES_TARGET
    why = _why_not()
    if why is not None:
        return _not_measured(figure, unit=unit, why=why, ratio_of="throughput", target=target, n=n)
    two = _on_new_database(f"{_OURS}:w1_nodes", "ours_w1_two_nodes", n=n, nodes=2)
    one = _on_new_database(f"{_OURS}:w1_nodes", "ours_w1_one_node", n=n, nodes=1)
    ours, single = interleave(repeats, two, one)
    return throughput_record(
        figure,
        unit=unit,
        baseline="one node (the same node process, node_id='node-1') doing all n",
        target=target,
        n=n,
        baseline_n=n,
        seconds=[r["seconds"] for r in ours],
        baseline_seconds=[r["seconds"] for r in single],
        method=method(
            repeats,
            _NODES_HOW,
            _NODE_LABEL,
            _pg.describe_settings(ours + single),
            "each side of each repetition on a new database of the same server, created by "
            "the harness before the nodes start and dropped (WITH (FORCE)) after they ended",
            "CPU seconds in the timed part, medians of each side's repetitions (a node's "
            "process: time.process_time() over its own part; server processes: utime + "
            "stime from /proc/PID/stat, read just before the nodes are told to begin and "
            "just after the last said it was done; machine: /proc/stat, over the same "
            "interval): "
            + "; ".join(
                [_nodes_cpu_split("two nodes", ours), _nodes_cpu_split("one node", single)]
            ),
        ),
    )


@functools.lru_cache(maxsize=4)
def _w2(n: int, repeats: int) -> tuple[list[dict[str, Any]], ...] | str:
    """Each side's W2 results (suspend and resume seconds, each part's CPU split), ours then
    LangGraph's (absent when it is not installed), or why neither could run. The suspend
    and resume figures share one measurement: the resume needs the suspended
    conversations."""
    why = _why_not()
    if why is not None:
        return why
    candidate = _on_new_database(f"{_OURS}:w2", "ours_w2", n=n)
    if not langgraph_installed():
        return tuple(interleave(repeats, candidate))
    baseline = _on_new_database(f"{_LANGGRAPH}:w2", "langgraph_w2", n=n)
    return tuple(interleave(repeats, candidate, baseline))


_W2_HOW = (
    "both sides all at once (ours: n trio tasks; LangGraph: ainvoke + AsyncPostgresSaver "
    "under asyncio.gather); the resume in a new runtime on a new PostgresStore (LangGraph: "
    "a new connection) after every conversation was read back waiting"
)


def _w2_figure(figure: str, n: int, repeats: int, *, resume: bool) -> Record:
    key = "resume" if resume else "suspend"
    target = W2_POSTGRES_RESUME_TARGET if resume else W2_POSTGRES_SUSPEND_TARGET
    ratio_of: RatioOf = "throughput" if resume else "time"
    unit = (
        "resumes/s (all at once, until every run completed; PostgreSQL)"
        if resume
        else "s (until all n, started at once, are suspended; PostgreSQL)"
    )
    results = _w2(n, repeats)
    if isinstance(results, str):
        return _not_measured(figure, unit=unit, why=results, ratio_of=ratio_of, target=target, n=n)
    ours = results[0]
    peer = results[1] if len(results) > 1 else None
    seconds = [r[key] for r in ours]
    details = [
        _W2_HOW,
        _OURS_LABEL,
        _pg.describe_settings(ours + (peer or [])),
        _DATABASES,
        _READ_BACK,
        _cpu_method(ours, peer, f"{key}_cpu", key),
    ]
    if peer is None:
        return unavailable_record(
            figure,
            unit=unit,
            samples=[n / s for s in seconds] if resume else seconds,
            baseline=f"langgraph-checkpoint-postgres {UNAVAILABLE}",
            ratio_of=ratio_of,
            target=target,
            n=n,
            method=method(repeats, *details, sides=1),
        )
    api = "ainvoke(Command(resume=...))" if resume else "ainvoke"
    label = _langgraph_label(f"{api} + AsyncPostgresSaver, all at once")
    if resume:
        return throughput_record(
            figure,
            unit=unit,
            baseline=label,
            target=target,
            n=n,
            baseline_n=n,
            seconds=seconds,
            baseline_seconds=[r[key] for r in peer],
            method=method(repeats, *details),
        )
    return time_record(
        figure,
        unit=unit,
        baseline=label,
        target=target,
        n=n,
        seconds=seconds,
        baseline_seconds=[r[key] for r in peer],
        method=method(repeats, *details),
    )


def w2_postgres_suspend(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Seconds until ``n`` conversations are suspended (all started at once) on
    ``PostgresStore``, vs LangGraph on ``AsyncPostgresSaver``."""
    return _w2_figure("w2_postgres_suspend", n, repeats, resume=False)


def w2_postgres_resume(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Resumes per second (all ``n`` submitted at once, until every run completed) on
    ``PostgresStore``, vs LangGraph on ``AsyncPostgresSaver``."""
    return _w2_figure("w2_postgres_resume", n, repeats, resume=True)
