"""Both sides of the ``postgres_driver`` figures: ``PostgresStore`` as shipped (libpq driven
by trio's socket waits), and the same store with its connections replaced by
:class:`ThreadConnection`, psycopg's blocking ``Connection`` with every call made in a worker
thread.

:class:`ThreadConnection` has the interface of ``pai_actors._store.postgres_connection.
Connection`` as the store uses it (``connect``, ``open``, ``fetch``, ``execute``,
``fetch_blocking``, ``execute_blocking``, ``pipeline``, ``fetch_many``, ``in_transaction``,
``broken``, ``close``, ``pgconn``). It is what choice (a) of the store's module text would
have been, written as a psycopg user writes it:

- one blocking ``psycopg.Connection`` per store connection, ``autocommit=True`` (the store
  sends its own ``BEGIN``/``COMMIT``), ``prepare_threshold=0`` (every statement prepared on
  the connection the first time it runs there, as the store's are), ``RawCursor`` (the
  store's ``$1`` placeholders as they are: no translation), binary parameters and results,
  with ``int`` dumped as ``int8`` and ``str`` as ``text`` (the types the store's own encoder
  gives them, so that a prepared statement keeps its parameter types as the store's does);
  rows come back as tuples of the same Python values;
- every call one hop through ``trio.to_thread.run_sync`` (``abandon_on_cancel=True``: a
  cancelled call returns at once; the connection is then broken, and a worker thread asks the
  server to cancel the statement and closes the connection once the abandoned call ended);
- ``pipeline`` and ``fetch_many``: the statements in psycopg's own ``conn.pipeline()`` (one
  cursor each, one ``Sync``), inside one hop; ``pipeline`` returns each cursor's
  ``PGresult`` (binary: the store's group commit reads the epochs as binary ``int8``), a
  refused statement's result and those after it replaced by stand-ins whose ``status`` is
  ``FATAL_ERROR`` / ``PIPELINE_ABORTED``, which is all the store looks at there.

So both sides send the same statements, prepared the same way, in the same round trips; what
differs is how a call waits for the server: a trio wait on the socket, or a worker thread
blocked in psycopg (whose cursors and pipelines cost CPU time of their own).
:class:`SameCallsThreadConnection` isolates the hop: the store's own ``psycopg.pq`` calls,
encoders and decoders, made blocking in the worker thread.

:func:`installed` puts a thread version in place of ``Connection`` in every module of
``pai_actors._store`` that imported it, before any store is made, in a baseline's side
process only (and puts the store's class back when the side returns).

Each side (:func:`w1`, :func:`reads`) runs in a fresh process started by
:func:`benchmarks._harness.fresh` and imports the same modules whichever driver it runs.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Literal, Self, TypeVar

import psycopg
import trio
from psycopg import pq
from psycopg.pq.abc import PGconn, PGresult
from psycopg.types.numeric import Int8BinaryDumper
from psycopg.types.string import StrBinaryDumper

import pai_actors._store.postgres
import pai_actors._store.postgres_connection as ours
import pai_actors._store.postgres_group
import pai_actors._store.postgres_pool
from pai_actors import PostgresStore

from . import _durable_ours, _pg, _postgres_ours

Driver = Literal["socket waits", "threads", "same calls in threads"]
T = TypeVar("T")

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


class _StandIn:
    """A pipeline's result where psycopg raised instead of returning one."""

    __slots__ = ("status",)
    command_tuples = None
    ntuples = nfields = 0

    def __init__(self, status: pq.ExecStatus) -> None:
        self.status = status


