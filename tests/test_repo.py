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


def test_no_test_asks_for_the_mock_clock_through_usefixtures() -> None:
    # pytest-trio runs a test under the clock it finds among the test's *arguments*; a clock
    # requested with ``usefixtures`` is created and then ignored, so the test would run on
    # the real clock while looking as if it did not.
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if re.search(r"usefixtures\([^)]*(autojump_clock|mock_clock)", path.read_text())
    ]
    assert offenders == [], f"ask for the clock as an argument instead: {offenders}"
