"""The durable-approval figures: conversations whose tool call suspends for approval in a
SQLite file, against LangGraph (``SqliteSaver``) and pydantic-ai (history in SQLite).

One conversation is one thread: a tool call is requested with a small JSON input, the tool
suspends for approval with a small payload, the state is durable in SQLite, a client submits
``{"approved": true}``, the tool resumes and returns and the run completes. No side calls an
LLM: each has a fixed model or none (see :mod:`._durable_ours`, :mod:`._peers_langgraph`,
:mod:`._peers_pydantic_ai`). Each side of each repetition runs in a fresh process
(:func:`._harness.fresh`) holding only that side, the sides interleaved; figures are medians.
After its timed part every side reads EVERY conversation back, untimed, from a fresh
connection (ours: a new ``SqliteStore`` on the same file and a new runtime; LangGraph:
``graph.get_state`` through a new ``SqliteSaver`` connection; pydantic-ai: every stored
history) and checks it completed with the refund's result (or, after W2's suspend, that it is
waiting with its pending action).

Durability. Ours is ``SqliteStore(path)`` at its default ``durability="normal"`` (WAL,
``synchronous=NORMAL``). The headline figures compare it with LangGraph AT ITS DEFAULTS: no
PRAGMA is set on its connection (its saver puts the file in WAL; SQLite keeps
``synchronous=FULL``, an fsync per commit); the label reports the modes read back with
PRAGMA. Figures named ``*_equal_normal`` set LangGraph's connection to ``synchronous=NORMAL``
(WAL, as ours); ``*_equal_full`` put ours at ``durability="full"`` against LangGraph at
``synchronous=FULL``. Those are informational.

- ``w1_sequential``: whole conversations per second, one after another (ours awaited one by
  one in trio; LangGraph's sync ``invoke`` + ``SqliteSaver``). Target: >= 5x.
- ``w1_concurrent``: the same with all ``n`` in flight at once, through async APIs on both
  sides (ours: ``n`` trio tasks in a nursery; LangGraph: ``ainvoke`` + ``AsyncSqliteSaver``
  under ``asyncio.gather``). Target: >= 8x.
- ``w1_sequential_equal_normal``, ``w1_sequential_equal_full``, ``w1_concurrent_equal_normal``,
  ``w1_concurrent_equal_full``: the same at equal durability; informational.
- ``w1_concurrent_vs_sequential``: ours all at once over ours one after another, measured
  in the same run (interleaved). Target: >= 1.5.
- ``w1_sequential_pydantic_ai``, ``w1_concurrent_pydantic_ai``: against pydantic-ai's
  deferred tools, its history in SQLite at our durability (it has no store of its own);
  informational.
- ``w2_suspend``: seconds until ``n`` conversations (all started at once) are suspended, vs
  LangGraph (``ainvoke``, all at once). Target: ratio of times <= 0.2.
- ``w2_resume``: resumes per second with all ``n`` submissions at once, until every run
  completed, in a new runtime (LangGraph: a new connection) after every conversation was
  read back waiting. Target: >= 5x. ``w2_suspend_equal_normal``, ``w2_resume_equal_normal``:
  the same against LangGraph at ``synchronous=NORMAL``; informational.
- ``w2_memory``: resident bytes per suspended conversation (VmRSS in a fresh process after
  ``n`` conversations are suspended, 100 in flight at a time, minus before, minus the
  workload's own list of thread ids, over ``n``). ``w2_memory_at_once``: the same with all
  ``n`` sent at once. Target: <= 1024 each. LangGraph's resident bytes per suspended
  conversation (all at once, at its defaults, measured the same way) is the baseline:
  informational.
- ``cpu_per_conversation``: milliseconds of process CPU time per conversation (W1 one after
  another, ``SqliteStore`` at NORMAL), vs the durable-write limit: plain ``sqlite3`` (WAL,
  ``synchronous=NORMAL``) doing 3 commits of a 1 KB INSERT per conversation. Target:
  limit / ours >= 0.08 (the issue's bound on ours: <= 1.2 ms).
- ``reopen_100k``: seconds from opening a ``SqliteStore`` holding ``n`` suspended calls (and
  a runtime on it) until the runtime accepts a submission to one of them. Target: <= 1 s.

Without the peers (``pip install .[bench]`` installs them), a peer figure reports our value
with ``baseline`` saying so, and no ratio.
"""

