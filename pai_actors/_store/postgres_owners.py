"""Which node owns which thread, when several processes share one PostgreSQL database.

A node (a :class:`~pai_actors.PostgresStore` given a ``node_id``) owns a thread by a
**lease**: a row of ``pai_thread_owners`` naming the node, an ``epoch`` and an expiry. It
takes the lease in the transaction of its first write to the thread, renews it with every
later write and with :meth:`Owners.renew` between writes, and gives it up in the commit
that leaves the thread with no running run (:meth:`Owners.release`: its run waits or ended,
or it was created without one), or at the next renewal when a write left it so
(:meth:`Owners.release_idle`): a waiting thread needs no owner, and the next node that
writes it takes it.

**Fencing.** Every write a node commits checks, in the same transaction, that the node
still holds the lease of each thread it writes, at the epoch it took it with. A node that
lost a lease (it paused, or its connection to the database was cut, past the expiry, and
another node took the thread, which raises the epoch) has that write refused with
:class:`~pai_actors.ThreadOwnedElsewhere`, so nothing it does after another node took over is
written: no call is recorded twice, and a run is driven by one node at a time. A node that
takes a thread anew (its first write, or after losing it) always raises the epoch, so even
its own earlier, paused process with the same ``node_id`` is fenced.

Why leases in a table rather than PostgreSQL advisory locks: a session advisory lock lives
as long as the connection that took it, so a node's ownership would die with any one
connection (the store reconnects when one breaks), and a lock gives no epoch a write can
check; a lease row is checked and renewed by the same statement a commit runs anyway, and
survives a reconnection.

Only the owner caches a thread. What this node cached of a thread another node took from
it is forgotten (the store's mirror, and what the callbacks given to :meth:`Owners.on_lost`
drop, such as the runtime's "loaded" mark). A thread it gave up itself the store keeps as
it left it, with the epoch it gave it up at (:meth:`Owners.on_given_up`), and answers a read
of it only once :meth:`Owners.changed` found that no other node took it since: any node
that writes a thread takes its lease first, which raises the epoch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from .._core.errors import ThreadOwnedElsewhere
from .postgres_connection import Param, Row, Statement


class Fetcher(Protocol):
    """A connection, or the read pool: what runs one statement and returns its rows."""

    async def fetch(self, sql: str, *params: Param) -> list[Row]: ...


OWNERS_TABLE = """
CREATE TABLE IF NOT EXISTS pai_thread_owners (
    thread_id TEXT COLLATE "C" PRIMARY KEY,
    node_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
)
"""
"""The nodes' leases: not records of the store (outside its schema versions), created by
every store that opens a database with a ``node_id``."""

# Renew the leases this node holds at the epochs it holds them (the threads it still owns
# come back). A lease row a transaction has locked meanwhile is skipped, never waited for:
# waiting could deadlock with a group commit that locks several in another order (this
# node's commit renews it anyway; see :meth:`Owners.renew` for the rest).
_RENEW = (
    "UPDATE pai_thread_owners AS o"
    " SET expires_at = now() + make_interval(secs => ($2 / 1000.0)::float8)"
    " FROM (SELECT l.thread_id FROM pai_thread_owners AS l"
    " JOIN json_to_recordset($3::text::json) AS h (thread_id text, epoch bigint)"
    " ON l.thread_id = h.thread_id AND l.epoch = h.epoch WHERE l.node_id = $1"
    " FOR UPDATE OF l SKIP LOCKED) AS mine"
    " WHERE o.thread_id = mine.thread_id"
    " RETURNING o.thread_id"
)
# Inside a commit's transaction: renew, waiting for a row's lock if need be (a renewal
# above never waits, so it cannot close a cycle with a commit).
_RENEW_WRITTEN = (
    "UPDATE pai_thread_owners AS o"
    " SET expires_at = now() + make_interval(secs => ($2 / 1000.0)::float8)"
    " FROM json_to_recordset($3::text::json) AS h (thread_id text, epoch bigint)"
    " WHERE o.thread_id = h.thread_id AND o.node_id = $1 AND o.epoch = h.epoch"
    " RETURNING o.thread_id"
)
# The threads of those a renewal skipped that this node still holds (read, not locked).
_STILL_HELD = (
    "SELECT o.thread_id FROM pai_thread_owners AS o"
    " JOIN json_to_recordset($2::text::json) AS h (thread_id text, epoch bigint)"
    " ON o.thread_id = h.thread_id AND o.epoch = h.epoch WHERE o.node_id = $1"
)
# Take threads this node does not hold: new ones, those whose lease expired, and those a
# process of this node id holds (a restart); the epoch goes up (the threads taken come back).
_TAKE = (
    "INSERT INTO pai_thread_owners AS o (thread_id, node_id, epoch, expires_at)"
    " SELECT value, $1, 1, now() + make_interval(secs => ($2 / 1000.0)::float8)"
    " FROM json_array_elements_text($3::text::json)"
    " ON CONFLICT (thread_id) DO UPDATE SET node_id = excluded.node_id,"
    " epoch = o.epoch + 1, expires_at = excluded.expires_at"
    " WHERE o.expires_at < now() OR o.node_id = excluded.node_id"
    " RETURNING o.thread_id, o.epoch"
)
# Of these threads and epochs, those whose lease row is no longer this node's at that epoch
# (another node took the thread since).
_CHANGED = (
    "SELECT h.thread_id FROM json_to_recordset($2::text::json) AS h (thread_id text, epoch bigint)"
    " LEFT JOIN pai_thread_owners AS o"
    " ON o.thread_id = h.thread_id AND o.node_id = $1 AND o.epoch = h.epoch"
    " WHERE o.thread_id IS NULL"
)
_OWNER = (
    "SELECT thread_id, node_id, expires_at < now() FROM pai_thread_owners"
    " WHERE thread_id IN (SELECT value FROM json_array_elements_text($1::text::json))"
)
# Give up the leases of held threads without a running run (nothing to drive: the next
# node that writes one takes it); one a transaction has locked is left for the next round.
# A lease given up is expired, not deleted: its epoch stays, so the next node to take the
# thread raises it, and a node that drove the thread before is fenced all the same.
_RELEASE = (
    "UPDATE pai_thread_owners AS o SET expires_at = '-infinity'"
    " FROM (SELECT l.thread_id FROM pai_thread_owners AS l"
    " JOIN json_to_recordset($2::text::json) AS h (thread_id text, epoch bigint)"
    " ON l.thread_id = h.thread_id AND l.epoch = h.epoch WHERE l.node_id = $1"
    " AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.thread_id = l.thread_id AND runs.active"
    " AND runs.json::jsonb ->> 'status' = 'running')"
    " FOR UPDATE OF l SKIP LOCKED) AS idle"
    " WHERE o.thread_id = idle.thread_id"
    " RETURNING o.thread_id"
)
_GIVE_UP = (
    "UPDATE pai_thread_owners AS o SET expires_at = '-infinity'"
    " FROM json_to_recordset($2::text::json) AS h (thread_id text, epoch bigint)"
    " WHERE o.thread_id = h.thread_id AND o.node_id = $1 AND o.epoch = h.epoch"
    " RETURNING o.thread_id"
)
# In a group written in one pipeline: give up leases this node renewed or took earlier in
# the same transaction (their rows are locked by it: they are this node's at those epochs).
_GIVE_UP_TAKEN = (
    "UPDATE pai_thread_owners SET expires_at = '-infinity'"
    " WHERE node_id = $1"
    " AND thread_id IN (SELECT value FROM json_array_elements_text($2::text::json))"
    " RETURNING thread_id"
)
# Tell the other nodes which threads a commit changed (delivered when it commits): each
# thread's id, a space, and the number of its last row in the update log (0: none), which
# this commit wrote (``postgres_updates``), so a node knows which rows a notice stands for.
CHANGES = "pai_threads"
_NOTIFY = (
    "SELECT count(pg_notify('pai_threads', value || ' ' || coalesce((SELECT max(seq)"
    " FROM pai_updates WHERE thread_id = value), 0)))"
    " FROM json_array_elements_text($1::text::json)"
)
# Threads with a running run and no live owner: a node stopped while it drove them.
_ORPHANED = (
    "SELECT runs.thread_id FROM runs LEFT JOIN pai_thread_owners AS o USING (thread_id)"
    " WHERE runs.active AND runs.json::jsonb ->> 'status' = 'running'"
    " AND (o.thread_id IS NULL OR o.expires_at < now()) ORDER BY runs.seq LIMIT $1"
)


class Owners:
    """The leases one node holds, by thread: the epoch it took each with.

    A lease lasts ``lease`` seconds past its last renewal. Not thread-safe: the store's
    (trio) thread uses it."""

    def __init__(self, node_id: str, lease: float) -> None:
        if not isinstance(node_id, str) or not node_id.strip():
            raise ValueError(
                f"node_id must be a non-empty str naming this process, got {node_id!r}"
            )
        if not lease > 0:
            raise ValueError(f"lease={lease!r}; use a number of seconds > 0")
        self.node_id = node_id
        self.lease = lease
        self._lease_ms = max(1, round(lease * 1000))  # (parameters cross as integers)
        self.held: dict[str, int] = {}  # thread id -> epoch
        # Threads this node lost to another: refused to its writes until it takes them
        # again on purpose (:meth:`take`, when it loads one afresh), so that what it was
        # still doing with one (an actor finishing) never writes it, even once it is free.
        self.fenced: set[str] = set()
        self._lost: list[Callable[[str], None]] = []
        self._fenced: list[Callable[[str], None]] = []
        self._held: list[Callable[[str, int], None]] = []
        self._given_up: list[Callable[[str, int], None]] = []

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(thread_id)`` whenever this node stops owning a thread."""
        self._lost.append(callback)

    def on_fenced(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(thread_id)`` when another node took a thread from this one."""
        self._fenced.append(callback)

    def on_held(self, callback: Callable[[str, int], None]) -> None:
        """Call ``callback(thread_id, epoch)`` for each lease a written commit (or a take)
        renewed or took: this node holds the thread at that epoch."""
        self._held.append(callback)

    def on_given_up(self, callback: Callable[[str, int], None]) -> None:
        """Call ``callback(thread_id, epoch)`` when this node gave up its lease of a thread,
        held at that epoch (before the :meth:`on_lost` callbacks)."""
        self._given_up.append(callback)

    async def renew_held(self, db: Fetcher, thread_ids: Iterable[str]) -> set[str]:
        """Inside a group commit's transaction, before its commits: renew at once the
        leases this node holds of the threads the group writes (their rows stay locked to
        the end of the transaction); the threads renewed, for :meth:`claim` to skip a
        statement of its own."""
        wanted = set(thread_ids)
        held = {t: e for t, e in self.held.items() if t in wanted and t not in self.fenced}
        if not held:
            return set()
        rows = await db.fetch(_RENEW_WRITTEN, self.node_id, self._lease_ms, _pairs(held))
        return {str(row[0]) for row in rows}

    async def claim(
        self, db: Fetcher, thread_ids: Iterable[str], renewed: set[str] | None = None
    ) -> dict[str, int]:
        """Inside a commit's transaction: renew or take the lease of each thread the commit
        writes; the leases it holds then (to :meth:`hold` once the commit is written).
        ``renewed``: what :meth:`renew_held` renewed for the group (a held thread not in it
        was lost). :class:`~pai_actors.ThreadOwnedElsewhere` when another node owns one, or
        this node lost one it held (fenced): the caller rolls the commit back."""
        wanted = sorted(set(thread_ids))
        fenced = [t for t in wanted if t in self.fenced]
        if fenced:
            raise ThreadOwnedElsewhere(
                f"thread {fenced[0]!r}",
                f"node {self.node_id!r} lost it to another node: nothing was written; this "
                "node drives it again only once it loads it afresh",
            )
        held = {t: self.held[t] for t in wanted if t in self.held}
        claimed: dict[str, int] = {}
        if held:
            if renewed is None:
                rows = await db.fetch(_RENEW_WRITTEN, self.node_id, self._lease_ms, _pairs(held))
                renewed = {str(row[0]) for row in rows}
            claimed.update((t, e) for t, e in held.items() if t in renewed)
            lost = [t for t in held if t not in claimed]
            if lost:
                self.lose(lost)
                raise ThreadOwnedElsewhere(
                    f"thread {lost[0]!r}",
                    f"node {self.node_id!r} lost its lease (another node took the thread "
                    "over while this one was paused or cut off): nothing was written; this "
                    "node no longer drives it",
                )
        new = [t for t in wanted if t not in held]
        if new:
            rows = await db.fetch(_TAKE, self.node_id, self._lease_ms, json.dumps(new))
            claimed.update((str(row[0]), int(row[1])) for row in rows)
            refused = [t for t in new if t not in claimed]
            if refused:
                raise ThreadOwnedElsewhere(
                    f"thread {refused[0]!r}",
                    await self._owned_elsewhere(db, refused),
                )
        return claimed

    async def _owned_elsewhere(self, db: Fetcher, thread_ids: list[str]) -> str:
        rows: list[Row] = await db.fetch(_OWNER, json.dumps(thread_ids))
        owners = sorted({str(row[1]) for row in rows})
        return (
            f"owned by node {', '.join(map(repr, owners))} (its lease is live): nothing was "
            "written; send the request to that node, or retry once its lease expired"
        )

    async def release(
        self, db: Fetcher, claimed: dict[str, int], idle: Iterable[str]
    ) -> dict[str, int]:
        """Inside a commit's transaction: give up at once the leases it claimed of the
        threads whose run it stopped (waiting, or ended): nothing drives them now, and
        the next node that writes one takes it without waiting for the lease to expire.
        The leases given up, thread -> epoch (to :meth:`given_up` once the commit is
        written)."""
        done = {t: claimed.pop(t) for t in sorted(set(idle)) if t in claimed}
        if done:
            await db.fetch(_GIVE_UP, self.node_id, _pairs(done))
        return done

    def given_up(self, released: Mapping[str, int]) -> None:
        """The commit that gave these leases up (thread -> the epoch it held it at) is
        written: this node owns them no more."""
        for thread_id, epoch in released.items():
            self.held.pop(thread_id, None)
            for given_up in self._given_up:
                given_up(thread_id, epoch)
            for callback in self._lost:
                callback(thread_id)

    # A group commit written in one pipeline (``_store.postgres_group``) sends these
    # statements without reading their rows in between, and checks the rows afterwards: what
    # :meth:`renew_held`, :meth:`claim`, :meth:`release` and :meth:`announce` run, when
    # every claim succeeds.

    def held_of(self, thread_ids: Iterable[str]) -> dict[str, int] | None:
        """The leases held of ``thread_ids`` (thread -> epoch); ``None`` if one is fenced."""
        held = {}
        for thread_id in thread_ids:
            if thread_id in self.fenced:
                return None
            if thread_id in self.held:
                held[thread_id] = self.held[thread_id]
        return held

    def renew_statement(self, held: dict[str, int]) -> Statement:
        """Renew ``held`` (rows: the threads renewed, each of them if none was lost)."""
        return _RENEW_WRITTEN, (self.node_id, self._lease_ms, _pairs(held))

    def take_statement(self, thread_ids: list[str]) -> Statement:
        """Take ``thread_ids`` (rows: thread, epoch, for each one taken)."""
        return _TAKE, (self.node_id, self._lease_ms, json.dumps(thread_ids))

    def give_up_statement(self, thread_ids: list[str]) -> Statement:
        """Give up ``thread_ids``, renewed or taken before in the same transaction."""
        return _GIVE_UP_TAKEN, (self.node_id, json.dumps(thread_ids))

    @staticmethod
    def announce_statement(thread_ids: Iterable[str]) -> Statement:
        """:meth:`announce`'s statement."""
        return _NOTIFY, (json.dumps(sorted(set(thread_ids))),)

    async def announce(self, db: Fetcher, thread_ids: Iterable[str]) -> None:
        """Inside a commit's transaction: tell the other nodes (``LISTEN pai_threads``) that
        it changes these threads; PostgreSQL delivers it only if the commit is written."""
        changed = sorted(set(thread_ids))
        if changed:
            await db.fetch(_NOTIFY, json.dumps(changed))

    def hold(self, claimed: dict[str, int]) -> None:
        """The commit that claimed these leases is written: this node holds them."""
        self.held.update(claimed)
        if self._held:
            for thread_id, epoch in claimed.items():
                for callback in self._held:
                    callback(thread_id, epoch)

    def lose(self, thread_ids: Iterable[str]) -> None:
        """Another node took these threads from this one: fence them, forget them, and tell
        the callbacks."""
        for thread_id in thread_ids:
            if self.held.pop(thread_id, None) is not None:
                self.fenced.add(thread_id)
                for callback in (*self._lost, *self._fenced):
                    callback(thread_id)

    async def changed(self, db: Fetcher, epochs: dict[str, int]) -> set[str]:
        """Of ``epochs`` (thread -> an epoch this node held it at), the threads whose lease
        is no longer this node's at that epoch: another node took them since (this node
        taking one again raises its epoch too)."""
        rows = await db.fetch(_CHANGED, self.node_id, _pairs(epochs))
        return {str(row[0]) for row in rows}

    async def renew(self, db: Fetcher) -> None:
        """Renew every lease this node holds; forget those it lost."""
        if not self.held:
            return
        held = dict(self.held)
        rows = await db.fetch(_RENEW, self.node_id, self._lease_ms, _pairs(held))
        kept = {str(row[0]) for row in rows}
        skipped = {t: e for t, e in held.items() if t not in kept}
        if skipped:  # locked by a commit, or lost: which?
            rows = await db.fetch(_STILL_HELD, self.node_id, _pairs(skipped))
            kept.update(str(row[0]) for row in rows)
        self.lose(t for t in held if t not in kept and self.held.get(t) == held[t])

    async def release_idle(self, db: Fetcher) -> None:
        """Give up the leases of the held threads that have no running run."""
        if not self.held:
            return
        held = dict(self.held)
        rows = await db.fetch(_RELEASE, self.node_id, _pairs(held))
        # (given up by this node, not taken by another: not fenced)
        released = (str(row[0]) for row in rows)
        self.given_up({t: held[t] for t in released if self.held.get(t) == held[t]})


async def orphaned_threads(db: Fetcher, limit: int) -> list[str]:
    """Threads with a running run whose owner's lease expired (or that have none), oldest
    run first: what a node that stopped was driving."""
    return [str(row[0]) for row in await db.fetch(_ORPHANED, limit)]


def _pairs(held: dict[str, int]) -> str:
    return json.dumps([{"thread_id": t, "epoch": e} for t, e in held.items()])
