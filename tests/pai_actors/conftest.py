"""Fixtures shared by the tests of ``pai_actors``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .postgres_support import new_database


@pytest.fixture
def database() -> Iterator[str]:
    """The URL of a new PostgreSQL database, dropped after the test (skipped, or failed
    under ``CI=true``, without a server: see ``postgres_support``)."""
    with new_database() as url:
        yield url
