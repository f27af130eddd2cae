"""One libpq connection of a :class:`~pai_actors.PostgresStore`, driven by trio's socket waits.

psycopg's connections have no trio support (its async API is asyncio's), so the store uses
the layer under them, ``psycopg.pq``: libpq's non-blocking calls (``send_prepare``,
``send_query_prepared``, ``flush``, ``consume_input``, ``is_busy``, ``get_result``,
``connect_poll``), waiting for the socket with ``trio.lowlevel.wait_readable`` /
``wait_writable`` between them. Why this rather than psycopg's blocking calls in worker
threads: see ``_store.postgres``.

Each statement is prepared on a connection the first time it runs there, so the server
parses and plans it once per connection (the store's statements are a fixed set of
constants). That halved the server's CPU time per conversation in the W1 benchmark's
workload (0.95 s to 0.46 s for 300 conversations) and raised the conversations per second
by a quarter (148 to 190).

Values cross as PostgreSQL's binary formats, typed by the Python value: ``str`` as ``text``,
``int`` as ``int8``, ``bool`` as ``bool``, ``bytes`` as ``bytea``, ``None`` as a ``NULL`` of
the type the statement gives it (write ``$1::bigint`` where nothing else does). A prepared
statement keeps the types of its first run, so a parameter keeps its type from run to run
(``None`` aside). Results come back binary as well and are decoded by their column's type;
only the types the store's statements return are known (:data:`_DECODERS`).

psycopg is an optional dependency (``pip install 'pai_actors[postgres]'``): this module
imports without it, and :func:`require_psycopg` says what to install before anything is used.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeAlias

import trio

try:
    import psycopg
    from psycopg import pq
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg.pq.abc import PGconn, PGresult
except ImportError as exc:  # the extra is not installed: require_psycopg() says so
    _MISSING: ImportError | None = exc
else:
    _MISSING = None

Param: TypeAlias = str | int | bool | bytes | None
"""A statement parameter (``$1``, ``$2``, ...)."""

Row: TypeAlias = tuple[Any, ...]

Statement: TypeAlias = tuple[str, Sequence[Param]]
"""A statement's SQL and its parameters."""


def require_psycopg() -> None:
    """Raise ``ImportError`` saying how to install the PostgreSQL extra, if it is missing."""
    if _MISSING is not None:
        raise ImportError(
            "PostgresStore needs psycopg 3 (with its libpq): pip install 'pai_actors[postgres]'"
        ) from _MISSING


def pipelining() -> bool:
    """libpq has pipeline mode (14 or later): :meth:`Connection.pipeline` can be used."""
    return bool(psycopg.capabilities.has_pipeline())


def parse_conninfo(conninfo: str, connect_timeout: float) -> tuple[str, str]:
    """The database's name for messages (a URL without the password) and the conninfo to
    connect with: ``conninfo`` with UTF-8 and ``connect_timeout`` (libpq's blocking connect
    obeys it; :meth:`Connection.open` needs a trio deadline)."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:  # libpq's message may quote the password: not chained
        raise ValueError(
            "conninfo is not a PostgreSQL URL or key=value string libpq can read; write it as "
            "'postgresql://user@host:5432/database'"
        ) from None
    user, host, port = params.get("user"), params.get("host", ""), params.get("port")
    name = (
        f"postgresql://{f'{user}@' if user else ''}{host}{f':{port}' if port else ''}"
        f"/{params.get('dbname', '')}"
    )
    timeout = max(2, math.ceil(connect_timeout))  # libpq takes whole seconds, at least 2
    return name, make_conninfo(conninfo, client_encoding="UTF8", connect_timeout=timeout)


class ServerError(Exception):
    """PostgreSQL answered a statement with an error (``sqlstate``: its SQLSTATE code).
    The connection stays usable (a transaction it was in is aborted)."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(f"{message} (SQLSTATE {sqlstate})")
        self.sqlstate = sqlstate
        self.message = message

    @property
    def integrity(self) -> bool:
        """A constraint refused the statement (class 23: a key taken, a foreign key missing)."""
        return self.sqlstate.startswith("23")


class ConnectionFailed(Exception):
    """The connection could not be made, or broke; libpq's message says why."""


