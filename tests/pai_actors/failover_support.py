"""Node processes for ``test_postgres_failover``: ``pai-actors serve`` of
``tests.pai_actors.failover_app`` on one PostgreSQL database, each with a ``--node-id``,
started, killed with ``SIGKILL`` and stopped from a trio run.

A :class:`Cluster` has a fixed number of slots, each held by one node process at a time (an
*incarnation*): :meth:`Cluster.kill` ends one with ``SIGKILL`` and says what it was doing then
(:class:`Kill`), and :meth:`Cluster.start` puts a new process in its slot, under the same node
id or a new one. Each incarnation has one protocol client (``reconnect=False``: a killed
node's client fails its requests with :class:`~pai_actors.client.ConnectionLost`, and is
never pointed at another process that reuses the port).
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio

from pai_actors.client import Client, open_client

from . import failover_app as app

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 60  # a hang guard for a process to print its URL, not a measurement
STOP_SECONDS = 30
APP = "tests.pai_actors.failover_app:factory"


def postgres_url(conninfo: str) -> str:
    """The ``postgresql://`` URL ``serve --db`` takes, of a key=value conninfo
    (``postgres_support.new_database`` gives one)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(conninfo)
    host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
    return f"postgresql://{params.get('user', 'postgres')}@{host}:{port}/{params['dbname']}"


@dataclass(eq=False)
class Node:
    """One node process (an incarnation of its slot) and its client."""

    slot: int
    node_id: str
    incarnation: int
    started_at: float
    stderr: Path
    process: trio.Process | None = None
    client: Client | None = None
    gone: trio.Event = field(default_factory=trio.Event)
    in_flight: collections.Counter[str] = field(default_factory=collections.Counter)

    @property
    def name(self) -> str:
        return f"{self.node_id}#{self.incarnation}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @contextmanager
    def request(self, op: str) -> Iterator[Client]:
        """Use the node's client for ``op``, counted in flight meanwhile (what a kill
        interrupts)."""
        if self.client is None or self.gone.is_set():
            raise NodeGone(f"node {self.name} is gone")
        self.in_flight[op] += 1
        try:
            yield self.client
        finally:
            self.in_flight[op] -= 1


class NodeFailed(Exception):
    """A node process did not start serving."""


class NodeGone(Exception):
    """The node was killed or stopped before the request was made."""


@dataclass(frozen=True)
class Kill:
    """One ``SIGKILL``: the node, when (seconds since the cluster started), what its process
    was doing (from the trace and the driver's requests in flight), and its successor."""

    node: str
    pid: int
    at: float
    uptime: float
    landed: tuple[str, ...]
    open_executions: tuple[tuple[str, str], ...]  # (thread, call) started, not ended
    successor: str = ""

    def __str__(self) -> str:
        return (
            f"t={self.at:5.2f}s SIGKILL {self.node} (pid {self.pid}, up {self.uptime:.2f}s) "
            f"during: {', '.join(self.landed)}; restarted as {self.successor or '-'}"
        )


