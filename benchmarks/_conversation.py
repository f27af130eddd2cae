"""What every side of the durable-approval figures shares, without importing any of them.

A side process imports only its own side: LangGraph's and pydantic-ai's sides never import
``pai_actors`` (nor ours theirs), so that no side's garbage collections walk another's objects.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOOL_NAME = "refund"
APPROVE: dict[str, Any] = {"approved": True}
PAYLOAD: dict[str, Any] = {"cents": 500}
"""The approval payload each tool call suspends with."""
RESULT: dict[str, Any] = {"refunded": 500}
"""What each tool call returns once approved."""
WARM_UP = 50
"""Conversations run (suspended and approved) before a memory measurement's first reading."""
BLOB = 1024
"""Bytes per commit of the durable-write limit (:func:`durable_write_limit`)."""
COMMITS = 3
"""Commits per conversation of the durable-write limit."""


def tool_input(i: int) -> dict[str, Any]:
    """The small JSON input of conversation ``i``'s tool call (the same on every side)."""
    return {"order": i, "cents": 500}


def request(i: int) -> str:
    """Conversation ``i``'s user message; the fixed models read the order from it."""
    return f"refund {i}"


def order_of(text: str) -> int:
    return int(text.rsplit(" ", 1)[1])


def new_db(directory: str, what: str) -> Path:
    """A new file name in ``directory`` for one side's database."""
    return Path(directory) / f"{what}-{os.getpid()}-{time.monotonic_ns()}.db"


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def rss_bytes() -> int:
    """This process's resident memory (VmRSS in ``/proc/self/status``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def bookkeeping_bytes(thread_ids: Sequence[str]) -> int:
    """What the workload itself keeps per measurement: the list of thread ids and its
    strings (``sys.getsizeof``), subtracted from the memory figures."""
    return sys.getsizeof(thread_ids) + sum(sys.getsizeof(t) for t in thread_ids)


SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def sqlite_modes(conn: sqlite3.Connection) -> dict[str, str]:
    """The connection's ``journal_mode`` and ``synchronous``, as SQLite reports them."""
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {"journal_mode": str(journal), "synchronous": SYNCHRONOUS_NAMES[int(synchronous)]}


def durable_write_limit(directory: str, n: int) -> float:
    """The durable-write limit: milliseconds of process CPU time per conversation for plain
    ``sqlite3`` (WAL, ``synchronous=NORMAL``) doing ``COMMITS`` commits of a ``BLOB``-byte
    INSERT each (each its own transaction) per conversation, ``n`` conversations."""
    path = new_db(directory, "limit")
    try:
        db = sqlite3.connect(path, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("CREATE TABLE writes (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
            body = bytes(range(256)) * (BLOB // 256)
            start = time.process_time()
            for _ in range(n):
                for _ in range(COMMITS):
                    db.execute("INSERT INTO writes (body) VALUES (?)", (body,))
            cpu = time.process_time() - start
            [(count,)] = db.execute("SELECT count(*) FROM writes").fetchall()
        finally:
            db.close()
        if count != n * COMMITS:
            raise AssertionError(f"{count} rows written, not {n * COMMITS}")
        return cpu * 1000 / n
    finally:
        remove_db(path)
