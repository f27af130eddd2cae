"""The benchmark figures run at tiny sizes and report well-formed records.

Only the shape of each record is checked, never a timing: timings belong to
``python -m benchmarks``. Most tests run the sides in this process
(:class:`benchmarks._harness.sides_in_process`: arguments and results still go through
JSON) so that they need not start an interpreter per side; the fresh-process runner has tests
of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks import (
    Record,
    Target,
    _durable,
    _failover,
    _harness,
    _postgres,
    _postgres_driver,
    _spawn_exit,
    _subagents,
    ask_round_trip,
    cancel_run,
    cpu_per_conversation,
    failover_long_lease,
    failover_short_lease,
    postgres_driver,
    postgres_driver_reads_concurrent,
    postgres_driver_reads_sequential,
    postgres_driver_same_calls,
    protocol_latency_p50_concurrent,
    protocol_latency_p50_sequential,
    protocol_latency_p99_concurrent,
    protocol_latency_p99_sequential,
    protocol_load,
    protocol_load_memory,
    render_markdown,
    simulation_faults,
    simulation_overhead,
    spawn_exit,
    spawn_exit_unscoped,
    stream_cpu_per_token,
    stream_first_token_latency,
    subagents_conversations,
    subagents_memory,
    subagents_round_trip,
    threaded,
    tool_calls,
    tool_calls_vs_pykka,
    tree_size,
    tree_teardown,
    vs_pykka,
    vs_pykka_sequential,
    w1_concurrent,
    w1_concurrent_equal_full,
    w1_concurrent_equal_normal,
    w1_concurrent_pydantic_ai,
    w1_concurrent_vs_sequential,
    w1_postgres,
    w1_postgres_two_nodes,
    w1_sequential,
    w1_sequential_equal_full,
    w1_sequential_equal_normal,
    w1_sequential_pydantic_ai,
    w2_memory,
    w2_memory_at_once,
    w2_postgres_resume,
    w2_postgres_suspend,
    w2_resume,
    w2_resume_equal_normal,
    w2_suspend,
    w2_suspend_equal_normal,
)
from benchmarks import reopen as reopen_figure
from benchmarks.__main__ import FULL, QUICK, main
from benchmarks._conversation import durable_write_limit
from benchmarks._durable import UNAVAILABLE, langgraph_installed, pydantic_ai_installed
from benchmarks._side import main as side_main

FIELDS: dict[str, type | tuple[type, ...]] = {
    "figure": str,
    "unit": str,
    "value": float,
    "baseline": str,
    "baseline_value": (float, type(None)),
    "ratio": (float, type(None)),
    "ratio_of": str,
    "target": (str, type(None)),
    "met": (bool, type(None)),
    "n": int,
    "baseline_n": int,
    "repeats": int,
    "method": str,
    "samples": list,
    "baseline_samples": list,
}


@pytest.fixture(autouse=True)
def in_process() -> Iterator[None]:
    """Sides run in this process (the caches of shared measurements emptied around each
    test, so that no test sees another's numbers)."""
    caches = (
        _durable._w2,
        _durable._memory,
        _postgres._w2,
        _spawn_exit._measure,
        _subagents._time,
        _subagents._memory,
    )
    for cache in caches:
        cache.cache_clear()
    with _harness.sides_in_process():
        yield
    for cache in caches:
        cache.cache_clear()


def check_record_json(line: str) -> dict[str, object]:
    data = json.loads(line)
    assert isinstance(data, dict)
    assert list(data) == list(FIELDS)
    for key, kind in FIELDS.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        assert type(data[key]) in kinds, (key, data[key])
    assert data["ratio_of"] in ("throughput", "time", "cost", "value")
    if data["target"] is None:  # an informational figure
        assert data["met"] is None
    else:
        assert str(data["target"]).split(" ")[0] in (">=", "<=")
    assert data["n"] > 0
    assert data["method"]
    if str(data["baseline"]).startswith("not measured: "):  # no PostgreSQL, or no psycopg
        assert data["repeats"] == 0
        assert data["samples"] == data["baseline_samples"] == []
        return data
    assert len(data["samples"]) == data["repeats"] >= 1
    assert all(type(x) is float for x in data["samples"] + data["baseline_samples"])
    if data["baseline_value"] is None:  # no baseline, or a peer that is not installed
        assert data["ratio"] is None
        assert data["baseline_n"] == 0
        assert data["baseline_samples"] == []
        if data["ratio_of"] != "value":
            assert data["met"] is None
            assert str(data["baseline"]).endswith(UNAVAILABLE)
        elif data["target"] is not None:
            assert type(data["met"]) is bool
    else:
        assert type(data["ratio"]) is float
        assert data["baseline_n"] > 0
        assert len(data["baseline_samples"]) >= 1
        if data["target"] is not None:
            assert type(data["met"]) is bool
    return data


OPENAI_STREAM_GENERATORS = pytest.mark.filterwarnings(
    r"ignore:Async generator '(openai|httpx2|httpcore2)\.:ResourceWarning"
)
"""For the tests that run ``stream_cpu_per_token``'s baseline (the ``openai`` SDK alone) in
this process: the SDK's stream leaves its async generators, and its HTTP client's under
them, unfinished even when read to the end inside ``async with stream`` (which is why the
adapters read the body themselves), and trio warns when they are collected. That is the
baseline as users write it, so it stays; the adapters' own tests keep these warnings
errors."""

FIGURES = [
    (lambda: spawn_exit(5, repeats=2), "spawn_exit", "throughput", 5),
    (lambda: spawn_exit_unscoped(5, repeats=2), "spawn_exit_unscoped", "throughput", 5),
    (lambda: ask_round_trip(5, repeats=2), "ask", "throughput", 5),
    (lambda: tree_teardown(2, 3, repeats=2), "teardown", "time", 13),
    (lambda: vs_pykka(3, pykka_n=2, repeats=2), "vs_pykka", "throughput", 3),
    (
        lambda: vs_pykka_sequential(3, pykka_n=2, repeats=2),
        "vs_pykka_sequential",
        "throughput",
        3,
    ),
    (lambda: tool_calls(3, repeats=2), "tool_calls", "throughput", 3),
    (
        lambda: tool_calls_vs_pykka(3, pykka_n=2, repeats=2),
        "tool_calls_vs_pykka",
        "throughput",
        3,
    ),
    (lambda: cancel_run(3, repeats=2), "cancel_run", "time", 3),
    (lambda: threaded(8, repeats=2), "threaded", "throughput", 8),
    (
        lambda: w1_concurrent_vs_sequential(3, repeats=2),
        "w1_concurrent_vs_sequential",
        "throughput",
        3,
    ),
    (lambda: cpu_per_conversation(3, repeats=2), "cpu_per_conversation", "cost", 3),
    (lambda: stream_cpu_per_token(5, repeats=2), "stream_cpu_per_token", "cost", 5),
]


@OPENAI_STREAM_GENERATORS
@pytest.mark.parametrize(("run", "figure", "ratio_of", "n"), FIGURES, ids=[f[1] for f in FIGURES])
def test_figure_record_shape(run: Callable[[], Record], figure: str, ratio_of: str, n: int) -> None:
    record = run()
    assert record.figure == figure
    assert record.ratio_of == ratio_of
    assert record.n == n
    assert record.repeats == 2
    assert len(record.samples) == len(record.baseline_samples) == 2
    data = check_record_json(record.to_json())
    assert data["figure"] == figure
    assert data["ratio"] is not None


PEER_FIGURES = [
    (lambda: w1_sequential(3, peer_n=2, repeats=1), "w1_sequential", "throughput", "langgraph"),
    (lambda: w1_concurrent(3, peer_n=2, repeats=1), "w1_concurrent", "throughput", "langgraph"),
    (
        lambda: w1_sequential_equal_normal(3, peer_n=2, repeats=1),
        "w1_sequential_equal_normal",
        "throughput",
        "langgraph",
    ),
    (
        lambda: w1_concurrent_equal_normal(3, peer_n=2, repeats=1),
        "w1_concurrent_equal_normal",
        "throughput",
        "langgraph",
    ),
    (
        lambda: w1_sequential_equal_full(3, peer_n=2, repeats=1),
        "w1_sequential_equal_full",
        "throughput",
        "langgraph",
    ),
    (
        lambda: w1_concurrent_equal_full(3, peer_n=2, repeats=1),
        "w1_concurrent_equal_full",
        "throughput",
        "langgraph",
    ),
    (
        lambda: w1_sequential_pydantic_ai(3, peer_n=2, repeats=1),
        "w1_sequential_pydantic_ai",
        "throughput",
        "pydantic-ai",
    ),
    (
        lambda: w1_concurrent_pydantic_ai(3, peer_n=2, repeats=1),
        "w1_concurrent_pydantic_ai",
        "throughput",
        "pydantic-ai",
    ),
    (lambda: w2_suspend(3, repeats=1), "w2_suspend", "time", "langgraph"),
    (lambda: w2_resume(3, repeats=1), "w2_resume", "throughput", "langgraph"),
    (
        lambda: w2_suspend_equal_normal(3, repeats=1),
        "w2_suspend_equal_normal",
        "time",
        "langgraph",
    ),
    (
        lambda: w2_resume_equal_normal(3, repeats=1),
        "w2_resume_equal_normal",
        "throughput",
        "langgraph",
    ),
]
PEER_IDS = [f[1] for f in PEER_FIGURES]


def _check_peer_figure(
    record: Record, figure: str, ratio_of: str, peer: str, *, installed: bool
) -> None:
    data = check_record_json(record.to_json())
    assert (record.figure, record.ratio_of, record.n, record.repeats) == (figure, ratio_of, 3, 1)
    assert record.value > 0
    if installed:
        assert record.baseline_value is not None
        assert record.baseline_value > 0
        assert record.ratio is not None
        if peer == "langgraph":  # the label says what SQLite modes LangGraph ran in
            assert "journal_mode=wal" in record.baseline
            expected = "NORMAL" if figure.endswith("_equal_normal") else "FULL"
            assert f"synchronous={expected}" in record.baseline
    else:
        assert data["baseline"] == f"{peer} {UNAVAILABLE}"
        assert (data["ratio"], data["met"], data["baseline_samples"]) == (None, None, [])


@pytest.mark.parametrize(("run", "figure", "ratio_of", "peer"), PEER_FIGURES, ids=PEER_IDS)
def test_durable_figure_record_shape(
    run: Callable[[], Record], figure: str, ratio_of: str, peer: str
) -> None:
    """Ours always runs; the peer's side runs when it is installed (``.[bench]``), and the
    record says it is unavailable otherwise."""
    installed = langgraph_installed() if peer == "langgraph" else pydantic_ai_installed()
    _check_peer_figure(run(), figure, ratio_of, peer, installed=installed)


@pytest.mark.parametrize(("run", "figure", "ratio_of", "peer"), PEER_FIGURES, ids=PEER_IDS)
def test_durable_figure_without_the_peers(
    monkeypatch: pytest.MonkeyPatch,
    run: Callable[[], Record],
    figure: str,
    ratio_of: str,
    peer: str,
) -> None:
    """As CI runs it (only the ``test`` extra): our value, no ratio, the baseline says how
    to install the peers."""
    monkeypatch.setattr(_durable, "langgraph_installed", lambda: False)
    monkeypatch.setattr(_durable, "pydantic_ai_installed", lambda: False)
    _check_peer_figure(run(), figure, ratio_of, peer, installed=False)


@pytest.mark.parametrize("peers", [True, False], ids=["peers", "no-peers"])
def test_memory_figures_record_shape(monkeypatch: pytest.MonkeyPatch, peers: bool) -> None:
    """One measurement gives both memory figures (and LangGraph's, their baseline)."""
    if not peers:
        monkeypatch.setattr(_durable, "langgraph_installed", lambda: False)
    with_baseline = peers and langgraph_installed()
    for record, figure in [
        (w2_memory(20, repeats=1), "w2_memory"),
        (w2_memory_at_once(20, repeats=1), "w2_memory_at_once"),
    ]:
        data = check_record_json(record.to_json())
        assert (data["figure"], data["ratio_of"], data["n"]) == (figure, "value", 20)
        assert type(data["met"]) is bool
        assert "bookkeeping" in record.method
        assert (data["baseline_value"] is not None) is with_baseline
        if not with_baseline:
            assert str(data["baseline"]).endswith(UNAVAILABLE)


def test_reopen_record_shape() -> None:
    record = reopen_figure(4, repeats=2)
    data = check_record_json(record.to_json())
    assert (data["figure"], data["ratio_of"], data["n"]) == ("reopen_100k", "value", 4)
    assert data["baseline_value"] is None
    assert type(data["met"]) is bool
    assert record.value > 0


def test_stream_first_token_latency_record_shape() -> None:
    record = stream_first_token_latency(3, tokens=4, repeats=2)
    data = check_record_json(record.to_json())
    assert (data["figure"], data["ratio_of"], data["n"]) == (
        "stream_first_token_latency",
        "value",
        3,
    )
    assert data["baseline_value"] is None
    assert type(data["met"]) is bool
    assert record.value > 0


def test_subagent_figures_record_shape() -> None:
    """One measurement gives both time figures (orchestrators and as many top-level W1
    conversations as sub-agents), one the memory figure (and its baseline)."""
    conversations = subagents_conversations(2, 3, repeats=2)
    round_trip = subagents_round_trip(2, 3, repeats=2)
    memory = subagents_memory(2, 3, repeats=1)
    expected = [
        (conversations, "subagents_conversations", "throughput", 2, 6, False),
        (round_trip, "subagents_round_trip", "time", 6, 6, True),
        (memory, "subagents_memory", "cost", 6, 6, True),
    ]
    for record, figure, ratio_of, n, baseline_n, has_target in expected:
        data = check_record_json(record.to_json())
        assert (data["figure"], data["ratio_of"], data["n"], data["baseline_n"]) == (
            figure,
            ratio_of,
            n,
            baseline_n,
        )
        assert data["ratio"] is not None
        assert (data["target"] is not None) is has_target
    assert conversations.repeats == round_trip.repeats == 2
    # The same two measurements, per conversation and per round trip.
    assert conversations.samples == pytest.approx(
        [2 / (ms * 6 / 1000) for ms in round_trip.samples]
    )
    assert "bookkeeping" in memory.method
    assert memory.target == ">= 0.5"


def test_simulation_figures_record_shape() -> None:
    overhead = simulation_overhead(5, repeats=1)
    faults = simulation_faults(5, repeats=1)
    assert overhead.figure == "simulation_overhead"
    assert overhead.ratio is not None
    assert overhead.ratio > 0
    assert overhead.target == ">= 0.666667"  # (the harness costs at most 1.5x)
    assert faults.figure == "simulation_faults"
    assert "faults injected per CPU-second" in faults.method


def test_failover_figures_record_shape() -> None:
    """One kill and one flow without, on two node processes (a real PostgreSQL, else the
    figure says it was not measured)."""
    record = failover_short_lease(0.5, 1, nodes=2)
    check_record_json(record.to_json())
    assert (record.figure, record.ratio_of, record.n, record.target) == (
        "failover_short_lease",
        "value",
        1,
        "<= 0.75",
    )
    if record.repeats:
        assert len(record.samples) == len(record.baseline_samples) == 1
        assert "failover / lease" in record.method


def test_failover_figures_without_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_failover, "_why_not", lambda: "PostgreSQL unreachable at 'x'")
    data = check_record_json(failover_long_lease(10.0, 5).to_json())
    assert data["baseline"] == "not measured: PostgreSQL unreachable at 'x'"
    assert (data["value"], data["met"], data["target"]) == (0.0, None, "<= 15")


