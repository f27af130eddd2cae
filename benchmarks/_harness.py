"""The timing harness: best of N repetitions, candidate and baseline interleaved in one run.

A side of a comparison is a zero-argument callable that does its own setup (usually a fresh
``trio.run``), times only the part being measured with :func:`time.perf_counter`, and returns
those seconds. :func:`best_of` runs the two sides alternately, swapping which goes first on
every repetition so that neither always runs on a warmer (or more tired) interpreter, and
keeps the fastest time of each: noise on a shared machine only ever adds time.

The garbage collector is run before each timed side and stays enabled while it runs, so the
cost of collecting what a side allocates is part of its time, as it is in production.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

TimedRun: TypeAlias = Callable[[], float]
"""Runs one side once and returns the seconds spent in its measured part."""

RatioOf: TypeAlias = Literal["throughput", "time", "value"]


@dataclass(frozen=True, slots=True)
class Target:
    """A bound on a figure's ratio: at least (``>=``) or at most (``<=``) ``threshold``."""

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
    baseline: str
    """What the figure is compared against (measured in the same run), or why it is not."""
    baseline_value: float | None
    """``None`` when there is no baseline: a ``value`` figure, or a peer that is not
    installed (``baseline`` then says how to install it)."""
    ratio: float | None
    """``None`` exactly when ``baseline_value`` is."""
    ratio_of: RatioOf
    """``throughput``: value / baseline_value, higher is better. ``time``: value /
    baseline_value in seconds, lower is better. ``value``: no baseline; the target bounds
    ``value`` itself (a budget, such as bytes per call)."""
    target: str | None
    """``None`` for an informational figure, which has no target."""
    met: bool | None
    """``None`` for an informational figure, and when the baseline is unavailable."""
    n: int
    """Operations per timed repetition of the candidate (``baseline_n`` for the baseline)."""
    baseline_n: int
    """``0`` when there is no baseline."""
    repeats: int
    """Repetitions of each side; ``value`` and ``baseline_value`` are the best of them."""

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
            }
        )


def _round(x: float) -> float:
    """Four significant figures: more would only report noise."""
    return float(f"{x:.4g}")


def best_of(repeats: int, candidate: TimedRun, baseline: TimedRun) -> tuple[float, float]:
    """Run both sides ``repeats`` times, interleaved; return the best seconds of each."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, not {repeats!r}")
    best_candidate = best_baseline = math.inf
    for i in range(repeats):
        order = (candidate, baseline) if i % 2 == 0 else (baseline, candidate)
        for side in order:
            gc.collect()
            seconds = side()
            if side is candidate:
                best_candidate = min(best_candidate, seconds)
            else:
                best_baseline = min(best_baseline, seconds)
    return best_candidate, best_baseline


def throughput_record(
    figure: str,
    *,
    unit: str,
    baseline: str,
    target: Target | None,
    n: int,
    baseline_n: int,
    repeats: int,
    seconds: float,
    baseline_seconds: float,
) -> Record:
    """A figure reported as operations per second (``n`` / best seconds), higher is better."""
    value = n / seconds
    baseline_value = baseline_n / baseline_seconds
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
        repeats=repeats,
    )


def time_record(
    figure: str,
    *,
    baseline: str,
    target: Target,
    n: int,
    repeats: int,
    seconds: float,
    baseline_seconds: float,
) -> Record:
    """A figure reported as seconds for the same work on both sides, lower is better."""
    ratio = seconds / baseline_seconds
    return Record(
        figure=figure,
        unit="s",
        value=seconds,
        baseline=baseline,
        baseline_value=baseline_seconds,
        ratio=ratio,
        ratio_of="time",
        target=str(target),
        met=target.met_by(ratio),
        n=n,
        baseline_n=n,
        repeats=repeats,
    )


def value_record(
    figure: str,
    *,
    unit: str,
    value: float,
    target: Target,
    n: int,
    repeats: int,
    baseline: str = "none: the target bounds the value",
) -> Record:
    """A figure with no baseline, whose ``target`` bounds ``value`` itself."""
    return Record(
        figure=figure,
        unit=unit,
        value=value,
        baseline=baseline,
        baseline_value=None,
        ratio=None,
        ratio_of="value",
        target=str(target),
        met=target.met_by(value),
        n=n,
        baseline_n=0,
        repeats=repeats,
    )


def unavailable_record(
    figure: str,
    *,
    unit: str,
    value: float,
    baseline: str,
    ratio_of: RatioOf,
    target: Target | None,
    n: int,
    repeats: int,
) -> Record:
    """A figure whose baseline could not be measured (a peer that is not installed):
    ``value`` is reported, with no ratio and ``met`` ``None``."""
    return Record(
        figure=figure,
        unit=unit,
        value=value,
        baseline=baseline,
        baseline_value=None,
        ratio=None,
        ratio_of=ratio_of,
        target=str(target) if target is not None else None,
        met=None,
        n=n,
        baseline_n=0,
        repeats=repeats,
    )
