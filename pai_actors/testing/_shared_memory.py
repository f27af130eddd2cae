""":class:`SharedMemory`: the database several simulated nodes share (``_cluster``), in memory.

It holds what one PostgreSQL database holds for ``PostgresStore(url, node_id=...)``
processes: the records (a :class:`~pai_actors.MemoryStore`'s data), the nodes' three
tables (the leases, ``pai_thread_owners``, the requests between nodes, ``pai_requests``, and
the log of the updates each commit showed, ``pai_updates``), and the notifications a commit
sends (``LISTEN``/``NOTIFY``).

The node's side of the protocol is PostgreSQL's own code, run unchanged
(:class:`~pai_actors._store.postgres_owners.Owners`, ``orphaned_threads``, the functions of
``postgres_requests`` and ``postgres_updates``): it sends its statements to a
:class:`Database`, which does what each does in PostgreSQL, on persistent maps
(``immutables.Map``, as the :class:`~pai_actors.MemoryStore` holds its records). A statement
is known by the constant it is in those modules (:data:`_STATEMENTS`); one added there is
refused here, saying so, until it is taught.

Time is ``trio.current_time()``: under ``trio.testing.MockClock``, virtual seconds, so a
lease expires at the same instant in every run.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import trio
from immutables import Map

from .._core.errors import StoreError
from .._store import postgres_owners as owners_sql
from .._store import postgres_requests as requests_sql
from .._store import postgres_updates as updates_sql
from .._store.base import PutRun, Write
from .._store.memory import MemoryBacking, MemoryStore
from .._store.memory import _Tables as Records
from .._store.postgres_connection import Param, Row
from .._store.postgres_owners import CHANGES
from .._store.postgres_requests import ANSWERED, REQUESTED

ANSWERS_KEPT = 600.0
"""How long an answer nobody read is kept (``postgres_requests``: ten minutes)."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A row of ``pai_thread_owners``: the node that owns a thread, the epoch it took it
    at, and until when (trio time; ``-inf``: given up)."""

    node_id: str
    epoch: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class Request:
    """A row of ``pai_requests``."""

    thread_id: str
    from_node: str
    body: str
    answer: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class Logged:
    """A row of ``pai_updates``: what one commit showed of one thread."""

    seq: int
    prev: int
    node_id: str
    body: str
    written_at: float


@dataclass(frozen=True, slots=True)
class NodeTables:
    """The nodes' tables at one commit. Never mutated: a transaction makes the next one."""

    leases: Map[str, Lease] = field(default_factory=Map)
    requests: Map[int, Request] = field(default_factory=Map)
    # by thread: its rows of the update log (``postgres_updates``), oldest first
    updates: Map[str, tuple[Logged, ...]] = field(default_factory=Map)


Note = tuple[str, str, object]
"""A notification: its channel, its payload, and who sent it (a node's store object: a
node hears what the others' commits change, not its own)."""


