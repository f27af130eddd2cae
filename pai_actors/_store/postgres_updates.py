"""The log of updates that lets a watcher on any node see every update of a thread, in order,
when several nodes share a database.

Watchers are fed by the process that commits (``_runtime.watch``): a commit's updates are
published to the watchers of that process once it committed. A watcher on another node
used to be shown another node's change as the difference between the thread it had been
shown and the thread read again after the change's notification; a read that came after
two commits showed them as one, and a state the thread passed through between reads (a
tool part ``executing``, a run ``running`` again) was never shown there.

So with a ``node_id``, each commit also writes, in its own transaction, one row of
``pai_updates`` per thread it shows a change of: the updates a watcher of that thread is
shown (``_store.updates``), numbered ``seq`` from a sequence, with the number of the
thread's row before it (``prev``, 0 for none), and marked with the node that wrote it. A
node whose watchers follow the thread reads the rows after the last it showed
(``logged_since``) when notified of a change, and shows them one commit at a time, in their
order, skipping its own (shown when they committed). Only the thread's owner writes it
(leases, fencing), through one connection, in commit order, so the numbers follow the order
in which the changes were committed; a first row whose ``prev`` is not the last row shown
says rows were lost.

The log only delivers updates (the thread's tables are what is stored), so it is an
``UNLOGGED`` table: no write-ahead log, nothing to fsync. A crash of the server empties it
(a failover to a standby finds it empty); the sequence is logged, so the rows written after
are numbered past every earlier one, and their ``prev`` (0) shows the loss. Rows older than
:data:`KEPT` seconds go (``prune``, run by ``keep_leases``), all but each thread's last, so
that ``prev`` goes on from it. A watcher that finds rows lost is shown the difference
between what it was shown and the thread read again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from .._core.updates import MessageDelta, ThreadUpdate, ThreadUpdateOrDelta
from .postgres_connection import Statement
from .postgres_owners import Fetcher
from .updates import decode_updates

_log = logging.getLogger("pai_actors.store")

UPDATES_TABLE = """
CREATE SEQUENCE IF NOT EXISTS pai_updates_seq;
CREATE UNLOGGED TABLE IF NOT EXISTS pai_updates (
    thread_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    prev BIGINT NOT NULL,
    node_id TEXT NOT NULL,
    body TEXT NOT NULL,
    written_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, seq)
)
"""
"""The nodes' update log: not records of the store (outside its schema versions), created
with the leases' table."""

KEPT = 60
"""Seconds a row of the log is kept (each thread's last is kept whatever its age)."""

PRUNE_EVERY = 60.0
"""Seconds between two prunings by a node's ``keep_leases``."""

_LOG = (
    "INSERT INTO pai_updates (thread_id, seq, prev, node_id, body)"
    " SELECT $1, nextval('pai_updates_seq'), coalesce(max(seq), 0), $2, $3"
    " FROM pai_updates WHERE thread_id = $1"
)
_SINCE = (
    "SELECT seq, prev, node_id, body FROM pai_updates WHERE thread_id = $1 AND seq > $2"
    " ORDER BY seq"
)
_LAST = "SELECT coalesce(max(seq), 0) FROM pai_updates WHERE thread_id = $1"
_PRUNE = (
    "DELETE FROM pai_updates u WHERE written_at < now() - $1::bigint * interval '1 second'"
    " AND seq < (SELECT max(seq) FROM pai_updates l WHERE l.thread_id = u.thread_id)"
)


LIVE = "pai_live"
"""The channel of the updates a node never stores (text fragments, transient tool data):
sent at once, to the nodes that said they watch the thread (:data:`WATCHING`)."""
WATCHING = "pai_watching"
"""The channel on which a node says it has watchers of a thread (again every third of a
lease while it has)."""

_PAYLOAD_BYTES = 7_900
"""A notification's payload must be shorter than 8,000 bytes."""
_FRAGMENT = 1_000
"""Characters of a text fragment per notification (escaped in JSON, a character can take 6
bytes): a longer one is sent as several, which its watchers join as they join any."""
_LIVE: TypeAdapter[ThreadUpdateOrDelta] = TypeAdapter(ThreadUpdateOrDelta)


def live_payloads(node_id: str, updates: Sequence[ThreadUpdateOrDelta]) -> list[str]:
    """The payloads that send ``updates`` on :data:`LIVE`: ``[node id, update's wire]``
    each, a long text fragment cut in several; a transient tool-data item too large for a
    notification is left out (and logged)."""
    payloads: list[str] = []
    for update in updates:
        pieces: list[ThreadUpdateOrDelta] = [update]
        if isinstance(update, MessageDelta) and len(update.delta) > _FRAGMENT:
            text = update.delta
            pieces = [
                update.model_copy(update={"delta": text[i : i + _FRAGMENT]})
                for i in range(0, len(text), _FRAGMENT)
            ]
        for piece in pieces:
            payload = json.dumps([node_id, piece.to_wire()], separators=(",", ":"))
            if len(payload.encode()) < _PAYLOAD_BYTES:
                payloads.append(payload)
            else:
                _log.warning(
                    "an update of thread %r is too large to send to the other nodes' "
                    "watchers (%d bytes); they see the thread as stored",
                    piece.thread_id,
                    len(payload.encode()),
                )
    return payloads


def decode_live(wire: Any) -> ThreadUpdateOrDelta:
    """The update a :data:`LIVE` payload carries (its wire form)."""
    return _LIVE.validate_python(wire)


@dataclass(frozen=True)
class LoggedCommit:
    """One row of the log: what one commit showed of one thread."""

    seq: int
    prev: int  # the number of the thread's row before it (0: none)
    node_id: str
    updates: list[ThreadUpdate]


def log_statement(thread_id: str, node_id: str, body: str) -> Statement:
    """The statement that logs ``body`` (``_store.updates.encode_updates``) as the thread's
    next row, inside the commit's transaction."""
    return _LOG, (thread_id, node_id, body)


async def logged_since(db: Fetcher, thread_id: str, seq: int) -> list[LoggedCommit]:
    """The rows of ``thread_id`` after ``seq``, in order."""
    rows = await db.fetch(_SINCE, thread_id, seq)
    return [LoggedCommit(int(s), int(p), str(n), decode_updates(str(b))) for s, p, n, b in rows]


async def last_logged(db: Fetcher, thread_id: str) -> int:
    """The number of the thread's last row (0: none yet)."""
    [(seq,)] = await db.fetch(_LAST, thread_id)
    return int(seq)


async def prune(db: Fetcher, kept: int = KEPT) -> None:
    """Delete the rows older than ``kept`` seconds, but each thread's last."""
    await db.fetch(_PRUNE, kept)
