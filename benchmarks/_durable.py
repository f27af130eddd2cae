"""The durable-approval figures: conversations whose tool call suspends for approval in a
SQLite file, against LangGraph (``SqliteSaver``) and pydantic-ai (history in SQLite).

One conversation is one thread: a tool call is requested with a small JSON input, the tool
suspends for approval with a small payload, the state is durable (SQLite on every side, WAL,
``synchronous=NORMAL``), a client submits ``{"approved": true}``, the tool resumes and returns
and the run completes. No side calls an LLM: each has a fixed model (see
:mod:`._durable_ours`, :mod:`._peers_langgraph`, :mod:`._peers_pydantic_ai`).

- ``w1_sequential``: whole conversations per second, one after another, vs LangGraph's sync
  API. Target: >= 5x.
- ``w1_concurrent``: the same with all ``n`` in flight at once (trio tasks; the peers through
  ``ainvoke``/``agent.run`` under ``asyncio.gather``). Target: >= 5x.
- ``w1_sequential_pydantic_ai``, ``w1_concurrent_pydantic_ai``: the same against pydantic-ai's
  deferred tools; informational.
- ``w2_suspend``: seconds until ``n`` conversations (all started at once) are suspended, vs
  LangGraph. Target: ratio of times <= 0.1 (10x faster).
- ``w2_resume``: resumes per second with all ``n`` submissions at once, until every run
  completed, vs LangGraph. Target: >= 10x.
- ``w2_memory``: resident bytes per suspended call (VmRSS in a fresh process, after ``n``
  conversations are suspended and their call actors exited, minus before, over ``n``).
  Target: <= 1024.
- ``reopen_100k``: seconds from opening a ``SqliteStore`` holding ``n`` suspended calls (and
  a runtime on it) until the runtime accepts a submission to one of them. Target: < 1 s
  (``<= 1``).

Without the peers (``pip install .[bench]`` installs them), a peer figure reports our value
with ``baseline`` saying so, and no ratio.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import _durable_ours as ours
from ._harness import (
    RatioOf,
    Record,
    Target,
    best_of,
    throughput_record,
    time_record,
    unavailable_record,
    value_record,
)

W1_TARGET = Target(">=", 5.0)
W2_SUSPEND_TARGET = Target("<=", 0.1)
W2_RESUME_TARGET = Target(">=", 10.0)
MEMORY_TARGET = Target("<=", 1024.0)
REOPEN_TARGET = Target("<=", 1.0)
UNAVAILABLE = "unavailable (pip install .[bench])"
_ROOT = Path(__file__).resolve().parent.parent


def langgraph_installed() -> bool:
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("langgraph", "langgraph.checkpoint.sqlite", "aiosqlite")
    )


def pydantic_ai_installed() -> bool:
    return importlib.util.find_spec("pydantic_ai") is not None


def _langgraph_label(what: str) -> str:
    from . import _peers_langgraph as lg

    return f"LangGraph {lg.VERSION} {what}"


def _pydantic_ai_label(what: str) -> str:
    from . import _peers_pydantic_ai as pa

    return f"pydantic-ai {pa.VERSION} {what}"


def _best(repeats: int, run: Callable[[], float]) -> float:
    best = math.inf
    for _ in range(repeats):
        gc.collect()
        best = min(best, run())
    return best


def _w1(
    figure: str,
    n: int,
    peer_n: int,
    repeats: int,
    *,
    concurrent: bool,
    peer: str,
    target: Target | None,
) -> Record:
    mode = "all at once" if concurrent else "one after another"
    unit = f"conversations/s ({mode}; suspend, approve, resume, complete; SQLite)"
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:
        directory = Path(tmp)

        def candidate() -> float:
            return ours.round_trips(n, directory, concurrent=concurrent)

        baseline: Callable[[], float]
        if peer == "langgraph" and langgraph_installed():
            from . import _peers_langgraph as lg

            run = lg.round_trips_concurrent if concurrent else lg.round_trips_sequential
            label = _langgraph_label(
                "ainvoke + AsyncSqliteSaver" if concurrent else "invoke + SqliteSaver"
            )

            def baseline() -> float:
                return run(peer_n, directory)

        elif peer == "pydantic-ai" and pydantic_ai_installed():
            from . import _peers_pydantic_ai as pa

            label = _pydantic_ai_label("deferred tools, history in SQLite")

            def baseline() -> float:
                return pa.round_trips(peer_n, directory, concurrent=concurrent)

        else:
            return unavailable_record(
                figure,
                unit=unit,
                value=n / _best(repeats, candidate),
                baseline=f"{peer} {UNAVAILABLE}",
                ratio_of="throughput",
                target=target,
                n=n,
                repeats=repeats,
            )
        seconds, baseline_seconds = best_of(repeats, candidate, baseline)
    return throughput_record(
        figure,
        unit=unit,
        baseline=label,
        target=target,
        n=n,
        baseline_n=peer_n,
        repeats=repeats,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
    )


def w1_sequential(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Conversations per second, one after another, vs LangGraph."""
    return _w1(
        "w1_sequential", n, peer_n, repeats, concurrent=False, peer="langgraph", target=W1_TARGET
    )