class SharedMemory:
    """The database several simulated nodes share, as one PostgreSQL database is shared by
    ``PostgresStore(url, node_id=...)`` processes: give each node a
    :class:`~pai_actors.testing._cluster.NodeStore` on it.

    ``backing``: the records to share (new by default; a store's ``backing`` runs the
    nodes on its data). ``store`` reads them as they are, for checks and dumps: it writes
    around the leases, so never give it to a runtime. :meth:`owner`, :meth:`expire`,
    :meth:`leases` and :meth:`requests_left` look at the nodes' tables as a test does in
    SQL.

    Concurrency contract: used by the tasks of one trio run. A transaction
    (:meth:`connect`) runs in one step, with no checkpoint inside, so it is atomic: its
    changes (records, leases, requests, notifications) all land at its commit, or none."""

    def __init__(self, backing: MemoryBacking | None = None) -> None:
        self.backing = backing if backing is not None else MemoryBacking()
        self.store = MemoryStore(self.backing)
        self.tables = NodeTables()
        self._request_ids = itertools.count(1)
        self._update_seqs = itertools.count(1)  # (``pai_updates_seq``)
        # run id -> its creation number (``runs.seq``): the runs already there first
        self._run_order = {
            run_id: number
            for number, run_id in enumerate(
                run_id
                for thread in sorted(self.backing.tables.threads.values(), key=lambda t: t.number)
                for run_id in thread.run_ids
            )
        }
        self._listeners: list[trio.MemorySendChannel[Note]] = []
        self._runtimes: dict[str, int] = {}  # node id -> runtimes opened on it

    def __repr__(self) -> str:
        return f"<SharedMemory: {len(self.tables.leases)} leases>"

    # -- what a test looks at ----------------------------------------------------------------

    def owner(self, thread_id: str) -> tuple[str, int] | None:
        """The node whose lease of ``thread_id`` is live, and its epoch; ``None`` if none."""
        lease = self.tables.leases.get(thread_id)
        if lease is None or lease.expires_at <= trio.current_time():
            return None
        return lease.node_id, lease.epoch

    def leases(self) -> list[tuple[str, Lease]]:
        """Every lease, live, expired or given up, by thread id."""
        return sorted(self.tables.leases.items())

    def expire(self, thread_id: str) -> None:
        """Let the lease of ``thread_id`` run out now (what its owner, paused or stopped past
        its lease, leaves), keeping its epoch."""
        lease = self.tables.leases.get(thread_id)
        if lease is not None:
            expired = replace(lease, expires_at=min(lease.expires_at, trio.current_time() - 1))
            self.tables = replace(self.tables, leases=self.tables.leases.set(thread_id, expired))

    def requests_left(self) -> int:
        """How many requests between nodes are stored (answered or not)."""
        return len(self.tables.requests)

    # -- what a node's store uses ------------------------------------------------------------

    def connect(self, sender: object, *, autocommit: bool) -> Database:
        """A transaction on the database for the node store ``sender`` (with
        ``autocommit``: each statement one, as on PostgreSQL's pool)."""
        return Database(self, sender, autocommit=autocommit)

    @contextmanager
    def listen(self) -> Iterator[trio.MemoryReceiveChannel[Note]]:
        """Every notification committed from now on, in commit order, until the block
        ends (``LISTEN`` on a connection of one's own)."""
        send, receive = trio.open_memory_channel[Note](math.inf)
        self._listeners.append(send)
        try:
            yield receive
        finally:
            self._listeners.remove(send)

    def runtime_prefix(self, node_id: str) -> str:
        """The prefix of the ids of the next runtime opened on node ``node_id``
        (``a1_``, then ``a2_`` for the node restarted, ...)."""
        opened = self._runtimes[node_id] = self._runtimes.get(node_id, 0) + 1
        return f"{node_id}{opened}_"

    def _install(
        self, tables: NodeTables, records: Records | None, writes: Sequence[Write]
    ) -> None:
        if records is not None:
            self.backing.tables = records
            for write in writes:
                if isinstance(write, PutRun):
                    self._run_order.setdefault(write.run.run_id, len(self._run_order))
        self.tables = tables

    def _send(self, notes: list[Note]) -> None:
        for note in notes:
            for listener in self._listeners:
                listener.send_nowait(note)


