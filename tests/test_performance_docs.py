"""The figures docs/performance.md quotes are the benchmarks' output, pasted whole.

Each table between ``<!-- figures: FILE -->`` and ``<!-- /figures -->`` must be exactly what
``python -m benchmarks --markdown FILE`` renders of the JSON lines a run wrote to ``FILE``
(``python -m benchmarks --out FILE``), and the main results file holds every figure of a full
run, in order.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmarks import render_markdown
from benchmarks.__main__ import FULL

ROOT = Path(__file__).resolve().parent.parent
PERFORMANCE = ROOT / "docs" / "performance.md"
RESULTS = "benchmarks/results.jsonl"
FIGURES = re.compile(r"^<!-- figures: (\S+) -->\n(.*?)^<!-- /figures -->$", re.DOTALL | re.M)


def test_every_table_of_figures_is_the_rendering_of_its_results_file() -> None:
    tables = FIGURES.findall(PERFORMANCE.read_text(encoding="utf-8"))
    assert RESULTS in [name for name, _ in tables], f"performance.md quotes no table of {RESULTS}"
    for name, table in tables:
        lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
        assert table == render_markdown(lines), (
            f"the table of {name} in docs/performance.md is not its output: paste "
            f"`python -m benchmarks --markdown {name}` there"
        )


def test_the_main_results_are_a_full_run_of_every_figure() -> None:
    records = [
        json.loads(line)
        for line in (ROOT / RESULTS).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    assert [r["figure"] for r in records] == list(FULL)
    assert all(r["method"] for r in records)