def test_durable_write_limit(tmp_path: Path) -> None:
    assert durable_write_limit(str(tmp_path), 5) > 0
    assert list(tmp_path.iterdir()) == []


def test_protocol_figures_record_shape() -> None:
    """One measurement gives the four latency figures, one load run the two load figures."""
    latency = [
        (protocol_latency_p50_sequential(3), "protocol_latency_p50_sequential", False),
        (protocol_latency_p99_sequential(3), "protocol_latency_p99_sequential", True),
        (protocol_latency_p50_concurrent(3), "protocol_latency_p50_concurrent", False),
        (protocol_latency_p99_concurrent(3), "protocol_latency_p99_concurrent", True),
    ]
    for record, figure, has_target in latency:
        data = check_record_json(record.to_json())
        assert (data["figure"], data["ratio_of"], data["n"]) == (figure, "time", 3)
        assert record.value > 0
        assert (data["target"] is not None) is has_target
    # Long enough for a conversation to complete on a loaded machine (a record of 0 is refused).
    sizes: dict[str, Any] = {"warmup": 0.1, "clients": 2, "sample_every": 0.1, "linger": 0.1}
    load = protocol_load(1.5, **sizes)
    memory = protocol_load_memory(1.5, **sizes)
    for record, figure in [(load, "protocol_load"), (memory, "protocol_load_memory")]:
        data = check_record_json(record.to_json())
        assert (data["figure"], data["ratio_of"]) == (figure, "value")
        assert data["n"] == load.n > 0
    assert load.target is None
    assert memory.target is not None


