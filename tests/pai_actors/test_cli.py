"""The ``pai-actors`` command and its demo."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pai_actors import __version__
from pai_actors._cli import main
from pai_actors._demo import run_demo


async def test_demo_crashes_restarts_and_cancels_the_whole_tree() -> None:
    lines: list[str] = []
    tree = await run_demo(lines.append)
    text = "\n".join(lines)
    assert "the ask raised ActorExited: actor 'parser' exited before replying" in text
    assert "exit  app/workers/pool/writer: shutdown" in text  # rest_for_one stopped it
    assert "answers Parse('42') with 42" in text
    assert tree.splitlines() == [
        "supervisor app: cancelled: demo finished",
        "├── actor cache: cancelled: demo finished",
        "└── actor workers: cancelled: demo finished",
        "    └── supervisor pool: cancelled: demo finished",
        "        ├── actor fetcher: cancelled: demo finished",
        "        ├── actor parser: cancelled: demo finished (after 1 restart)",
        "        └── actor writer: cancelled: demo finished (after 1 restart)",
    ]
    exits = [line for line in lines if line.startswith("  exit  ")]
    assert exits[-1] == "  exit  app: cancelled: demo finished"


def test_the_installed_command_runs_the_demo() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pai_actors._cli", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "every actor's exit reason" in result.stdout


def test_version_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"pai-actors {__version__}"
    with pytest.raises(SystemExit) as info:
        main(["dance"])
    assert info.value.code == 2
    assert "invalid choice: 'dance'" in capsys.readouterr().err
