"""Test policy for pai_actors and supervisors.

- trio everywhere (``trio_mode = true``); anything involving time runs under
  ``trio.testing.MockClock``: pytest-trio's ``autojump_clock`` fixture, or
  ``MockClock(autojump_threshold=0)``, so no test waits on the wall clock and none
  asserts a duration. A test asks for the clock as an argument
  (``autojump_clock: trio.testing.MockClock``): pytest-trio ignores a clock requested with
  ``usefixtures`` (``tests/test_repo.py`` checks that none is).
- No ``sleep`` to order events: use ``trio.testing.wait_all_tasks_blocked``,
  ``trio.testing.Sequencer`` or the library's own waits (``wait_exit``, ``ask``).
- Network tests (later issues) bind loopback, port 0 only, and run under ``trio.fail_after``.
- Hypothesis profiles: ``ci`` (200 examples per property, derandomized so CI replays the
  same examples) is chosen by ``HYPOTHESIS_PROFILE=ci`` (``.ci/run`` sets it); ``dev`` (the
  default) runs 200 examples as well but with fresh randomness each run.
- Timing lives in ``benchmarks/``, never in a test.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
