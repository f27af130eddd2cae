"""Test runtimes read trio's clock: :func:`trio_clock` (see ``_core.clock``)."""

from __future__ import annotations

from datetime import datetime, timedelta

import trio

from .._core.clock import EPOCH, Clock


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
