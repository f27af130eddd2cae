"""How ``PostgresStore`` runs psycopg under trio, measured: libpq's non-blocking calls driven
by trio's socket waits (what the store does, ``pai_actors._store.postgres_connection``)
against psycopg's blocking calls in worker threads, on the store's real workload.

Both sides run the same store code on the same server; only the class of the store's
connections differs. The baseline's side process replaces it, before any store is made, by
a worker-thread version with the same interface (:mod:`._postgres_driver_sides`):

- ``threads`` (:class:`._postgres_driver_sides.ThreadConnection`): psycopg's blocking
  ``Connection`` (autocommit, ``prepare_threshold=0``, ``RawCursor`` for the store's ``$1``
  placeholders, binary parameters and results with ``int`` as ``int8`` and ``str`` as
  ``text``, as the store sends them), every call one hop through ``trio.to_thread.run_sync``
  and each pipeline psycopg's ``conn.pipeline()`` inside one hop: choice (a) as a psycopg
  user writes it;
- ``same calls in threads`` (:class:`._postgres_driver_sides.SameCallsThreadConnection`):
  the store's own ``psycopg.pq`` calls (its prepared statements, encoders, decoders and
  pipeline) made blocking in the worker thread: the hop alone, with nothing of psycopg's
  cursors.

So both sides send the same statements, prepared once per connection, in the same round
trips. The figures:

- ``postgres_driver``: W1 (:mod:`._postgres`'s ``w1_postgres`` conversation, ``n`` at once on
  ``PostgresStore(conninfo)`` at its defaults) in conversations per second, ours over
  ``threads``. Target: >= 1 (the choice must not lose).
- ``postgres_driver_same_calls``: the same measurement's candidate over ``same calls in
  threads``; informational.
- ``postgres_driver_reads_sequential`` and ``postgres_driver_reads_concurrent``: single-read
  round trips (``store.get_thread`` on a store without a mirror, so each is one statement)
  per second, ``n`` from one task, then ``n`` from 8 tasks at once (the pool's 4
  connections), ours over ``threads``; informational (``same calls in threads`` runs as a
  third side, its median in ``method``).

Each side of each repetition runs in a fresh process on a new database of the server
(:func:`._pg.new_database`), the sides interleaved, figures the medians; ``method`` gives
the CPU split of the timed part (the side's process, with its worker threads; the
database's PostgreSQL backends; the server's background processes; the machine). Without
``psycopg`` or a reachable server the figures say so and report no samples.
"""

from __future__ import annotations

import functools
import statistics
from importlib.metadata import version
from typing import Any

from . import _pg, _postgres
from ._harness import Record, Target, interleave, method, throughput_record

POSTGRES_DRIVER_TARGET = Target(">=", 1.0)

_SIDES = "benchmarks._postgres_driver_sides"
_W1_UNIT = "conversations/s (all at once; suspend, approve, resume, complete; PostgreSQL)"
_READS_TASKS = 8


def _libpq() -> str:
    from psycopg import pq

    libpq = pq.version()
    return f"psycopg.pq's {pq.__impl__} implementation, libpq {libpq // 10_000}.{libpq % 100}"


def _ours() -> str:
    return (
        "ours: the store's own connections, libpq's non-blocking calls (psycopg "
        f"{version('psycopg')}, {_libpq()}) driven from the trio thread, "
        "trio.lowlevel.wait_readable / wait_writable on the socket between them, each "
        "statement prepared on a connection the first time it runs there, binary parameters "
        "and results, group commits in one libpq pipeline"
    )


def _threads() -> str:
    return (
        f"threads: the store's connections replaced (in that side's process only, before the "
        f"store was made) by psycopg {version('psycopg')}'s blocking psycopg.Connection "
        "(autocommit=True, prepare_threshold=0: every statement prepared the first time it "
        "runs on a connection; RawCursor: the store's $1 placeholders as written; binary "
        "parameters and results, int dumped as int8 and str as text as the store sends them; "
        "rows as tuples of the same Python values), every call one trio.to_thread.run_sync "
        "hop (abandon_on_cancel=True: a cancelled call returns at once, the connection is "
        "then cancelled and closed), each pipeline psycopg's conn.pipeline() with a cursor "
        "per statement inside one hop (its PGresults returned as the store's pipeline "
        "returns them); the same statements in the same round trips"
    )


