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
from datetime import UTC, datetime
from typing import Any, NoReturn

import pytest

from pai_actors import (
    Message,
    PostgresStore,
    TextPart,
    ThreadRecord,
    ToolRegistration,
    define_agent,
    define_tool,
    json_schema,
)
from pai_actors._store.postgres_connection import parse_conninfo
from pai_actors.testing import ScriptedModel, text, tool_call

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


def thread(thread_id: str) -> ThreadRecord:
    """A thread record of scope ``s``, for a test to write."""
    return ThreadRecord(
        thread_id=thread_id, scope_key="s", created_at=datetime(2026, 1, 1, tzinfo=UTC)
    )


def message(message_id: str, text: str | None = None) -> Message:
    """A user message saying ``text`` (its id by default)."""
    return Message(
        id=message_id, role="user", parts=(TextPart(text=message_id if text is None else text),)
    )


async def append(store: PostgresStore, thread_id: str, message_id: str) -> None:
    """Append the message ``message_id`` to the thread, in a commit of its own."""
    async with store.transaction() as tx:
        tx.append_message(thread_id, message(message_id))


def payer() -> Any:
    """An agent whose ``pay`` tool needs approval, then returns ``"paid"``."""
    pay = define_tool(
        id="test.pay.v1",
        description="Pay.",
        input_schema=json_schema({"type": "object"}),
        execute=lambda ctx: "paid",
    )
    return define_agent(name="payer", tools={"pay": ToolRegistration(pay, needs_approval=True)})


def payer_model() -> ScriptedModel:
    """:func:`payer`'s model: it calls ``pay``, then says ``done`` once the call answered."""

    def step(request: Any) -> Any:
        answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
        return text("done") if answered else [tool_call("pay", {})]

    return ScriptedModel([step], repeat_last=True)


class Statements:
    """The statements a store sends on its read pool, recorded, and its round trips (a
    read of several statements is one)."""

    def __init__(self, store: PostgresStore) -> None:
        self.sent: list[str] = []
        self.round_trips = 0
        pool = store._pool
        fetch, fetch_many = pool.fetch, pool.fetch_many

        async def recorded_fetch(sql: str, *params: Any) -> Any:
            self.round_trips += 1
            self.sent.append(sql)
            return await fetch(sql, *params)

        async def recorded_fetch_many(statements: Any) -> Any:
            self.round_trips += 1
            self.sent.extend(sql for sql, _ in statements)
            return await fetch_many(statements)

        pool.fetch = recorded_fetch  # type: ignore[method-assign]
        pool.fetch_many = recorded_fetch_many  # type: ignore[method-assign]

    def reads_of_records(self) -> list[str]:
        """What was read of threads, messages, runs and calls (not of leases)."""
        return [sql for sql in self.sent if "pai_thread_owners" not in sql]

    def checks(self) -> list[str]:
        return [sql for sql in self.sent if "pai_thread_owners" in sql]

    def clear(self) -> None:
        self.sent.clear()
        self.round_trips = 0