class Database:
    """A transaction on a :class:`SharedMemory`: what the node statements of
    ``postgres_owners`` and ``postgres_requests`` do in PostgreSQL (:meth:`fetch`), and
    the records a commit writes (:meth:`write`); :meth:`commit` installs all of it at once
    and sends its notifications. Dropped without a commit, it changed nothing.

    Locks do not exist here (a transaction runs in one step): a renewal skips no lease, so
    ``_RENEW`` and ``_RENEW_WRITTEN`` do the same."""

    def __init__(self, shared: SharedMemory, sender: object, *, autocommit: bool) -> None:
        self.shared = shared
        self._sender = sender
        self._autocommit = autocommit
        self.tables = self._base = shared.tables
        self._records: Records | None = None
        self._writes: Sequence[Write] = ()
        self._notes: list[Note] = []
        self.now = trio.current_time()

    async def fetch(self, sql: str, *params: Param) -> list[Row]:
        statement = _STATEMENTS.get(sql)
        if statement is None:
            raise StoreError(
                f"the in-memory cluster does not know the statement {sql[:60]!r}...; teach "
                "pai_actors/testing/_shared_memory.py (_STATEMENTS) what it does in PostgreSQL"
            )
        if self._autocommit:  # (each statement sees what was committed before it)
            self.tables = self._base = self.shared.tables
            self.now = trio.current_time()
        rows = statement(self, *params)
        if self._autocommit:
            self.commit()
        return rows

    def write(self, records: Records, writes: Sequence[Write]) -> None:
        """Stage the records a commit of ``writes`` leaves (installed at :meth:`commit`)."""
        self._records, self._writes = records, writes

    def commit(self) -> None:
        if self.shared.tables is not self._base:  # (a transaction never spans a checkpoint)
            raise AssertionError("another transaction committed during this one")
        self.shared._install(self.tables, self._records, self._writes)
        self._base = self.tables
        self.shared._send(self._notes)
        self._records, self._writes, self._notes = None, (), []

    # (for the statements)

    def notify(self, channel: str, payload: str) -> None:
        self._notes.append((channel, payload, self._sender))

    def set_lease(self, thread_id: str, lease: Lease) -> None:
        self.tables = replace(self.tables, leases=self.tables.leases.set(thread_id, lease))

    def set_requests(self, requests: Map[int, Request]) -> None:
        self.tables = replace(self.tables, requests=requests)

    def set_updates(self, updates: Map[str, tuple[Logged, ...]]) -> None:
        self.tables = replace(self.tables, updates=updates)

    def held(self, node_id: str, pairs: str) -> Iterable[tuple[str, Lease]]:
        """The leases of ``pairs`` (JSON: thread id and epoch) ``node_id`` holds at that
        epoch (expired or not)."""
        for pair in json.loads(pairs):
            lease = self.tables.leases.get(pair["thread_id"])
            if lease is not None and lease.node_id == node_id and lease.epoch == pair["epoch"]:
                yield pair["thread_id"], lease

    def running(self, thread_id: str) -> bool:
        """Whether ``thread_id`` has an active run with the status ``running``."""
        records = self.shared.backing.tables
        thread = records.threads.get(thread_id)
        return thread is not None and any(
            records.runs[run_id].active and records.runs[run_id].status == "running"
            for run_id in thread.run_ids
        )


# -- the statements, by the constant each mirrors --------------------------------------------


def _renew(db: Database, node_id: str, lease_ms: int, pairs: str) -> list[Row]:
    expires = db.now + lease_ms / 1000
    renewed = list(db.held(node_id, pairs))
    for thread_id, lease in renewed:
        db.set_lease(thread_id, replace(lease, expires_at=expires))
    return [(thread_id,) for thread_id, _ in renewed]


def _still_held(db: Database, node_id: str, pairs: str) -> list[Row]:
    return [(thread_id,) for thread_id, _ in db.held(node_id, pairs)]


def _take(db: Database, node_id: str, lease_ms: int, thread_ids: str) -> list[Row]:
    rows: list[Row] = []
    for thread_id in json.loads(thread_ids):
        lease = db.tables.leases.get(thread_id)
        if lease is None:
            epoch = 1
        elif lease.expires_at < db.now or lease.node_id == node_id:
            epoch = lease.epoch + 1
        else:
            continue
        db.set_lease(thread_id, Lease(node_id, epoch, db.now + lease_ms / 1000))
        rows.append((thread_id, epoch))
    return rows


def _owners(db: Database, thread_ids: str) -> list[Row]:
    leases = db.tables.leases
    return [
        (t, leases[t].node_id, leases[t].expires_at < db.now)
        for t in json.loads(thread_ids)
        if t in leases
    ]


def _release(db: Database, node_id: str, pairs: str) -> list[Row]:
    idle = [(t, lease) for t, lease in db.held(node_id, pairs) if not db.running(t)]
    for thread_id, lease in idle:
        db.set_lease(thread_id, replace(lease, expires_at=-math.inf))
    return [(thread_id,) for thread_id, _ in idle]


def _give_up(db: Database, node_id: str, pairs: str) -> list[Row]:
    held = list(db.held(node_id, pairs))
    for thread_id, lease in held:
        db.set_lease(thread_id, replace(lease, expires_at=-math.inf))
    return [(thread_id,) for thread_id, _ in held]


def _notify_changes(db: Database, thread_ids: str) -> list[Row]:
    changed = json.loads(thread_ids)
    for thread_id in changed:
        logged = db.tables.updates.get(thread_id, ())
        db.notify(CHANGES, f"{thread_id} {logged[-1].seq if logged else 0}")
    return [(len(changed),)]