class Connection:
    """A libpq connection in autocommit mode, used by one task at a time.

    Concurrency contract: every call is cancellable. A statement cancelled (or interrupted
    by any exception) while it is in flight leaves the connection ``broken``: a worker
    thread asks the server to cancel the statement (a cancel request opens a connection of
    its own, so waiting for it here would delay the caller) and then closes the connection,
    so the caller stops waiting at once and the server stops working for it soon after. A
    caller that must not be interrupted mid-statement (a commit) runs it under a shield.
    """

    __slots__ = ("broken", "pgconn", "statements")

    def __init__(self, pgconn: PGconn) -> None:
        pgconn.nonblocking = 1
        self.pgconn = pgconn
        self.broken = False  # handed to a worker thread to cancel and close: never use again
        self.statements: dict[str, bytes] = {}  # SQL -> its prepared statement's name here

    @classmethod
    def connect(cls, conninfo: str) -> Connection:
        """Connect, blocking the calling thread (a store's constructor does, once)."""
        pgconn = pq.PGconn.connect(conninfo.encode())
        if pgconn.status != pq.ConnStatus.OK:
            message = pgconn.get_error_message()
            pgconn.finish()
            raise ConnectionFailed(message)
        return cls(pgconn)

    @classmethod
    async def open(cls, conninfo: str) -> Connection:
        """Connect without blocking the trio thread; cancellable (nothing is left open).

        libpq resolves a host *name* synchronously here (a numeric ``host``/``hostaddr``
        needs no lookup), and ignores ``connect_timeout``: bound the wait with a trio
        deadline."""
        pgconn = pq.PGconn.connect_start(conninfo.encode())
        try:
            while True:
                if pgconn.status == pq.ConnStatus.BAD:
                    raise ConnectionFailed(pgconn.get_error_message())
                status = pgconn.connect_poll()
                if status == pq.PollingStatus.OK:
                    return cls(pgconn)
                if status == pq.PollingStatus.READING:
                    await trio.lowlevel.wait_readable(pgconn.socket)
                elif status == pq.PollingStatus.WRITING:
                    await trio.lowlevel.wait_writable(pgconn.socket)
                else:
                    raise ConnectionFailed(pgconn.get_error_message())
        except BaseException:
            pgconn.finish()
            raise

    @property
    def in_transaction(self) -> bool:
        """Inside a transaction block (``BEGIN`` sent, not yet ended)."""
        return bool(self.pgconn.transaction_status != pq.TransactionStatus.IDLE)

    def close(self) -> None:
        """Close the connection now (a broken one is the worker thread's to close)."""
        if not self.broken:
            self.pgconn.finish()

    async def fetch(self, sql: str, *params: Param) -> list[Row]:
        """The rows of one statement."""
        return _rows(await self._exchange(sql, params))

    async def execute(self, sql: str, *params: Param) -> int:
        """Run one statement; the number of rows it wrote (or returned)."""
        return _count(await self._exchange(sql, params))

    def fetch_blocking(self, sql: str, *params: Param) -> list[Row]:
        """:meth:`fetch`, blocking the calling thread (the store's constructor migrates so)."""
        return _rows([self._exec_blocking(sql, params)])

    def execute_blocking(self, sql: str, *params: Param) -> int:
        """:meth:`execute`, blocking the calling thread. Without parameters, ``sql`` may hold
        several statements (a schema)."""
        return _count([self._exec_blocking(sql, params, script=not params)])

    def _exec_blocking(
        self, sql: str, params: Sequence[Param], *, script: bool = False
    ) -> PGresult:
        pgconn = self.pgconn
        try:  # libpq's exec calls block whatever the connection's mode
            if script:  # several statements, with text results (and none read)
                return pgconn.exec_(sql.encode())
            return pgconn.exec_params(sql.encode(), *_encoded(params), pq.Format.BINARY)
        except psycopg.Error as exc:
            raise ConnectionFailed(pgconn.get_error_message()) from exc

    async def _exchange(self, sql: str, params: Sequence[Param]) -> list[PGresult]:
        """Run one statement: prepared on this connection the first time it runs here (the
        server then parses and plans it once), with the parameters' types of that time."""
        await trio.lowlevel.checkpoint_if_cancelled()  # before sending: nothing to cancel
        if self.broken:
            raise ConnectionFailed("the connection was abandoned by an interrupted statement")
        values, types, formats = _encoded(params)
        name = self.statements.get(sql)
        if name is None:
            name = f"pai_{len(self.statements)}".encode()
            _checked(await self._round_trip(self.pgconn.send_prepare, name, sql.encode(), types))
            self.statements[sql] = name
        return await self._round_trip(
            self.pgconn.send_query_prepared, name, values, formats, pq.Format.BINARY
        )

    async def pipeline(self, statements: Sequence[Statement]) -> list[PGresult]:
        """Run ``statements`` in libpq's pipeline mode: all sent at once, then their
        results, in one round trip (each prepared on this connection the first time it runs
        here, in the same pipeline). Each statement's last result, in order: once one fails
        (``FATAL_ERROR``), those after it are not run (``PIPELINE_ABORTED``). Inside an
        explicit transaction, a failure aborts it: the caller rolls it back.

        It reads while it sends, so the server never waits on a full socket for this
        connection to read its results. Cancellable as every call is (the connection is
        then broken); libpq must have pipeline mode (14 or later:
        ``psycopg.capabilities.has_pipeline()``)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.broken:
            raise ConnectionFailed("the connection was abandoned by an interrupted statement")
        pgconn = self.pgconn
        preparing: dict[str, bytes] = {}  # SQL -> the name this pipeline prepares it as
        prepares: list[tuple[int, str]] = []  # (position of the prepare in the results, SQL)
        queries: list[int] = []  # the position of each statement's results
        try:
            pgconn.enter_pipeline_mode()
            for sql, params in statements:
                values, types, formats = _encoded(params)
                name = self.statements.get(sql) or preparing.get(sql)
                if name is None:
                    name = preparing[sql] = f"pai_{len(self.statements) + len(preparing)}".encode()
                    pgconn.send_prepare(name, sql.encode(), types)
                    prepares.append((len(queries) + len(prepares), sql))
                pgconn.send_query_prepared(name, values, formats, pq.Format.BINARY)
                queries.append(len(queries) + len(prepares))
            pgconn.pipeline_sync()
            while pgconn.flush():  # the rest, as the socket takes it
                await _readable_or_writable(pgconn.socket)
                pgconn.consume_input()  # (what the server answered meanwhile)
            results = await self._pipeline_results(len(queries) + len(prepares))
            end = await self._get_result()  # the Sync's own result ends the pipeline
            if end is None or end.status != pq.ExecStatus.PIPELINE_SYNC:
                raise ConnectionFailed("the server's answers to a pipeline ended out of step")
            pgconn.exit_pipeline_mode()
        except psycopg.Error as exc:  # libpq lost the connection
            self._abandon()
            raise ConnectionFailed(pgconn.get_error_message()) from exc
        except BaseException:  # cancelled or interrupted with the pipeline in flight
            self._abandon()
            raise
        for position, sql in prepares:  # (a prepare the pipeline did not run is not kept)
            if results[position].status == pq.ExecStatus.COMMAND_OK:
                self.statements[sql] = preparing[sql]
        return [results[position] for position in queries]

    async def fetch_many(self, statements: Sequence[Statement]) -> list[list[Row]]:
        """The rows of each of ``statements``, run in one :meth:`pipeline` (one round trip);
        the first that failed raises its :class:`ServerError`."""
        return [_rows([result]) for result in await self.pipeline(statements)]

    async def _pipeline_results(self, count: int) -> list[PGresult]:
        """In a pipeline, the results of its next ``count`` commands (each command's last
        result; its error if it failed), waiting on the socket only when libpq has not read
        the next one whole yet. (One loop, not a call per result: a group of a hundred
        statements was two hundred coroutines.)"""
        pgconn = self.pgconn
        results: list[PGresult] = []
        last: PGresult | None = None
        while len(results) < count:
            while pgconn.is_busy():
                await trio.lowlevel.wait_readable(pgconn.socket)
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is not None:  # (a command's results go on until a None)
                if last is None or last.status != pq.ExecStatus.FATAL_ERROR:
                    last = result
                continue
            if last is None or pgconn.status == pq.ConnStatus.BAD:
                raise ConnectionFailed(
                    pgconn.get_error_message() or "the server closed the connection"
                )
            results.append(last)
            last = None
        return results

    async def _round_trip(self, send: Callable[..., None], *args: Any) -> list[PGresult]:
        """``send(*args)``, then the results, waiting on the socket in between."""
        pgconn = self.pgconn
        try:
            send(*args)
            while pgconn.flush():  # a large statement: the rest, as the socket takes it
                await trio.lowlevel.wait_writable(pgconn.socket)
            results = []
            while True:
                result = await self._get_result()
                if result is None:
                    break
                results.append(result)
            if pgconn.status == pq.ConnStatus.BAD:  # the server closed the connection
                raise ConnectionFailed(pgconn.get_error_message())
            return results
        except psycopg.Error as exc:  # libpq lost the connection
            self._abandon()
            raise ConnectionFailed(pgconn.get_error_message()) from exc
        except BaseException:  # cancelled or interrupted with the statement in flight; or BAD
            self._abandon()
            raise

    async def _get_result(self) -> PGresult | None:
        """libpq's next result, once it has read it whole (``None``: a command's results
        ended)."""
        pgconn = self.pgconn
        while pgconn.is_busy():
            await trio.lowlevel.wait_readable(pgconn.socket)
            pgconn.consume_input()
        return pgconn.get_result()

    def _abandon(self) -> None:
        """Cancel what the server runs for this connection and close it, in a worker thread."""
        self.broken = True
        trio.lowlevel.start_thread_soon(
            partial(_cancel_and_close, self.pgconn), _nothing, name="pai_actors postgres cancel"
        )


async def _readable_or_writable(socket: int) -> None:
    """Wait until ``socket`` can be read or written, whichever comes first."""
    async with trio.open_nursery() as nursery:

        async def wait(ready: Callable[[int], Awaitable[None]]) -> None:
            await ready(socket)
            nursery.cancel_scope.cancel()

        nursery.start_soon(wait, trio.lowlevel.wait_readable)
        nursery.start_soon(wait, trio.lowlevel.wait_writable)


def _cancel_and_close(pgconn: PGconn) -> None:
    """Ask the server to cancel the connection's statement, then close the connection."""
    try:
        if pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
            if psycopg.capabilities.has_cancel_safe():  # libpq >= 17: encrypted if the
                pgconn.cancel_conn().blocking()  # connection is
            else:
                pgconn.get_cancel().cancel()
    except psycopg.Error:
        pass  # the server is gone or refused: closing the connection is all that is left
    finally:
        pgconn.finish()