from __future__ import annotations

import functools
import importlib.util
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

from . import _durable_ours as ours
from ._conversation import BLOB, COMMITS, durable_write_limit
from ._harness import (
    Record,
    Target,
    cost_record,
    fresh,
    interleave,
    method,
    throughput_record,
    time_record,
    unavailable_record,
    value_record,
)

W1_SEQUENTIAL_TARGET = Target(">=", 5.0)
W1_CONCURRENT_TARGET = Target(">=", 8.0)
W1_CONCURRENT_VS_SEQUENTIAL_TARGET = Target(">=", 1.5)
W2_SUSPEND_TARGET = Target("<=", 0.2)
W2_RESUME_TARGET = Target(">=", 5.0)
MEMORY_TARGET = Target("<=", 1024.0)
CPU_TARGET = Target(">=", 0.08)
CPU_BOUND_MS = 1.2
"""The issue's bound on ours alone (ms of CPU per conversation), quoted in the unit."""
REOPEN_TARGET = Target("<=", 1.0)
UNAVAILABLE = "unavailable (pip install .[bench])"

_LANGGRAPH = "benchmarks._peers_langgraph"
_PYDANTIC_AI = "benchmarks._peers_pydantic_ai"
_READ_BACK = (
    "every conversation read back after the timed part, untimed, from a fresh connection "
    "(ours: a new SqliteStore on the file and a new runtime) and checked"
)

Setting = Literal["defaults", "equal_normal", "equal_full"]
_OURS_DURABILITY: dict[Setting, ours.Durability] = {
    "defaults": "normal",
    "equal_normal": "normal",
    "equal_full": "full",
}
_LANGGRAPH_SYNCHRONOUS: dict[Setting, str | None] = {
    "defaults": None,
    "equal_normal": "NORMAL",
    "equal_full": "FULL",
}


def langgraph_installed() -> bool:
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("langgraph", "langgraph.checkpoint.sqlite", "aiosqlite")
    )


def pydantic_ai_installed() -> bool:
    return importlib.util.find_spec("pydantic_ai") is not None


def _ours_label(durability: ours.Durability) -> str:
    sync = "NORMAL" if durability == "normal" else "FULL"
    return f'SqliteStore(path, durability="{durability}"): WAL, synchronous={sync}'


def _langgraph_label(what: str, setting: Setting, modes: dict[str, Any]) -> str:
    how = {
        "defaults": "at its defaults (no PRAGMA set)",
        "equal_normal": "connection set to synchronous=NORMAL",
        "equal_full": "connection set to synchronous=FULL",
    }[setting]
    return (
        f"LangGraph {version('langgraph')} {what}, {how}: journal_mode={modes['journal_mode']}, "
        f"synchronous={modes['synchronous']} (read back with PRAGMA); durability='async' "
        "(its default); one node calling interrupt() in the tool"
    )


def _modes(results: list[dict[str, Any]]) -> dict[str, Any]:
    modes = {(r["journal_mode"], r["synchronous"]) for r in results}
    if len(modes) != 1:
        raise AssertionError(f"LangGraph's connection changed modes between repetitions: {modes}")
    [(journal_mode, synchronous)] = modes
    return {"journal_mode": journal_mode, "synchronous": synchronous}


