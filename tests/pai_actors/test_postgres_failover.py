"""Failover, for real: three ``pai-actors serve --node-id`` processes on one PostgreSQL
database, one of them killed with ``SIGKILL`` at seeded moments of approval flows and started
again (under the same node id, or a new one), while a driver in the test process carries the
conversations to their end through whichever nodes are alive.

The nodes serve ``tests/pai_actors/failover_app.py`` (see its docstring: the user asks for one
or two jobs, the model calls one tool per job, each call waits for the user's approval, runs,
logs its execution to a file that a ``SIGKILL`` cannot lose, and the model answers). The nodes
run with a lease of one second, so a killed node's runs are taken over within 1 to 1.5 s.

**The driver** (:class:`Driver`) runs the conversations at once (each starting at a seeded
moment): it creates the thread, sends the request, polls the thread (a watch sees only the
runs its own node drives, so it polls, with a short sleep: a wait for other processes; the
whole is bounded by ``DRIVE_SECONDS``, after which it reports what each unfinished
conversation showed), and submits each pending approval to a node the seed picks, until the
thread's run is completed. A request refused because another node drives the thread (a
``thread-busy`` error: its owner did not answer the request handed to it in time) or
because its node died is retried on another node after a short pause (after reading again:
a request whose answer was lost may have been carried out). It reads a thread either
through the nodes (``getState``, ``listPendingActions``: what a client behind a load
balancer does) or from the database (then nothing but the nodes' own work and the
submissions touches their runtimes: a run must complete without a client's reads); each
seed runs both ways.

**The kills** (:class:`Plan`): each is due a seeded delay after the N-th request that starts
work (a send or a submission), most on the node that request went to, so kills land in model
steps, tool executions and submissions in flight, and in a restarted node's first leases
(when it takes over its predecessor's runs); one node is down at a time. The trace the nodes
write says where each kill landed.

**The checks** (:func:`check_database`), on the database through a fresh ``PostgresStore``
(no node id) once every node stopped gracefully, and on the execution log and the trace:

- no conversation is lost: every thread the driver created exists, with its request, one run,
  ``completed``, whose last message is the model's answer (once);
- no resume ran twice, none was lost: a ``job`` call with an output was executed exactly once,
  by the process whose output it holds; no call was executed twice by live processes;
- every interrupted call is recorded: a ``job`` call whose execution a kill cut is
  ``output-error`` with the interrupted text (and executed at most once, by a killed process);
  a ``rerunJob`` call (``rerun_interrupted``) is never recorded interrupted: it ran again, each
  earlier execution by a process that was killed;
- no pending action is left, and every one the driver saw could be resolved (else the driver
  times out, saying which);
- every call's tool part equals the projection of its record, and every logged execution
  belongs to a call of a conversation.

The seed fixes the plan (the conversations, the kill points, the victims and restarts, the
nodes each request goes to), not the interleaving: the nodes are real processes on the real
clock. A failure prints the seed, the kills (when, and what each landed in), what differed,
what the database holds of each failed conversation and the requests the driver made for it,
and the nodes' stderr (their INFO logs included). ``FAILOVER_SEED=failover-1`` (a list, with
commas) runs those seeds only; ``FAILOVER_KILLS=0`` runs the flows without kills.
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest
import trio

from pai_actors import PendingActionRef, PostgresStore, TextPart
from pai_actors._core.calls import INTERRUPTED_TEXT, to_part
from pai_actors.client import Client, ClientError, ClientThread, ConnectionLost, ServerError

from . import failover_app as app
from .failover_support import (
    Cluster,
    Node,
    NodeGone,
    postgres_url,
    stderr_report,
    tracebacks,
)
from .postgres_support import connect

SLOTS = 3
LEASE = 1.0
PACE = 0.15  # the longest pause of a model step, and of each half of a tool's execution
CONVERSATIONS = 10
SPREAD = 4.0  # the conversations begin within this many seconds
KILLS = int(os.environ.get("FAILOVER_KILLS", "4"))  # per iteration
POLL = 0.15  # between reads of a thread: a wait for other processes, not for an event
DRIVE_SECONDS = 45  # a hang guard for one iteration, not a measurement (CI machines are shared)
SEEDS = (
    os.environ["FAILOVER_SEED"].split(",")
    if "FAILOVER_SEED" in os.environ
    else [f"failover-{n}" for n in range(3)]
)

T = TypeVar("T")


# -- the plan --------------------------------------------------------------------------------

Reads = Literal["nodes", "database"]


@dataclass(frozen=True)
class KillPoint:
    """Kill a node ``delay`` seconds after the ``after``-th request that starts work: the
    node that request went to (``victim`` ``None``: where the work is) or the ``victim``-th
    live node (modulo), restarted under the ``same`` node id or a ``new`` one."""

    after: int
    delay: float
    victim: int | None
    restart: Literal["same", "new"]


@dataclass(frozen=True)
class Plan:
    """What the seed fixes: each conversation's jobs and when it starts, and the kills.
    ``reads`` is how the driver reads a thread: through the ``nodes`` (``getState`` and
    ``listPendingActions``, as a client behind a load balancer does), or from the
    ``database`` (a ``PostgresStore`` without node id or mirror; submissions still go
    through the nodes), which keeps reads from touching the nodes' runtimes."""

    seed: str
    reads: Reads
    conversations: tuple[tuple[str, ...], ...]  # the kinds of job each asks for
    starts: tuple[float, ...]  # when each conversation begins (s after the nodes serve)
    kills: tuple[KillPoint, ...]

    @classmethod
    def draw(cls, seed: str, reads: Reads) -> Plan:
        rng = random.Random(seed)
        conversations = tuple(
            tuple(rng.choice(("once", "once", "rerun")) for _ in range(rng.randint(1, 2)))
            for _ in range(CONVERSATIONS)
        )
        starts = tuple(round(rng.uniform(0, SPREAD), 2) for _ in conversations)
        requests = len(conversations) + sum(len(jobs) for jobs in conversations)
        afters = sorted(rng.sample(range(1, requests * 3 // 4), KILLS))
        restarts: tuple[Literal["same", "new"], ...] = ("same", "new")
        kills = tuple(
            KillPoint(
                after,
                round(rng.choice((rng.uniform(0, 0.02), rng.uniform(0, 0.4))), 3),
                rng.choice((None, None, rng.randrange(SLOTS))),
                rng.choice(restarts),
            )
            for after in afters
        )
        return cls(seed, reads, conversations, starts, kills)


# -- the driver ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """A thread as the driver read it: its runs (id, status, error), its pending actions,
    and its tool parts (for a report)."""

    runs: tuple[tuple[str, str, str | None], ...]
    pending: tuple[PendingActionRef, ...]
    calls: tuple[tuple[str, str], ...]


@dataclass(eq=False)
class Conversation:
    index: int
    kinds: tuple[str, ...]
    start: float
    thread_id: str | None = None
    lost_creates: int = 0  # createThread answers lost with their node (a thread may exist)
    views: dict[Node, ClientThread] = field(default_factory=dict)
    last: Seen | None = None
    approved: set[str] = field(default_factory=set)  # action ids accepted or seen resolved
    errors: list[str] = field(default_factory=list)  # the latest retried errors
    history: list[str] = field(default_factory=list)  # the requests that did something

    @property
    def request(self) -> str:
        return "jobs: " + " ".join(self.kinds)


class Driver:
    """The client side: carries each conversation to its end through the live nodes, and
    kills nodes as the plan says. ``reader`` is the store the driver reads threads from
    when the plan reads from the database."""

    def __init__(self, cluster: Cluster, plan: Plan, reader: PostgresStore | None) -> None:
        self.cluster = cluster
        self.plan = plan
        self.reader = reader
        self.conversations = [
            Conversation(n, kinds, start)
            for n, (kinds, start) in enumerate(zip(plan.conversations, plan.starts, strict=True))
        ]
        self.problems: list[str] = []
        self.retries: collections.Counter[str] = collections.Counter()
        self.requests = 0  # sends and submissions made (attempts), for the kill points
        self.targets: list[Node] = []  # the node each went to
        self._requested = trio.Event()
        self._done = False
        self._waiting: trio.CancelScope | None = None

    # the kills

    async def kill_as_planned(self) -> None:
        for point in self.plan.kills:
            with trio.CancelScope() as self._waiting:
                if self._done:
                    return
                while self.requests < point.after:
                    await self._requested.wait()
                await trio.sleep(point.delay)
            if self._waiting.cancelled_caught:
                return
            alive = self.cluster.alive()
            target = self.targets[point.after - 1]
            if point.victim is not None or target not in alive:
                victim = alive[(point.victim or 0) % len(alive)]
            else:
                victim = target
            await self.cluster.kill(victim)
            node_id = victim.node_id if point.restart == "same" else self.cluster.new_node_id()
            successor = await self.cluster.start(victim.slot, node_id)
            self.cluster.kills[-1] = replace(self.cluster.kills[-1], successor=successor.name)

    def _count_request(self, node: Node) -> None:
        self.requests += 1
        self.targets.append(node)
        self._requested.set()
        self._requested = trio.Event()

    # the conversations

    async def drive(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.kill_as_planned)
            async with trio.open_nursery() as conversations:
                for conversation in self.conversations:
                    conversations.start_soon(self.converse, conversation)
            self._done = True
            if self._waiting is not None:
                self._waiting.cancel()

    async def converse(self, conv: Conversation) -> None:
        rng = random.Random(f"{self.plan.seed}/conversation/{conv.index}")
        await trio.sleep(conv.start)
        conv.thread_id = await self.attempt(conv, rng, "createThread", self._create)
        await self.attempt(conv, rng, "send", lambda node, client: self._send(conv, node, client))
        started: set[str] = set()
        async with trio.open_nursery() as approvals:
            while True:
                seen = await self.attempt(
                    conv, rng, "read", lambda node, client: self._read(conv, node, client)
                )
                conv.last = seen
                if seen.runs and seen.runs[-1][1] not in ("running", "waiting"):
                    if seen.runs[-1][1] != "completed":
                        self.problems.append(
                            f"conversation {conv.index} ({conv.thread_id}): its run ended "
                            f"{seen.runs[-1][1]}: {seen.runs[-1][2]}"
                        )
                    break
                for ref in seen.pending:
                    if ref.action_id not in started:
                        started.add(ref.action_id)
                        seed = f"{self.plan.seed}/{conv.index}/{ref.tool_call_id}"
                        approvals.start_soon(self.approve, conv, random.Random(seed), ref)
                await trio.sleep(POLL * rng.uniform(0.5, 1.5))

    async def approve(self, conv: Conversation, rng: random.Random, ref: PendingActionRef) -> None:
        """Submit ``{"approved": true}`` for ``ref`` through a node the seed picks, until it
        is accepted (or found resolved: the answer of an earlier attempt was lost)."""
        await trio.sleep(rng.uniform(0, 0.3))  # a person reads it first
        tries = 0

        async def submit(node: Node, client: Client) -> str:
            nonlocal tries
            tries += 1
            if ref.action_id not in [a.action_id for a in await self._pending(ref, client)]:
                conv.approved.add(ref.action_id)
                return f"{ref.tool_call_id} no longer pending"
            self._count_request(node)
            result = await client.submit_action(ref, {"approved": True})
            # An earlier try whose node died may still be applied: handed to the thread's
            # owner, it outlives its asker, so it can land between this try's look and its
            # submission. Its answer is then "already resolved" (the database check below
            # finds the approval submitted once, approved).
            earlier = tries > 1 and "already resolved" in (result.error or "")
            if result.status != "accepted" and not earlier:
                self.problems.append(
                    f"conversation {conv.index} ({ref.thread_id}): the approval of "
                    f"{ref.tool_call_id} through {node.name} was {result.status}: {result.error}"
                )
            conv.approved.add(ref.action_id)
            return f"{ref.tool_call_id} {result.status}"

        await self.attempt(conv, rng, "submitAction", submit)

    async def _create(self, node: Node, client: Client) -> str:
        return (await client.create_thread()).thread_id

    async def _send(self, conv: Conversation, node: Node, client: Client) -> str:
        assert conv.thread_id is not None
        if self.reader is not None:
            sent = bool(await self.reader.list_messages(conv.thread_id))
        else:
            sent = bool((await client.thread(conv.thread_id)).get_state().messages)
        if sent:  # (an earlier attempt's answer was lost with its node)
            return "sent already"
        self._count_request(node)
        result = await client.request(
            "send", threadId=conv.thread_id, text=conv.request, clientData=None, clientTools=[]
        )
        return str(result["runId"])

    async def _pending(self, ref: PendingActionRef, client: Client) -> list[PendingActionRef]:
        if self.reader is not None:
            return [a.ref for a in await self.reader.list_pending_actions(ref.thread_id)]
        return [a.ref for a in await client.pending_actions(ref.thread_id)]

    async def _read(self, conv: Conversation, node: Node, client: Client) -> Seen:
        """The thread, read now (through ``node`` or from the database)."""
        thread_id = conv.thread_id
        assert thread_id is not None
        if self.reader is not None:
            runs = await self.reader.list_runs(thread_id)
            calls = await self.reader.list_calls(thread_id)
            return Seen(
                tuple((r.run_id, r.status, r.error) for r in runs),
                tuple(a.ref for a in await self.reader.list_pending_actions(thread_id)),
                tuple((c.record.tool_call_id, c.record.state) for c in calls),
            )
        thread = conv.views.get(node)
        if thread is None:  # (opening it reads it)
            thread = conv.views[node] = await client.thread(thread_id)
        else:
            await thread.refresh()
        state = thread.get_state()
        return Seen(
            tuple((r.run_id, r.status, r.error) for r in state.runs),
            tuple(a.ref for a in thread.pending_actions()),
            tuple((p.tool_call_id, p.state) for m in state.messages for p in m.tool_parts),
        )

    async def attempt(
        self,
        conv: Conversation,
        rng: random.Random,
        op: str,
        action: Callable[[Node, Client], Awaitable[T]],
    ) -> T:
        """``action`` through a live node the seed picks, until it is done: a refusal
        (another node drives the thread) or a node's death is retried on another node after
        a short pause."""
        while True:
            alive = await self.cluster.wait_alive()
            node = alive[rng.randrange(len(alive))]
            began = self.cluster.now()
            try:
                with node.request(op) as client:
                    result = await action(node, client)
            except (ClientError, OSError, NodeGone) as exc:
                why = exc.code if isinstance(exc, ServerError) else type(exc).__name__
                self.retries[f"{op}: {why}"] += 1
                conv.errors = [*conv.errors[-4:], f"{op} via {node.name}: {exc}"]
                if op == "createThread" and isinstance(exc, ConnectionLost):
                    conv.lost_creates += 1  # its answer lost with its node: it may exist
                if op != "read":
                    conv.history.append(
                        f"{began:.2f}-{self.cluster.now():.2f}s {op} via {node.name}: {why}"
                    )
            else:
                if op != "read":
                    conv.history.append(
                        f"{began:.2f}-{self.cluster.now():.2f}s {op} via {node.name}: {result}"
                    )
                return result
            await trio.sleep(rng.uniform(0.05, 0.2))


# -- the checks ------------------------------------------------------------------------------


@dataclass
class Logs:
    """What the nodes' files say, by call ``(thread, call)``: the processes that logged an
    execution (in order), those that entered ``execute``, and those a kill cut."""

    executions: dict[tuple[str, str], list[int]]
    starts: dict[tuple[str, str], list[int]]
    cut: dict[tuple[str, str], list[int]]
    killed: set[int]

    @classmethod
    def read(cls, cluster: Cluster) -> Logs:
        executions: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
        for line in app.read_lines(str(cluster.log)):
            executions[(line["thread"], line["call"])].append(line["pid"])
        starts: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
        for line in app.read_lines(str(cluster.trace)):
            if line["event"] == "tool-start":
                starts[(line["thread"], line["call"])].append(line["pid"])
        cut: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
        for kill in cluster.kills:
            for key in kill.open_executions:
                cut[key].append(kill.pid)
        return cls(dict(executions), dict(starts), dict(cut), set(cluster.killed_pids))


async def check_database(
    url: str, cluster: Cluster, driver: Driver
) -> tuple[list[str], collections.Counter[str]]:
    """Every invariant of the module docstring, on the database as the nodes left it; the
    problems, and how the calls ended (for the report)."""
    logs = Logs.read(cluster)
    problems: list[str] = []
    outcomes: collections.Counter[str] = collections.Counter()
    checked: set[tuple[str, str]] = set()
    with PostgresStore(url) as store:
        stored = {thread.thread_id for thread in await store.list_threads(app.SCOPE)}
        for conv in driver.conversations:
            if conv.thread_id is None:
                problems.append(f"conversation {conv.index} was never created")
                continue
            problems += await check_conversation(store, conv, logs, outcomes, checked)
        created = {conv.thread_id for conv in driver.conversations}
        strays = sorted(stored - created)
        if len(strays) > sum(conv.lost_creates for conv in driver.conversations):
            problems.append(f"threads no createThread made (or more than were lost): {strays}")
        for thread_id in strays:  # created by a createThread whose answer was lost
            messages = await store.list_messages(thread_id)
            runs = await store.list_runs(thread_id)
            if messages or runs:
                problems.append(f"the stray thread {thread_id} holds messages or runs {runs}")
        left = await store.list_scope_pending_actions(app.SCOPE)
        if left:
            problems.append(f"pending actions left: {[a.ref for a in left]}")
    for key in sorted(set(logs.executions) | set(logs.starts)):
        if key not in checked:
            problems.append(f"an execution of {key}, which is no call of a conversation")
    return problems, outcomes


async def check_conversation(
    store: PostgresStore,
    conv: Conversation,
    logs: Logs,
    outcomes: collections.Counter[str],
    checked: set[tuple[str, str]],
) -> list[str]:
    thread_id = conv.thread_id
    assert thread_id is not None
    where = f"conversation {conv.index} ({thread_id}, {conv.request!r})"
    if await store.get_thread(thread_id) is None:
        return [f"{where}: lost, no such thread"]
    messages = await store.list_messages(thread_id)
    runs = await store.list_runs(thread_id)
    calls = sorted(await store.list_calls(thread_id), key=lambda c: c.record.tool_call_id)
    problems = []
    if [run.status for run in runs] != ["completed"]:
        problems.append(f"{where}: runs {[(r.run_id, r.status, r.error) for r in runs]}")
    said = [[p.text for p in m.parts if isinstance(p, TextPart)] for m in messages]
    if not messages or messages[0].role != "user" or said[0] != [conv.request]:
        problems.append(f"{where}: the first message is not the request: {messages[:1]}")
    answers = [
        text for m, texts in zip(messages, said, strict=True) if m.role != "user" for text in texts
    ]
    expected_answer = app.answer([c.record.tool_call_id for c in calls])
    if answers != [expected_answer]:
        problems.append(f"{where}: the model's answers {answers} != [{expected_answer!r}]")
    asked = [(app.TOOLS[kind], {"job": f"{kind}-{n}"}) for n, kind in enumerate(conv.kinds)]
    made = [(c.record.name, c.record.input) for c in calls]
    if made != asked:
        problems.append(f"{where}: calls {made} != the ones asked for {asked}")
    parts = {(m.id, p.tool_call_id): p for m in messages for p in m.tool_parts}
    for call in calls:
        record = call.record
        key = (thread_id, record.tool_call_id)
        checked.add(key)
        what = f"{where} call {record.tool_call_id} ({record.name})"
        part = parts.get((call.message_id, record.tool_call_id))
        if part is None or part.to_wire() != to_part(record).to_wire():
            problems.append(f"{what}: part {part} != the record's {to_part(record)}")
        approval = record.approval
        if approval is None or approval.state != "submitted" or not approval.approved:
            problems.append(f"{what}: approval {approval}")
        problems += check_call(what, record, logs.executions.get(key, []), logs, key, outcomes)
    pending = await store.list_pending_actions(thread_id)
    if pending:
        problems.append(f"{where}: pending actions left {[a.ref for a in pending]}")
    if problems:  # what the database holds, and what the driver did
        shown = [
            f"{c.record.tool_call_id}: {c.record.phase} {c.record.finish} entry_started="
            f"{c.record.entry_started} approval={c.record.approval and c.record.approval.state} "
            f"revision {c.revision}"
            for c in calls
        ]
        problems.append(
            f"{where}: stored runs {[(r.run_id, r.status, r.revision) for r in runs]}, calls "
            f"{shown}, lease {lease_of(store, thread_id)}; the driver's requests {conv.history}"
        )
    return problems


def lease_of(store: PostgresStore, thread_id: str) -> Any:
    with connect(store.name) as db:
        return db.execute(
            "SELECT node_id, epoch, expires_at < now() AS expired FROM pai_thread_owners"
            " WHERE thread_id = %s",
            (thread_id,),
        ).fetchall()


def check_call(
    what: str,
    record: Any,
    executions: list[int],
    logs: Logs,
    key: tuple[str, str],
    outcomes: collections.Counter[str],
) -> list[str]:
    """No execution twice, none lost, an interrupted call recorded: see the module docstring."""
    starts = logs.starts.get(key, [])
    cut = logs.cut.get(key, [])
    rerun = record.name == app.TOOLS["rerun"]
    kind = "rerunJob" if rerun else "job"
    shown = f"logged executions by pids {executions}, execute entered by {starts}, cut {cut}"
    if record.phase != "done":
        return [f"{what}: {record.phase} after its run completed ({shown})"]
    if record.finish == "output-available":
        pid = record.output.get("pid") if isinstance(record.output, dict) else None
        earlier = [p for p in starts if p != pid]
        outcomes[f"{kind}: output, after {len(earlier)} cut execution(s)"] += 1
        if pid in cut:
            return [f"{what}: its output is from pid {pid}, whose execution a kill cut ({shown})"]
        if not rerun and (executions != [pid] or earlier):
            return [f"{what}: an output from pid {pid}, but {shown}: ran twice, or its run lost"]
        if rerun and (
            not executions or executions[-1] != pid or len(set(executions)) != len(executions)
        ):
            return [f"{what}: an output from pid {pid}, but {shown}"]
        alive = sorted(set(earlier) - logs.killed)
        if alive:
            return [f"{what}: executed by live processes {alive} besides pid {pid} ({shown})"]
        return []
    if record.finish == "output-error" and record.error_text == INTERRUPTED_TEXT:
        outcomes[f"{kind}: interrupted, {len(executions)} logged execution(s)"] += 1
        if rerun:
            return [f"{what}: registered rerun_interrupted, yet recorded interrupted ({shown})"]
        alive = sorted(set(starts) - logs.killed)
        if len(executions) > 1 or len(starts) > 1 or alive:
            return [f"{what}: recorded interrupted, but {shown}; live: {alive}"]
        return []
    return [f"{what}: ended {record.finish}: {record.error_text or record.output} ({shown})"]


# -- the test --------------------------------------------------------------------------------


@dataclass
class Outcome:
    cluster: Cluster
    driver: Driver
    problems: list[str]
    calls: collections.Counter[str]


async def run_plan(url: str, plan: Plan, directory: Path) -> Outcome:
    """Start the nodes, drive the conversations while the kills happen, stop the nodes,
    check."""
    cluster = Cluster(url, directory, lease=LEASE, pace=PACE)
    problems: list[str] = []
    # The database's tables first, by one store: nodes that open a new database at once
    # race on them (the last test).
    PostgresStore(url, node_id="setup").close()
    with PostgresStore(url, mirror=False) as reader:
        driver = Driver(cluster, plan, reader if plan.reads == "database" else None)
        async with cluster.running():
            async with trio.open_nursery() as nursery:
                for slot in range(SLOTS):
                    nursery.start_soon(cluster.start, slot, cluster.new_node_id())
            with trio.move_on_after(DRIVE_SECONDS) as guard:
                await driver.drive()
            if guard.cancelled_caught:
                problems.append(f"the conversations did not all complete within {DRIVE_SECONDS}s:")
                problems += [f"  {unfinished(conv)}" for conv in driver.conversations]
            problems += await cluster.stop()
    problems += driver.problems
    checked, calls = await check_database(url, cluster, driver)
    return Outcome(cluster, driver, problems + checked, calls)


def unfinished(conv: Conversation) -> str:
    seen = conv.last
    return (
        f"conversation {conv.index} ({conv.thread_id}, {conv.request!r}): runs "
        f"{seen.runs if seen else '?'}, calls {seen.calls if seen else '?'}, pending "
        f"{[r.action_id for r in seen.pending] if seen else '?'}, approved "
        f"{sorted(conv.approved)}, last errors {conv.errors}, history {conv.history}"
    )


def report(plan: Plan, outcome: Outcome, seconds: float) -> str:
    cluster, driver = outcome.cluster, outcome.driver
    landed = collections.Counter(where for kill in cluster.kills for where in kill.landed)
    lines = [
        f"seed {plan.seed!r}, reads through the {plan.reads}: {len(plan.conversations)} "
        f"conversations {plan.conversations} starting at {plan.starts}, "
        f"{len(cluster.kills)} of {len(plan.kills)} planned kills, {seconds:.1f}s",
        *(f"  {kill}" for kill in cluster.kills),
        f"kills landed in: {dict(sorted(landed.items()))}",
        f"calls: {dict(sorted(outcome.calls.items()))}",
        f"retried requests: {dict(sorted(driver.retries.items()))}",
        f"errors the nodes logged: {dict(tracebacks(cluster))}",
    ]
    return "\n".join(lines)


@pytest.mark.parametrize("reads", ["nodes", "database"])
@pytest.mark.parametrize("seed", SEEDS)
def test_nodes_killed_during_approval_flows_lose_nothing_and_run_nothing_twice(
    database: str, seed: str, reads: Reads, tmp_path: Path
) -> None:
    plan = Plan.draw(seed, reads)
    began = time.monotonic()
    outcome = trio.run(run_plan, postgres_url(database), plan, tmp_path)
    summary = report(plan, outcome, time.monotonic() - began)
    print(summary)
    assert not outcome.problems, (
        f"{summary}\n{len(outcome.problems)} problem(s):\n"
        + "\n".join(outcome.problems)
        + f"\nthe nodes' stderr:\n{stderr_report(outcome.cluster)}"
    )


def test_nodes_that_open_a_new_database_at_once_all_open(database: str) -> None:
    """The nodes of a new deployment start together: each creates the tables it needs, and
    none fails because another created one at the same moment. Three stores with a node id
    open at once, after the schema is migrated (only the leases' table is new), five times
    (the table dropped in between): a race shows in one round or another."""
    PostgresStore(database).close()
    failed: list[str] = []
    for _ in range(5):
        with connect(database) as db:
            db.execute("DROP TABLE IF EXISTS pai_thread_owners")
        together = threading.Barrier(SLOTS)

        def open_node(node_id: str, together: threading.Barrier = together) -> str:
            together.wait(timeout=30)
            try:
                PostgresStore(database, node_id=node_id).close()
            except Exception as exc:
                return f"node {node_id}: {exc!r}"
            return ""

        with ThreadPoolExecutor(SLOTS) as pool:
            failed += [error for error in pool.map(open_node, ["n1", "n2", "n3"]) if error]
    assert not failed, "\n".join(failed)
