"""Every ```python block in docs/**/*.md is a complete program; run each in a fresh interpreter.

Blocks that are not meant to run are fenced as ```text or ```pycon instead.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def _blocks() -> list[pytest.ParameterSet]:
    params = []
    for path in sorted(DOCS.rglob("*.md")):
        name = path.relative_to(DOCS).as_posix()
        text = path.read_text(encoding="utf-8")
        for index, match in enumerate(BLOCK.finditer(text)):
            line = text.count("\n", 0, match.start()) + 2
            params.append(pytest.param(match.group(1), id=f"{name}[{index}]-line{line}"))
    return params


BLOCKS = _blocks()


def test_docs_have_examples() -> None:
    assert BLOCKS, f"no ```python blocks found under {DOCS}"


@pytest.mark.parametrize("source", BLOCKS)
def test_docs_example_runs(source: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (
        f"example exited with {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