def _w1_method(repeats: int, concurrent: bool, setting: Setting, peer: str) -> str:
    durability = _OURS_DURABILITY[setting]
    if concurrent:
        drive = (
            f"all n at once through async APIs (ours: n trio tasks in a nursery; {peer}: "
            "under asyncio.gather)"
        )
    else:
        drive = (
            "one conversation after another (ours: awaited one by one in trio; "
            f"{peer}: " + ("sync invoke" if peer == "LangGraph" else "agent.run awaited") + ")"
        )
    return method(repeats, drive, f"ours: {_ours_label(durability)}", _READ_BACK)


def _w1(
    figure: str,
    n: int,
    peer_n: int,
    repeats: int,
    *,
    concurrent: bool,
    setting: Setting,
    target: Target | None,
) -> Record:
    mode = "all at once" if concurrent else "one after another"
    unit = f"conversations/s ({mode}; suspend, approve, resume, complete; SQLite)"
    durability = _OURS_DURABILITY[setting]
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:

        def candidate() -> float:
            seconds: float = fresh(
                ours.w1, directory=tmp, n=n, concurrent=concurrent, durability=durability
            )
            return seconds

        if not langgraph_installed():
            [seconds] = interleave(repeats, candidate)
            return unavailable_record(
                figure,
                unit=unit,
                samples=[n / s for s in seconds],
                baseline=f"langgraph {UNAVAILABLE}",
                ratio_of="throughput",
                target=target,
                n=n,
                method=method(repeats, f"ours: {_ours_label(durability)}", _READ_BACK, sides=1),
            )
        side = f"{_LANGGRAPH}:{'w1_concurrent' if concurrent else 'w1_sequential'}"

        def baseline() -> dict[str, Any]:
            result: dict[str, Any] = fresh(
                side, directory=tmp, n=peer_n, synchronous=_LANGGRAPH_SYNCHRONOUS[setting]
            )
            return result

        ours_results, peer_results = interleave(repeats, candidate, baseline)
    what = "ainvoke + AsyncSqliteSaver" if concurrent else "invoke + SqliteSaver"
    return throughput_record(
        figure,
        unit=unit,
        baseline=_langgraph_label(what, setting, _modes(peer_results)),
        target=target,
        n=n,
        baseline_n=peer_n,
        seconds=ours_results,
        baseline_seconds=[r["seconds"] for r in peer_results],
        method=_w1_method(repeats, concurrent, setting, "LangGraph"),
    )


