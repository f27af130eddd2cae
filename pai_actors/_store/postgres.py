""":class:`PostgresStore`: the durable :class:`~pai_actors.Store` on a PostgreSQL database.

It behaves exactly as :class:`~pai_actors.MemoryStore` and :class:`~pai_actors.SqliteStore`
do (the same conflicts in the same words, the same orders, checked by the same conformance
suite), with SQLite's schema in PostgreSQL's types (``_store.postgres_schema``) and the same
statements in PostgreSQL's dialect (``_store.postgres_writes``).

How it runs under trio. psycopg is the driver (``pip install 'pai_actors[postgres]'``), but
its async API is asyncio's, so the choice was between (a) psycopg's blocking calls in worker
threads (``trio.to_thread.run_sync``; psycopg_pool for the connections) and (b) libpq driven
without blocking from the trio thread: psycopg's ``pq`` layer sends a statement and reads its
results with non-blocking calls, and ``trio.lowlevel.wait_readable`` / ``wait_writable``
wait for the connection's socket in between (``_store.postgres_connection``). (b) was
chosen by measurement: the ``postgres_driver`` figures (``docs/performance.md``) run W1 and
single reads both ways; (b) is faster on both, most on reads (each a hop for (a)). And (b)
keeps every wait a trio checkpoint: a cancelled read stops at once, where (a) would have to
abandon a thread that still holds the
connection. The price of (b): the store speaks libpq's protocol itself (a prepared
statement, its binary parameters and results, a cancel request: ``postgres_connection``),
where (a) would have used psycopg's cursors and psycopg_pool; and, like any socket I/O, it
cannot run under ``trio.testing.MockClock(autojump_threshold=0)`` (a wait for the server
looks idle, the clock jumps).

Cancellation. A read is a statement on a connection of the read pool; cancelled while the
server works on it, it returns at once, and a worker thread sends the server a cancel request
and closes that connection (the pool opens another when it needs one). A commit is atomic
with respect to cancellation, as the Store contract requires: cancelled before it joined a
group commit it writes nothing; once it joined one it is not cancellable (the group is
written under a shield, and a cancellation reaches the caller at its next checkpoint), so it
returns applied or raises with nothing of it written. A group waits, shielded, for the
server's answer: for a lock another process's transaction holds, and, if the server stops
answering, until TCP gives up (bound that with ``keepalives_idle`` or ``tcp_user_timeout``
in the URL, and lock waits with the server's ``lock_timeout``). A connection lost while ``COMMIT``
was in flight leaves its outcome unknown, as with any client of a database server; the
:class:`~pai_actors.StoreError` says so.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar

import pydantic
import trio

from .._core.errors import StoreError, ThreadOwnedElsewhere
from .._core.parts import Message, ToolDataItem
from .._core.records import (
    OpenAction,
    RunRecord,
    StoredCall,
    StoredFileBody,
    ThreadRecord,
    UploadedFile,
)
from .._core.updates import ThreadUpdateOrDelta
from .base import (
    ClosingStore,
    Transaction,
    Write,
    expiring_actions,
    open_actions,
)
from .postgres_connection import (
    Connection,
    ConnectionFailed,
    Param,
    Row,
    ServerError,
    parse_conninfo,
    require_psycopg,
)
from .postgres_group import Commit, stopped, thread_ids, write_pipelined
from .postgres_owners import CHANGES, OWNERS_TABLE, Owners, orphaned_threads
from .postgres_pool import Connections
from .postgres_requests import (
    ANSWERED,
    REQUESTED,
    REQUESTS_TABLE,
    open_requests,
    take_answer,
    withdraw,
)
from .postgres_requests import answer as answer_request
from .postgres_requests import forward as forward_request
from .postgres_schema import migrate
from .postgres_updates import (
    LIVE,
    PRUNE_EVERY,
    UPDATES_TABLE,
    WATCHING,
    LoggedCommit,
    decode_live,
    last_logged,
    live_payloads,
    logged_since,
    prune,
)
from .postgres_writes import apply_writes
from .sqlite import _messages
from .sqlite_mirror import Mirror, MirroredThread
from .sqlite_writes import instant_us

R = TypeVar("R", bound=pydantic.BaseModel)

_log = logging.getLogger("pai_actors.store")

WRITERS = 2
"""How many groups a store without a ``node_id`` writes at once, each in a transaction on a
connection of its own (a thread's commits never in two at once: they reach the server in
the order made). A node writes one at a time (see ``GROUP_LIMIT``)."""

GROUP_LIMIT = 128
"""The most commits a group of a store without a ``node_id`` takes; those of a larger burst
form the next group, written on the other connection meanwhile. A burst the size of the
runtime's active runs (256 by default) is then two groups: the server writes one while the
process works on the commits of the other, instead of the process idling while the server
writes it all. A node's groups take every commit waiting, one group at a time, as before:
nodes sharing a machine's cores had nothing idle for the split to use and lost by it (see
``docs/design.md``)."""

MIRRORED_IDLE_THREADS = 1024
"""How many threads without a ``running`` run a :class:`PostgresStore` keeps in memory besides
those with one (SQLite's store keeps 256, ``_store.sqlite_mirror``): as many as the runtime
remembers as loaded (``_runtime.loading.INDEX_CAPACITY``). The runtime reads such a thread's
pending actions, runs and calls from the store without loading it again; each pushed out of
the mirror before is read whole from the server, a round trip of four statements (a burst of
clients answering their suspended conversations, in the W2 benchmark, read back three in
four of the threads between 256 and 1,024). A node (with a ``node_id``) needs them too: it
gives a thread up whenever its run waits and keeps it to answer its client's next reads
(:meth:`PostgresStore._released`), which wait for a check of its lease, so more of its
conversations wait at once. Each costs its records in memory; a suspended one beyond these
costs its rows only."""


class PostgresStore(ClosingStore):
    """A :class:`~pai_actors.Store` in a PostgreSQL database:
    ``PostgresStore("postgresql://user@host:5432/app")``.

    ``conninfo`` is a ``postgresql://`` URL or a libpq ``key=value`` string. The database is
    connected to (and its schema created, or migrated forward) at construction, which blocks
    the calling thread for that long; ``close()`` the store, or use it as a context manager
    (``with`` or ``async with``). A new store on the same database, in this process or
    another, finds every committed transaction. Versioning: a database written by an older
    release is migrated forward when it is opened; one of a newer release is refused with
    :class:`~pai_actors.StoreError` (upgrade pai_actors to open it). The store names the
    database as a URL without its password (``name``, ``repr``, errors).

    Connections: commits have two of their own (the second opened when two groups are first
    written at once; a node's, one); reads take one from a pool of ``min_size`` (opened at
    construction) to ``max_size`` (opened as reads need them, kept until ``close``).
    ``connect_timeout`` (seconds) bounds every connection attempt.

    ``mirror=True`` (the default) keeps the threads this store last touched in memory
    (``_store.sqlite_mirror``: a read of one runs no query). It assumes that this store
    object is the only writer of those threads: another process, or another store object,
    writing them would go unseen and the mirror would answer with what it replaced. Open
    every store that shares a database with another writer with ``mirror=False``.

    Concurrency contract: every method is atomic with respect to other tasks and to
    cancellation. ``commit`` is a group commit: the commits that arrive while the groups
    before are being written (or in the same scheduler tick), up to ``GROUP_LIMIT`` (128),
    share one PostgreSQL transaction; two groups are written at once, on two connections, but
    never two that write the same thread (its commits reach the server in the order made).
    With a ``node_id``, one group at a time takes every commit waiting.
    Each commit is under its own savepoint in its group, so each either applies its whole
    batch and returns, or raises (:class:`~pai_actors.StoreConflict`, or ``trio.Cancelled``
    before it joined a group) and writes nothing; it learns which only after ``COMMIT``.
    Readers see the last committed state. A store object belongs to one trio run at a time.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        mirror: bool = True,
        connect_timeout: float = 10.0,
        node_id: str | None = None,
        lease: float = 10.0,
    ) -> None:
        require_psycopg()
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ValueError(
                f"min_size={min_size}, max_size={max_size} cannot size a pool; use "
                "0 <= min_size <= max_size and max_size >= 1"
            )
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout={connect_timeout!r}; use a number of seconds > 0")
        owners = None if node_id is None else Owners(node_id, lease)
        self.name, connect_with = parse_conninfo(conninfo, connect_timeout)
        self._connect_with = connect_with
        self._pool = Connections(
            self.name,
            connect_with,
            min_size=min_size,
            max_size=max_size,
            connect_timeout=connect_timeout,
        )
        writer = self._pool.connect_now()
        try:
            migrate(
                writer,
                self.name,
                also=None if owners is None else f"{OWNERS_TABLE};{REQUESTS_TABLE};{UPDATES_TABLE}",
            )
            self._pool.fill()
        except BaseException:
            writer.close()
            self._pool.close()
            raise
        self._idle_writers: list[Connection] = [writer]  # the commits' connections not in use
        self._line: deque[trio.Event] = deque()  # the groups to board, in the order formed
        # (a node's groups: one at a time, and as large as what waits; see GROUP_LIMIT)
        self._writer_slots = trio.Semaphore(WRITERS if owners is None else 1)
        self._group_limit = GROUP_LIMIT if owners is None else math.inf
        self._flights: list[_Flight] = []  # the groups in flight, oldest first
        self._batch: list[Commit] | None = None  # the group commit being gathered
        self._mirror = Mirror(MIRRORED_IDLE_THREADS) if mirror else None
        self._owners = owners
        if owners is not None and self._mirror is not None:
            # Only the owner caches a thread; one it gave up stays as it left it, answering
            # once its lease is found unchanged (:meth:`_released`).
            owners.on_fenced(self._mirror.forget)
            owners.on_given_up(self._retain)
            owners.on_held(self._retake)
        self._check: _Check | None = None  # the released threads' next check, gathering
        self._check_lock = trio.Lock()  # held while a check is read
        self._writing: set[str] = set()  # the threads the groups in flight write (each in one)
        self._loading: dict[str, _Load] = {}  # the threads being read into the mirror
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresStore({self.name!r})"

    def close(self) -> None:
        """Close the connections; further calls raise :class:`~pai_actors.StoreError`.
        A connection in use closes when its statement ends. Closing twice is harmless."""
        self._closed = True
        self._pool.close()
        for db in self._idle_writers:
            db.close()
        self._idle_writers.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self!r} is closed; open the database again with PostgresStore")

    async def _fetch(self, sql: str, *params: Param) -> list[Row]:
        self._check_open()
        return await self._pool.fetch(sql, *params)

    # Writes.

    def transaction(self) -> Transaction:
        return Transaction(self)

    @trio.lowlevel.enable_ki_protection  # a Ctrl-C inside would strand the group (see below)
    async def commit(self, writes: Sequence[Write]) -> None:
        """Apply ``writes`` atomically: group commit.

        A commit that finds no group gathering leads one: it waits (shielded) for the group
        before it to be written, the commits arriving meanwhile joining it, then writes them
        all in one PostgreSQL transaction, each under its own savepoint: a conflict refuses
        that writer's batch alone, in the order they joined. Once a commit has joined a group
        it is not cancellable: it returns applied, or raises with nothing of it written. A
        ``KeyboardInterrupt`` waits, as a cancellation does, for the caller's next
        checkpoint: arriving inside, it would leave a leader's group never written (every
        later commit joining it) or a joiner listed for a wake-up after it left.
        """
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        mine = Commit(writes, pipelined=self._pool.pipelining, log_as=self.node_id)
        group = self._batch
        if group is not None and len(group) < self._group_limit:  # a leader gathers: join it
            group.append(mine)
            # Parked until the leader has written the group, and not cancellable meanwhile
            # (as under a shield, a cancel reaches the caller at its next checkpoint).
            mine.waiting = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(_not_now)
        else:
            group = self._batch = [mine]
            turn = self._join_line()  # (groups formed in one tick board in that order)
            with trio.CancelScope(shield=True):
                await trio.lowlevel.checkpoint()  # let this tick's writers join
                try:
                    flight = await self._board(turn, functools.partial(thread_ids, group))
                except BaseException as exc:  # (a write of no known kind): none is written
                    if self._batch is group:
                        self._batch = None
                    for commit in group:
                        commit.error = exc
                        if commit.waiting is not None:
                            trio.lowlevel.reschedule(commit.waiting)
                    raise
                # (no checkpoint since it boarded: nobody joined the group after its threads
                # were taken)
                if self._batch is group:  # (a full group was replaced already)
                    self._batch = None
                await self._write(group, flight)
        if mine.error is not None:
            raise mine.error

    def _join_line(self) -> trio.Event:
        """A place in the line of groups to board, set when it is at the front."""
        turn = trio.Event()
        if not self._line:
            turn.set()
        self._line.append(turn)
        return turn

    def _leave_line(self, turn: trio.Event) -> None:
        line = self._line
        first = line[0] is turn
        line.remove(turn)
        if first and line:
            line[0].set()

    async def _board(self, turn: trio.Event, threads: Callable[[], Iterable[str]]) -> _Flight:
        """Wait for ``turn`` (the groups formed before board first), for a connection, and
        until no group in flight writes any of ``threads()`` (asked again after every wait:
        commits join the group meanwhile), then take off: the flight is in ``_flights`` and
        its threads in ``_writing``. :meth:`_land` ends it."""
        try:
            await turn.wait()
            await self._writer_slots.acquire()
            try:
                while True:
                    wanted = set(threads())
                    ahead = [f for f in self._flights if not wanted.isdisjoint(f.threads)]
                    if not ahead:
                        break
                    await ahead[-1].landed.wait()
            except BaseException:
                self._writer_slots.release()
                raise
        finally:
            self._leave_line(turn)
        flight = _Flight(frozenset(wanted))
        self._flights.append(flight)
        self._writing |= flight.threads  # (no flight writes one of them: see above)
        if self._mirror is not None:
            for thread_id in flight.threads & self._loading.keys():
                self._loading[thread_id].stale = True  # read while this group goes in
        return flight

    def _land(self, flight: _Flight) -> None:
        """A flight ended: its connection idle again (closed if it broke or the store
        did), its threads no longer written, the groups waiting for it free to go."""
        db, flight.db = flight.db, None
        if db is not None:
            if self._closed or db.broken:
                db.close()
            else:
                self._idle_writers.append(db)
        self._flights.remove(flight)
        self._writing -= flight.threads
        self._writer_slots.release()
        flight.landed.set()

    async def _write(self, group: list[Commit], flight: _Flight) -> None:
        """Write a group in one transaction: pipelined (``_store.postgres_group``), or, when
        that finds a commit refused, carefully (:meth:`_write_carefully`)."""
        committing = False
        try:
            try:
                db = await self._writer_connection(flight)
                written = False
                if self._pool.pipelining:  # the fast way first (_store.postgres_group)
                    try:
                        written = await write_pipelined(db, group, self._owners)
                    except ConnectionFailed:  # no COMMIT was sent: nothing of it was written
                        db = await self._writer_connection(flight)
                if not written:
                    db = await self._write_carefully(flight, group)
                if db.in_transaction:
                    committing = True
                    await db.execute("COMMIT")
                self._mirror_commits(group)
                if self._owners is not None:
                    for commit in group:
                        if commit.error is None:
                            self._owners.hold(commit.claimed)
                            self._owners.given_up(commit.released)
            except BaseException as exc:
                on = flight.db  # (the one it wrote on last)
                if on is not None and not on.broken and on.in_transaction:
                    await on.execute("ROLLBACK")
                if isinstance(exc, ServerError | ConnectionFailed):
                    raise self._failed(exc, committing=committing) from exc
                raise
        except BaseException as exc:  # nothing of the group was written (or, see _failed)
            if self._mirror is not None:
                self._mirror.clear()  # it may disagree with the database now: never trust it
                for load in self._loading.values():
                    load.stale = True
            for commit in group:
                commit.error = exc if commit.error is None else commit.error
            if not isinstance(exc, Exception):
                raise
        finally:
            self._land(flight)
            for commit in group:
                if commit.waiting is not None:
                    trio.lowlevel.reschedule(commit.waiting)

    async def _write_carefully(self, flight: _Flight, group: list[Commit]) -> Connection:
        """Write ``group`` a statement at a time, each commit under its own savepoint: a
        refused commit is rolled back alone, and looked into to say why. The connection it
        wrote on (``flight.db``), still in the transaction if a commit is to be written."""
        db = await self._writer_connection(flight)
        try:
            await db.execute("BEGIN")
        except ConnectionFailed:  # it died idle (see Connections.fetch): nothing was sent
            db = await self._writer_connection(flight)
            await db.execute("BEGIN")
        alone = len(group) == 1  # no savepoint needed: a conflict refuses it all
        renewed = None  # (the group's held leases renewed in one statement)
        if self._owners is not None and not alone:
            renewed = await self._owners.renew_held(db, thread_ids(group))
        for commit in group:
            if not alone:
                await db.execute("SAVEPOINT one_commit")
            try:
                if self._owners is not None:
                    commit.claimed = await self._claim(db, commit, alone, renewed)
                undo = "ROLLBACK" if alone else "ROLLBACK TO SAVEPOINT one_commit"
                await apply_writes(db, commit.writes, undo=undo)
                await self._log(db, commit, undo)
                if self._owners is not None:
                    commit.released = await self._owners.release(
                        db, commit.claimed, stopped(commit)
                    )
            except StoreError as exc:
                commit.error = exc
            except ServerError as exc:
                commit.error = StoreError(f"PostgreSQL refused a commit to {self.name!r}: {exc}")
            if not alone:
                await db.execute("RELEASE SAVEPOINT one_commit")
        if db.in_transaction and self._owners is not None:  # the other nodes learn it at COMMIT
            await self._owners.announce(db, thread_ids([c for c in group if c.error is None]))
        return db

    async def _log(self, db: Connection, commit: Commit, undo: str) -> None:
        """Log the updates ``commit`` shows, in its transaction (with a ``node_id``)."""
        for sql, params in commit.log:
            try:
                await db.execute(sql, *params)
            except ServerError:
                await db.execute(undo)
                raise

    async def _claim(
        self, db: Connection, commit: Commit, alone: bool, renewed: set[str] | None
    ) -> dict[str, int]:
        """The leases of the threads ``commit`` writes, renewed or taken in its transaction
        (``_store.postgres_owners``); refused (rolled back to its savepoint) when another node
        owns one, or this node lost one."""
        assert self._owners is not None
        try:
            return await self._owners.claim(db, thread_ids([commit]), renewed)
        except StoreError:
            await db.execute("ROLLBACK" if alone else "ROLLBACK TO SAVEPOINT one_commit")
            raise

    # -- nodes (``node_id``): leases, and the threads of a node that stopped -----------------

    @property
    def node_id(self) -> str | None:
        """The node this store writes as (``None``: it shares the database with no other)."""
        return None if self._owners is None else self._owners.node_id

    @property
    def lease(self) -> float:
        """How long (seconds) this node's lease of a thread lasts past its last renewal."""
        return self._need_owners().lease

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(thread_id)`` whenever this node stops owning a thread (what it
        caches of it must go). Only for a store with a ``node_id``."""
        self._need_owners().on_lost(callback)

    def on_fenced(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(thread_id)`` when another node took a thread from this one (its
        lease lapsed while this node drove it): this node's writes of it are refused until
        :meth:`take` takes it again. Only for a store with a ``node_id``."""
        self._need_owners().on_fenced(callback)

    @trio.lowlevel.enable_ki_protection  # a Ctrl-C inside could keep its place or slot
    async def take(self, thread_id: str) -> bool:
        """Take ``thread_id`` for this node now (its lease, in a transaction of its own),
        as a node does before it recovers a run it finds with no live owner; ``False`` when
        another node owns it. Lifts the fence of a thread this node lost. Only for a store
        with a ``node_id``."""
        owners = self._need_owners()
        owners.fenced.discard(thread_id)
        flight = await self._board(self._join_line(), lambda: [thread_id])
        try:
            db = await self._writer_connection(flight)
            await db.execute("BEGIN")
            try:
                claimed = await owners.claim(db, [thread_id])
            except ThreadOwnedElsewhere:
                await db.execute("ROLLBACK")
                return False
            except BaseException:
                if not db.broken and db.in_transaction:
                    with trio.CancelScope(shield=True):
                        await db.execute("ROLLBACK")
                raise
            with trio.CancelScope(shield=True):
                await db.execute("COMMIT")
            owners.hold(claimed)
        finally:
            self._land(flight)
        return True

    async def keep_leases(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Renew this node's leases, and give up those of threads with no running run, at
        once and then every third of a lease, until cancelled (run it in a nursery beside
        the runtime; ``nursery.start`` returns after the first round). A round the database
        fails (unreachable, or a statement it aborted) is logged and tried again at the
        next: a node cut off for longer than its lease loses its threads, safely (fencing)."""
        owners = self._need_owners()
        pruned_at = -math.inf
        while True:
            try:
                await owners.renew(self._pool)
                await owners.release_idle(self._pool)
            except StoreError:
                _log.warning("renewing the leases of node %r failed", owners.node_id, exc_info=True)
            if trio.current_time() - pruned_at >= PRUNE_EVERY:
                pruned_at = trio.current_time()
                try:
                    await prune(self._pool)
                except StoreError:
                    _log.warning("pruning the update log failed", exc_info=True)
            task_status.started()
            task_status = trio.TASK_STATUS_IGNORED
            await trio.sleep(owners.lease / 3)

    async def orphaned_threads(self, limit: int = 100) -> list[str]:
        """Threads with a running run whose owner's lease expired (or that have none): a
        node stopped while it drove them. Loading one in a runtime recovers it as a restart
        does (:meth:`~pai_actors.AgentRuntime.get_state`)."""
        self._need_owners()
        return await orphaned_threads(self._pool, limit)

    async def follow_other_nodes(
        self,
        changed: Callable[[str, int], None],
        *,
        requested: Callable[[str], None] | None = None,
        answered: Callable[[int], None] | None = None,
        live: Callable[[ThreadUpdateOrDelta], None] | None = None,
        watching: Callable[[str], None] | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Call ``changed(thread_id, logged)`` each time another node commits a change to a
        thread (``logged``: the number of its last row in the update log then, see
        :meth:`logged_since`), until cancelled: a connection of its own ``LISTEN``s to what
        every node's commits announce (``NOTIFY``, delivered at commit, in commit order);
        this node's own are left out. With ``requested``, also ``requested(thread_id)`` when
        another node stores a request for the owner of ``thread_id`` (:meth:`forward`); with
        ``answered``, ``answered(request_id)`` when a node answers one; with ``live``,
        ``live(update)`` for each update another node sent its watchers without storing it
        (:meth:`send_live`), in order with the changes; with ``watching``,
        ``watching(thread_id)`` when another node says it has watchers of the thread
        (:meth:`announce_watching`). ``nursery.start`` returns once it listens."""
        node_id = self._need_owners().node_id
        channels = [CHANGES, REQUESTED, ANSWERED, LIVE, WATCHING]
        db = await self._pool.connect()
        try:
            for channel in channels:
                await db.execute(f"LISTEN {channel}")
            task_status.started()
            pgconn = db.pgconn
            while True:
                await trio.lowlevel.wait_readable(pgconn.socket)
                pgconn.consume_input()
                own = self._writer_pids()
                while (note := pgconn.notifies()) is not None:
                    channel, extra = note.relname.decode(), note.extra.decode()
                    if channel == ANSWERED:
                        if answered is not None:
                            answered(int(extra))
                    elif channel == REQUESTED:
                        if requested is not None:
                            requested(extra)
                    elif channel == CHANGES:
                        if note.be_pid not in own:
                            thread_id, _, logged = extra.rpartition(" ")
                            changed(thread_id, int(logged))
                    else:  # LIVE or WATCHING: [node id, what it says]
                        sender, said = json.loads(extra)
                        if sender == node_id:
                            continue  # its own
                        if channel == LIVE and live is not None:
                            live(decode_live(said))
                        elif channel == WATCHING and watching is not None:
                            watching(said)
        finally:
            db.close()

    async def send_live(self, updates: Sequence[ThreadUpdateOrDelta]) -> None:
        """Send ``updates`` (never stored: text fragments and transient tool data) to the
        other nodes' watchers of their threads, at once (``live``, see
        :meth:`follow_other_nodes`). An update too large for a notification is left out
        (``_store.postgres_updates.live_payloads``)."""
        self._check_open()
        payloads = live_payloads(self._need_owners().node_id, updates)
        if payloads:
            await self._pool.fetch(_SEND, json.dumps(payloads))

    async def announce_watching(self, thread_ids: Sequence[str]) -> None:
        """Tell the other nodes that this one has watchers of ``thread_ids`` (``watching``,
        see :meth:`follow_other_nodes`): the node running one sends them what it never
        stores (:meth:`send_live`). Said again while they watch (it lasts a lease)."""
        self._check_open()
        node_id = self._need_owners().node_id
        if thread_ids:
            said = [json.dumps([node_id, thread_id]) for thread_id in sorted(set(thread_ids))]
            await self._pool.fetch(_ANNOUNCE_WATCHING, json.dumps(said))

    async def logged_since(self, thread_id: str, seq: int) -> list[LoggedCommit]:
        """The changes of ``thread_id`` committed after the ``seq``-th (by any node), as
        the updates each showed its watchers, in commit order (``_store.postgres_updates``).
        Rows older than a minute may be gone: a first ``prev`` that is not ``seq`` says
        so. Only for a store with a ``node_id``."""
        self._need_owners()
        return await logged_since(self._pool, thread_id, seq)

    async def last_logged(self, thread_id: str) -> int:
        """The number of the last change of ``thread_id`` in the log (0: none yet): what
        :meth:`logged_since` goes on from. Only for a store with a ``node_id``."""
        self._need_owners()
        return await last_logged(self._pool, thread_id)

    # -- requests for the node that owns a thread (``_store.postgres_requests``) -------------

    def fenced(self, thread_id: str) -> bool:
        """Whether this node lost ``thread_id`` to another and has not taken it again
        (:meth:`take`): its writes of it are refused meanwhile."""
        return thread_id in self._need_owners().fenced

    def holds(self, thread_id: str) -> bool:
        """Whether this node holds the lease of ``thread_id`` (as far as it knows: a lease
        it lost unknowingly is found lost at its next write or renewal)."""
        return thread_id in self._need_owners().held

    async def forward(self, thread_id: str, request: dict[str, Any]) -> int:
        """Store ``request`` (a JSON object) for the node that owns ``thread_id`` and wake
        that node (``requested``, see :meth:`follow_other_nodes`); the request's id, to
        read its answer with :meth:`take_answer`."""
        self._check_open()
        return await forward_request(self._pool, thread_id, self._need_owners().node_id, request)

    async def open_requests(self, thread_id: str) -> list[tuple[int, dict[str, Any]]]:
        """The requests stored for ``thread_id`` that no node answered yet, oldest first."""
        self._check_open()
        return await open_requests(self._pool, thread_id)

    async def answer(self, request_id: int, answer: dict[str, Any]) -> None:
        """Answer a request (the first answer stands) and wake the node that asked."""
        self._check_open()
        await answer_request(self._pool, request_id, answer)

    async def take_answer(self, request_id: int) -> dict[str, Any] | None:
        """The answer to a request this node stored, deleting it; ``None`` while it has none."""
        self._check_open()
        return await take_answer(self._pool, request_id)

    async def withdraw(self, request_id: int) -> None:
        """Delete a request this node stopped waiting for."""
        self._check_open()
        await withdraw(self._pool, request_id)

    def _need_owners(self) -> Owners:
        if self._owners is None:
            raise StoreError(
                f"{self!r} has no node_id: leases are for stores that share a database with "
                "other nodes; give PostgresStore(..., node_id='a-name-per-process')"
            )
        return self._owners

    async def _writer_connection(self, flight: _Flight) -> Connection:
        """The connection ``flight`` writes on: the one it has, unless that one broke (it is
        closed), or an idle one of the commits', or a new one (not once the store closed)."""
        db = flight.db
        if db is not None and not db.broken:
            return db
        self._check_open()
        if db is not None:
            db.close()
        flight.db = None
        while self._idle_writers:
            db = self._idle_writers.pop()
            if not db.broken:
                flight.db = db
                return db
            db.close()
        flight.db = db = await self._pool.connect()
        return db

    def _writer_pids(self) -> set[int]:
        """The server processes of the commits' connections (the notifications they sent
        are this node's own)."""
        busy = (f.db for f in self._flights if f.db is not None)
        return {db.pgconn.backend_pid for db in (*self._idle_writers, *busy)}

    def _failed(self, exc: ServerError | ConnectionFailed, *, committing: bool) -> StoreError:
        if committing and isinstance(exc, ConnectionFailed):
            return StoreError(
                f"the connection to {self.name!r} broke while COMMIT was in flight ({exc}): "
                "the group's commits may or may not have been applied; read them back"
            )
        return StoreError(f"PostgreSQL refused a commit to {self.name!r}: {exc}")

    def _mirror_commits(self, group: list[Commit]) -> None:
        """Apply to the mirror the commits of ``group`` PostgreSQL applied. A mirror that
        cannot take one is dropped, never trusted, and the commits stand: they are written."""
        mirror = self._mirror
        if mirror is None:
            return
        try:
            for commit in group:
                if commit.error is None:
                    mirror.apply(commit.writes)
        except Exception:
            mirror.clear()
            for load in self._loading.values():
                load.stale = True

    # Reads: one statement on a connection of the pool (a snapshot of the last commit), or
    # the mirror, after a cancellation point only (it waits for nothing).

    async def _mirrored(self, thread_id: str) -> MirroredThread | _NoThread | None:
        """The thread as the mirror holds it, read into it first if it is not there;
        :data:`_NO_THREAD` when that read found no such thread; ``None`` when the mirror
        cannot answer (it is off, a commit to the thread is in flight, so the server may
        already show what the mirror does not yet, or another node may write it: this node
        does not own it; or a group writing the thread went to the server while it was
        read)."""
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        mirror = self._mirror
        if mirror is None or thread_id in self._writing:
            return None
        if not self._owns(thread_id):
            return await self._released(thread_id)
        found = mirror.thread(thread_id)
        if found is not None:
            return found
        load = self._loading.get(thread_id)
        if load is not None:  # another task is reading it in: what it finds
            await load.done.wait()
            return self._mirrored_now(thread_id)
        # Read while groups are written, not between them (waiting for the writer would
        # put every read of a thread not mirrored in line with every commit); a group that
        # writes the thread and goes to the server meanwhile makes what is read stale (it
        # may hold that group or not, and the mirror applies a group once it committed):
        # then it is not mirrored, and the caller reads from the server.
        load = self._loading[thread_id] = _Load()
        try:
            rows, messages, runs, calls = await self._pool.fetch_many(
                [(sql, (thread_id,)) for sql in (_THREAD, _MESSAGES, _RUNS, _CALLS)]
            )
        finally:
            del self._loading[thread_id]
            load.done.set()
        if load.stale or self._closed or not self._owns(thread_id):
            return None
        if not rows:  # (read after the call began, and nothing was writing it)
            return _NO_THREAD
        return mirror.load(
            _load(ThreadRecord, rows[0][0]),
            _messages(messages),
            _loaded(RunRecord, runs),
            _loaded(StoredCall, calls),
        )

    def _mirrored_now(self, thread_id: str) -> MirroredThread | None:
        """The thread if the mirror holds it and may answer for it; no read into it."""
        if self._mirror is None or thread_id in self._writing or not self._owns(thread_id):
            return None
        return self._mirror.thread(thread_id)

    def _owns(self, thread_id: str) -> bool:
        return self._owners is None or thread_id in self._owners.held

    # A node's threads it gave up. A node gives up a thread's lease when the thread's run
    # waits or ends (``_store.postgres_owners``), most often to take it again a moment later
    # (the client answers the action it waits on, here). The mirror keeps such a thread as
    # the node left it, marked with the epoch it gave the lease up at, and answers a read
    # of it once a check sent after the read began finds this node's lease row at that
    # epoch still: any other node that wrote the thread since took its lease first, in the
    # transaction of its write, which raised the epoch. So the answer is the database's
    # at the check, and the checks of every such read meanwhile are one statement. When
    # this node takes the thread again at the next epoch, nobody wrote it in between: the
    # mirror holds it as before; at any other, it is forgotten.

    def _retain(self, thread_id: str, epoch: int) -> None:
        """This node gave up ``thread_id``'s lease, held at ``epoch`` (``Owners.on_given_up``)."""
        mirror = self._mirror
        thread = None if mirror is None else mirror.threads.get(thread_id)
        if mirror is None or thread is None:
            return
        if thread.released is None or epoch == thread.released + 1:
            thread.released = epoch  # (or taken and given up in one commit, continuously)
        else:
            mirror.forget(thread_id)

    def _retake(self, thread_id: str, epoch: int) -> None:
        """This node holds ``thread_id`` at ``epoch`` (``Owners.on_held``)."""
        mirror = self._mirror
        thread = None if mirror is None else mirror.threads.get(thread_id)
        if mirror is None or thread is None or thread.released is None:
            return
        if epoch == thread.released + 1:
            thread.released = None
        else:
            mirror.forget(thread_id)

    async def _released(self, thread_id: str) -> MirroredThread | None:
        """A thread this node gave up, as the mirror holds it, if no other node wrote it
        since (checked after this call began); ``None`` otherwise (read it from the server)."""
        mirror = self._mirror
        found = None if mirror is None else mirror.thread(thread_id)
        if mirror is None or found is None or found.released is None:
            return None
        if thread_id in self._writing:
            return None
        epoch = found.released
        check = self._check
        if check is None:  # the first reader sends the check
            check = self._check = _Check()
            check.epochs[thread_id] = epoch
            await self._run_check(check)
        else:
            checked = check.epochs.setdefault(thread_id, epoch)
            await check.done.wait()
            if checked != epoch:
                return None  # (this node's commits moved the epoch before the check)
        if mirror.threads.get(thread_id) is not found or thread_id in self._writing:
            return None  # forgotten, or being written, meanwhile
        if check.changed is None:
            return None  # the check failed: the server says why
        if thread_id in check.changed:
            if found.released == epoch:
                mirror.forget(thread_id)  # another node took it since
            return None
        # As found at the check; or, taken (and given up) since by this node, continuously:
        # as it was at that later commit.
        return found

    async def _run_check(self, check: _Check) -> None:
        """Read the epochs of ``check``'s threads once the check before it was read (one at
        a time: the threads that come meanwhile join the next one)."""
        assert self._owners is not None
        try:
            async with self._check_lock:
                if self._check is check:
                    self._check = None  # closed: what comes now is read by the next
                try:
                    check.changed = await self._owners.changed(self._pool, check.epochs)
                except StoreError:
                    pass  # (each reader reads from the server, which says what failed)
        finally:
            if self._check is check:
                self._check = None
            check.done.set()

    async def _answering(self, thread_id: str) -> MirroredThread | None:
        """The mirrored thread that may answer a read now, without reading it in: owned
        and mirrored, or given up and unchanged since (:meth:`_released`)."""
        if self._owns(thread_id):
            return self._mirrored_now(thread_id)
        return await self._released(thread_id)

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        # A thread's record never changes: the mirror answers for it even while a group
        # that writes the thread is in flight, or once another node owns it.
        mirrored = None if self._mirror is None else self._mirror.thread(thread_id)
        if mirrored is not None:
            return mirrored.record
        # Not in memory: read whole into the mirror, in one round trip, as the runtime
        # reads the rest of a thread right after its record (or found missing in it).
        read = await self._mirrored(thread_id)
        if read is not None:
            return read.record
        rows = await self._fetch(_THREAD, thread_id)
        return _load(ThreadRecord, rows[0][0]) if rows else None

    async def list_threads(self, scope_key: str) -> list[ThreadRecord]:
        rows = await self._fetch(
            "SELECT json FROM threads WHERE scope_key = $1 ORDER BY seq", scope_key
        )
        return _loaded(ThreadRecord, rows)

    async def list_messages(self, thread_id: str) -> list[Message]:
        thread = await self._mirrored(thread_id)
        if thread is not None:
            return list(thread.messages)
        return _messages(await self._fetch(_MESSAGES, thread_id))

    async def get_run(self, run_id: str) -> RunRecord | None:
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        found = None if self._mirror is None else self._mirror.run(run_id)
        if found is not None and found.thread_id not in self._writing:
            if self._owns(found.thread_id):
                return found
            thread = await self._released(found.thread_id)
            if thread is not None:
                return thread.runs.get(run_id)
        rows = await self._fetch("SELECT json FROM runs WHERE run_id = $1", run_id)
        return _load(RunRecord, rows[0][0]) if rows else None

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        thread = await self._mirrored(thread_id)
        if thread is not None:
            return list(thread.runs.values())
        return _loaded(RunRecord, await self._fetch(_RUNS, thread_id))

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        thread = await self._answering(thread_id)
        if thread is not None:
            return next((run for run in thread.runs.values() if run.active), None)
        # Not mirrored: one indexed read, not the whole thread (a tree of sub-agent runs
        # asks this of threads it does not otherwise read).
        rows = await self._fetch("SELECT json FROM runs WHERE thread_id = $1 AND active", thread_id)
        return _load(RunRecord, rows[0][0]) if rows else None

    async def get_call(self, thread_id: str, tool_call_id: str) -> StoredCall | None:
        thread = await self._mirrored(thread_id)
        if thread is not None:
            return thread.calls.get(tool_call_id)
        rows = await self._fetch(
            "SELECT json FROM calls WHERE thread_id = $1 AND tool_call_id = $2",
            thread_id,
            tool_call_id,
        )
        return _load(StoredCall, rows[0][0]) if rows else None

    async def list_calls(self, thread_id: str) -> list[StoredCall]:
        thread = await self._mirrored(thread_id)
        if thread is not None:
            return list(thread.calls.values())
        return _loaded(StoredCall, await self._fetch(_CALLS, thread_id))

    async def get_pending_action(self, thread_id: str, action_id: str) -> OpenAction | None:
        for action in await self.list_pending_actions(thread_id):
            if action.ref.action_id == action_id:
                return action
        return None

    async def list_pending_actions(self, thread_id: str) -> list[OpenAction]:
        thread = await self._mirrored(thread_id)
        if thread is not None:
            calls: Iterable[StoredCall] = thread.calls.values()
        else:
            calls = _loaded(
                StoredCall,
                await self._fetch(
                    "SELECT json FROM calls WHERE thread_id = $1 AND open ORDER BY seq",
                    thread_id,
                ),
            )
        return [
            replace(action, input=copy.deepcopy(action.input))
            for call in calls
            for action in open_actions(call)
        ]

    async def list_scope_pending_actions(self, scope_key: str) -> list[OpenAction]:
        rows = await self._fetch(
            "SELECT c.json FROM threads t JOIN calls c ON c.thread_id = t.thread_id"
            " WHERE t.scope_key = $1 AND c.open ORDER BY t.seq, c.seq",
            scope_key,
        )
        return [action for call in _loaded(StoredCall, rows) for action in open_actions(call)]

    async def list_expiring_actions(
        self, *, until: datetime | None = None, limit: int | None = None
    ) -> list[OpenAction]:
        rows = await self._fetch(
            "SELECT json FROM calls WHERE expires_us IS NOT NULL AND expires_us <= $1"
            " ORDER BY expires_us, thread_id, seq LIMIT $2::bigint",
            _MAX_US if until is None else instant_us(until),
            limit,
        )
        calls = _loaded(StoredCall, rows)
        return expiring_actions(calls, until=until, limit=limit)

    async def list_tool_data(
        self, thread_id: str, tool_call_id: str, channel: str
    ) -> list[ToolDataItem]:
        call = await self.get_call(thread_id, tool_call_id)
        if call is None:
            return []
        return [
            ToolDataItem(id=item.id, value=copy.deepcopy(item.value), updated_at=item.updated_at)
            for item in call.record.data.get(channel, ())
        ]

    async def read_file(self, file_id: str, *, scope_key: str) -> StoredFileBody | None:
        rows = await self._fetch(
            "SELECT json, body FROM files WHERE file_id = $1 AND scope_key = $2",
            file_id,
            scope_key,
        )
        return StoredFileBody(_load(UploadedFile, rows[0][0]), rows[0][1]) if rows else None


_SEND = f"SELECT count(pg_notify('{LIVE}', value)) FROM json_array_elements_text($1::text::json)"
_ANNOUNCE_WATCHING = (
    f"SELECT count(pg_notify('{WATCHING}', value)) FROM json_array_elements_text($1::text::json)"
)


class _Check:
    """A check of threads this node gave up (:meth:`PostgresStore._released`): each with
    the epoch it gave it up at; ``done`` when it was read, and ``changed`` then: those
    another node took since (``None`` when the read failed)."""

    __slots__ = ("changed", "done", "epochs")

    def __init__(self) -> None:
        self.epochs: dict[str, int] = {}
        self.done = trio.Event()
        self.changed: set[str] | None = None


class _Flight:
    """A group being written (or a lease taken): the threads it writes, the connection it
    writes on, and an event set when it is done."""

    __slots__ = ("db", "landed", "threads")

    def __init__(self, threads: frozenset[str]) -> None:
        self.threads = threads
        self.db: Connection | None = None
        self.landed = trio.Event()


class _NoThread:
    """What :meth:`PostgresStore._mirrored` answers for a thread its read found missing: no
    record, and nothing of it (the rows the server would give), so that a read of a thread
    that does not exist is one round trip, not a second one for the same answer."""

    __slots__ = ()

    record = None
    messages: tuple[Message, ...] = ()
    runs: Mapping[str, RunRecord] = MappingProxyType({})
    calls: Mapping[str, StoredCall] = MappingProxyType({})


_NO_THREAD = _NoThread()


class _Load:
    """A thread being read into the mirror: done when read; ``stale`` when a group that
    writes it was sent meanwhile (or the mirror was cleared)."""

    __slots__ = ("done", "stale")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.stale = False


_THREAD = "SELECT json FROM threads WHERE thread_id = $1"
_MESSAGES = (
    "SELECT m.message_id, m.json, p.json FROM messages m LEFT JOIN parts p"
    " ON p.thread_id = m.thread_id AND p.message_id = m.message_id"
    " WHERE m.thread_id = $1 ORDER BY m.seq, p.position"
)
"""A thread's messages joined with their parts, in order (what ``sqlite._messages`` parses)."""
_RUNS = "SELECT json FROM runs WHERE thread_id = $1 ORDER BY seq"
_CALLS = "SELECT json FROM calls WHERE thread_id = $1 ORDER BY seq"

_MAX_US = 2**63 - 1
"""No deadline is later than this (``calls.expires_us`` is a ``BIGINT``)."""


def _load(model: type[R], text: str) -> R:
    try:
        return model.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise StoreError(
            f"a stored {model.__name__} cannot be read (an unknown shape version, or a row "
            f"changed by hand): {exc}"
        ) from exc


def _loaded(model: type[R], rows: list[Row]) -> list[R]:
    return [_load(model, row[0]) for row in rows]


def _not_now(_: object) -> trio.lowlevel.Abort:
    """A joined commit is not cancelled: it returns once its group is written."""
    return trio.lowlevel.Abort.FAILED


def stored_ids(store: PostgresStore) -> list[str]:
    """The thread, run and message ids in ``store``'s database, read on a blocking
    connection of its own (what ``pai_actors.testing`` numbers a new test runtime's ids
    after, from a synchronous function)."""
    import psycopg  # (the store exists: psycopg is installed)

    with psycopg.connect(store._connect_with) as db:
        rows = db.execute(
            "SELECT thread_id FROM threads UNION ALL SELECT run_id FROM runs"
            " UNION ALL SELECT message_id FROM messages"
        ).fetchall()
    return [str(row[0]) for row in rows]
