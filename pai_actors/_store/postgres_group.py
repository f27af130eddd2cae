"""A group commit of :class:`~pai_actors.PostgresStore`: its commits, and the fast way to
write them, in one pipeline.

The store writes a group in one transaction. The careful way (``PostgresStore._write``) runs
each commit under a savepoint, one statement at a time, so that a refused write rolls back
its own commit alone and is looked into in the transaction as it found it. That costs a round
trip per statement, and a round trip is a trio wait: with a thousand conversations at once,
the writer spent nearly all of W1's time waiting on them, one after another, while the
machine's second core idled.

Writes are almost never refused (``_store.postgres_writes``: no write is meant to fail), so
:func:`write_pipelined` tries the fast way first: ``BEGIN``, the leases' statements (with a
``node_id``), every write of every commit and the notification, sent in one libpq pipeline
with no savepoints, and their results checked afterwards. If every statement wrote what it
must, the caller commits. If anything was refused or failed, the transaction is rolled back
and the caller writes the group the careful way, which refuses exactly the commits it
refused before; nothing of the fast attempt remains (leases, notifications and rows all roll
back with it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import trio

try:
    from psycopg import pq
except ImportError:  # the extra is missing: PostgresStore says so before this is used
    pass

from .base import (
    AppendMessage,
    CreateThread,
    PutCall,
    PutRun,
    PutToolPart,
    ReplaceMessage,
    SaveFile,
    Write,
)
from .postgres_connection import Connection, Statement
from .postgres_owners import Owners
from .postgres_updates import log_statement
from .postgres_writes import statement
from .updates import PartTexts, encoded_updates

_CHUNK = 2_000
"""At most this many statements per pipeline: a group's results are read (and its failure
found) a chunk at a time, and memory stays bounded for a group of tens of thousands."""


class Commit:
    """One writer's batch in a group commit, and what became of it."""

    __slots__ = ("claimed", "error", "log", "released", "statements", "waiting", "writes")

    def __init__(
        self, writes: Sequence[Write], *, pipelined: bool = False, log_as: str | None = None
    ) -> None:
        self.writes = writes
        texts: PartTexts = {}  # (each part encoded once, for its row and for the log)
        # With ``log_as`` (a node id): the statements that log the updates it shows, after
        # its writes in its transaction (``_store.postgres_updates``).
        self.log: Sequence[Statement] = (
            ()
            if log_as is None
            else [
                log_statement(t, log_as, body) for t, body in encoded_updates(writes, texts).items()
            ]
        )
        # For a pipelined group: made by the committing task as it joins, while the group
        # before is being written (the leader would make them all after it, the server
        # waiting); none where groups are never pipelined.
        self.statements = (
            [*(statement(write, texts) for write in writes), *self.log] if pipelined else None
        )
        self.claimed: dict[str, int] = {}  # the leases its transaction renewed or took
        self.released: dict[str, int] = {}  # and those it gave up (their runs stopped)
        self.error: BaseException | None = None
        self.waiting: trio.lowlevel.Task | None = None  # a joiner, parked until written


async def write_pipelined(db: Connection, group: list[Commit], owners: Owners | None) -> bool:
    """Write ``group`` in one transaction, its statements pipelined (see the module's text).
    ``True``: every commit applied, the transaction is open for the caller to ``COMMIT``,
    each commit's ``claimed``/``released`` set. ``False``: something was refused or failed
    (or a thread is fenced); no transaction is open and nothing was written."""
    statements: list[Statement] = [("BEGIN", ())]
    expect: list[Expect] = [_ANY]
    plan = _LeasePlan(owners, group) if owners is not None else None
    if plan is not None:
        if not plan.possible:
            return False
        plan.renew(statements, expect)
    for index, commit in enumerate(group):
        if plan is not None:
            plan.claim(index, statements, expect)
        made = commit.statements
        if made is None:
            made = [*(statement(write) for write in commit.writes), *commit.log]
        statements.extend(made)
        expect.extend(_WROTE for _ in made)
        if plan is not None:
            plan.release(index, statements, expect)
    if plan is not None:
        plan.announce(statements, expect)
    ok = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
    for start in range(0, len(statements), _CHUNK):
        chunk = slice(start, start + _CHUNK)
        results = await db.pipeline(statements[chunk])
        for result, check in zip(results, expect[chunk], strict=True):
            if result.status not in ok or not check(result):
                if db.in_transaction:
                    await db.execute("ROLLBACK")
                return False
    if plan is not None:
        plan.settle()
    return True


