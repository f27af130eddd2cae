"""Keeping a waiting run warm: spin, then park.

A run left waiting only on pending actions passivates: its actor ends, its slot of
``max_active_runs`` is free, and a submission activates it again from the store. That is
what a human's approval needs (minutes, or never). When pending actions are resolved within
moments (a client tool answered by the browser, an approval a policy gives, sub-agents that
finish quickly), ending the actor and starting it again costs more than keeping it: about a
tenth of the CPU of a conversation that suspends once, measured with the W1 benchmark
(``docs/performance.md``).

So a waiting run may keep its actor, and its slot, for up to ``keep_warm`` seconds,
listening for the submission, before it passivates. Its state is written first, as for any
waiting run (``waiting``, the pending action committed): a crash or a close while it is warm
loses nothing, and whether it is warm is visible only in what it costs. Whether it is kept
warm is decided the way an adaptive mutex decides whether to spin before it sleeps: from how
recent waits ended. :class:`KeepWarm` keeps a moving share of the pending actions resolved
within ``keep_warm`` seconds of their suspension (each accepted resolution, read from the
timestamps its record carries, so that the resolutions of passivated runs count too) and of
warm runs that passivated without one; runs are kept warm only while at least half of them
were quick. Ten thousand
approvals that never come (the W2 benchmark) keep no run warm; a runtime whose actions are
resolved at once keeps them all.

A runtime on a store shared with other nodes (``PostgresStore(node_id=...)``) keeps no run
warm: a waiting run gives its thread's lease up in the commit that records it waiting, so
another node may take the thread over (a submission that reaches it, say) while the warm
actor would still listen here, and a ``cancel_run`` at that actor would not reach the run.

Pure: it reads no clock (the caller gives the wait it measured) and does no I/O.
"""

from __future__ import annotations

import math
from datetime import datetime

from .._core.call_record import CallRecord
from .._core.errors import RuntimeConfigError

__all__ = ["DEFAULT_KEEP_WARM", "KeepWarm", "check_keep_warm", "waited"]

DEFAULT_KEEP_WARM = 0.25
"""Seconds a waiting run keeps its actor by default, when actions are being resolved that
quickly: longer than an automated answer takes under load (a submission is a commit), far
shorter than a person takes."""

_WEIGHT = 1 / 32
"""The weight of each new wait in the moving share: about the last 32 waits count."""


def check_keep_warm(value: float) -> float:
    """``value`` if it is a valid ``keep_warm`` (seconds, finite, ``>= 0``; ``0``: never)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise RuntimeConfigError(
            "keep_warm must be a finite number of seconds >= 0 (how long a run waiting only "
            f"on pending actions keeps its actor; 0 never keeps it), got {value!r}"
        )
    return float(value)


class KeepWarm:
    """Whether a run that waits only on pending actions keeps its actor, and for how long
    (see the module docstring). One per runtime; not for concurrent use across threads."""

    __slots__ = ("_quick", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = check_keep_warm(seconds)
        self._quick = 0.0  # moving share of recent waits that ended within ``seconds``

    def __repr__(self) -> str:
        return f"KeepWarm(seconds={self.seconds!r}, quick={self._quick:.3f})"

    @property
    def quick_share(self) -> float:
        """The moving share of recent waits that ended within ``seconds`` (0 to 1)."""
        return self._quick

    def window(self) -> float:
        """Seconds the run that begins to wait now keeps its actor: ``seconds`` while at
        least half of the recent waits were quick, else ``0`` (it passivates at once)."""
        return self.seconds if self._quick >= 0.5 else 0.0

    def resolved(self, seconds_waited: float | None) -> None:
        """A pending action was resolved ``seconds_waited`` after its suspension (``None``:
        unknown, not counted)."""
        if seconds_waited is not None and self.seconds:
            self._observe(seconds_waited <= self.seconds)

    def went_cold(self) -> None:
        """A warm run passivated: nothing came within its window."""
        self._observe(False)

    def _observe(self, quick: bool) -> None:
        self._quick += ((1.0 if quick else 0.0) - self._quick) * _WEIGHT


def waited(record: CallRecord) -> float | None:
    """Seconds between the suspension (or approval request) that ``record``'s latest
    resolution resolved and that resolution, from the record's own timestamps; ``None``
    when its latest action is not resolved, or carries no times (an output action)."""
    if record.episodes:
        last = record.episodes[-1]
        return _seconds(last.suspended_at, last.resolved_at)
    approval = record.approval
    if approval is not None:
        return _seconds(approval.requested_at, approval.resolved_at)
    return None


def _seconds(begun: datetime, ended: datetime | None) -> float | None:
    return None if ended is None else (ended - begun).total_seconds()