def _same_calls() -> str:
    return (
        "same calls in threads: the store's connections replaced (in that side's process "
        "only) by the store's own psycopg.pq calls (the same prepared statements, encoders, "
        "decoders and pipeline code) made blocking, each call one trio.to_thread.run_sync hop: "
        "what differs from ours is the hop to a worker thread and back instead of a trio "
        "wait on the socket"
    )


def _short(driver: str) -> str:
    """The ``baseline`` of a record: which thread version (``method`` says all of it)."""
    if driver == "threads":
        how = (
            f"psycopg {version('psycopg')}'s blocking psycopg.Connection, every call one "
            "trio.to_thread.run_sync hop"
        )
    else:
        how = "the store's own psycopg.pq calls made blocking, every call one hop"
    return f"{how} (the store's connections replaced; the same statements and round trips)"


def _hops(name: str, results: list[dict[str, Any]], n: int) -> str:
    def med(key: str) -> float:
        return float(statistics.median(r["calls"][key] for r in results))

    return (
        f"{name}'s connections in the timed part (medians): {med('hops'):.0f} hops "
        f"({med('hops') / n:.2f} per conversation), {med('pipelines'):.0f} of them pipelines "
        f"of {med('pipelined'):.0f} statements in all"
    )


def _cpu(sides: list[tuple[str, list[dict[str, Any]]]], cpu: str, wall: str) -> str:
    return (
        "CPU seconds in the timed part, medians of each side's repetitions (process: "
        "time.process_time(), its worker threads included; server processes: utime + stime "
        "from /proc/PID/stat, read before and after; machine: /proc/stat): "
        + "; ".join(_postgres._cpu_split(name, results, cpu, wall) for name, results in sides)
    )


@functools.lru_cache(maxsize=4)
def _w1(n: int, repeats: int) -> tuple[list[dict[str, Any]], ...] | str:
    """W1 on each side: ours, ``threads``, ``same calls in threads`` (one interleaved
    measurement gives both W1 figures), or why none could run."""
    why = _postgres._why_not()
    if why is not None:
        return why
    sides = [
        _postgres._on_new_database(f"{_SIDES}:w1", what, n=n, driver=driver)
        for what, driver in (
            ("driver_socket_waits", "socket waits"),
            ("driver_threads", "threads"),
            ("driver_same_calls", "same calls in threads"),
        )
    ]
    return tuple(interleave(repeats, *sides))


_W1_HOW = (
    "W1 as w1_postgres runs it (the same conversation: a user message, a refund call "
    "suspended for approval, {approved: true} submitted, the tool resumed, the answer): n "
    "at once (n trio tasks in a nursery) on PostgresStore(conninfo) at its defaults (group "
    "commits of up to 128, two in flight on two connections; reads on a pool of 1 to 4; "
    "mirror=True), nothing set on the session; the sides differ only in the class of the "
    "store's connections"
)


def _w1_figure(figure: str, n: int, repeats: int, baseline: str) -> Record:
    target = POSTGRES_DRIVER_TARGET if baseline == "threads" else None
    results = _w1(n, repeats)
    if isinstance(results, str):
        return _postgres._not_measured(
            figure, unit=_W1_UNIT, why=results, ratio_of="throughput", target=target, n=n
        )
    ours, threads, same = results
    other, label = (threads, _threads()) if baseline == "threads" else (same, _same_calls())
    interleaving = "three sides interleaved (ours, threads, same calls in threads, then reversed)"
    return throughput_record(
        figure,
        unit=_W1_UNIT,
        baseline=_short(baseline),
        target=target,
        n=n,
        baseline_n=n,
        seconds=[r["seconds"] for r in ours],
        baseline_seconds=[r["seconds"] for r in other],
        method=method(
            repeats,
            interleaving if repeats > 1 else "three sides (ours, threads, same calls in threads)",
            _W1_HOW,
            _ours(),
            label,
            _hops("the baseline", other, n),
            _pg.describe_settings([*ours, *threads, *same]),
            _postgres._DATABASES,
            "every conversation read back after the timed part, untimed, through a new "
            "PostgresStore on the database (on the side's own connections) and a new runtime, "
            "and checked",
            _cpu([("ours", ours), (baseline, other)], "cpu", "seconds"),
            sides=3,
        ),
    )