class Expect:
    """What a statement's result must show for the group to stand."""

    def __call__(self, result: pq.abc.PGresult) -> bool:
        return True


class _Wrote(Expect):
    def __call__(self, result: pq.abc.PGresult) -> bool:
        return bool(result.command_tuples)


class _Rows(Expect):
    """Returned a row for each of these threads (its first column); keeps the rows."""

    def __init__(self, thread_ids: Iterable[str]) -> None:
        self.wanted = set(thread_ids)
        self.rows: list[tuple[str, int | None]] = []

    def __call__(self, result: pq.abc.PGresult) -> bool:
        for row in range(result.ntuples):
            thread_id = (result.get_value(row, 0) or b"").decode()
            epoch = result.get_value(row, 1) if result.nfields > 1 else None
            self.rows.append((thread_id, None if epoch is None else _int8(epoch)))
        return {thread_id for thread_id, _ in self.rows} >= self.wanted


_ANY, _WROTE = Expect(), _Wrote()


def _int8(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


class _LeasePlan:
    """The leases' statements of a group written in one pipeline: what ``Owners.renew_held``,
    ``claim``, ``release`` and ``announce`` run when every claim succeeds, and the
    ``claimed``/``released`` each commit then has."""

    def __init__(self, owners: Owners, group: list[Commit]) -> None:
        self.owners = owners
        self.group = group
        self.threads = [sorted(set(thread_ids([commit]))) for commit in group]
        held = owners.held_of(t for threads in self.threads for t in threads)
        self.possible = held is not None  # a fenced thread: the careful way refuses it
        self.held = held or {}
        self.taken: dict[int, _Rows] = {}  # commit -> its take's rows
        self.idle: dict[int, list[str]] = {}  # commit -> the leases it gives up

    def renew(self, statements: list[Statement], expect: list[Expect]) -> None:
        if self.held:
            statements.append(self.owners.renew_statement(self.held))
            expect.append(_Rows(self.held))

    def claim(self, index: int, statements: list[Statement], expect: list[Expect]) -> None:
        new = [t for t in self.threads[index] if t not in self.held]
        if new:
            self.taken[index] = rows = _Rows(new)
            statements.append(self.owners.take_statement(new))
            expect.append(rows)

    def release(self, index: int, statements: list[Statement], expect: list[Expect]) -> None:
        idle = self.idle[index] = sorted(set(stopped(self.group[index])) & set(self.threads[index]))
        if idle:
            statements.append(self.owners.give_up_statement(idle))
            expect.append(_Rows(idle))

    def announce(self, statements: list[Statement], expect: list[Expect]) -> None:
        changed = [t for threads in self.threads for t in threads]
        if changed:
            statements.append(self.owners.announce_statement(changed))
            expect.append(_ANY)

    def settle(self) -> None:
        """Every statement wrote what it must: each commit's ``claimed`` (less what it gave
        up), as ``Owners.claim`` and ``release`` would have left it."""
        for index, commit in enumerate(self.group):
            claimed = {t: self.held[t] for t in self.threads[index] if t in self.held}
            if index in self.taken:
                claimed.update((t, e) for t, e in self.taken[index].rows if e is not None)
            idle = self.idle.get(index, ())
            commit.released = {t: claimed.pop(t) for t in idle if t in claimed}
            commit.claimed = claimed


def stopped(commit: Commit) -> Iterable[str]:
    """The threads ``commit`` leaves with no running run: those whose run it records
    waiting or ended, and those it creates without starting a run."""
    running = {
        write.stored.thread_id
        for write in commit.writes
        if isinstance(write, PutRun) and write.stored.status == "running"
    }
    for write in commit.writes:
        if isinstance(write, PutRun) and write.stored.status != "running":
            yield write.run.thread_id
        elif isinstance(write, CreateThread) and write.thread.thread_id not in running:
            yield write.thread.thread_id


def thread_ids(group: list[Commit]) -> Iterable[str]:
    """The threads the writes of ``group`` change. (``isinstance`` is given a tuple: ``A | B``
    would make a union object for every write.)"""
    for commit in group:
        for write in commit.writes:
            if isinstance(write, CreateThread):
                yield write.thread.thread_id
            elif isinstance(write, (AppendMessage, ReplaceMessage, PutToolPart)):
                yield write.thread_id
            elif isinstance(write, PutRun):
                yield write.run.thread_id
            elif isinstance(write, PutCall):
                yield write.call.thread_id
            else:
                assert isinstance(write, SaveFile)  # files are not mirrored