def _orphaned(db: Database, limit: int) -> list[Row]:
    runs = db.shared.backing.tables.runs
    leases, order = db.tables.leases, db.shared._run_order
    running = sorted(
        (run for run in runs.values() if run.active and run.status == "running"),
        key=lambda run: (order.get(run.run_id, math.inf), run.run_id),
    )
    orphaned = [
        run.thread_id
        for run in running
        if run.thread_id not in leases or leases[run.thread_id].expires_at < db.now
    ]
    return [(thread_id,) for thread_id in orphaned[:limit]]


def _forward(db: Database, thread_id: str, node_id: str, body: str) -> list[Row]:
    request_id = next(db.shared._request_ids)
    request = Request(thread_id, node_id, body, None, db.now)
    db.set_requests(db.tables.requests.set(request_id, request))
    db.notify(REQUESTED, thread_id)
    return [(request_id,)]


def _open(db: Database, thread_id: str) -> list[Row]:
    requests = db.tables.requests
    return [
        (request_id, requests[request_id].body)
        for request_id in sorted(requests.keys())
        if requests[request_id].thread_id == thread_id and requests[request_id].answer is None
    ]


def _answer(db: Database, request_id: int, body: str) -> list[Row]:
    requests = db.tables.requests
    # (one statement: the old answers it deletes are those of before it, not this one)
    old = [
        i
        for i, r in requests.items()
        if r.answer is not None and r.created_at < db.now - ANSWERS_KEPT
    ]
    request = requests.get(request_id)
    answered = request is not None and request.answer is None
    changed = requests.mutate()
    if request is not None and answered:
        changed[request_id] = replace(request, answer=body)
    for i in old:
        del changed[i]
    db.set_requests(changed.finish())
    if answered:
        db.notify(ANSWERED, str(request_id))
    return [(int(answered),)]


def _take_answer(db: Database, request_id: int) -> list[Row]:
    request = db.tables.requests.get(request_id)
    if request is None or request.answer is None:
        return []
    db.set_requests(db.tables.requests.delete(request_id))
    return [(request.answer,)]


def _withdraw(db: Database, request_id: int) -> list[Row]:
    if request_id in db.tables.requests:
        db.set_requests(db.tables.requests.delete(request_id))
    return []


def _log(db: Database, thread_id: str, node_id: str, body: str) -> list[Row]:
    rows = db.tables.updates.get(thread_id, ())
    prev = rows[-1].seq if rows else 0
    row = Logged(next(db.shared._update_seqs), prev, node_id, body, db.now)
    db.set_updates(db.tables.updates.set(thread_id, (*rows, row)))
    return []


def _since(db: Database, thread_id: str, seq: int) -> list[Row]:
    return [
        (row.seq, row.prev, row.node_id, row.body)
        for row in db.tables.updates.get(thread_id, ())
        if row.seq > seq
    ]


def _last(db: Database, thread_id: str) -> list[Row]:
    rows = db.tables.updates.get(thread_id, ())
    return [(rows[-1].seq if rows else 0,)]


def _prune(db: Database, kept: int) -> list[Row]:
    changed = db.tables.updates.mutate()
    for thread_id, rows in db.tables.updates.items():
        left = tuple(r for r in rows[:-1] if r.written_at >= db.now - kept) + rows[-1:]
        if left != rows:
            changed[thread_id] = left
    db.set_updates(changed.finish())
    return []


_STATEMENTS: Mapping[str, Callable[..., list[Row]]] = {
    owners_sql._RENEW: _renew,
    owners_sql._RENEW_WRITTEN: _renew,
    owners_sql._STILL_HELD: _still_held,
    owners_sql._TAKE: _take,
    owners_sql._OWNER: _owners,
    owners_sql._RELEASE: _release,
    owners_sql._GIVE_UP: _give_up,
    owners_sql._NOTIFY: _notify_changes,
    owners_sql._ORPHANED: _orphaned,
    requests_sql._FORWARD: _forward,
    requests_sql._OPEN: _open,
    requests_sql._ANSWER: _answer,
    requests_sql._TAKE_ANSWER: _take_answer,
    requests_sql._WITHDRAW: _withdraw,
    updates_sql._LOG: _log,
    updates_sql._SINCE: _since,
    updates_sql._LAST: _last,
    updates_sql._PRUNE: _prune,
}
"""Each statement the node protocol runs, and what does it here (private constants of the
PostgreSQL modules: a statement added there is refused here until it is taught)."""