def w1_sequential(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Conversations per second, one after another, vs LangGraph at its defaults."""
    return _w1(
        "w1_sequential",
        n,
        peer_n,
        repeats,
        concurrent=False,
        setting="defaults",
        target=W1_SEQUENTIAL_TARGET,
    )


def w1_concurrent(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Conversations per second, all in flight at once, vs LangGraph at its defaults."""
    return _w1(
        "w1_concurrent",
        n,
        peer_n,
        repeats,
        concurrent=True,
        setting="defaults",
        target=W1_CONCURRENT_TARGET,
    )


def w1_sequential_equal_normal(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Informational: one after another, LangGraph at synchronous=NORMAL like ours."""
    return _w1(
        "w1_sequential_equal_normal",
        n,
        peer_n,
        repeats,
        concurrent=False,
        setting="equal_normal",
        target=None,
    )


def w1_concurrent_equal_normal(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Informational: all at once, LangGraph at synchronous=NORMAL like ours."""
    return _w1(
        "w1_concurrent_equal_normal",
        n,
        peer_n,
        repeats,
        concurrent=True,
        setting="equal_normal",
        target=None,
    )


def w1_sequential_equal_full(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Informational: one after another, ours at durability="full" vs LangGraph at FULL."""
    return _w1(
        "w1_sequential_equal_full",
        n,
        peer_n,
        repeats,
        concurrent=False,
        setting="equal_full",
        target=None,
    )


def w1_concurrent_equal_full(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Informational: all at once, ours at durability="full" vs LangGraph at FULL."""
    return _w1(
        "w1_concurrent_equal_full",
        n,
        peer_n,
        repeats,
        concurrent=True,
        setting="equal_full",
        target=None,
    )


def w1_concurrent_vs_sequential(n: int = 1_000, *, repeats: int = 3) -> Record:
    """Ours all at once over ours one after another (the same ``n``, interleaved)."""
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:

        def side(concurrent: bool) -> Callable[[], float]:
            return lambda: float(
                fresh(ours.w1, directory=tmp, n=n, concurrent=concurrent, durability="normal")
            )

        at_once, one_by_one = interleave(repeats, side(True), side(False))
    return throughput_record(
        "w1_concurrent_vs_sequential",
        unit="conversations/s (ours, all at once: n trio tasks in a nursery; SQLite)",
        baseline="ours, one conversation after another (awaited one by one), same n",
        target=W1_CONCURRENT_VS_SEQUENTIAL_TARGET,
        n=n,
        baseline_n=n,
        seconds=at_once,
        baseline_seconds=one_by_one,
        method=method(repeats, f"both sides ours: {_ours_label('normal')}", _READ_BACK),
    )


def _w1_pydantic_ai(figure: str, n: int, peer_n: int, repeats: int, *, concurrent: bool) -> Record:
    mode = "all at once" if concurrent else "one after another"
    unit = f"conversations/s ({mode}; suspend, approve, resume, complete; SQLite)"
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:

        def candidate() -> float:
            return float(
                fresh(ours.w1, directory=tmp, n=n, concurrent=concurrent, durability="normal")
            )

        if not pydantic_ai_installed():
            [seconds] = interleave(repeats, candidate)
            return unavailable_record(
                figure,
                unit=unit,
                samples=[n / s for s in seconds],
                baseline=f"pydantic-ai {UNAVAILABLE}",
                ratio_of="throughput",
                target=None,
                n=n,
                method=method(repeats, f"ours: {_ours_label('normal')}", _READ_BACK, sides=1),
            )

        def baseline() -> float:
            return float(
                fresh(f"{_PYDANTIC_AI}:w1", directory=tmp, n=peer_n, concurrent=concurrent)
            )

        seconds, baseline_seconds = interleave(repeats, candidate, baseline)
    return throughput_record(
        figure,
        unit=unit,
        baseline=f"pydantic-ai {version('pydantic-ai-slim')} deferred tools (ApprovalRequired), "
        "history in SQLite written by the application (WAL, synchronous=NORMAL, as ours: "
        "pydantic-ai has no store of its own)",
        target=None,
        n=n,
        baseline_n=peer_n,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=_w1_method(repeats, concurrent, "defaults", "pydantic-ai"),
    )


def w1_sequential_pydantic_ai(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Conversations per second, one after another, vs pydantic-ai; informational."""
    return _w1_pydantic_ai("w1_sequential_pydantic_ai", n, peer_n, repeats, concurrent=False)


def w1_concurrent_pydantic_ai(n: int = 1_000, *, peer_n: int = 1_000, repeats: int = 3) -> Record:
    """Conversations per second, all in flight at once, vs pydantic-ai; informational."""
    return _w1_pydantic_ai("w1_concurrent_pydantic_ai", n, peer_n, repeats, concurrent=True)


@functools.lru_cache(maxsize=8)
def _w2(n: int, repeats: int, setting: Setting) -> tuple[list[dict[str, Any]], ...]:
    """Each side's W2 results (suspend and resume seconds), ours then LangGraph's (absent
    when it is not installed). A figure's suspend and resume share one measurement: the
    resume needs the suspended conversations."""
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:

        def candidate() -> dict[str, Any]:
            result: dict[str, Any] = fresh(
                ours.w2, directory=tmp, n=n, durability=_OURS_DURABILITY[setting]
            )
            return result

        def baseline() -> dict[str, Any]:
            result: dict[str, Any] = fresh(
                f"{_LANGGRAPH}:w2", directory=tmp, n=n, synchronous=_LANGGRAPH_SYNCHRONOUS[setting]
            )
            return result

        if not langgraph_installed():
            return tuple(interleave(repeats, candidate))
        return tuple(interleave(repeats, candidate, baseline))


_W2_HOW = (
    "both sides all at once (ours: n trio tasks; LangGraph: ainvoke + AsyncSqliteSaver under "
    "asyncio.gather); the resume in a new runtime on a new store (LangGraph: a new "
    "connection) after every conversation was read back waiting"
)


def _w2_figure(figure: str, n: int, repeats: int, setting: Setting, *, resume: bool) -> Record:
    results = _w2(n, repeats, setting)
    key = "resume" if resume else "suspend"
    seconds = [r[key] for r in results[0]]
    target: Target | None = None
    if setting == "defaults":
        target = W2_RESUME_TARGET if resume else W2_SUSPEND_TARGET
    unit = (
        "resumes/s (all at once, until every run completed; SQLite)"
        if resume
        else "s (until all n, started at once, are suspended; SQLite)"
    )
    details = [_W2_HOW, f"ours: {_ours_label(_OURS_DURABILITY[setting])}", _READ_BACK]
    if len(results) == 1:
        return unavailable_record(
            figure,
            unit=unit,
            samples=[n / s for s in seconds] if resume else seconds,
            baseline=f"langgraph {UNAVAILABLE}",
            ratio_of="throughput" if resume else "time",
            target=target,
            n=n,
            method=method(repeats, *details, sides=1),
        )
    peer = results[1]
    api = "ainvoke(Command(resume=...))" if resume else "ainvoke"
    label = _langgraph_label(f"{api} + AsyncSqliteSaver, all at once", setting, _modes(peer))
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


def w2_suspend(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Seconds until ``n`` conversations are suspended (all started at once), vs LangGraph."""
    return _w2_figure("w2_suspend", n, repeats, "defaults", resume=False)


def w2_resume(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Resumes per second (all ``n`` submitted at once, until every run completed), vs
    LangGraph."""
    return _w2_figure("w2_resume", n, repeats, "defaults", resume=True)


def w2_suspend_equal_normal(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Informational: ``w2_suspend`` against LangGraph at synchronous=NORMAL."""
    return _w2_figure("w2_suspend_equal_normal", n, repeats, "equal_normal", resume=False)


def w2_resume_equal_normal(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Informational: ``w2_resume`` against LangGraph at synchronous=NORMAL."""
    return _w2_figure("w2_resume_equal_normal", n, repeats, "equal_normal", resume=True)


@functools.lru_cache(maxsize=4)
def _memory(n: int, repeats: int) -> tuple[list[dict[str, float]], ...]:
    """Per repetition, interleaved: ours 100 in flight at a time, ours all at once, and
    LangGraph all at once (when installed), each in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:
        sides: list[Callable[[], dict[str, float]]] = [
            lambda: dict(fresh(ours.memory_per_suspended_call, directory=tmp, n=n, at_once=False)),
            lambda: dict(fresh(ours.memory_per_suspended_call, directory=tmp, n=n, at_once=True)),
        ]
        if langgraph_installed():
            sides.append(
                lambda: dict(
                    fresh(f"{_LANGGRAPH}:memory_per_suspended_conversation", directory=tmp, n=n)
                )
            )
        return tuple(interleave(repeats, *sides))


def _memory_figure(figure: str, n: int, repeats: int, *, at_once: bool) -> Record:
    results = _memory(n, repeats)
    mine = results[1 if at_once else 0]
    bookkeeping = max(r["bookkeeping"] for r in mine)
    how = (
        "all n conversations sent at once"
        if at_once
        else f"{ours.IN_FLIGHT} conversations in flight at a time"
    )
    details = [
        f"ours: VmRSS (/proc/self/status) in a fresh process after {how} are suspended and "
        "their call actors exited, minus VmRSS before (after a warm-up of "
        "50 conversations and gc.collect()), over n",
        "the workload's own bookkeeping subtracted: the list of thread-id strings "
        f"(sys.getsizeof of the list plus its strings, about {bookkeeping:.0f} B per "
        "conversation)",
    ]
    unit = f"bytes of VmRSS per suspended conversation ({how}; SQLite)"
    if len(results) < 3:
        return value_record(
            figure,
            unit=unit,
            samples=[r["bytes"] for r in mine],
            target=MEMORY_TARGET,
            n=n,
            method=method(repeats, *details, sides=1, warmed=True),
            baseline=f"LangGraph's bytes per suspended conversation: langgraph {UNAVAILABLE}",
        )
    peer = results[2]
    return value_record(
        figure,
        unit=unit,
        samples=[r["bytes"] for r in mine],
        target=MEMORY_TARGET,
        n=n,
        method=method(repeats, *details, sides=3, warmed=True),
        baseline=f"informational: LangGraph {version('langgraph')} at its defaults, bytes "
        "of VmRSS per suspended conversation, all n suspended at once (ainvoke + "
        "AsyncSqliteSaver under asyncio.gather), measured the same way in its own fresh "
        "process, its own list of thread ids subtracted",
        baseline_samples=[r["bytes"] for r in peer],
        baseline_n=n,
    )


def w2_memory(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Resident bytes per suspended conversation, 100 in flight at a time."""
    return _memory_figure("w2_memory", n, repeats, at_once=False)


def w2_memory_at_once(n: int = 10_000, *, repeats: int = 1) -> Record:
    """Resident bytes per suspended conversation, all ``n`` sent at once."""
    return _memory_figure("w2_memory_at_once", n, repeats, at_once=True)


def cpu_per_conversation(n: int = 1_000, *, repeats: int = 3) -> Record:
    """CPU milliseconds per conversation (one after another, SqliteStore at NORMAL) vs the
    durable-write limit of plain sqlite3; ratio limit / ours."""
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:
        ms, limit_ms = interleave(
            repeats,
            lambda: float(fresh(ours.cpu_per_conversation, directory=tmp, n=n)),
            lambda: float(fresh(durable_write_limit, directory=tmp, n=n)),
        )
    return cost_record(
        "cpu_per_conversation",
        unit=f"ms of process CPU time per conversation (W1 one after another, "
        f'SqliteStore(path) at durability="normal"; the issue\'s bound: <= {CPU_BOUND_MS:g} ms)',
        baseline=f"the durable-write limit: plain sqlite3, WAL, synchronous=NORMAL, {COMMITS} "
        f"commits per conversation, each its own transaction INSERTing a {BLOB}-byte blob",
        target=CPU_TARGET,
        n=n,
        baseline_n=n,
        samples=ms,
        baseline_samples=limit_ms,
        method=method(
            repeats,
            "time.process_time() (every thread of the process) around the timed loop, over n",
            "ratio = limit / ours (higher is better)",
            _READ_BACK,
        ),
    )


def reopen(n: int = 100_000, *, repeats: int = 3) -> Record:
    """Seconds from opening a store with ``n`` suspended calls until a submission is
    accepted. The store is built once through the runtime, in a fresh process (not timed);
    each repetition opens it in a fresh process and submits to another thread."""
    with tempfile.TemporaryDirectory(prefix="pai-bench-") as tmp:
        path = str(Path(tmp) / "suspended.db")
        thread_ids: list[str] = fresh(ours.build_suspended_store, path=path, n=n, count=repeats)
        seconds = [
            float(fresh(ours.reopen_until_first_submission, path=path, thread_id=thread_id))
            for thread_id in thread_ids
        ]
    return value_record(
        "reopen_100k",
        unit=f"s (open SqliteStore + runtime holding {n:,} suspended calls, until a "
        "submission is accepted)",
        samples=seconds,
        target=REOPEN_TARGET,
        n=n,
        method=method(
            repeats,
            "the store built once through the runtime in a fresh process (untimed); each "
            "repetition submits to another suspended thread",
            sides=1,
        ),
    )
