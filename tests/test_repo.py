"""The README's two commands are the ones CI and a fresh machine run (one source each)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = "bash scripts/install && .venv/bin/pai-actors demo"
TESTS = "bash scripts/test"


def test_readme_shows_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", readme, re.S)
    commands = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    assert DEMO in commands
    assert TESTS in commands


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert TESTS in [line.strip() for line in ci]


def test_both_packages_ship_py_typed() -> None:
    assert (ROOT / "supervisors" / "py.typed").exists()
    assert (ROOT / "pai_actors" / "py.typed").exists()