def postgres_driver(n: int = 1_000, *, repeats: int = 5) -> Record:
    """W1 conversations per second, all at once, on ``PostgresStore`` as shipped (libpq
    driven by trio's socket waits) vs the same store on psycopg's blocking ``Connection``
    with every call in a worker thread."""
    return _w1_figure("postgres_driver", n, repeats, "threads")


def postgres_driver_same_calls(n: int = 1_000, *, repeats: int = 5) -> Record:
    """The same W1 as :func:`postgres_driver` (one measurement), ours vs the store's own
    libpq calls made blocking in a worker thread: the hop alone. Informational."""
    return _w1_figure("postgres_driver_same_calls", n, repeats, "same calls in threads")


@functools.lru_cache(maxsize=4)
def _reads(n: int, repeats: int) -> tuple[list[dict[str, Any]], ...] | str:
    """The read round trips on each side: ours, ``threads``, ``same calls in threads``
    (one measurement gives both read figures; the third side's medians are in their
    ``method``), or why none could run."""
    why = _postgres._why_not()
    if why is not None:
        return why
    sides = [
        _postgres._on_new_database(f"{_SIDES}:reads", what, n=n, tasks=_READS_TASKS, driver=driver)
        for what, driver in (
            ("reads_socket_waits", "socket waits"),
            ("reads_threads", "threads"),
            ("reads_same_calls", "same calls in threads"),
        )
    ]
    return tuple(interleave(repeats, *sides))


def _reads_figure(figure: str, n: int, repeats: int, *, concurrent: bool) -> Record:
    key = "many" if concurrent else "one"
    how = (
        f"from {_READS_TASKS} tasks at once, n / {_READS_TASKS} each, one after another"
        if concurrent
        else "from one task, one after another"
    )
    unit = f"reads/s (store.get_thread, {how}; PostgreSQL)"
    results = _reads(n, repeats)
    if isinstance(results, str):
        return _postgres._not_measured(
            figure, unit=unit, why=results, ratio_of="throughput", target=None, n=n
        )
    ours, threads, same = results
    same_rate = statistics.median(n / r[key] for r in same)
    return throughput_record(
        figure,
        unit=unit,
        baseline=_short("threads"),
        target=None,
        n=n,
        baseline_n=n,
        seconds=[r[key] for r in ours],
        baseline_seconds=[r[key] for r in threads],
        method=method(
            repeats,
            f"n reads of one thread's record through store.get_thread {how} (each one "
            "statement on a connection of the read pool: the store opened with mirror=False, "
            "the rest at its defaults, a pool of 1 to 4 connections; the thread created "
            "through a runtime first, closed before the reads: nothing else runs); in each "
            "side's process, after a warm-up of "
            f"{4 * _READS_TASKS} reads from {_READS_TASKS} tasks (the pool's connections "
            "opened, the statement prepared on each), the n reads from one task, then n from "
            f"{_READS_TASKS} tasks; each thread version's side checked that each read was "
            "one hop",
            "three sides interleaved (ours, threads, same calls in threads, then reversed)"
            if repeats > 1
            else "three sides (ours, threads, same calls in threads)",
            _ours(),
            _threads(),
            f"{_same_calls()}: {same_rate:.0f} reads/s (median; ours over it "
            f"{statistics.median(n / r[key] for r in ours) / same_rate:.3g})",
            _pg.describe_settings([*ours, *threads, *same]),
            _postgres._DATABASES,
            _cpu(
                [("ours", ours), ("threads", threads), ("same calls in threads", same)],
                f"{key}_cpu",
                key,
            ),
            warmed=True,
            sides=3,
        ),
    )


def postgres_driver_reads_sequential(n: int = 10_000, *, repeats: int = 5) -> Record:
    """Single-statement reads per second from one task, ``PostgresStore`` as shipped vs on
    psycopg's blocking ``Connection`` in worker threads. Informational."""
    return _reads_figure("postgres_driver_reads_sequential", n, repeats, concurrent=False)


def postgres_driver_reads_concurrent(n: int = 10_000, *, repeats: int = 5) -> Record:
    """The same reads from 8 tasks at once (one measurement with
    :func:`postgres_driver_reads_sequential`). Informational."""
    return _reads_figure("postgres_driver_reads_concurrent", n, repeats, concurrent=True)
