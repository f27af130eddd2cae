"""User code type-checks: ``examples/`` and the programs of ``docs/guides/typing.md`` pass
``mypy --strict`` as an application would run it, a few mistakes are errors, and the
examples run.

mypy runs once (it is slow), from a directory outside the repository with
``examples/mypy.ini`` and no other configuration, so ``pai_actors`` is found the way an
application finds it: through the installed package (the editable install's static ``.pth``
entry, see ``scripts/install``), never through the repository's own mypy settings. The
snippet below marks each line that must be an error with ``# error: [code]``; every other
line of it, ``assert_type`` checks included, must pass.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
MYPY = Path(sys.executable).with_name("mypy")

SNIPPET = """
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from typing_extensions import assert_type

from pai_actors import (
    BoundTool,
    ThreadUpdate,
    ToolContext,
    ToolDefinition,
    define_tool,
    json_schema,
)
from pai_actors.client import ThreadResynced


class Quote(BaseModel):
    symbol: str


class Order(BaseModel):
    quantity: int


@dataclass
class Desk:
    name: str


async def quote(ctx: ToolContext[Quote, Desk]) -> str:
    assert_type(ctx.input, Quote)
    assert_type(ctx.context, Desk)
    assert_type(ctx.tools.lookup, BoundTool)
    assert_type(ctx.capabilities.box, Any)
    ctx.tools.lookup.run({})  # error: [attr-defined]
    return ctx.input.symbol + ctx.context.name


quote_tool = define_tool(id="t.quote", description="d", input_schema=Quote, execute=quote)
assert_type(quote_tool, ToolDefinition[Quote, Desk])
define_tool(id="t.order", description="d", input_schema=Order, execute=quote)  # error: [arg-type]
define_tool(
    id="t.lambda",
    description=lambda dc: dc.context.name,
    input_schema=Quote,
    context_schema=Desk,
    execute=lambda ctx: ctx.input.symbol + ctx.context.nickname,  # error: [attr-defined]
)
define_tool(
    id="t.missing",
    description="d",
    input_schema=Quote,
    execute=lambda ctx: ctx.input.nonexistent_field,  # error: [attr-defined]
)
assert_type(
    define_tool(id="t.list", description="d", input_schema=list[int]), ToolDefinition[list[int]]
)
assert_type(
    define_tool(id="t.lit", description="d", input_schema=Literal["a", "b"]),
    ToolDefinition[Literal["a", "b"]],
)
assert_type(
    define_tool(id="t.opt", description="d", input_schema=int | None), ToolDefinition[int | None]
)
assert_type(
    define_tool(id="t.raw", description="d", input_schema=json_schema({})), ToolDefinition[Any]
)


def show(update: ThreadUpdate | ThreadResynced) -> str:
    if update.type == "run-status":
        return update.run.status
    if update.type == "tool-data":
        return update.channel
    if update.type == "resynced":
        return update.state.thread_id
    if update.type == "tool-part-updated":
        return str(update.channel)  # error: [attr-defined]
    return update.message.role
"""

_EXPECTED = re.compile(r"#\s*error:\s*\[([a-z-]+)\]")
_REPORTED = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$", re.M)


GUIDE = ROOT / "docs" / "guides" / "typing.md"
_PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def test_examples_and_snippets_type_check_as_an_application(tmp_path: Path) -> None:
    snippet = tmp_path / "typing_snippet.py"
    snippet.write_text(SNIPPET)
    programs = _PYTHON_BLOCK.findall(GUIDE.read_text(encoding="utf-8"))
    assert programs, f"no ```python block in {GUIDE}"
    guide = []
    for index, program in enumerate(programs):
        guide.append(tmp_path / f"typing_guide_{index}.py")
        guide[-1].write_text(program)
    result = subprocess.run(
        [
            str(MYPY),
            "--config-file",
            str(EXAMPLES / "mypy.ini"),
            "--cache-dir",
            str(ROOT / ".mypy_cache" / "test_typing"),
            "--no-pretty",
            "--no-error-summary",
            str(EXAMPLES),
            str(snippet),
            *map(str, guide),
        ],
        cwd=tmp_path,  # outside the repository: nothing but the installed package to find
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    reported = {
        (Path(m["file"]).name, int(m["line"]), m["code"]) for m in _REPORTED.finditer(result.stdout)
    }
    expected = {
        (snippet.name, number, m[1])
        for number, line in enumerate(SNIPPET.splitlines(), start=1)
        if (m := _EXPECTED.search(line))
    }
    assert reported == expected, (
        "mypy --strict did not report exactly the marked errors (if pai_actors itself is not "
        "found, reinstall with scripts/install: its editable install must be a static .pth "
        f"path entry)\n--- stdout ---\n{result.stdout}--- stderr ---\n{result.stderr}"
    )
    assert result.returncode == 1, result.stderr  # 1: type errors (the marked ones), no crash


def _run_example(name: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, name],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"--- stdout ---\n{result.stdout}--- stderr ---\n{result.stderr}"
    return result.stdout.splitlines()


FILL = "json: {'symbol': 'ACME', 'quantity': 10, 'total': 1200.0, 'approved_by_person': True}"


def test_the_trading_desk_runs() -> None:
    assert _run_example("trading_desk.py") == [
        "placeOrder.approval {'symbol': 'ACME', 'quantity': 10, 'total': 1200.0, 'limit': 1000.0}",
        "rejected",
        "accepted",
        "run completed",
        "run completed",
        FILL,
    ]


def test_the_trading_client_runs() -> None:
    lines = _run_example("trading_client.py")
    assert lines[0] == "message-appended user"
    assert "tool-placeOrder input-available waiting=True" in lines
    approving = next(i for i, line in enumerate(lines) if line.startswith("approving "))
    assert lines[approving + 1] == "accepted"
    assert lines[-2:] == [lines[-2], FILL]
    assert re.fullmatch(r"run \S+ completed", lines[-2])


def test_the_synchronous_trading_desk_runs() -> None:
    assert _run_example("trading_sync.py") == [
        "placeOrder.approval 1200.0 1000.0",
        "accepted",
        "run completed output-error A person declined the order: over budget.",
    ]


@pytest.mark.parametrize("name", ["pai_actors", "supervisors"])
def test_the_editable_install_is_a_path_entry_type_checkers_follow(name: str) -> None:
    # setuptools chooses how to make an editable install; an import hook (its default for a
    # flat layout) hides the package from mypy. pyproject.toml's package-dir asks for a static
    # path entry: the site directory holds a .pth listing the project root, no finder.
    pth = sorted(Path(sysconfig.get_paths()["purelib"]).glob("__editable__*pai_actors*.pth"))
    if not pth:
        pytest.skip("pai-actors is not installed in editable mode in this interpreter")
    lines = pth[0].read_text().splitlines()
    assert [Path(line).resolve() for line in lines] == [ROOT], (
        f"{pth[0]} is not a static path entry of {ROOT}: {lines}"
    )
    assert (ROOT / name / "py.typed").exists()