class _Threaded:
    """What both thread versions share: the calls the store makes, each one hop through
    ``trio.to_thread.run_sync`` (see the module's text); one task at a time, as the store
    uses its connections."""

    __slots__ = ("_lock", "broken", "pgconn", "statements")

    calls: ClassVar[dict[str, int]] = {"hops": 0, "pipelines": 0, "pipelined": 0, "abandoned": 0}
    """What every instance did in this process (the side reports it: proof that the store
    ran on these connections, and how many hops they took)."""

    def __init__(self, pgconn: PGconn) -> None:
        self._lock = threading.Lock()  # held by the call in flight
        self.pgconn = pgconn
        self.broken = False
        self.statements: dict[str, bytes] = {}  # SQL -> its prepared statement's name here

    @classmethod
    def connect(cls, conninfo: str) -> Self:
        raise NotImplementedError

    @classmethod
    async def open(cls, conninfo: str) -> _Threaded:
        """Connect in a worker thread; cancellable (a connection made for a caller that
        left is closed)."""
        cls.calls["hops"] += 1
        lock = threading.Lock()
        made: list[_Threaded] = []
        left = False

        def connect() -> _Threaded:
            connection = cls.connect(conninfo)
            with lock:
                if left:
                    connection._finish()
                made.append(connection)
            return connection

        try:
            return await trio.to_thread.run_sync(connect, abandon_on_cancel=True)
        except trio.Cancelled:
            cls.calls["abandoned"] += 1
            with lock:
                left = True
                for connection in made:  # made, but its caller had left
                    connection._finish()
            raise

    @property
    def in_transaction(self) -> bool:
        return bool(self.pgconn.transaction_status != pq.TransactionStatus.IDLE)

    def close(self) -> None:
        if not self.broken:
            self._finish()

    async def fetch(self, sql: str, *params: ours.Param) -> list[ours.Row]:
        return await self._hop(self._fetch, sql, params)

    async def execute(self, sql: str, *params: ours.Param) -> int:
        return await self._hop(self._execute, sql, params)

    def fetch_blocking(self, sql: str, *params: ours.Param) -> list[ours.Row]:
        return self._guarded(self._fetch, sql, params)

    def execute_blocking(self, sql: str, *params: ours.Param) -> int:
        if params:
            return self._guarded(self._execute, sql, params)
        return self._guarded(self._script, sql)  # several statements (a schema)

    async def pipeline(self, statements: Sequence[ours.Statement]) -> list[Any]:
        self.calls["pipelines"] += 1
        self.calls["pipelined"] += len(statements)
        return await self._hop(self._pipeline, statements)

    async def fetch_many(self, statements: Sequence[ours.Statement]) -> list[list[ours.Row]]:
        self.calls["pipelines"] += 1
        self.calls["pipelined"] += len(statements)
        return await self._hop(self._fetch_many, statements)

    # In the worker thread (or, for the blocking calls, the caller's).

    def _fetch(self, sql: str, params: Sequence[ours.Param]) -> list[ours.Row]:
        raise NotImplementedError

    def _execute(self, sql: str, params: Sequence[ours.Param]) -> int:
        raise NotImplementedError

    def _script(self, sql: str) -> int:
        raise NotImplementedError

    def _pipeline(self, statements: Sequence[ours.Statement]) -> list[Any]:
        raise NotImplementedError

    def _fetch_many(self, statements: Sequence[ours.Statement]) -> list[list[ours.Row]]:
        raise NotImplementedError

    def _finish(self) -> None:
        raise NotImplementedError

    def _cancel(self) -> None:
        """Ask the server to cancel the statement in flight (from another thread)."""
        raise NotImplementedError

    def _guarded(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` holding the connection, psycopg's errors as the store's."""
        with self._lock:
            try:
                return call(*args)
            except psycopg.Error as exc:
                if exc.sqlstate is not None and self.pgconn.status == pq.ConnStatus.OK:
                    message = exc.diag.message_primary or str(exc)
                    raise ours.ServerError(exc.sqlstate, message) from None
                self.broken = True  # libpq lost the connection
                self._finish()
                raise ours.ConnectionFailed(str(exc)) from exc

    async def _hop(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` in a worker thread: one hop there and back."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.broken:
            raise ours.ConnectionFailed("the connection was abandoned by an interrupted statement")
        self.calls["hops"] += 1
        try:
            return await trio.to_thread.run_sync(self._guarded, call, *args, abandon_on_cancel=True)
        except trio.Cancelled:
            self.calls["abandoned"] += 1
            self.broken = True
            trio.lowlevel.start_thread_soon(self._cancel_and_close, _nothing)
            raise

    def _cancel_and_close(self) -> None:
        """Ask the server to cancel the abandoned call's statement, then close the
        connection once that call ended."""
        try:
            self._cancel()
        except psycopg.Error:
            pass
        finally:
            with self._lock:
                self._finish()


def _nothing(_: object) -> None:
    """What :meth:`_Threaded._cancel_and_close` ends with has no one to go to."""


class ThreadConnection(_Threaded):
    """psycopg's blocking ``Connection``: its cursors and its pipelines (see the module's
    text)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        super().__init__(conn.pgconn)
        self._conn = conn

    @classmethod
    def connect(cls, conninfo: str) -> Self:
        try:
            conn = psycopg.Connection.connect(
                conninfo, autocommit=True, prepare_threshold=0, cursor_factory=psycopg.RawCursor
            )
        except psycopg.Error as exc:
            raise ours.ConnectionFailed(str(exc)) from None
        conn.adapters.register_dumper(int, Int8BinaryDumper)
        conn.adapters.register_dumper(str, StrBinaryDumper)
        return cls(conn)

    def _fetch(self, sql: str, params: Sequence[ours.Param]) -> list[ours.Row]:
        return _rows(self._conn.execute(sql, params or None, binary=True))

    def _execute(self, sql: str, params: Sequence[ours.Param]) -> int:
        return max(self._conn.execute(sql, params or None, binary=True).rowcount, 0)

    def _script(self, sql: str) -> int:
        return max(self._conn.execute(sql, prepare=False).rowcount, 0)

    def _pipelined(
        self, statements: Sequence[ours.Statement]
    ) -> tuple[list[psycopg.Cursor[Any]], psycopg.Error | None]:
        """The statements in one psycopg pipeline: their cursors, and the server's error
        that stopped it, if one did."""
        cursors: list[psycopg.Cursor[Any]] = []
        try:
            with self._conn.pipeline():
                for sql, params in statements:
                    cursor = self._conn.cursor(binary=True)
                    cursor.execute(sql, params or None)
                    cursors.append(cursor)
        except psycopg.Error as exc:
            if exc.sqlstate is None or self._conn.broken:
                raise
            return cursors, exc
        return cursors, None

    def _pipeline(self, statements: Sequence[ours.Statement]) -> list[Any]:
        cursors, error = self._pipelined(statements)
        results: list[Any] = []
        failed = False
        for cursor in cursors:
            result = cursor.pgresult
            if error is not None and (failed or result is None or result.status not in _OK):
                status = pq.ExecStatus.PIPELINE_ABORTED if failed else pq.ExecStatus.FATAL_ERROR
                results.append(_StandIn(status))
                failed = True
            else:
                results.append(result)
        aborted = _StandIn(pq.ExecStatus.PIPELINE_ABORTED)  # (never sent: psycopg raised)
        return results + [aborted] * (len(statements) - len(results))

    def _fetch_many(self, statements: Sequence[ours.Statement]) -> list[list[ours.Row]]:
        cursors, error = self._pipelined(statements)
        if error is not None:
            raise error
        return [_rows(cursor) for cursor in cursors]

    def _finish(self) -> None:
        self._conn.close()

    def _cancel(self) -> None:
        self._conn.cancel_safe(timeout=5.0)


class SameCallsThreadConnection(_Threaded):
    """The store's own libpq calls (``psycopg.pq``: the same prepared statements, the same
    binary parameters and results, decoded by the store's own functions, the same pipeline),
    made blocking in a worker thread instead of waiting on the socket from the trio thread:
    the hop alone."""

    __slots__ = ()

    @classmethod
    def connect(cls, conninfo: str) -> Self:
        pgconn = pq.PGconn.connect(conninfo.encode())  # blocking, and left so
        if pgconn.status != pq.ConnStatus.OK:
            message = pgconn.get_error_message()
            pgconn.finish()
            raise ours.ConnectionFailed(message)
        return cls(pgconn)

    def _fetch(self, sql: str, params: Sequence[ours.Param]) -> list[ours.Row]:
        return ours._rows([self._exchange(sql, params)])

    def _execute(self, sql: str, params: Sequence[ours.Param]) -> int:
        return ours._count([self._exchange(sql, params)])

    def _script(self, sql: str) -> int:
        return ours._count([self.pgconn.exec_(sql.encode())])

    def _exchange(self, sql: str, params: Sequence[ours.Param]) -> PGresult:
        """As ``Connection._exchange``: prepared here the first time it runs here."""
        pgconn = self.pgconn
        values, types, formats = ours._encoded(params)
        name = self.statements.get(sql)
        if name is None:
            name = f"pai_{len(self.statements)}".encode()
            ours._checked([pgconn.prepare(name, sql.encode(), types)])
            self.statements[sql] = name
        # (a None value is a NULL, as the store sends it; psycopg's stub leaves it out)
        return pgconn.exec_prepared(name, values, formats, pq.Format.BINARY)  # type: ignore[arg-type]

    def _pipeline(self, statements: Sequence[ours.Statement]) -> list[Any]:
        """As ``Connection.pipeline``, blocking (libpq reads while it sends when the socket
        is full, so that the server never waits on this connection)."""
        pgconn = self.pgconn
        preparing: dict[str, bytes] = {}
        prepares: list[tuple[int, str]] = []
        queries: list[int] = []
        pgconn.enter_pipeline_mode()
        for sql, params in statements:
            values, types, formats = ours._encoded(params)
            name = self.statements.get(sql) or preparing.get(sql)
            if name is None:
                name = preparing[sql] = f"pai_{len(self.statements) + len(preparing)}".encode()
                pgconn.send_prepare(name, sql.encode(), types)
                prepares.append((len(queries) + len(prepares), sql))
            pgconn.send_query_prepared(name, values, formats, pq.Format.BINARY)
            queries.append(len(queries) + len(prepares))
        pgconn.pipeline_sync()
        pgconn.flush()
        results = [self._next_results() for _ in range(len(queries) + len(prepares))]
        end = pgconn.get_result()
        if end is None or end.status != pq.ExecStatus.PIPELINE_SYNC:
            raise ours.ConnectionFailed("the server's answers to a pipeline ended out of step")
        pgconn.exit_pipeline_mode()
        for position, sql in prepares:
            if results[position].status == pq.ExecStatus.COMMAND_OK:
                self.statements[sql] = preparing[sql]
        return [results[position] for position in queries]

    def _next_results(self) -> PGresult:
        last: PGresult | None = None
        while (result := self.pgconn.get_result()) is not None:
            if last is None or last.status != pq.ExecStatus.FATAL_ERROR:
                last = result
        if last is None or self.pgconn.status == pq.ConnStatus.BAD:
            raise ours.ConnectionFailed(self.pgconn.get_error_message() or "connection lost")
        return last

    def _fetch_many(self, statements: Sequence[ours.Statement]) -> list[list[ours.Row]]:
        return [ours._rows([result]) for result in self._pipeline(statements)]

    def _finish(self) -> None:
        self.pgconn.finish()

    def _cancel(self) -> None:
        if self.pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
            self.pgconn.get_cancel().cancel()


def _rows(cursor: psycopg.Cursor[Any]) -> list[ours.Row]:
    result = cursor.pgresult
    if result is None or result.status != pq.ExecStatus.TUPLES_OK:
        return []
    return cursor.fetchall()


_MODULES = (
    ours,
    pai_actors._store.postgres,
    pai_actors._store.postgres_pool,
    pai_actors._store.postgres_group,
)


@contextlib.contextmanager
def installed(replacement: type[_Threaded]) -> Iterator[None]:
    """Put ``replacement`` in place of the store's ``Connection`` wherever a module of
    ``pai_actors._store`` imported it (the pool makes them: ``Connection.connect`` and
    ``Connection.open``), until the block ends (a side's process ends with it; a test
    running the side in its own process gets the store's class back)."""
    original = ours.Connection
    modules = [
        module
        for module in list(sys.modules.values())
        if getattr(module, "__name__", "").startswith("pai_actors.")
        and getattr(module, "Connection", None) is original
    ]
    if not set(_MODULES) <= set(modules):
        raise AssertionError("a module of the store no longer imports Connection by name")
    try:
        for module in modules:
            module.Connection = replacement  # type: ignore[attr-defined]
        yield
    finally:
        for module in modules:
            module.Connection = original  # type: ignore[attr-defined]


_DRIVERS: dict[str, type[_Threaded] | None] = {
    "socket waits": None,
    "threads": ThreadConnection,
    "same calls in threads": SameCallsThreadConnection,
}


def _use(driver: Driver) -> contextlib.AbstractContextManager[None]:
    """The connections of ``driver`` in place while the block runs."""
    if driver not in _DRIVERS:
        raise ValueError(f"driver must be one of {sorted(_DRIVERS)}, not {driver!r}")
    replacement = _DRIVERS[driver]
    return contextlib.nullcontext() if replacement is None else installed(replacement)


def _calls(driver: Driver) -> dict[str, int]:
    return {} if _DRIVERS[driver] is None else dict(_Threaded.calls)


def w1(conninfo: str, n: int, driver: Driver) -> dict[str, Any]:
    """W1 as :func:`benchmarks._postgres_ours.w1` runs it (the same conversations, ``n`` trio
    tasks in a nursery on ``PostgresStore(conninfo)`` at its defaults, the same CPU split
    and read-back), on ``driver``'s connections; with a thread version's, how many hops and
    pipelines its connections made in the timed part."""
    database = _pg.database_of(conninfo)

    async def main() -> dict[str, Any]:
        thread_ids: list[str] = []
        with PostgresStore(conninfo) as store:
            async with _postgres_ours.runtime(store) as rt:
                before = _calls(driver)
                cpu = _pg.cpu_times(database)
                start_time = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        nursery.start_soon(_postgres_ours._conversation, rt, i, thread_ids)
                elapsed = time.perf_counter() - start_time
                split = _pg.cpu_since(cpu, database)
                calls = {key: count - before[key] for key, count in _calls(driver).items()}
        _postgres_ours._check_count(thread_ids, n)
        await _postgres_ours._read_back(conninfo, thread_ids, waiting=False)
        return {"seconds": elapsed, "cpu": split, "calls": calls}

    with _use(driver):
        result = trio.run(main)
    return {**result, "settings": _pg.settings(conninfo)}


async def _read_all(store: PostgresStore, thread_id: str, n: int, tasks: int) -> None:
    """``n`` reads of the thread's record (``store.get_thread``: one statement on a store
    without a mirror), shared between ``tasks`` tasks, each reading one after another."""

    async def read(count: int) -> None:
        for _ in range(count):
            if await store.get_thread(thread_id) is None:
                raise AssertionError(f"thread {thread_id} not found")

    async with trio.open_nursery() as nursery:
        for k in range(tasks):
            nursery.start_soon(read, n // tasks + (k < n % tasks))


def reads(conninfo: str, n: int, tasks: int, driver: Driver) -> dict[str, Any]:
    """Seconds for ``n`` single-statement reads (``store.get_thread`` of a thread a runtime
    created, then closed: nothing else runs meanwhile) from one task, then ``n`` from
    ``tasks`` tasks at once, on ``PostgresStore(conninfo, mirror=False)`` (every read a
    statement; the rest at its defaults: a pool of 1 to 4 connections) on ``driver``'s
    connections, after a warm-up of ``4 * tasks`` reads from ``tasks`` tasks (the pool's
    connections opened, the statement prepared on each); each part's CPU split (with a
    thread version, each read checked to be one hop)."""
    database = _pg.database_of(conninfo)

    async def main() -> dict[str, Any]:
        parts: dict[str, Any] = {}
        with PostgresStore(conninfo, mirror=False) as store:
            async with _postgres_ours.runtime(store) as rt:
                thread_id = await rt.create_thread(scope_key=_durable_ours.SCOPE)
            # The runtime closed (nothing else runs): the store's reads alone.
            await _read_all(store, thread_id, 4 * tasks, tasks)
            for name, at_once in (("one", 1), ("many", tasks)):
                before = _calls(driver)
                cpu = _pg.cpu_times(database)
                start = time.perf_counter()
                await _read_all(store, thread_id, n, at_once)
                parts[name] = time.perf_counter() - start
                parts[f"{name}_cpu"] = _pg.cpu_since(cpu, database)
                hops = _calls(driver).get("hops", n) - before.get("hops", 0)
                if hops != n:
                    raise AssertionError(f"{n} reads made {hops} hops, not one each")
        return parts

    with _use(driver):
        result = trio.run(main)
    return {**result, "settings": _pg.settings(conninfo)}
