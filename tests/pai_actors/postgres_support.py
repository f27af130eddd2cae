"""PostgreSQL for the tests: a new database for each test, on the server that
``PAI_TEST_POSTGRES`` names (``postgresql://postgres@127.0.0.1:5432/postgres`` by default).

Without a reachable server the tests that need one are skipped, saying how to run them;
under ``CI=true`` they fail instead, so CI can never pass by skipping them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, NoReturn

import pytest

from pai_actors import PostgresStore
from pai_actors._store.postgres_connection import parse_conninfo

SERVER_ENV = "PAI_TEST_POSTGRES"
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def _unavailable(why: str) -> NoReturn:
    message = (
        f"{why}; start PostgreSQL at {DEFAULT_SERVER} (trust auth for user postgres), or set "
        f"{SERVER_ENV} to the URL of a server where this user may CREATE DATABASE"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true, and the PostgreSQL tests cannot run: {message}", pytrace=False)
    pytest.skip(message)


def connect(url: str) -> Any:
    """A blocking psycopg connection in autocommit mode, for a test to look or prepare."""
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def require_psycopg() -> None:
    """Skip (fail under ``CI=true``) when psycopg is not installed."""
    try:
        import psycopg  # noqa: F401 - only whether it imports
    except ImportError as exc:
        _unavailable(f"psycopg is not installed ({exc}): pip install 'pai_actors[postgres]'")


@contextmanager
def new_database() -> Iterator[str]:
    """A new, empty database on the test server (its URL), dropped afterwards whatever
    holds it open (``DROP DATABASE ... WITH (FORCE)``)."""
    require_psycopg()
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    server = os.environ.get(SERVER_ENV, DEFAULT_SERVER)
    name = f"pai_test_{uuid.uuid4().hex[:16]}"
    try:
        admin = connect(server)
    except psycopg.OperationalError as exc:
        where = parse_conninfo(server, 5)[0]  # without a password the variable may hold
        _unavailable(f"PostgreSQL is not reachable at {SERVER_ENV}={where!r} ({exc})".strip())
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(server, dbname=name)
    finally:
        with connect(server) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def in_schema(url: str, schema: str) -> str:
    """``url`` with its tables in ``schema`` (first on the ``search_path``), created if new."""
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    with connect(url) as db:
        db.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    return make_conninfo(url, options=f"-csearch_path={schema}")


def postgres_stores(
    url: str, **options: Any
) -> Callable[[str], AbstractAsyncContextManager[PostgresStore]]:
    """``open_store(name)`` for :func:`~pai_actors.testing.check_store`: a store on the
    database at ``url``, its tables in the schema ``name`` (a new name: empty), closed on
    exit."""

    @asynccontextmanager
    async def open_store(name: str) -> AsyncIterator[PostgresStore]:
        with PostgresStore(in_schema(url, name), **options) as store:
            yield store

    return open_store