def _nothing(_: object) -> None:
    """What :func:`_cancel_and_close` ends with has no one to go to: the caller has left."""


def _encoded(
    params: Sequence[Param],
) -> tuple[list[bytes | None], list[int], list[int]]:
    """libpq's values, type OIDs and formats (all binary) for ``params``."""
    values: list[bytes | None] = []
    types: list[int] = []
    for value in params:
        kind = type(value)
        if kind is str:  # the most frequent first (ids, JSON)
            values.append(value.encode())  # type: ignore[union-attr]
            types.append(_TEXT)
        elif value is None:
            values.append(None)
            types.append(0)  # the statement's context (or a cast) gives the type
        elif kind is bool:  # before int: a bool is an int
            values.append(b"\x01" if value else b"\x00")
            types.append(_BOOL)
        elif kind is int:
            values.append(_INT8.pack(value))
            types.append(_INT8_OID)
        elif isinstance(value, str):  # (a subclass: as its text)
            values.append(str.encode(value))
            types.append(_TEXT)
        elif isinstance(value, int):  # (a subclass, an IntEnum say: as its number)
            values.append(_INT8.pack(int(value)))
            types.append(_INT8_OID)
        else:
            values.append(bytes(value))
            types.append(_BYTEA)
    return values, types, [1] * len(values)