# --- The harness ---------------------------------------------------------------------------


def test_fresh_runs_a_side_in_another_process() -> None:
    """The real runner: a side in a fresh interpreter, its JSON result parsed back."""
    with _harness.sides_in_process(False):
        seconds = _harness.fresh(_spawn_exit.baseline, n=3, scoped=True)
        assert isinstance(seconds, float)
        assert seconds > 0
        ms = _harness.fresh("benchmarks._conversation:durable_write_limit", directory="/tmp", n=2)
        assert isinstance(ms, float)
        assert ms > 0
        with pytest.raises(RuntimeError, match="failed with exit status"):
            _harness.fresh(_spawn_exit.baseline, n=-1, scoped=True, unexpected=1)


def test_a_figure_end_to_end_in_fresh_processes() -> None:
    with _harness.sides_in_process(False):
        record = ask_round_trip(5, repeats=2)
    data = check_record_json(record.to_json())
    assert data["repeats"] == 2
    assert "fresh Python process" in record.method


def test_fresh_refuses_what_is_not_a_benchmarks_function() -> None:
    with pytest.raises(ValueError, match="not a function of benchmarks"):
        _harness.fresh("json:dumps", obj=1)
    with pytest.raises(ValueError, match="not a module-level function"):
        _harness.fresh(lambda: 1.0)


