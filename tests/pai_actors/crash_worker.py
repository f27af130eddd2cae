"""The child process of ``test_crash_safety``: approval flows on a SQLite file, killed on cue.

Run from the repository root (``tests`` is a package)::

    .venv/bin/python -m tests.pai_actors.crash_worker --db x.db --log x.log --seed 7 \\
        --generation 1 --target 6 --kill-at 23 --kill-when after

Every conversation (a thread of the scope ``SCOPE``): the user asks for one or two jobs; the
model calls the tool ``approve`` once per job; each call suspends at ``approval``; this
process, playing the client, submits ``{"approved": true}``; the tool resumes, logs its
execution and returns; the model answers with text.

On start the process goes on where the last one stopped: it loads every thread the file
holds (their ids are in the file: ``list_threads(SCOPE)``), sends the request of a thread
created without one, submits every pending action and waits for the thread to be idle; then
it starts new conversations (at most ``--concurrency`` at a time) until the file holds
``--target`` threads.

The crash: :class:`KillingStore` counts this process's commits and sends itself ``SIGKILL``
at commit number ``--kill-at``: ``before`` it begins (nothing of it written), ``during`` it
(every statement applied, ``COMMIT`` not run) or ``after`` it (committed, not yet returned
to the runtime). Counting commits, not time, makes the kill point exact, and the run is
replayable: ids are counters (``--generation`` keeps those of successive processes apart),
time is ``MockClock``'s, the plan is drawn from ``--seed`` and trio's scheduler is seeded
too, so the same command on the same file commits the same sequence.

Resume log: each execution of the tool's resume appends one JSON line
``{"thread", "call", "action", "generation"}`` to ``--log`` with ``os.write`` on an
``O_APPEND`` descriptor before the tool returns. The line is in the kernel once ``write``
returns, so a ``SIGKILL`` cannot lose it (``--fsync`` also syncs it, for a power-loss
model), and it is independent of the store: the parent counts resumes from it.

A process that finishes prints one JSON line: ``{"commits": n, "threads": m}``.

Replays are exact with a fixed ``PYTHONHASHSEED`` (the test uses ``0``). ``--serve`` runs a
fork server (:func:`serve`), which the test uses to start its many processes without paying
the imports each time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal

import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    AgentRuntime,
    ModelRequest,
    ModelToolMessage,
    ModelUserMessage,
    ResumeEntry,
    RunRecord,
    SqliteStore,
    StoredCall,
    SuspendPoint,
    ToolContext,
    ToolRegistration,
    create_agent_runtime,
    define_agent,
    define_tool,
)
from pai_actors._store.base import Write
from pai_actors.testing import ScriptedModel, text, tool_call, trio_clock

SCOPE = "crash"
TOOL = "approve"
KillWhen = Literal["before", "during", "after"]
KILL_WHENS: tuple[KillWhen, ...] = ("before", "during", "after")
HANG_GUARD_SECONDS = 120


class Job(BaseModel):
    job: str


class Decision(BaseModel):
    approved: bool


# -- the resume log --------------------------------------------------------------------------


def log_resume(path: str, entry: dict[str, Any], *, fsync: bool = False) -> None:
    """Append ``entry`` as one line; in the kernel (or on disk, with ``fsync``) on return."""
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        assert written == len(line), "a short write to the resume log"
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_resume_log(path: str) -> list[dict[str, Any]]:
    """Every logged resume, in order. A torn line fails loudly (it would hide a resume)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file.read().splitlines()]


def resume_key(thread_id: str, tool_call_id: str, action_id: str) -> tuple[str, str, str]:
    return (thread_id, tool_call_id, action_id)


# -- the agent and its model -----------------------------------------------------------------


def make_agent(log_path: str, *, generation: str, fsync: bool = False) -> Any:
    """The agent: one tool, ``approve``, that suspends for approval and logs each resume."""

    async def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            entry = {
                "thread": ctx.thread.thread_id,
                "call": ctx.thread.tool_call_id,
                "action": ctx.entry.action.action_id,
                "generation": generation,
            }
            log_resume(log_path, entry, fsync=fsync)
            await trio.lowlevel.checkpoint()  # let other conversations run in between
            return {"job": ctx.input.job, "approved": ctx.entry.resume.approved}
        return ctx.suspend("approval", {"job": ctx.input.job})

    tool = define_tool(
        id="crash.approve.v1",
        description="Run a job once a human approves it.",
        input_schema=Job,
        suspend={"approval": SuspendPoint(suspend_schema=Job, resume_schema=Decision)},
        execute=execute,
    )
    return define_agent(name="crash", tools={TOOL: ToolRegistration(tool)})


def jobs_of(request_text: str) -> list[str]:
    """The jobs a user message asks for: ``"jobs: a b"`` -> ``["a", "b"]``."""
    match = re.fullmatch(r"jobs: (.+)", request_text)
    assert match is not None, f"not a request of this test: {request_text!r}"
    return match.group(1).split()


def answer(job_outputs: str) -> str:
    return f"done: {job_outputs}"