def w1_concurrent(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Conversations per second, all in flight at once, vs LangGraph."""
    return _w1(
        "w1_concurrent", n, peer_n, repeats, concurrent=True, peer="langgraph", target=W1_TARGET
    )


def w1_sequential_pydantic_ai(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Conversations per second, one after another, vs pydantic-ai; informational."""
    return _w1(
        "w1_sequential_pydantic_ai",
        n,
        peer_n,
        repeats,
        concurrent=False,
        peer="pydantic-ai",
        target=None,
    )


def w1_concurrent_pydantic_ai(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Conversations per second, all in flight at once, vs pydantic-ai; informational."""
    return _w1(
        "w1_concurrent_pydantic_ai",
        n,
        peer_n,
        repeats,
        concurrent=True,
        peer="pydantic-ai",
        target=None,
    )


@functools.lru_cache(maxsize=4)
def _w2_seconds(n: int, repeats: int) -> tuple[float, float, float | None, float | None]:
    """Best seconds to suspend and to resume ``n`` conversations, ours then LangGraph's
    (``None`` when it is not installed). ``w2_suspend`` and ``w2_resume`` share one
    measurement: the resume needs the suspended conversations."""
    peer = langgraph_installed()
    best: list[float] = [math.inf] * 4
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:
        directory = Path(tmp)
        for i in range(repeats):
            sides: list[Callable[[], tuple[float, float]]] = [
                lambda: ours.suspend_resume(n, directory)
            ]
            if peer:
                from . import _peers_langgraph as lg

                sides.append(lambda: lg.suspend_resume(n, directory))
            order = range(len(sides)) if i % 2 == 0 else reversed(range(len(sides)))
            for side in order:
                gc.collect()
                suspend, resume = sides[side]()
                best[2 * side] = min(best[2 * side], suspend)
                best[2 * side + 1] = min(best[2 * side + 1], resume)
    if not peer:
        return best[0], best[1], None, None
    return best[0], best[1], best[2], best[3]


def w2_suspend(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Seconds until ``n`` conversations are suspended (all started at once), vs LangGraph."""
    seconds, _, peer_seconds, _ = _w2_seconds(n, repeats)
    if peer_seconds is None:
        return _unavailable_w2("w2_suspend", "s", seconds, "time", W2_SUSPEND_TARGET, n, repeats)
    return time_record(
        "w2_suspend",
        baseline=_langgraph_label("ainvoke + AsyncSqliteSaver, all at once"),
        target=W2_SUSPEND_TARGET,
        n=n,
        repeats=repeats,
        seconds=seconds,
        baseline_seconds=peer_seconds,
    )


def w2_resume(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Resumes per second (all ``n`` submitted at once, until every run completed), vs
    LangGraph."""
    _, seconds, _, peer_seconds = _w2_seconds(n, repeats)
    unit = "resumes/s (all at once, until every run completed; SQLite)"
    if peer_seconds is None:
        return _unavailable_w2(
            "w2_resume", unit, n / seconds, "throughput", W2_RESUME_TARGET, n, repeats
        )
    return throughput_record(
        "w2_resume",
        unit=unit,
        baseline=_langgraph_label("ainvoke(Command(resume=...)) + AsyncSqliteSaver, all at once"),
        target=W2_RESUME_TARGET,
        n=n,
        baseline_n=n,
        repeats=repeats,
        seconds=seconds,
        baseline_seconds=peer_seconds,
    )


def _unavailable_w2(
    figure: str, unit: str, value: float, ratio_of: RatioOf, target: Target, n: int, repeats: int
) -> Record:
    return unavailable_record(
        figure,
        unit=unit,
        value=value,
        baseline=f"langgraph {UNAVAILABLE}",
        ratio_of=ratio_of,
        target=target,
        n=n,
        repeats=repeats,
    )


def _memory_in_fresh_process(n: int, directory: str) -> float:
    code = (
        "import sys\n"
        "from benchmarks._durable_ours import memory_per_suspended_call\n"
        "print(memory_per_suspended_call(int(sys.argv[1]), sys.argv[2]))\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", code, str(n), directory],
        cwd=_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the memory measurement failed:\n{done.stderr}")
    return float(done.stdout.strip().splitlines()[-1])


def w2_memory(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Resident bytes per suspended call, each repetition in a fresh process (the least)."""
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:
        value = min(_memory_in_fresh_process(n, tmp) for _ in range(repeats))
    return value_record(
        "w2_memory",
        unit="bytes of VmRSS per suspended call (fresh process, after the call actors exited)",
        value=value,
        target=MEMORY_TARGET,
        n=n,
        repeats=repeats,
    )


def reopen(n: int = 100_000, *, repeats: int = 3) -> Record:
    """Seconds from opening a store with ``n`` suspended calls until a submission is
    accepted. The store is built once through the runtime (not timed)."""
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:
        path = Path(tmp) / "suspended.db"
        thread_ids = ours.build_suspended_store(path, n, count=repeats)
        best = math.inf
        for thread_id in thread_ids:
            gc.collect()
            best = min(best, ours.reopen_until_first_submission(path, thread_id))
    return value_record(
        "reopen_100k",
        unit=f"s (open SqliteStore + runtime holding {n:,} suspended calls, until a "
        "submission is accepted)",
        value=best,
        target=REOPEN_TARGET,
        n=n,
        repeats=repeats,
    )
