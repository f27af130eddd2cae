"""What every side of the PostgreSQL figures shares: the server, a new database per side of
each repetition, the server's settings and the CPU time its processes spend.

Like :mod:`._conversation`, it imports no side: ours and LangGraph's import it, and so does
the figures' module in the parent process (which creates and drops the databases). It needs
``psycopg`` (``pip install .[bench]``), imported only when a function here connects.

The server is the one at :data:`ADMIN` (``PAI_BENCH_POSTGRES`` in the environment, else
``host=127.0.0.1 port=5432 user=postgres dbname=postgres``): a maintenance database the
harness connects to, to ``CREATE DATABASE`` one new database for each side of each
repetition (:func:`new_database`) and to ``DROP DATABASE ... WITH (FORCE)`` it afterwards, so
that no side sees another's data. A side connects to its own database only.

The CPU split (:func:`cpu_times`): the runtime process and the PostgreSQL server share the
machine's cores, so a side reports, besides its own process's CPU time, the CPU seconds
(``utime + stime`` in ``/proc/PID/stat``) of the server's processes over its timed part:
the backends serving its database (a backend's process title names its database) and the
server's own background processes (the postmaster, checkpointer, background writer, WAL
writer, ...), which serve every database of the server. Backends of other databases are not
counted, nor a backend that exited during the timed part (none does: both sides hold their
connections through it). The machine's busy CPU seconds (``/proc/stat``, every core) over the
same interval bound what anything else on the machine did meanwhile.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ADMIN = os.environ.get(
    "PAI_BENCH_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)
"""The libpq connection string of the server's maintenance database."""

SETTINGS = ("server_version", "fsync", "synchronous_commit", "wal_sync_method")
"""The server settings each side reads back on its own connection and reports."""

_BACKGROUND = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum",
    "logical replication",
    "archiver",
    "stats collector",
    "walsender",
    "walreceiver",
)
"""Process titles of the server's background processes (the postmaster has no title)."""

_TICK = os.sysconf("SC_CLK_TCK")


def psycopg_installed() -> bool:
    return importlib.util.find_spec("psycopg") is not None


def unreachable() -> str | None:
    """Why the server at :data:`ADMIN` cannot be used, or ``None`` when it can."""
    import psycopg

    try:
        with psycopg.connect(ADMIN, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        return f"PostgreSQL unreachable at {ADMIN!r}: {first}"
    return None


@contextlib.contextmanager
def new_database(what: str) -> Iterator[str]:
    """A new, empty database on the server, named after ``what``; yields its connection
    string and drops it (``WITH (FORCE)``: any connection a failed side left is closed)."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    name = f"pai_bench_{what}_{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(ADMIN, dbname=name)
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def database_of(conninfo: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(conninfo).get("dbname")
    if not isinstance(name, str):
        raise ValueError(f"the connection string {conninfo!r} names no database")
    return name


def settings(conninfo: str) -> dict[str, str]:
    """The server's :data:`SETTINGS`, as a new session on ``conninfo`` sees them."""
    import psycopg

    values: dict[str, str] = {}
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for name in SETTINGS:
            row = conn.execute(f"SHOW {name}").fetchone()
            assert row is not None
            values[name] = str(row[0])
    return values


def _server_processes() -> Iterator[tuple[str, float]]:
    """Every process of the PostgreSQL server: its title and its CPU seconds so far."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            stat = (entry / "stat").read_text()
        except OSError:  # it exited meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        yield title, (int(fields[11]) + int(fields[12])) / _TICK


def _machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (``/proc/stat``, every core)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / _TICK


def cpu_times(database: str) -> dict[str, float]:
    """CPU seconds so far: this process's (``time.process_time``), the server's backends
    serving ``database``, the server's background processes, and the machine's busy time.
    Subtract a reading from a later one (:func:`cpu_since`)."""
    backends = background = 0.0
    for title, seconds in _server_processes():
        words = title.split()
        if database in words:
            backends += seconds
        elif not title.startswith("postgres:") or any(b in title for b in _BACKGROUND):
            background += seconds
    return {
        "process": time.process_time(),
        "backends": backends,
        "background": background,
        "machine": _machine_busy(),
    }


def cpu_since(before: dict[str, float], database: str) -> dict[str, float]:
    after = cpu_times(database)
    return {key: after[key] - before[key] for key in before}


def describe_settings(results: list[dict[str, Any]]) -> str:
    """The server's settings that every side read back (the same in every repetition)."""
    seen = {tuple(sorted(r["settings"].items())) for r in results}
    if len(seen) != 1:
        raise AssertionError(f"the server's settings changed between repetitions: {seen}")
    [pairs] = seen
    values = dict(pairs)
    return (
        f"PostgreSQL {values['server_version']} on the same machine, fsync={values['fsync']}, "
        f"synchronous_commit={values['synchronous_commit']}, "
        f"wal_sync_method={values['wal_sync_method']} (read back with SHOW)"
    )