def decide(request: ModelRequest) -> Any:
    """One model step, decided from the request alone (so a step done again after a crash
    is the same step): a user request -> one ``approve`` call per job; tool results -> text."""
    last = request.messages[-1]
    if isinstance(last, ModelUserMessage):
        return [tool_call(TOOL, {"job": job}) for job in jobs_of(last.text)]
    assert isinstance(last, ModelToolMessage), f"unexpected last message {last!r}"
    return text(answer(" ".join(sorted(part.tool_call_id for part in last.parts))))


def make_model() -> ScriptedModel:
    """A :class:`ScriptedModel` whose every step is :func:`decide` (more than any run asks)."""
    return ScriptedModel([decide] * 100_000)


def new_ids(generation: str) -> Callable[[str], str]:
    """Deterministic ids, unique per store as long as each process has its own generation."""
    counter = iter(range(1, sys.maxsize))
    return lambda prefix: f"{prefix}_{generation}_{next(counter)}"


def open_runtime(store: SqliteStore, log_path: str, generation: str, **kw: Any) -> AgentRuntime:
    """The runtime the worker (and the parent's checks) open on ``store``."""
    return create_agent_runtime(
        make_agent(log_path, generation=generation, fsync=kw.pop("fsync", False)),
        store=store,
        model=make_model(),
        new_id=new_ids(generation),
        clock=trio_clock(),
        **kw,
    )


# -- the store that kills its process -------------------------------------------------------


class KillingStore(SqliteStore):
    """A :class:`SqliteStore` that sends its process ``SIGKILL`` at commit ``kill_at``
    (``None``: never), ``before``, ``during`` (``COMMIT`` about to run) or ``after`` it.

    ``exclude`` names known bugs (see :func:`known_bug`): a kill that would leave the file in
    the state one of them mishandles is postponed to the next commit that would not (and
    said so on stderr), so the test keeps asserting the correct behaviour elsewhere.
    """

    def __init__(
        self,
        path: str,
        *,
        kill_at: int | None,
        kill_when: KillWhen,
        exclude: frozenset[int] = frozenset(),
    ) -> None:
        super().__init__(path, durability="normal")
        self.kill_at = kill_at
        self.kill_when = kill_when
        self.exclude = exclude
        self.commits = 0
        self._armed = False
        db = self._db
        assert db is not None
        db.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        if self._armed and statement.strip().upper() == "COMMIT":
            die()

    def _may_die(self) -> bool:
        """Whether the file, as it is now, is not in a known bug's state."""
        db = self._db
        assert db is not None
        bug = known_bug(db, self.exclude)
        if bug is None:
            return True
        print(
            f"kill at commit {self.commits} {self.kill_when} postponed: excluded until bug "
            f"{bug} is fixed",
            file=sys.stderr,
            flush=True,
        )
        return False

    async def commit(self, writes: Sequence[Write]) -> None:
        self.commits += 1
        due = self.kill_at is not None and self.commits >= self.kill_at
        # before/during: the file keeps what it holds now; after: it gets this commit too.
        if due and self.kill_when in ("before", "during") and not self._may_die():
            due = False
        if due and self.kill_when == "before":
            die()
        self._armed = due and self.kill_when == "during"
        try:
            await super().commit(writes)
        finally:
            self._armed = False
        if due and self.kill_when == "after" and self._may_die():
            die()


def known_bug(db: sqlite3.Connection, exclude: frozenset[int]) -> int | None:
    """The first bug of ``exclude`` whose state the file is in (read synchronously: no
    checkpoint, so no other task commits meanwhile), or ``None``.

    Bug 1: an active run's final answer (an assistant message with no tool call) is stored,
    its completion is not; the next runtime asks the model again (a second answer).
    Bug 2: a ``running`` run whose calls are all done or suspended (a started, unfinished
    call counts as done: the next load records it interrupted), one at least suspended; the
    next runtime leaves the run ``running`` instead of ``waiting``.
    """
    if not exclude:
        return None
    for (json_text,) in db.execute("SELECT json FROM runs WHERE active = 1").fetchall():
        run = RunRecord.model_validate_json(json_text)
        tid = run.thread_id
        if 1 in exclude:
            last = db.execute(
                "SELECT message_id, json FROM messages WHERE thread_id = ? ORDER BY seq DESC"
                " LIMIT 1",
                (tid,),
            ).fetchone()
            if last is not None and json.loads(last[1])["role"] == "assistant":
                kinds = [
                    json.loads(row[0])["type"]
                    for row in db.execute(
                        "SELECT json FROM parts WHERE thread_id = ? AND message_id = ?",
                        (tid, last[0]),
                    )
                ]
                if not any(kind.startswith("tool-") for kind in kinds):
                    return 1
        if 2 in exclude and run.status == "running":
            records = [
                call.record
                for (text_,) in db.execute("SELECT json FROM calls WHERE thread_id = ?", (tid,))
                for call in [StoredCall.model_validate_json(text_)]
                if call.run_id == run.run_id
            ]
            settled = [
                r.phase == "done"
                or r.phase == "streaming"
                or (r.phase == "executing" and r.entry_started)
                or r.phase == "suspended"
                for r in records
            ]
            if records and all(settled) and any(r.phase == "suspended" for r in records):
                return 2
    return None


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


