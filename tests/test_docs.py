"""Every ```python block in docs/**/*.md is a complete program; run each in a fresh interpreter.

Blocks that are not meant to run are fenced as ```text or ```pycon instead. When a ```text
block follows a program directly, or after the sentence "This prints:", it is the program's
whole output, and the test checks it (a shortened output is introduced otherwise, e.g. "The
failure prints as:").
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```(python|text)[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_OUTPUT_INTRO = ("", "This prints:")


def _blocks() -> list[pytest.ParameterSet]:
    params = []
    for path in sorted(DOCS.rglob("*.md")):
        name = path.relative_to(DOCS).as_posix()
        text = path.read_text(encoding="utf-8")
        blocks = list(BLOCK.finditer(text))
        programs = [(i, m) for i, m in enumerate(blocks) if m.group(1) == "python"]
        for index, (i, match) in enumerate(programs):
            line = text.count("\n", 0, match.start()) + 2
            following = blocks[i + 1] if i + 1 < len(blocks) else None
            expected = None
            if following is not None and following.group(1) == "text":
                if text[match.end() : following.start()].strip() in _OUTPUT_INTRO:
                    expected = following.group(2)
            params.append(pytest.param(match.group(2), expected, id=f"{name}[{index}]-line{line}"))
    return params


BLOCKS = _blocks()


def test_docs_have_examples() -> None:
    assert BLOCKS, f"no ```python blocks found under {DOCS}"


def test_most_examples_show_their_whole_output() -> None:
    checked = [p for p in BLOCKS if p.values[1] is not None]
    assert len(checked) >= 25, f"only {len(checked)} examples have their output checked"


@pytest.mark.parametrize(("source", "expected"), BLOCKS)
def test_docs_example_runs(source: str, expected: str | None) -> None:
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
    if expected is not None:
        assert result.stdout == expected, (
            "the example's output is not what the page shows after it\n"
            f"--- shown ---\n{expected}--- printed ---\n{result.stdout}"
        )
