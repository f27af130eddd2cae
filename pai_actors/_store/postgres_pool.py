"""The connections of a :class:`~pai_actors.PostgresStore`: how it opens one (blocking, at
construction; or from trio), and the pool its reads take theirs from. Kept apart from the
store: the store module holds group commit, the mirror and what each read asks; this one
holds where a statement's connection comes from and what happens when one dies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio

from .._core.errors import StoreError
from .postgres_connection import (
    Connection,
    ConnectionFailed,
    Param,
    Row,
    ServerError,
    Statement,
    pipelining,
)

T = TypeVar("T")


class Connections:
    """Opens the connections of one store, and pools those its reads use: from ``min_size``
    (opened by :meth:`fill`, at construction) to ``max_size`` (opened as reads need them,
    kept until :meth:`close`). ``connect_timeout`` (seconds) bounds every attempt.

    Concurrency contract: :meth:`fetch` is called from the store's trio run by any number of
    tasks at once (at most ``max_size`` of them hold a connection; the others wait, and
    may be cancelled while they do). A connection in use when :meth:`close` is called is
    closed when its statement ends.
    """

    def __init__(
        self, name: str, conninfo: str, *, min_size: int, max_size: int, connect_timeout: float
    ) -> None:
        self.name = name
        self.min_size, self.max_size = min_size, max_size
        self.connect_timeout = connect_timeout
        self._conninfo = conninfo  # may hold the password: never shown
        self._idle: list[Connection] = []  # the pool's connections not in use
        self._readers = _Tokens(max_size)  # a token per connection in use
        self._closed = False
        self.pipelining = pipelining()

    def connect_now(self) -> Connection:
        """A new connection, blocking the calling thread until it is made."""
        try:
            return Connection.connect(self._conninfo)
        except ConnectionFailed as exc:
            raise self._cannot_connect(exc) from exc

    async def connect(self) -> Connection:
        """A new connection, made without blocking the trio thread; cancellable."""
        try:
            with trio.fail_after(self.connect_timeout):
                return await Connection.open(self._conninfo)
        except (ConnectionFailed, trio.TooSlowError) as exc:
            raise self._cannot_connect(exc) from exc

    def fill(self) -> None:
        """Open the pool's first ``min_size`` connections, blocking."""
        while len(self._idle) < self.min_size:
            self._idle.append(self.connect_now())

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def fetch(self, sql: str, *params: Param) -> list[Row]:
        """The rows of one read statement, on a connection of the pool.

        A connection that died while idle (the server restarted, or ended the session)
        fails its next statement: the read is retried once on a new connection, and the
        pool's other idle connections, likely dead of the same cause, are dropped."""
        return await self._retried(lambda db: db.fetch(sql, *params))

    async def fetch_many(self, statements: Sequence[Statement]) -> list[list[Row]]:
        """The rows of each of several read statements, run in one round trip on a
        connection of the pool (libpq's pipeline mode; one after another where libpq has
        none); retried as :meth:`fetch` is."""

        async def read(db: Connection) -> list[list[Row]]:
            if self.pipelining:
                return await db.fetch_many(statements)
            return [await db.fetch(sql, *params) for sql, params in statements]

        return await self._retried(read)

    async def _retried(self, read: Callable[[Connection], Awaitable[T]]) -> T:
        """``read`` on a connection of the pool, once more on a new one if it died idle."""
        for retry in (True, False):
            await self._readers.acquire()
            try:
                db = self._idle.pop() if self._idle else await self.connect()
                try:
                    return await read(db)
                except ConnectionFailed as exc:
                    if not retry:
                        raise self._unreadable(exc) from exc
                    idle, self._idle = self._idle, []
                    for connection in idle:
                        connection.close()
                except ServerError as exc:
                    raise self._unreadable(exc) from exc
                finally:
                    if db.broken:
                        pass  # a worker thread cancels its statement and closes it
                    elif self._closed:
                        db.close()
                    else:
                        self._idle.append(db)
            finally:
                self._readers.release()
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _cannot_connect(self, exc: Exception) -> StoreError:
        why = str(exc).strip() or f"no answer in {self.connect_timeout} s"
        return StoreError(
            f"cannot connect to {self.name!r}: {why}; check that PostgreSQL runs there and "
            "lets this user in"
        )

    def _unreadable(self, exc: Exception) -> StoreError:
        return StoreError(f"PostgreSQL could not read from {self.name!r}: {exc}")


class _Tokens:
    """A semaphore (``trio.Semaphore``'s ``acquire`` and ``release``, first come first
    served) whose waiters wait with nothing else in hand: ``trio.Semaphore`` parks a waiter
    inside its ``except WouldBlock``, so each read waiting for a connection kept that
    exception and its traceback alive, objects the garbage collector scanned again and
    again while thousands of reads waited (a burst of clients loading their threads)."""

    __slots__ = ("_free", "_lot")

    def __init__(self, count: int) -> None:
        self._free = count
        self._lot = trio.lowlevel.ParkingLot()

    @trio.lowlevel.enable_ki_protection
    async def acquire(self) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._free:
            self._free -= 1
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            await self._lot.park()  # woken by release, with its token

    @trio.lowlevel.enable_ki_protection
    def release(self) -> None:
        if self._lot:
            self._lot.unpark()  # (the token goes to the first waiter)
        else:
            self._free += 1