class Cluster:
    """Node processes on the database ``url``, one per slot (:meth:`start` fills a slot), with
    a lease of ``lease`` seconds and the application's pauses up to ``pace`` seconds; their
    execution log, trace and stderr files in ``directory``."""

    def __init__(self, url: str, directory: Path, *, lease: float, pace: float) -> None:
        self.url = url
        self.directory = directory
        self.lease = lease
        self.log = directory / "executions.log"
        self.trace = directory / "trace.log"
        self.env = {
            **os.environ,
            app.LOG_ENV: str(self.log),
            app.TRACE_ENV: str(self.trace),
            app.PACE_ENV: str(pace),
        }
        self.nodes: dict[int, Node] = {}
        self.kills: list[Kill] = []
        self.killed_pids: set[int] = set()
        self.incarnations: list[Node] = []
        self._node_ids = 0
        self._changed = trio.Event()  # set (and replaced) whenever a node comes or goes
        self._nursery: trio.Nursery | None = None
        self._t0 = trio.current_time()

    def new_node_id(self) -> str:
        self._node_ids += 1
        return f"n{self._node_ids}"

    def now(self) -> float:
        return trio.current_time() - self._t0

    def alive(self) -> list[Node]:
        """The nodes serving now, by slot."""
        return [
            node
            for _, node in sorted(self.nodes.items())
            if node.client is not None and not node.gone.is_set()
        ]

    async def wait_alive(self) -> list[Node]:
        while not (alive := self.alive()):
            await self._changed.wait()
        return alive

    def _touch(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Cluster]:
        """The cluster's processes live within this block: those still running at its end
        are killed (a test that stops them gracefully calls :meth:`stop` first)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield self
            finally:
                for node in list(self.nodes.values()):
                    if node.process is not None and node.process.returncode is None:
                        node.process.kill()
                    node.gone.set()
                nursery.cancel_scope.cancel()

    async def start(self, slot: int, node_id: str) -> Node:
        """Start a node process in ``slot`` under ``node_id``; it returns once the process
        serves and the node's client is connected."""
        assert self._nursery is not None
        incarnation = sum(1 for n in self.incarnations if n.slot == slot) + 1
        node = Node(
            slot=slot,
            node_id=node_id,
            incarnation=incarnation,
            started_at=trio.current_time(),
            stderr=self.directory / f"slot{slot}-{incarnation}-{node_id}.err",
        )
        self.incarnations.append(node)
        await self._nursery.start(self._run, node)
        self.nodes[slot] = node
        self._touch()
        return node

    async def _run(self, node: Node, *, task_status: trio.TaskStatus[None]) -> None:
        command = [
            *(
                sys.executable,
                "-m",
                "pai_actors._cli",
                "serve",
                "tests.pai_actors.failover_app:factory",
            ),
            *("--port", "0", "--no-http", "--db", self.url),
            *("--node-id", node.node_id, "--lease", str(self.lease)),
        ]
        stderr = os.open(node.stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        async with trio.open_nursery() as nursery:
            try:
                run = partial(
                    trio.run_process,
                    command,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    cwd=ROOT,
                    env=self.env,
                    check=False,
                )
                process: trio.Process = await nursery.start(run)
            finally:
                os.close(stderr)
            node.process = process
            with trio.fail_after(START_SECONDS):
                line = await _read_line(process)
            found = re.search(r" on (ws://\S+) \(database ", line)
            if found is None:
                with trio.move_on_after(STOP_SECONDS):
                    await process.wait()
                process.kill()
                raise NodeFailed(
                    f"node {node.name} did not serve (exit status {process.returncode}; it "
                    f"printed {line!r}): {_tail(node.stderr, 400).strip()}"
                )
            async with open_client(found.group(1), token=app.TOKEN, reconnect=False) as client:
                node.client = client
                task_status.started()
                await node.gone.wait()

    async def kill(self, node: Node) -> Kill:
        """``SIGKILL`` the node's process, wait for its end, and say what it was doing."""
        assert node.process is not None
        in_flight = +node.in_flight  # (the positive counts)
        node.process.send_signal(signal.SIGKILL)
        await node.process.wait()
        node.gone.set()
        self._touch()
        self.killed_pids.add(node.pid)
        landed, executions = self._doing(node.pid)
        landed += [f"a {op} request in flight" for op in sorted(in_flight)]
        uptime = trio.current_time() - node.started_at
        if node.incarnation > 1 and uptime < 1.5 * self.lease:
            landed.append("its first 1.5 leases after a restart (taking over)")
        kill = Kill(
            node.name,
            node.pid,
            round(self.now(), 2),
            uptime,
            tuple(landed) or ("idle",),
            tuple(executions),
        )
        self.kills.append(kill)
        return kill

    def _doing(self, pid: int) -> tuple[list[str], list[tuple[str, str]]]:
        """What the (dead) process ``pid`` had begun and not ended, from its trace lines."""
        models = 0
        executions: dict[tuple[str, str], int] = {}
        for line in app.read_lines(str(self.trace)):
            if line["pid"] != pid:
                continue
            if line["event"] == "model-start":
                models += 1
            elif line["event"] == "model-end":
                models -= 1
            elif line["event"] in ("tool-start", "tool-end"):
                key = (line["thread"], line["call"])
                executions[key] = executions.get(key, 0) + (line["event"] == "tool-start") * 2 - 1
        open_executions = sorted(key for key, n in executions.items() if n > 0)
        logged = {
            (line["thread"], line["call"])
            for line in app.read_lines(str(self.log))
            if line["pid"] == pid
        }
        landed = ["a model step"] * models
        for key in open_executions:
            half = "after" if key in logged else "before"
            landed.append(f"a tool execution, {half} its log line")
        return landed, open_executions

    async def stop(self) -> list[str]:
        """Stop every live node gracefully (``SIGINT``); what went wrong."""
        problems: list[str] = []

        async def stop_one(node: Node) -> None:
            assert node.process is not None
            node.process.send_signal(signal.SIGINT)
            with trio.move_on_after(STOP_SECONDS) as waited:
                await node.process.wait()
            if waited.cancelled_caught:
                problems.append(f"node {node.name} did not stop within {STOP_SECONDS}s of SIGINT")
            elif node.process.returncode != 0:
                problems.append(
                    f"node {node.name} exited with {node.process.returncode} after SIGINT: "
                    f"{_tail(node.stderr)}"
                )
            node.gone.set()

        async with trio.open_nursery() as nursery:
            for node in self.alive():
                nursery.start_soon(stop_one, node)
        self._touch()
        return problems


async def _read_line(process: trio.Process) -> str:
    assert process.stdout is not None
    data = b""
    while b"\n" not in data:
        chunk = await process.stdout.receive_some()
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").split("\n", 1)[0]


def _tail(path: Path, size: int = 3000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-size:]


def stderr_report(cluster: Cluster) -> str:
    """The tail of each node process's stderr that holds anything (for a failure)."""
    parts = []
    for node in cluster.incarnations:
        text = _tail(node.stderr)
        if text.strip():
            parts.append(
                f"--- {node.name} (pid {node.process.pid if node.process else '?'})\n{text}"
            )
    return "\n".join(parts)


def tracebacks(cluster: Cluster) -> collections.Counter[str]:
    """How often the node processes logged each error (the last line of each traceback,
    its ids blanked), all processes together."""
    found: collections.Counter[str] = collections.Counter()
    for node in cluster.incarnations:
        text = node.stderr.read_text(errors="replace") if node.stderr.exists() else ""
        lines = text.splitlines()
        for n, line in enumerate(lines):
            if line.startswith("Traceback"):
                end = n + 1
                while end < len(lines) and lines[end].startswith((" ", "\t")):
                    end += 1
                last = lines[end] if end < len(lines) else "?"
                found[re.sub(r"'(thread|run|call|msg)_\w+'", r"'\1_…'", last)[:140]] += 1
    return found