# -- the client ------------------------------------------------------------------------------


async def settle(rt: AgentRuntime, thread_id: str) -> None:
    """Submit every pending action of the thread (approve it) until none is left."""
    while True:
        await rt.wait_idle(thread_id)
        actions = await rt.pending_actions(thread_id)
        if not actions:
            return
        for action in actions:
            result = await action.submit({"approved": True})
            assert result.status == "accepted", (action.ref, result)


async def converse(
    rt: AgentRuntime, store: SqliteStore, thread_id: str | None, rng: random.Random
) -> None:
    """One conversation: create the thread (``None``), send its request unless it holds
    one, then approve until it is done."""
    if thread_id is None:
        thread_id = await rt.create_thread(SCOPE)
    await rt.wait_idle(thread_id)  # loads it: a stopped process's work is settled
    if not await store.list_messages(thread_id):  # created, then the process stopped
        jobs = [f"{thread_id}-{n}" for n in range(1, rng.randint(1, 2) + 1)]
        await rt.send(thread_id, "jobs: " + " ".join(jobs))
    await settle(rt, thread_id)


async def work(args: argparse.Namespace) -> dict[str, int]:
    rng = random.Random(f"{args.seed}/{args.generation}")
    kill_at = args.kill_at if args.kill_at > 0 else None
    exclude = frozenset(args.exclude_bug)
    store = KillingStore(args.db, kill_at=kill_at, kill_when=args.kill_when, exclude=exclude)
    with store:
        async with open_runtime(store, args.log, args.generation, fsync=args.fsync) as rt:
            existing = [t.thread_id for t in await store.list_threads(SCOPE)]
            limiter = trio.CapacityLimiter(args.concurrency)

            async def one(thread_id: str | None) -> None:
                async with limiter:
                    await converse(rt, store, thread_id, rng)

            async with trio.open_nursery() as nursery:
                for thread_id in existing:
                    nursery.start_soon(one, thread_id)
                for _ in range(max(0, args.target - len(existing))):
                    nursery.start_soon(one, None)
        threads = len(await store.list_threads(SCOPE))
    return {"commits": store.commits, "threads": threads}


def seed_trio_scheduler(seed: str) -> None:
    """trio randomizes the order of runnable tasks; seed it so a command replays exactly."""
    scheduler_random = getattr(trio._core._run, "_r", None)
    if isinstance(scheduler_random, random.Random):
        scheduler_random.seed(f"trio/{seed}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.pai_actors.crash_worker")
    parser.add_argument("--db", required=True)
    parser.add_argument("--log", required=True, help="the resume log (appended to)")
    parser.add_argument("--seed", required=True)
    parser.add_argument("--generation", required=True, help="unique per process on a db")
    parser.add_argument("--target", type=int, required=True, help="threads to reach")
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--kill-at", type=int, default=0, help="commit number; 0: never")
    parser.add_argument("--kill-when", choices=KILL_WHENS, default="after")
    parser.add_argument(
        "--exclude-bug", type=int, action="append", default=[], help="see known_bug"
    )
    parser.add_argument("--fsync", action="store_true", help="fsync each resume log line")
    args = parser.parse_args(argv)
    args.generation = f"g{args.generation}"
    seed_trio_scheduler(f"{args.seed}/{args.generation}")
    summary = trio.run(work, args, clock=trio.testing.MockClock(autojump_threshold=0))
    print(json.dumps(summary), flush=True)
    return 0


def check_sqlite_file(path: str) -> None:
    """``PRAGMA integrity_check`` of the file (raises with SQLite's report)."""
    db = sqlite3.connect(path)
    try:
        report = db.execute("PRAGMA integrity_check").fetchall()
    finally:
        db.close()
    assert report == [("ok",)], f"{path}: integrity_check says {report}"


# -- the fork server --------------------------------------------------------------------------


def serve() -> int:
    """``--serve``: run worker processes without paying the imports each time.

    Reads one request per line on stdin, ``{"argv": [...], "stdout": path, "stderr": path}``;
    forks a child that runs :func:`main` with ``argv`` (its output to those files) and
    exits; answers each request with one line, ``{"returncode": n}`` (``-9``: killed by
    ``SIGKILL``, as :mod:`subprocess` reports it). The child is a separate process forked
    before any trio run, store or thread exists here, so it is the process
    ``python -m tests.pai_actors.crash_worker <argv>`` would be, already imported.
    """
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the child
            code = 70
            signal.alarm(HANG_GUARD_SECONDS)  # a hung child dies (-14) rather than hang CI
            try:
                for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(target, fd)
                    os.close(target)
                code = main(request["argv"])
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        returncode = os.waitstatus_to_exitcode(status)
        print(json.dumps({"returncode": returncode}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main())