def test_side_runner_prints_the_result_last(capsys: pytest.CaptureFixture[str]) -> None:
    assert side_main(["benchmarks._teardown", "tree_size", '{"depth": 2, "fanout": 3}']) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == 13
    assert side_main(["json", "dumps", "{}"]) == 2
    assert side_main(["benchmarks._teardown", "tree_size", "[2, 3]"]) == 2
    assert side_main([]) == 2


def test_interleave_alternates_and_keeps_every_sample() -> None:
    calls: list[str] = []

    def side(name: str) -> Callable[[], str]:
        def run() -> str:
            calls.append(name)
            return f"{name}{len(calls)}"

        return run

    a, b = _harness.interleave(4, side("a"), side("b"))
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert a == ["a1", "a4", "a5", "a8"]
    assert b == ["b2", "b3", "b6", "b7"]
    with pytest.raises(ValueError, match="repeats"):
        _harness.interleave(0, side("a"))


def test_records_report_medians() -> None:
    record = _harness.throughput_record(
        "x",
        unit="ops/s",
        baseline="y",
        target=Target(">=", 1.0),
        n=10,
        baseline_n=10,
        seconds=[1.0, 10.0, 2.0],
        baseline_seconds=[5.0, 5.0, 0.1],
        method="m",
    )
    assert (record.value, record.baseline_value, record.ratio) == (5.0, 2.0, 2.5)
    assert record.samples == (10.0, 1.0, 5.0)
    assert record.met is True
    cost = _harness.cost_record(
        "c",
        unit="ms",
        baseline="limit",
        target=Target(">=", 0.5),
        n=1,
        baseline_n=1,
        samples=[2.0, 4.0, 3.0],
        baseline_samples=[1.0],
        method="m",
    )
    assert (cost.value, cost.ratio, cost.met) == (3.0, 1 / 3, False)
    value = _harness.value_record(
        "v",
        unit="B",
        samples=[900.0],
        target=Target("<=", 1024.0),
        n=1,
        method="m",
        baseline="peer",
        baseline_samples=[1800.0],
        baseline_n=1,
    )
    assert (value.ratio, value.met) == (0.5, True)


