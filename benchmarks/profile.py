"""``python -m benchmarks.profile [N]``: where a conversation's CPU time goes, by area.

Not a figure: a profile, printed so that the analysis in ``docs/performance.md`` can be
checked by anyone. It runs W1 one after another (the conversation of
``benchmarks._durable_ours``: suspend, approve, resume, complete, on a ``SqliteStore`` at its
defaults) in a fresh process: 50 conversations to warm up, then ``N`` (1,000 by default)
under ``cProfile``, and ``N`` more unprofiled, timed with ``time.process_time``. It prints
the unprofiled CPU milliseconds per conversation, then each area's share of the profiled
functions' own time (cProfile's ``tottime``). cProfile's overhead falls on Python calls, not
on C code such as SQLite's, so the shares of Python areas are overstated against C ones;
read them as an order, and the shares of C areas as a lower bound.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence

import trio

from pai_actors import SqliteStore

from . import _durable_ours as ours
from ._conversation import new_db, remove_db
from ._harness import fresh

WARM_UP = 50

# Each function's file is put in the first area whose pattern it contains (in this order).
_AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SQLite's C code (execute, fetch)", ("sqlite3.Connection", "sqlite3.Cursor")),
    (
        "records: pydantic, JSON, copies",
        (
            "pydantic",
            "/json/",
            "copy.py",
            "dataclasses.py",
            "_core/call_json.py",
            "_core/json.py",
            "_core/wire.py",
            "_core/records.py",
            "_core/parts.py",
            "isoformat",
            "SchemaValidator",
            "SchemaSerializer",
        ),
    ),
    ("trio (scheduler, cancel scopes, I/O poll)", ("trio/", "outcome", "select.epoll")),
    ("actors (supervisors)", ("supervisors/",)),
    ("the store's Python (writes, mirror, group commit)", ("pai_actors/_store/",)),
    ("the call core (transitions)", ("pai_actors/_core/",)),
    ("the runtime (runs, calls, admission, watch)", ("pai_actors/_runtime/",)),
    ("tools' context and schemas", ("pai_actors/_tools/",)),
)


def _area(filename: str, function: str) -> str:
    where = f"{filename}:{function}"
    for name, patterns in _AREAS:
        if any(p in where for p in patterns):
            return name
    return "the rest (builtins, contextlib, the workload)"


def shares(n: int) -> dict[str, float]:
    """The side run in a fresh process: ``{"cpu_ms": ..., area: share, ...}``."""
    directory = tempfile.mkdtemp()
    path = new_db(directory, "profile")
    profile = cProfile.Profile()

    async def main() -> float:
        thread_ids: list[str] = []
        with SqliteStore(path) as store:
            async with ours.runtime(store) as rt:
                for i in range(WARM_UP):
                    await ours._conversation(rt, i, thread_ids)
                profile.enable()
                for i in range(WARM_UP, WARM_UP + n):
                    await ours._conversation(rt, i, thread_ids)
                profile.disable()
                start = time.process_time()
                for i in range(WARM_UP + n, WARM_UP + 2 * n):
                    await ours._conversation(rt, i, thread_ids)
                return (time.process_time() - start) * 1000 / n

    try:
        cpu_ms = trio.run(main)
    finally:
        remove_db(path)
        os.rmdir(directory)
    own: Counter[str] = Counter()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        own[_area(filename, function)] += tottime
    total = sum(own.values())
    return {"cpu_ms": cpu_ms, **{area: t / total for area, t in own.most_common()}}


def main(argv: Sequence[str]) -> int:
    n = int(argv[0]) if argv else 1_000
    result = fresh("benchmarks.profile:shares", n=n)
    print(
        f"W1 one after another, SqliteStore at its defaults: {result.pop('cpu_ms'):.3f} ms of "
        f"CPU per conversation ({n} unprofiled, after {n} profiled and {WARM_UP} to warm up)"
    )
    print("share of the profiled functions' own time (cProfile tottime), by area:")
    for area, share in result.items():
        print(f"  {share * 100:5.1f}%  {area}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
