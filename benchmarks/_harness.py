"""The timing harness: medians of interleaved repetitions, each side in a fresh process.

A side of a comparison is a module-level function of ``benchmarks`` that takes JSON
arguments, does its own setup (usually a fresh ``trio.run``), times only the part being
measured and returns JSON (seconds, or a dict of what it measured). :func:`fresh` runs it in
a new Python interpreter (``python -m benchmarks._side``), so that no side runs on what an
earlier side or figure left in the process: its imports, its caches, the objects the cyclic
garbage collector walks. The collector keeps CPython's defaults everywhere (no
``gc.freeze``, no ``gc.disable``, no threshold changes); the runner collects once before the
side is called, so that the imports' garbage is not charged to it.

:func:`interleave` runs a figure's sides alternately, swapping which goes first on every
repetition (candidate, baseline, then baseline, candidate, ...), and a figure reports the
MEDIAN of each side's repetitions, with every repetition's value in ``samples`` (and
``baseline_samples``) so that the spread shows. Every record says how it was measured in
``method``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TypeAlias

ROOT = Path(__file__).resolve().parent.parent
"""The directory holding the ``benchmarks`` package (the side processes' working directory)."""

RatioOf: TypeAlias = Literal["throughput", "time", "cost", "value"]

_IN_PROCESS = False
"""Set only by :class:`sides_in_process` (tests): sides are called in this process."""


@dataclass(frozen=True, slots=True)
class Target:
    """A bound on a figure's ratio (or, for a ``value`` figure, on its value): at least
    (``>=``) or at most (``<=``) ``threshold``."""

    op: Literal[">=", "<="]
    threshold: float

    def __post_init__(self) -> None:
        if self.op not in (">=", "<="):
            raise ValueError(f"target op must be '>=' or '<=', not {self.op!r}")
        if not (self.threshold > 0) or math.isinf(self.threshold):
            raise ValueError(
                f"target threshold must be a finite number > 0, not {self.threshold!r}"
            )

    def __str__(self) -> str:
        return f"{self.op} {self.threshold:g}"

    def met_by(self, ratio: float) -> bool:
        return ratio >= self.threshold if self.op == ">=" else ratio <= self.threshold


@dataclass(frozen=True, slots=True)
class Record:
    """One figure's result; printed as one JSON line by :meth:`to_json`."""

    figure: str
    unit: str
    """Unit of ``value`` and ``baseline_value``."""
    value: float
    """The median of ``samples``."""
    baseline: str
    """What the figure is compared against (measured in the same run), or why it is not."""
    baseline_value: float | None
    """The median of ``baseline_samples``; ``None`` when there is no baseline: a ``value``
    figure without one, or a peer that is not installed (``baseline`` then says how to
    install it)."""
    ratio: float | None
    """``None`` exactly when ``baseline_value`` is."""
    ratio_of: RatioOf
    """``throughput``: ratio = value / baseline_value, higher is better. ``time``: ratio =
    value / baseline_value in seconds, lower is better. ``cost``: value and baseline_value
    are costs per operation; ratio = baseline_value / value, higher is better. ``value``:
    the target bounds ``value`` itself (a budget, such as bytes per call); a baseline, if
    there is one, is informational (ratio = value / baseline_value)."""
    target: str | None
    """``None`` for an informational figure, which has no target."""
    met: bool | None
    """``None`` for an informational figure, and when the baseline is unavailable."""
    n: int
    """Operations per timed repetition of the candidate (``baseline_n`` for the baseline)."""
    baseline_n: int
    """``0`` when there is no baseline."""
    repeats: int
    """Repetitions of each side."""
    method: str
    """How the figure was measured: repetitions, processes, settings of both sides."""
    samples: tuple[float, ...]
    """Every repetition's value of the candidate, in the order they ran."""
    baseline_samples: tuple[float, ...]
    """Every repetition's value of the baseline (empty when there is none)."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "figure": self.figure,
                "unit": self.unit,
                "value": _round(self.value),
                "baseline": self.baseline,
                "baseline_value": (
                    None if self.baseline_value is None else _round(self.baseline_value)
                ),
                "ratio": None if self.ratio is None else round(self.ratio, 3),
                "ratio_of": self.ratio_of,
                "target": self.target,
                "met": self.met,
                "n": self.n,
                "baseline_n": self.baseline_n,
                "repeats": self.repeats,
                "method": self.method,
                "samples": [_round(x) for x in self.samples],
                "baseline_samples": [_round(x) for x in self.baseline_samples],
            }
        )


def _round(x: float) -> float:
    """Four significant figures: more would only report noise."""
    return float(f"{x:.4g}")


# --- Running sides -------------------------------------------------------------------------


def _side_of(function: Callable[..., Any] | str) -> tuple[str, str]:
    """The module and name of a side: a module-level function of ``benchmarks``, or its
    ``"module:name"``."""
    if isinstance(function, str):
        module, _, name = function.partition(":")
    else:
        module, name = function.__module__, function.__name__
        if getattr(sys.modules[module], name, None) is not function:
            raise ValueError(f"{function!r} is not a module-level function")
    if module != "benchmarks" and not module.startswith("benchmarks."):
        raise ValueError(f"{module}:{name} is not a function of benchmarks")
    return module, name


def _runner(module: str, name: str, arguments: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of ``python -m benchmarks._side`` running a side (in
    :data:`ROOT`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return [sys.executable, "-m", "benchmarks._side", module, name, arguments], env


def fresh(function: Callable[..., Any] | str, /, **kwargs: Any) -> Any:
    """Call ``function(**kwargs)`` in a fresh Python process and return its JSON result.

    ``function`` is a module-level function of ``benchmarks``, or its ``"module:name"`` (so
    that this process need not import a peer to name its side); ``kwargs`` are JSON."""
    module, name = _side_of(function)
    arguments = json.dumps(kwargs)
    if _IN_PROCESS:
        call = getattr(importlib.import_module(module), name)
        return json.loads(json.dumps(call(**json.loads(arguments))))
    command, env = _runner(module, name, arguments)
    with tempfile.TemporaryFile("w+") as stderr:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            stderr.seek(0)
            raise RuntimeError(
                f"the side {module}:{name}({arguments}) failed with exit status "
                f"{done.returncode}:\n{stderr.read()}"
            )
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"the side {module}:{name}({arguments}) printed nothing")
    return json.loads(lines[-1])


class Started:
    """A side running in a fresh process (:func:`started`) that its runner talks to through
    its pipes: lines written to its stdin (:meth:`tell`), lines read from its stdout
    (:meth:`expect`), then its JSON result (:meth:`result`)."""

    def __init__(self, process: subprocess.Popen[str], stderr: IO[str], what: str) -> None:
        self._process = process
        self._stderr = stderr
        self._what = what

    def tell(self, line: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def expect(self, line: str) -> None:
        """Wait for the side to print ``line``; raise with its stderr if it prints anything
        else or exits."""
        assert self._process.stdout is not None
        got = self._process.stdout.readline().rstrip("\n")
        if got != line:
            raise self._failed(f"printed {got!r} where {line!r} was expected")

    def result(self, timeout: float = 120.0) -> Any:
        """The JSON the side returned, once it exited (its stdin is closed first)."""
        out, _ = self._process.communicate(timeout=timeout)
        if self._process.returncode != 0:
            raise self._failed(f"failed with exit status {self._process.returncode}")
        lines = out.strip().splitlines()
        if not lines:
            raise self._failed("printed nothing")
        return json.loads(lines[-1])

    def _failed(self, what: str) -> RuntimeError:
        self._stderr.seek(0)
        return RuntimeError(f"the side {self._what} {what}:\n{self._stderr.read()}")


@contextlib.contextmanager
def started(function: Callable[..., Any] | str, /, **kwargs: Any) -> Iterator[Started]:
    """Start ``function(**kwargs)`` in a fresh Python process, as :func:`fresh` runs it, for
    a side that its runner coordinates with others through its pipes (several processes
    started together, told when to begin). Always a process, also under
    :class:`sides_in_process`; killed if it is still running when the block exits."""
    module, name = _side_of(function)
    arguments = json.dumps(kwargs)
    command, env = _runner(module, name, arguments)
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            yield Started(process, stderr, f"{module}:{name}({arguments})")
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate()


class sides_in_process:
    """For tests only: within this block :func:`fresh` calls the side in this process (its
    arguments and result still go through JSON), so that a test can check a figure's record
    at tiny sizes without starting interpreters; ``sides_in_process(False)`` restores fresh
    processes within such a block. Timings taken in process are not figures."""

    def __init__(self, on: bool = True) -> None:
        self._on = on
        self._previous = _IN_PROCESS

    def __enter__(self) -> None:
        global _IN_PROCESS
        self._previous = _IN_PROCESS
        _IN_PROCESS = self._on

    def __exit__(self, *exc: object) -> None:
        global _IN_PROCESS
        _IN_PROCESS = self._previous


def interleave(repeats: int, *sides: Callable[[], Any]) -> list[list[Any]]:
    """Run every side ``repeats`` times, interleaved: in the given order on even
    repetitions, reversed on odd ones (candidate, baseline, then baseline, candidate, ...).
    Returns each side's results in the order they ran."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, not {repeats!r}")
    results: list[list[Any]] = [[] for _ in sides]
    for i in range(repeats):
        order = range(len(sides)) if i % 2 == 0 else reversed(range(len(sides)))
        for side in order:
            results[side].append(sides[side]())
    return results


def median(samples: Sequence[float]) -> float:
    if not samples:
        raise ValueError("no samples")
    return float(statistics.median(samples))


def method(repeats: int, *details: str, sides: int = 2, warmed: bool = False) -> str:
    """The ``method`` text: how the repetitions ran, then the figure's own ``details``.
    ``warmed``: the figure's details describe a warm-up; otherwise the text says there is
    none (each side's first-use costs fall in its timed part, as in a fresh server)."""
    if repeats == 1:
        each = ", each side" if sides >= 2 else ""
        how = f"one repetition{each} in a fresh Python process"
    elif sides >= 2:
        how = (
            f"median of {repeats} interleaved repetitions (candidate, baseline, then baseline, "
            "candidate, ...), each side of each repetition in a fresh Python process"
        )
    else:
        how = f"median of {repeats} repetitions, each in a fresh Python process"
    parts = [how, "garbage collector at its defaults"]
    if not warmed:
        parts.append("no warm-up: first-use costs fall in the timed part")
    return "; ".join([*parts, *details])


# --- Records -------------------------------------------------------------------------------


def throughput_record(
    figure: str,
    *,
    unit: str,
    baseline: str,
    target: Target | None,
    n: int,
    baseline_n: int,
    seconds: Sequence[float],
    baseline_seconds: Sequence[float],
    method: str,
) -> Record:
    """A figure reported as operations per second (median of ``n`` / seconds), higher is
    better."""
    samples = tuple(n / s for s in seconds)
    baseline_samples = tuple(baseline_n / s for s in baseline_seconds)
    value, baseline_value = median(samples), median(baseline_samples)
    ratio = value / baseline_value
    return Record(
        figure=figure,
        unit=unit,
        value=value,
        baseline=baseline,
        baseline_value=baseline_value,
        ratio=ratio,
        ratio_of="throughput",
        target=str(target) if target is not None else None,
        met=target.met_by(ratio) if target is not None else None,
        n=n,
        baseline_n=baseline_n,
        repeats=len(samples),
        method=method,
        samples=samples,
        baseline_samples=baseline_samples,
    )


def time_record(
    figure: str,
    *,
    baseline: str,
    target: Target | None,
    n: int,
    seconds: Sequence[float],
    baseline_seconds: Sequence[float],
    method: str,
    unit: str = "s",
) -> Record:
    """A figure reported as median seconds for the same work on both sides, lower is
    better."""
    value, baseline_value = median(seconds), median(baseline_seconds)
    ratio = value / baseline_value
    return Record(
        figure=figure,
        unit=unit,
        value=value,
        baseline=baseline,
        baseline_value=baseline_value,
        ratio=ratio,
        ratio_of="time",
        target=str(target) if target is not None else None,
        met=target.met_by(ratio) if target is not None else None,
        n=n,
        baseline_n=n,
        repeats=len(seconds),
        method=method,
        samples=tuple(seconds),
        baseline_samples=tuple(baseline_seconds),
    )


def cost_record(
    figure: str,
    *,
    unit: str,
    baseline: str,
    target: Target | None,
    n: int,
    baseline_n: int,
    samples: Sequence[float],
    baseline_samples: Sequence[float],
    method: str,
) -> Record:
    """A figure reported as a cost per operation on both sides; ratio = baseline / value
    (the share of our cost that the baseline's is), higher is better."""
    value, baseline_value = median(samples), median(baseline_samples)
    ratio = baseline_value / value
    return Record(
        figure=figure,
        unit=unit,
        value=value,
        baseline=baseline,
        baseline_value=baseline_value,
        ratio=ratio,
        ratio_of="cost",
        target=str(target) if target is not None else None,
        met=target.met_by(ratio) if target is not None else None,
        n=n,
        baseline_n=baseline_n,
        repeats=len(samples),
        method=method,
        samples=tuple(samples),
        baseline_samples=tuple(baseline_samples),
    )


def value_record(
    figure: str,
    *,
    unit: str,
    samples: Sequence[float],
    target: Target | None,
    n: int,
    method: str,
    baseline: str = "none: the target bounds the value",
    baseline_samples: Sequence[float] = (),
    baseline_n: int = 0,
) -> Record:
    """A figure whose ``target`` bounds ``value`` itself. A baseline, when given, is
    informational: its ratio (value / baseline_value) is printed, ``met`` judges the value."""
    value = median(samples)
    baseline_value = median(baseline_samples) if baseline_samples else None
    return Record(
        figure=figure,
        unit=unit,
        value=value,
        baseline=baseline,
        baseline_value=baseline_value,
        ratio=None if baseline_value is None else value / baseline_value,
        ratio_of="value",
        target=str(target) if target is not None else None,
        met=target.met_by(value) if target is not None else None,
        n=n,
        baseline_n=baseline_n if baseline_value is not None else 0,
        repeats=len(samples),
        method=method,
        samples=tuple(samples),
        baseline_samples=tuple(baseline_samples),
    )


def unavailable_record(
    figure: str,
    *,
    unit: str,
    samples: Sequence[float],
    baseline: str,
    ratio_of: RatioOf,
    target: Target | None,
    n: int,
    method: str,
) -> Record:
    """A figure whose baseline could not be measured (a peer that is not installed): our
    ``value`` (median of ``samples``) is reported, with no ratio and ``met`` ``None``."""
    return Record(
        figure=figure,
        unit=unit,
        value=median(samples),
        baseline=baseline,
        baseline_value=None,
        ratio=None,
        ratio_of=ratio_of,
        target=str(target) if target is not None else None,
        met=None,
        n=n,
        baseline_n=0,
        repeats=len(samples),
        method=method,
        samples=tuple(samples),
        baseline_samples=(),
    )


# --- Markdown ------------------------------------------------------------------------------

_COLUMNS = ("Figure", "Value", "Baseline", "Baseline value", "Ratio", "Target", "Met", "Method")


def _number(x: float) -> str:
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    if 1e-4 <= abs(x) < 1e4:
        return f"{x:.4g}"
    return f"{x:,.4g}" if abs(x) >= 1e4 else f"{x:.3e}"


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def render_markdown(lines: Iterable[str]) -> str:
    """A Markdown table of the JSON lines a run printed (``python -m benchmarks --out``): one
    row per figure, in order. Blank lines are skipped. The docs paste this table as is."""
    rows = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for line in lines:
        if not line.strip():
            continue
        data = json.loads(line)
        ratio = data["ratio"]
        met = data["met"]
        baseline_value = data["baseline_value"]
        cells = [
            f"`{data['figure']}`",
            f"{_number(data['value'])} {data['unit']}",
            data["baseline"],
            "—" if baseline_value is None else _number(baseline_value),
            "—" if ratio is None else f"{ratio:g} ({data['ratio_of']})",
            "—" if data["target"] is None else data["target"],
            "—" if met is None else ("yes" if met else "no"),
            data.get("method", ""),
        ]
        rows.append("| " + " | ".join(_cell(str(c)) for c in cells) + " |")
    return "\n".join(rows) + "\n"