def test_tree_size() -> None:
    assert tree_size(4, 10) == 11_111
    assert tree_size(2, 3) == 13


def test_target() -> None:
    assert str(Target(">=", 0.5)) == ">= 0.5"
    assert Target(">=", 0.5).met_by(0.5)
    assert not Target(">=", 0.5).met_by(0.49)
    assert Target("<=", 2.0).met_by(2.0)
    assert not Target("<=", 2.0).met_by(2.01)
    with pytest.raises(ValueError, match="threshold"):
        Target(">=", 0.0)


# --- Markdown ------------------------------------------------------------------------------

RESULTS = [
    json.dumps(
        {
            "figure": "w1_sequential",
            "unit": "conversations/s",
            "value": 1234.0,
            "baseline": "LangGraph | defaults",
            "baseline_value": 245.6,
            "ratio": 5.024,
            "ratio_of": "throughput",
            "target": ">= 5",
            "met": True,
            "n": 1000,
            "baseline_n": 1000,
            "repeats": 3,
            "method": "median of 3",
            "samples": [1200.0, 1234.0, 1300.0],
            "baseline_samples": [240.0, 245.6, 250.0],
        }
    ),
    "",
    json.dumps(
        {
            "figure": "w2_memory",
            "unit": "bytes",
            "value": 12345.0,
            "baseline": "langgraph unavailable (pip install .[bench])",
            "baseline_value": None,
            "ratio": None,
            "ratio_of": "value",
            "target": None,
            "met": None,
            "n": 10,
            "baseline_n": 0,
            "repeats": 1,
            "method": "one repetition",
            "samples": [12345.0],
            "baseline_samples": [],
        }
    ),
]


