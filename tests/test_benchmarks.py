"""The benchmark figures run at tiny sizes and report well-formed records.

Only the shape of each record is checked, never a timing: timings belong to
``python -m benchmarks``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import pytest

from benchmarks import (
    Record,
    Target,
    ask_round_trip,
    cancel_run,
    protocol_latency_p50_concurrent,
    protocol_latency_p50_sequential,
    protocol_latency_p99_concurrent,
    protocol_latency_p99_sequential,
    protocol_load,
    protocol_load_memory,
    spawn_exit,
    spawn_exit_scoped,
    threaded,
    tool_calls,
    tool_calls_vs_pykka,
    tree_size,
    tree_teardown,
    vs_pykka,
    vs_pykka_sequential,
    w1_concurrent,
    w1_concurrent_pydantic_ai,
    w1_sequential,
    w1_sequential_pydantic_ai,
    w2_memory,
    w2_resume,
    w2_suspend,
)
from benchmarks import reopen as reopen_figure
from benchmarks.__main__ import FULL, QUICK, main
from benchmarks._durable import UNAVAILABLE, langgraph_installed, pydantic_ai_installed

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
}


def check_record_json(line: str) -> dict[str, object]:
    data = json.loads(line)
    assert isinstance(data, dict)
    assert list(data) == list(FIELDS)
    for key, kind in FIELDS.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        assert type(data[key]) in kinds, (key, data[key])
    assert data["ratio_of"] in ("throughput", "time", "value")
    if data["target"] is None:  # an informational figure
        assert data["met"] is None
    else:
        assert str(data["target"]).split(" ")[0] in (">=", "<=")
    assert data["n"] > 0
    if data["baseline_value"] is None:  # a value figure, or a peer that is not installed
        assert data["ratio"] is None
        assert data["baseline_n"] == 0
        if data["ratio_of"] != "value":
            assert data["met"] is None
            assert str(data["baseline"]).endswith(UNAVAILABLE)
        elif data["target"] is not None:
            assert type(data["met"]) is bool
    else:
        assert data["ratio_of"] != "value"
        assert type(data["ratio"]) is float
        assert data["baseline_n"] > 0
        if data["target"] is not None:
            assert type(data["met"]) is bool
    return data


@pytest.mark.parametrize(
    ("run", "figure", "ratio_of", "n"),
    [
        (lambda: spawn_exit(5, repeats=2), "spawn_exit", "throughput", 5),
        (lambda: spawn_exit_scoped(5, repeats=2), "spawn_exit_scoped", "throughput", 5),
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
    ],
    ids=[
        "spawn_exit",
        "spawn_exit_scoped",
        "ask",
        "teardown",
        "vs_pykka",
        "vs_pykka_sequential",
        "tool_calls",
        "tool_calls_vs_pykka",
        "cancel_run",
        "threaded",
    ],
)
def test_figure_record_shape(run: Callable[[], Record], figure: str, ratio_of: str, n: int) -> None:
    record = run()
    assert record.figure == figure
    assert record.ratio_of == ratio_of
    assert record.n == n
    assert record.repeats == 2
    data = check_record_json(record.to_json())
    assert data["figure"] == figure


PEER_FIGURES = [
    (lambda: w1_sequential(3, peer_n=2, repeats=1), "w1_sequential", "throughput", "langgraph"),
    (lambda: w1_concurrent(3, peer_n=2, repeats=1), "w1_concurrent", "throughput", "langgraph"),
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
]


@pytest.mark.parametrize(
    ("run", "figure", "ratio_of", "peer"), PEER_FIGURES, ids=[f[1] for f in PEER_FIGURES]
)
def test_durable_figure_record_shape(
    run: Callable[[], Record], figure: str, ratio_of: str, peer: str
) -> None:
    """Ours always runs; the peer's side runs when it is installed (``.[bench]``), and the
    record says it is unavailable otherwise."""
    record = run()
    data = check_record_json(record.to_json())
    assert (record.figure, record.ratio_of, record.n, record.repeats) == (figure, ratio_of, 3, 1)
    assert record.value > 0
    installed = langgraph_installed() if peer == "langgraph" else pydantic_ai_installed()
    if installed:
        assert record.baseline_value is not None
        assert record.baseline_value > 0
    else:
        assert data["baseline"] == f"{peer} {UNAVAILABLE}"
        assert (data["ratio"], data["met"]) == (None, None)


def test_durable_value_figures_record_shape() -> None:
    for record, figure, n in [
        (w2_memory(20, repeats=1), "w2_memory", 20),
        (reopen_figure(4, repeats=2), "reopen_100k", 4),
    ]:
        data = check_record_json(record.to_json())
        assert (data["figure"], data["ratio_of"], data["n"]) == (figure, "value", n)
        assert data["baseline_value"] is None
        assert type(data["met"]) is bool
    assert reopen_figure(4, repeats=2).value > 0


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
    sizes = {"warmup": 0.1, "clients": 2, "sample_every": 0.1, "linger": 0.1}
    load = protocol_load(0.3, **sizes)
    memory = protocol_load_memory(0.3, **sizes)
    for record, figure in [(load, "protocol_load"), (memory, "protocol_load_memory")]:
        data = check_record_json(record.to_json())
        assert (data["figure"], data["ratio_of"]) == (figure, "value")
        assert data["n"] == load.n > 0
    assert load.target is None
    assert memory.target is not None


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


def test_cli_prints_one_line_per_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = {
        "spawn_exit": lambda: spawn_exit(3, repeats=1),
        "spawn_exit_scoped": lambda: spawn_exit_scoped(3, repeats=1),
        "ask": lambda: ask_round_trip(3, repeats=1),
        "teardown": lambda: tree_teardown(1, 2, repeats=1),
        "vs_pykka": lambda: vs_pykka(2, pykka_n=1, repeats=1),
        "vs_pykka_sequential": lambda: vs_pykka_sequential(2, pykka_n=1, repeats=1),
        "tool_calls": lambda: tool_calls(2, repeats=1),
        "tool_calls_vs_pykka": lambda: tool_calls_vs_pykka(2, pykka_n=1, repeats=1),
        "cancel_run": lambda: cancel_run(2, repeats=1),
        "w1_sequential": lambda: w1_sequential(2, peer_n=1, repeats=1),
        "w1_concurrent": lambda: w1_concurrent(2, peer_n=1, repeats=1),
        "w1_sequential_pydantic_ai": lambda: w1_sequential_pydantic_ai(2, peer_n=1, repeats=1),
        "w1_concurrent_pydantic_ai": lambda: w1_concurrent_pydantic_ai(2, peer_n=1, repeats=1),
        "w2_suspend": lambda: w2_suspend(2, repeats=1),
        "w2_resume": lambda: w2_resume(2, repeats=1),
        "w2_memory": lambda: w2_memory(5, repeats=1),
        "reopen_100k": lambda: reopen_figure(2, repeats=1),
        "threaded": lambda: threaded(8, repeats=1),
        "protocol_latency_p50_sequential": lambda: protocol_latency_p50_sequential(2),
        "protocol_latency_p99_sequential": lambda: protocol_latency_p99_sequential(2),
        "protocol_latency_p50_concurrent": lambda: protocol_latency_p50_concurrent(2),
        "protocol_latency_p99_concurrent": lambda: protocol_latency_p99_concurrent(2),
        "protocol_load": lambda: protocol_load(
            0.2, warmup=0.1, clients=1, sample_every=0.1, linger=0.1
        ),
        "protocol_load_memory": lambda: protocol_load_memory(
            0.2, warmup=0.1, clients=1, sample_every=0.1, linger=0.1
        ),
    }
    assert set(tiny) == set(FULL) == set(QUICK)
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
