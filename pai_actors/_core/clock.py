"""Where the runtime's timestamps come from: :data:`Clock` and :func:`wall_clock` (the
runtime's :func:`trio_clock` reads trio's clock instead).

Every timestamp the runtime records (a message, a run, a suspension, a tool data item, a
cancellation) is read from the runtime's clock. Production runtimes read the wall clock;
test runtimes read trio's clock, so that under ``trio.testing.MockClock`` the stored state
is the same on every run of a test and time moves only when the test (or autojump) moves it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""A callable returning the current time as a timezone-aware ``datetime``."""

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""Where :func:`trio_clock` starts by default: trio time ``0`` is this instant."""


def wall_clock() -> datetime:
    """The current UTC time of the machine."""
    return datetime.now(UTC)