def _checked(results: list[PGresult]) -> PGresult:
    """The statement's result, or its :class:`ServerError`."""
    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE) or b"?????"
            message = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b""
            raise ServerError(sqlstate.decode(), message.decode(errors="replace"))
    return results[-1]


def _rows(results: list[PGresult]) -> list[Row]:
    result = _checked(results)
    decoders = [_decoder(result.ftype(column)) for column in range(result.nfields)]
    value = result.get_value
    return [
        tuple(
            None if (raw := value(row, column)) is None else decode(raw)
            for column, decode in enumerate(decoders)
        )
        for row in range(result.ntuples)
    ]


def _count(results: list[PGresult]) -> int:
    return _checked(results).command_tuples or 0


def _decoder(oid: int) -> Callable[[bytes], Any]:
    try:
        return _DECODERS[oid]
    except KeyError:
        raise TypeError(
            f"a statement returned a column of type OID {oid}; add its decoder to _DECODERS"
        ) from None


def _integer(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


_BOOL, _BYTEA, _INT8_OID, _TEXT = 16, 17, 20, 25
_INT8 = struct.Struct("!q")
_DECODERS: dict[int, Callable[[bytes], Any]] = {
    _BOOL: lambda raw: raw == b"\x01",
    _BYTEA: bytes,
    _INT8_OID: _integer,
    21: _integer,  # int2
    23: _integer,  # int4
    _TEXT: bytes.decode,
    19: bytes.decode,  # name (the catalogs' identifiers)
    1043: bytes.decode,  # varchar
}
"""Binary decoders by type OID: the types the store's statements return."""
