"""Requests one node hands to the node that owns a thread, when several share a database.

A node that is asked to change a thread another node drives (its lease is live: a run is
running there) cannot write it (``_store.postgres_owners``: fencing). It stores the request
in ``pai_requests`` instead and wakes the owner (``NOTIFY pai_requests``, the thread id); the
owner applies it as if a client had asked it, writes the answer in the row and wakes the
asker (``NOTIFY pai_answers``, the request id), who reads the answer and deletes the row.
The row outlives both: a node that takes the thread over (its owner stopped) applies what
is left of its requests, as does the asker itself once the thread is free.

The rows are what the runtime makes of them (``_runtime.forwarding``): a JSON object
each, its request and its answer.
"""

from __future__ import annotations

import json
from typing import Any

from .postgres_owners import Fetcher

REQUESTS_TABLE = """
CREATE TABLE IF NOT EXISTS pai_requests (
    id BIGSERIAL PRIMARY KEY,
    thread_id TEXT COLLATE "C" NOT NULL,
    from_node TEXT NOT NULL,
    body TEXT NOT NULL,
    answer TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS pai_requests_open ON pai_requests (thread_id, id)
    WHERE answer IS NULL
"""
"""The requests in flight between nodes: not records of the store (outside its schema
versions), created with the leases' table."""

REQUESTED = "pai_requests"
ANSWERED = "pai_answers"

_FORWARD = (
    "WITH r AS (INSERT INTO pai_requests (thread_id, from_node, body) VALUES ($1, $2, $3)"
    " RETURNING id) SELECT r.id FROM r, (SELECT count(pg_notify('pai_requests', $1))) AS n"
)
_OPEN = "SELECT id, body FROM pai_requests WHERE thread_id = $1 AND answer IS NULL ORDER BY id"
# The first answer stands (a request applied twice, by an owner that stopped before it
# answered and by the node that took the thread over, is answered once). Answers nobody
# read for ten minutes (their asker stopped waiting) go.
_ANSWER = (
    "WITH a AS (UPDATE pai_requests SET answer = $2 WHERE id = $1 AND answer IS NULL"
    " RETURNING id), old AS (DELETE FROM pai_requests WHERE answer IS NOT NULL"
    " AND created_at < now() - interval '10 minutes')"
    " SELECT count(pg_notify('pai_answers', id::text)) FROM a"
)
_TAKE_ANSWER = "DELETE FROM pai_requests WHERE id = $1 AND answer IS NOT NULL RETURNING answer"
_WITHDRAW = "DELETE FROM pai_requests WHERE id = $1"


async def forward(db: Fetcher, thread_id: str, node_id: str, body: dict[str, Any]) -> int:
    """Store a request for the owner of ``thread_id`` and wake it; the request's id."""
    [(request_id,)] = await db.fetch(_FORWARD, thread_id, node_id, json.dumps(body))
    return int(request_id)


async def open_requests(db: Fetcher, thread_id: str) -> list[tuple[int, dict[str, Any]]]:
    """The requests for ``thread_id`` no node answered yet, oldest first."""
    return [(int(row[0]), json.loads(str(row[1]))) for row in await db.fetch(_OPEN, thread_id)]


async def answer(db: Fetcher, request_id: int, body: dict[str, Any]) -> None:
    """Answer a request (unless it was answered already) and wake its asker."""
    await db.fetch(_ANSWER, request_id, json.dumps(body))


async def take_answer(db: Fetcher, request_id: int) -> dict[str, Any] | None:
    """The answer to a request, which is then deleted; ``None`` while it has none."""
    rows = await db.fetch(_TAKE_ANSWER, request_id)
    return None if not rows else json.loads(str(rows[0][0]))


async def withdraw(db: Fetcher, request_id: int) -> None:
    """Delete a request whose asker stopped waiting for it (answered or not)."""
    await db.fetch(_WITHDRAW, request_id)
