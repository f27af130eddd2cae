"""``examples/orchestrator.py`` runs as ``docs/guides/sub-agents.md`` describes it: the
tree with three sub-agent threads under the calling part, the approval's origin chain and
deadline, a restart of the runtime on the same SQLite file while purchasing waits, and the
chain completing after the approval. (mypy checks the example with the others, in
``tests/test_typing.py``.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

TREE = [
    "thread_1 [buyer] run_1_1 {buyer}",
    "  consult call_1 {consult}",
    "    thread_1/call_1/compliance [compliance] run_1/call_1/compliance_1 completed",
    "      screen call_1 output-available",
    "    thread_1/call_1/pricing [pricing] run_1/call_1/pricing_1 completed",
    "      quote call_1 output-available",
    "    thread_1/call_1/purchasing [purchasing] run_1/call_1/purchasing_1 {purchasing}",
    "      reserve call_1 {reserve}",
]


def tree(buyer: str, consult: str, purchasing: str, reserve: str) -> list[str]:
    fields = {"buyer": buyer, "consult": consult, "purchasing": purchasing, "reserve": reserve}
    return [line.format(**fields) for line in TREE]


def test_the_orchestrator_runs() -> None:
    result = subprocess.run(
        [sys.executable, "orchestrator.py"],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"--- stdout ---\n{result.stdout}--- stderr ---\n{result.stderr}"
    assert result.stdout.splitlines() == [
        "consult: execute entered (initial entry)",
        *tree("waiting", "input-available", "waiting", "approval-requested"),
        "reserve {'amount': 46000} expires 2026-01-01 04:00:00+00:00",
        "asked by: consult call_1 of thread_1 (run_1_1)"
        " -> purchasing on thread_1/call_1/purchasing",
        "--- restart ---",
        "reserve thread_1/call_1/purchasing expires 2026-01-01 04:00:00+00:00",
        "status='accepted' error=None",
        "consult: execute entered (initial entry)",  # again, once all three ended
        *tree("completed", "output-available", "completed", "output-available"),
        "Ready to buy:",
        "pricing: $1150 each, $46000 in all",
        "compliance: Globex is on no sanctions list",
        "purchasing: $46000 reserved",
    ]
