"""Where the runtime's timestamps come from: :data:`Clock`, :func:`wall_clock`, :func:`trio_clock`.

Every timestamp the runtime records (a message, a run, a suspension, a tool data item, a
cancellation) is read from the runtime's clock. Production runtimes read the wall clock;
test runtimes read trio's clock, so that under ``trio.testing.MockClock`` the stored state
is the same on every run of a test and time moves only when the test (or autojump) moves it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import trio

Clock = Callable[[], datetime]
"""A callable returning the current time as a timezone-aware ``datetime``."""

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""Where :func:`trio_clock` starts by default: trio time ``0`` is this instant."""


def wall_clock() -> datetime:
    """The current UTC time of the machine."""
    return datetime.now(UTC)


def trio_clock(epoch: datetime = EPOCH) -> Clock:
    """A clock reading trio's: ``epoch + trio.current_time()`` seconds.

    Call the returned clock inside a trio run only. Under ``MockClock`` (which starts at
    ``0``), the first reading is ``epoch`` exactly; under trio's default clock the readings
    start at an arbitrary offset from ``epoch`` and advance in real time.
    """
    if epoch.tzinfo is None:
        raise ValueError(
            f"trio_clock(epoch=...) needs a timezone-aware datetime, got {epoch!r}; "
            "use datetime(..., tzinfo=UTC)"
        )

    def now() -> datetime:
        return epoch + timedelta(seconds=trio.current_time())

    return now