def test_render_markdown() -> None:
    assert render_markdown(RESULTS) == (
        "| Figure | Value | Baseline | Baseline value | Ratio | Target | Met | Method |\n"
        "|---|---|---|---|---|---|---|---|\n"
        "| `w1_sequential` | 1,234 conversations/s | LangGraph \\| defaults | 245.6 "
        "| 5.024 (throughput) | >= 5 | yes | median of 3 |\n"
        "| `w2_memory` | 12,345 bytes | langgraph unavailable (pip install .[bench]) | — | — "
        "| — | — | one repetition |\n"
    )
    assert render_markdown([]).count("\n") == 2


def test_cli_renders_markdown_and_writes_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(RESULTS) + "\n")
    assert main(["--markdown", str(results)]) == 0
    assert capsys.readouterr().out == render_markdown(RESULTS)

    record = spawn_exit(3, repeats=1)
    for name in QUICK:
        monkeypatch.setitem(QUICK, name, lambda: record)
    out = tmp_path / "out.jsonl"
    assert main(["--quick", "--only", "ask", "teardown", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == out.read_text().splitlines() == [record.to_json()] * 2
    assert render_markdown(printed).count("`spawn_exit`") == 2


@OPENAI_STREAM_GENERATORS
def test_cli_prints_one_line_per_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = {
        "spawn_exit": lambda: spawn_exit(3, repeats=1),
        "spawn_exit_unscoped": lambda: spawn_exit_unscoped(3, repeats=1),
        "ask": lambda: ask_round_trip(3, repeats=1),
        "teardown": lambda: tree_teardown(1, 2, repeats=1),
        "vs_pykka": lambda: vs_pykka(2, pykka_n=1, repeats=1),
        "vs_pykka_sequential": lambda: vs_pykka_sequential(2, pykka_n=1, repeats=1),
        "tool_calls": lambda: tool_calls(2, repeats=1),
        "tool_calls_vs_pykka": lambda: tool_calls_vs_pykka(2, pykka_n=1, repeats=1),
        "cancel_run": lambda: cancel_run(2, repeats=1),
        "threaded": lambda: threaded(8, repeats=1),
        "w1_sequential": lambda: w1_sequential(2, peer_n=1, repeats=1),
        "w1_concurrent": lambda: w1_concurrent(2, peer_n=1, repeats=1),
        "w1_concurrent_vs_sequential": lambda: w1_concurrent_vs_sequential(2, repeats=1),
        "w1_sequential_equal_normal": lambda: w1_sequential_equal_normal(2, peer_n=1, repeats=1),
        "w1_concurrent_equal_normal": lambda: w1_concurrent_equal_normal(2, peer_n=1, repeats=1),
        "w1_sequential_equal_full": lambda: w1_sequential_equal_full(2, peer_n=1, repeats=1),
        "w1_concurrent_equal_full": lambda: w1_concurrent_equal_full(2, peer_n=1, repeats=1),
        "w1_sequential_pydantic_ai": lambda: w1_sequential_pydantic_ai(2, peer_n=1, repeats=1),
        "w1_concurrent_pydantic_ai": lambda: w1_concurrent_pydantic_ai(2, peer_n=1, repeats=1),
        "w2_suspend": lambda: w2_suspend(2, repeats=1),
        "w2_resume": lambda: w2_resume(2, repeats=1),
        "w2_suspend_equal_normal": lambda: w2_suspend_equal_normal(2, repeats=1),
        "w2_resume_equal_normal": lambda: w2_resume_equal_normal(2, repeats=1),
        "w2_memory": lambda: w2_memory(5, repeats=1),
        "w2_memory_at_once": lambda: w2_memory_at_once(5, repeats=1),
        "cpu_per_conversation": lambda: cpu_per_conversation(2, repeats=1),
        "reopen_100k": lambda: reopen_figure(2, repeats=1),
        "protocol_latency_p50_sequential": lambda: protocol_latency_p50_sequential(2),
        "protocol_latency_p99_sequential": lambda: protocol_latency_p99_sequential(2),
        "protocol_latency_p50_concurrent": lambda: protocol_latency_p50_concurrent(2),
        "protocol_latency_p99_concurrent": lambda: protocol_latency_p99_concurrent(2),
        "protocol_load": lambda: protocol_load(
            1.5, warmup=0.1, clients=1, sample_every=0.1, linger=0.1
        ),
        "protocol_load_memory": lambda: protocol_load_memory(
            1.5, warmup=0.1, clients=1, sample_every=0.1, linger=0.1
        ),
        "stream_cpu_per_token": lambda: stream_cpu_per_token(2, repeats=1),
        "stream_first_token_latency": lambda: stream_first_token_latency(1, tokens=2, repeats=1),
        "subagents_conversations": lambda: subagents_conversations(1, 2, repeats=1),
        "subagents_round_trip": lambda: subagents_round_trip(1, 2, repeats=1),
        "subagents_memory": lambda: subagents_memory(1, 2, repeats=1),
        "w1_postgres": lambda: w1_postgres(2, peer_n=1, repeats=1),
        "w1_postgres_two_nodes": lambda: w1_postgres_two_nodes(2, repeats=1),
        "w2_postgres_suspend": lambda: w2_postgres_suspend(2, repeats=1),
        "w2_postgres_resume": lambda: w2_postgres_resume(2, repeats=1),
        "postgres_driver": lambda: postgres_driver(2, repeats=1),
        "postgres_driver_same_calls": lambda: postgres_driver_same_calls(2, repeats=1),
        "postgres_driver_reads_sequential": lambda: postgres_driver_reads_sequential(8, repeats=1),
        "postgres_driver_reads_concurrent": lambda: postgres_driver_reads_concurrent(8, repeats=1),
        "failover_short_lease": lambda: failover_short_lease(0.5, 1, nodes=2),
        "failover_long_lease": lambda: failover_long_lease(0.5, 1, nodes=2),
        "simulation_overhead": lambda: simulation_overhead(3, repeats=1),
        "simulation_faults": lambda: simulation_faults(3, repeats=1),
    }
    assert list(tiny) == list(FULL) == list(QUICK)
    for name, figure in tiny.items():
        monkeypatch.setitem(QUICK, name, figure)
    assert main(["--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [check_record_json(line)["figure"] for line in lines] == list(tiny)


def test_cli_refuses_check_in_quick_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--quick", "--check"])
    assert exit_info.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_cli_check_exits_1_when_a_target_is_missed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    record = spawn_exit(3, repeats=1)
    met, missed = replace(record, met=True), replace(record, met=False)
    for name in FULL:
        monkeypatch.setitem(FULL, name, lambda: met)
    assert main(["--check"]) == 0
    informational = replace(record, target=None, met=None)
    monkeypatch.setitem(FULL, "vs_pykka_sequential", lambda: informational)
    assert main(["--check"]) == 0  # no target, nothing to miss
    monkeypatch.setitem(FULL, "ask", lambda: missed)
    assert main(["--check"]) == 1
    assert main([]) == 0
    assert "targets missed: ask" in capsys.readouterr().err


def test_no_side_imports_another() -> None:
    """A peer's side process holds the peer only: its module never imports pai_actors."""
    for module in (
        "_peers_langgraph.py",
        "_peers_pydantic_ai.py",
        "_peers_langgraph_postgres.py",
        "_pg.py",
        "_conversation.py",
        "_streaming_sdk.py",
        "_sse_server.py",
    ):
        source = (Path(_harness.ROOT) / "benchmarks" / module).read_text()
        assert "pai_actors" not in source.replace("``pai_actors``", "")
        assert "_durable_ours" not in source


def test_two_nodes_figure_record_shape() -> None:
    """Two node processes on one database against one (a real PostgreSQL, else the figure
    says it was not measured)."""
    data = check_record_json(w1_postgres_two_nodes(3, repeats=1).to_json())
    assert (data["figure"], data["ratio_of"], data["n"], data["target"]) == (
        "w1_postgres_two_nodes",
        "throughput",
        3,
        ">= 1.6",
    )
    if data["repeats"]:
        assert data["baseline_n"] == 3
        method = str(data["method"])
        assert "two nodes: node-1's process" in method
        assert "node-2's process" in method
        assert "one node: node-1's process" in method


def test_two_nodes_figure_without_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_postgres, "_why_not", lambda: "PostgreSQL unreachable at 'x'")
    data = check_record_json(w1_postgres_two_nodes().to_json())
    assert data["baseline"] == "not measured: PostgreSQL unreachable at 'x'"
    assert (data["value"], data["met"], data["n"]) == (0.0, None, 1_000)


@pytest.fixture
def driver_caches() -> Iterator[None]:
    """The postgres_driver figures' shared measurements, emptied around a test."""
    caches = (_postgres_driver._w1, _postgres_driver._reads)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


@pytest.mark.usefixtures("driver_caches")
def test_postgres_driver_figures_record_shape() -> None:
    """W1 on the store as shipped against the store on worker-thread connections, and the
    read round trips (a real PostgreSQL, else the figures say they were not measured). The
    sides run in this process: the thread versions' class is put back after each."""
    from pai_actors._store import postgres_connection, postgres_pool

    original = vars(postgres_pool)["Connection"]
    for record, figure, target in (
        (postgres_driver(2, repeats=1), "postgres_driver", ">= 1"),
        (postgres_driver_same_calls(2, repeats=1), "postgres_driver_same_calls", None),
    ):
        data = check_record_json(record.to_json())
        assert (data["figure"], data["ratio_of"], data["n"], data["target"]) == (
            figure,
            "throughput",
            2,
            target,
        )
        if data["repeats"]:
            assert data["baseline_n"] == 2
            method = str(data["method"])
            assert "ours: its process" in method
            assert "its database's PostgreSQL backends" in method
            assert "the baseline's connections in the timed part" in method
            assert "trio.to_thread.run_sync" in method
    for record, figure in (
        (postgres_driver_reads_sequential(8, repeats=1), "postgres_driver_reads_sequential"),
        (postgres_driver_reads_concurrent(8, repeats=1), "postgres_driver_reads_concurrent"),
    ):
        data = check_record_json(record.to_json())
        assert (data["figure"], data["ratio_of"], data["n"], data["target"]) == (
            figure,
            "throughput",
            8,
            None,
        )
        if data["repeats"]:
            assert "threads: its process" in str(data["method"])
    assert vars(postgres_pool)["Connection"] is postgres_connection.Connection is original


@pytest.mark.usefixtures("driver_caches")
def test_postgres_driver_figures_without_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_postgres, "_why_not", lambda: "PostgreSQL unreachable at 'x'")
    for record in (postgres_driver(), postgres_driver_reads_concurrent()):
        data = check_record_json(record.to_json())
        assert data["baseline"] == "not measured: PostgreSQL unreachable at 'x'"
        assert (data["value"], data["met"], data["repeats"]) == (0.0, None, 0)
    assert postgres_driver().target == ">= 1"
