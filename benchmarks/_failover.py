"""The failover figures: how long a run whose node was killed takes to complete on another.

The nodes are what a user runs: ``pai-actors serve benchmarks._failover_app:factory --db
postgresql://... --node-id node-N --lease L --port 0``, fresh processes of the public CLI,
everything but the lease (and ``--port 0``: several nodes on one machine) at its default, on a
NEW database of the server at :data:`._pg.ADMIN` (:func:`._pg.new_database`). The driver is
a fresh Python process (:func:`benchmarks._harness.fresh`) talking to the nodes through the
public client (``pai_actors.client``, one connection per node).

**One flow** (see :mod:`._failover_app`): node X creates the thread and takes the user's
message; the model calls ``work``, which needs approval, and the run waits; the approval is
submitted through X, which takes the thread's lease and resumes the run; the tool's
execution connects to the driver and says its thread and process id, so the run is
running on X (its lease held, the call's start committed). After a random delay below a
third of the lease (the period of the lease's renewal, so that kills meet every phase of
it), the driver either

- kills X with ``SIGKILL`` (the figure): its lease runs out, a surviving node finds the
  orphaned run (every node looks every half lease), recovers it as a restart does (the call
  recorded interrupted, not run again), the model answers and the run completes; or
- releases the tool (the baseline, the same flow without a kill): it returns, the model
  answers and the run completes on X.

Both are timed (``trio.current_time``) from that moment until a watcher on another node
(``thread.watch()`` through its client, opened before the message was sent) is shown the
run completed; the watcher's node is the next one after X, and X rotates over the nodes. The
flows alternate (baseline, kill, then kill, baseline, ...); a killed node is replaced by a
fresh process with a new node id before the next flow. After each flow the watcher's state
must show one run, completed, the call interrupted (killed) or its output (released) and
the model's answer; just after each kill, the lease row (``pai_thread_owners``) must still
name X, and how long it had left (``expires_at - clock_timestamp()``) is read, to split
the failover into the lease's remainder and what followed its expiry.

- ``failover_short_lease`` and ``failover_long_lease``: median seconds from the ``SIGKILL``
  to the completion, each kill a sample; the baseline's samples are the released flows'.
  Target: the median at most 1.5 x the lease (the design's bound on a takeover). The
  ``method`` gives failover / lease (median, min, max) and the split.

Without ``psycopg`` or PostgreSQL nothing can be measured: the figure says why.
"""

from __future__ import annotations

import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from pai_actors import TextPart, ThreadState, ToolPart
from pai_actors.client import Client, ClientThread, ClientWatch, open_client

from . import _failover_app as app
from . import _pg
from ._harness import ROOT, Record, Target, fresh, value_record
from ._postgres import _not_measured, _why_not

APP = "benchmarks._failover_app:factory"
START_SECONDS = 60.0  # hang guards, not measurements
STOP_SECONDS = 20.0
INTERRUPTED = "interrupted"
"""In the error text of a call whose process stopped while it ran."""
BOUND = 1.5
"""A takeover is due within ``BOUND`` x the lease of the stop, by design."""


def failover_short_lease(lease: float = 2.0, kills: int = 10, *, nodes: int = 3) -> Record:
    """Seconds from ``SIGKILL`` of the node running a run until another completes it, with
    a short lease."""
    return _figure("failover_short_lease", lease, kills, nodes)


def failover_long_lease(lease: float = 10.0, kills: int = 5, *, nodes: int = 3) -> Record:
    """The same with a long lease (``serve``'s default, 10 s)."""
    return _figure("failover_long_lease", lease, kills, nodes)


def _figure(figure: str, lease: float, kills: int, nodes: int) -> Record:
    unit = (
        f"s (from SIGKILL of the node running a run until a watcher on another node sees it "
        f"completed; --lease {lease:g})"
    )
    if not (lease > 0 and kills >= 1 and nodes >= 2):
        raise ValueError(
            f"a failover figure needs a lease > 0 s, a kill and 2 nodes or more, not "
            f"{lease=}, {kills=}, {nodes=}"
        )
    target = Target("<=", BOUND * lease)
    why = _why_not()
    if why is not None:
        return _not_measured(figure, unit=unit, why=why, ratio_of="value", target=target, n=1)
    with _pg.new_database("failover") as conninfo:
        settings = _pg.describe_settings([{"settings": _pg.settings(conninfo)}])
        result = fresh(
            measure, url=postgres_url(conninfo), lease=lease, kills=kills, nodes=nodes, seed=figure
        )
    failovers, released = result["failover"], result["released"]
    return value_record(
        figure,
        unit=unit,
        samples=failovers,
        target=target,
        n=1,
        method=_method(result, lease, kills, nodes, settings),
        baseline=(
            "the same flow without a kill, in the same run: the tool released at the moment "
            "the kill would come, timed until the same watcher sees the run completed"
        ),
        baseline_samples=released,
        baseline_n=1,
    )


def _spread(values: list[float], unit: str = " s") -> str:
    """``median .., min .., max ..`` of ``values``, in seconds to the millisecond, or with
    ``unit`` ``" x"`` as multiples to two decimals."""
    digits = 2 if unit == " x" else 3
    return ", ".join(
        f"{what} {value:.{digits}f}{unit}"
        for what, value in (
            ("median", statistics.median(values)),
            ("min", min(values)),
            ("max", max(values)),
        )
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _method(result: dict[str, Any], lease: float, kills: int, nodes: int, settings: str) -> str:
    failovers: list[float] = result["failover"]
    remaining: list[float] = result["remaining"]
    after = [f - r for f, r in zip(failovers, remaining, strict=True)]
    within = sum(f <= BOUND * lease for f in failovers)
    exits = result["exits"]
    stopped = (
        "every node stopped with exit status 0 on SIGTERM at the end"
        if all(code == 0 for code in exits.values())
        else f"the nodes' exit statuses on SIGTERM at the end: {exits}"
    )
    return "; ".join(
        [
            f"{_count(kills, 'kill')}, one sample each, interleaved with {_count(kills, 'flow')} "
            "without a kill (baseline, kill, then kill, baseline, ...), one driver in a fresh "
            "Python process, garbage collector at its defaults, no warm-up",
            f"{nodes} fresh `pai-actors serve {APP} --db postgresql://... --node-id node-N "
            f"--lease {lease:g} --port 0` processes (the rest at its defaults) on a new "
            "database, a killed node replaced by a fresh process with a new node id before "
            f"the next flow (a node took {_spread(result['starts'])} from exec to serving)",
            "each flow: createThread and send through node X, the model calls a tool needing "
            "approval, the approval submitted through X (which takes the thread's lease and "
            "resumes the run), the tool's execution connects to the driver from X's process; "
            "after a random delay in [0, lease/3) X is killed with SIGKILL (or, the baseline, "
            "the tool released); timed from then until a watcher on the next node (public "
            "client, thread.watch(), opened before the send) is shown the run completed; X "
            "rotates over the nodes",
            "each run checked: one run, completed, the call recorded interrupted (killed; not "
            "run again) or its output (released), the model's answer",
            f"failover / lease: {_spread([f / lease for f in failovers], ' x')}; "
            f"{within} of {kills} within {BOUND:g} x lease",
            "the lease row just after each kill still named X, with "
            f"{_spread(remaining)} left (expires_at - clock_timestamp()); from its expiry to "
            f"the completion: {_spread(after)}",
            settings,
            stopped,
        ]
    )


def postgres_url(conninfo: str) -> str:
    """The ``postgresql://`` URL ``serve --db`` takes, of a key=value conninfo."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(conninfo)
    host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
    return f"postgresql://{params.get('user', 'postgres')}@{host}:{port}/{params['dbname']}"


# --- The driver (in its own process) -------------------------------------------------------


def measure(url: str, lease: float, kills: int, nodes: int, seed: str) -> dict[str, Any]:
    """The side: start the nodes on ``url``, run ``kills`` flows with a kill and as many
    without, alternately, stop the nodes; the seconds of each, and what the method quotes."""
    return trio.run(_measure, url, lease, kills, nodes, seed)


async def _measure(url: str, lease: float, kills: int, nodes: int, seed: str) -> dict[str, Any]:
    import psycopg

    rng = random.Random(seed)
    pairs = [(False, True) if i % 2 == 0 else (True, False) for i in range(kills)]
    flows = [kill for pair in pairs for kill in pair]  # baseline, kill, then kill, baseline
    measured: dict[str, list[float]] = {"failover": [], "released": [], "remaining": []}
    with (
        tempfile.TemporaryDirectory(prefix="pai-failover-") as directory,
        psycopg.connect(url, autocommit=True) as db,
    ):
        async with _open_cluster(url, lease, Path(directory)) as cluster:
            async with trio.open_nursery() as starting:
                for _ in range(nodes):
                    starting.start_soon(cluster.start)
            [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
            async with listener:
                for i, kill in enumerate(flows):
                    victim, watcher = cluster.nodes[i % nodes], cluster.nodes[(i + 1) % nodes]
                    flow = _Flow(victim, watcher, listener, db)
                    with trio.move_on_after(START_SECONDS + 4 * lease):  # a hang guard
                        measured["failover" if kill else "released"].append(
                            await flow.run(kill, rng.uniform(0, lease / 3))
                        )
                    if len(measured["failover"]) + len(measured["released"]) <= i:
                        raise NodeFailed(flow.stuck(kill, cluster))
                    if kill:
                        measured["remaining"].append(flow.remaining)
                        if i < len(flows) - 1:
                            await cluster.replace(victim)
                exits = await cluster.stop()
    return {**measured, "starts": cluster.starts, "exits": exits}


@dataclass(eq=False)
class _Node:
    """One node process and the driver's client of it; ``gone`` ends the client."""

    node_id: str
    process: trio.Process
    client: Client
    stderr: Path
    gone: trio.Event = field(default_factory=trio.Event)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.gone.set()


class NodeFailed(Exception):
    """A node did not start serving, or a flow found it doing what it should not."""


class _Cluster:
    """The node processes: started (:meth:`start`), replaced after a kill, stopped."""

    def __init__(self, url: str, lease: float, directory: Path, nursery: trio.Nursery) -> None:
        self.url = url
        self.lease = lease
        self.directory = directory
        self.nodes: list[_Node] = []
        self.starts: list[float] = []  # seconds from exec to serving, each process
        self._nursery = nursery
        self._count = 0
        self._env = dict(os.environ)
        self._env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT), self._env.get("PYTHONPATH")])
        )

    async def start(self) -> _Node:
        self._count += 1
        node: _Node = await self._nursery.start(self._run, f"node-{self._count}")
        self.nodes.append(node)
        return node

    async def replace(self, node: _Node) -> None:
        """Put a fresh process, with a new node id, in the place of the (killed) ``node``."""
        index = self.nodes.index(node)
        self.nodes[index] = await self._nursery.start(self._run, f"node-{self._count + 1}")
        self._count += 1

    async def stop(self) -> dict[str, int | None]:
        """Stop the live nodes (not the one killed last) with SIGTERM (graceful), each
        within a bound; their exit statuses."""
        alive = [node for node in self.nodes if not node.gone.is_set()]
        for node in alive:
            node.process.send_signal(signal.SIGTERM)
        exits: dict[str, int | None] = {}
        for node in alive:
            with trio.move_on_after(STOP_SECONDS):
                await node.process.wait()
            exits[node.node_id] = node.process.returncode
            node.gone.set()
        return exits

    async def _run(self, node_id: str, *, task_status: trio.TaskStatus[_Node]) -> None:
        command = [
            *_cli(),
            *("serve", APP, "--db", self.url, "--node-id", node_id),
            *("--lease", f"{self.lease:g}", "--port", "0"),
        ]
        stderr = self.directory / f"{node_id}.err"
        began = trio.current_time()
        with stderr.open("wb") as err:
            process = await trio.lowlevel.open_process(
                command, stdout=subprocess.PIPE, stderr=err, cwd=ROOT, env=self._env
            )
        try:
            assert process.stdout is not None
            with trio.fail_after(START_SECONDS):
                line = await _first_line(process.stdout)
            found = re.search(r" on (ws://\S+) \(database ", line)
            if found is None:
                raise NodeFailed(f"{node_id} did not serve: it printed {line!r}; {_tail(stderr)}")
            self.starts.append(trio.current_time() - began)
            async with (
                open_client(found.group(1), token=app.TOKEN, reconnect=False) as client,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(_drain, process.stdout)
                node = _Node(node_id, process, client, stderr)
                task_status.started(node)
                await node.gone.wait()
                nursery.cancel_scope.cancel()
        finally:
            if process.returncode is None:
                process.kill()
            with trio.CancelScope(shield=True), trio.move_on_after(STOP_SECONDS):
                await process.wait()


@asynccontextmanager
async def _open_cluster(url: str, lease: float, directory: Path) -> AsyncIterator[_Cluster]:
    """A cluster whose processes live within this block (killed if still running at its
    end)."""
    async with trio.open_nursery() as nursery:
        cluster = _Cluster(url, lease, directory, nursery)
        try:
            yield cluster
        finally:
            for node in cluster.nodes:
                node.gone.set()


def _cli() -> list[str]:
    """The public CLI: the ``pai-actors`` script beside this interpreter, else its module."""
    script = Path(sys.executable).with_name("pai-actors")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pai_actors._cli"]


async def _first_line(stream: trio.abc.ReceiveStream) -> str:
    data = b""
    while b"\n" not in data:
        chunk = await stream.receive_some()
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").partition("\n")[0]


async def _drain(stream: trio.abc.ReceiveStream) -> None:
    """Read what a node prints after its first line (so that it never blocks on the pipe)."""
    while await stream.receive_some():
        pass


def _tail(path: Path, chars: int = 600) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return f"its stderr ends: {text[-chars:]!r}"


@dataclass(eq=False)
class _Flow:
    """One approval conversation driven to a running tool on ``victim``, then a kill of
    ``victim`` or a release of the tool, until ``watcher``'s node shows the run completed.
    ``remaining``: the lease's remainder at the kill."""

    victim: _Node
    watcher: _Node
    listener: trio.SocketListener
    db: Any  # a psycopg connection, for the lease row
    remaining: float = 0.0
    seen: ClientThread | None = None

    async def run(self, kill: bool, delay: float) -> float:
        """Seconds from the kill (or release) until the watcher's node shows the run
        completed."""
        created = await self.victim.client.create_thread()
        thread_id = created.thread_id
        seen = self.seen = await self.watcher.client.thread(thread_id)
        async with seen.watch() as updates:
            await created.send(app.request(self.listener.socket.getsockname()[1]))
            await _until(seen, updates, lambda status: status == "waiting")
            [action] = await self.victim.client.pending_actions(thread_id)
            result = await self.victim.client.submit_action(action.ref, {"approved": True})
            if result.status != "accepted":
                raise NodeFailed(f"the approval was {result.status}: {result.error}")
            stream = await self.listener.accept()
            async with stream:
                said = (await _first_line(stream)).split()
                if said != [thread_id, str(self.victim.process.pid)]:
                    raise NodeFailed(
                        f"the tool of {thread_id} runs elsewhere than {self.victim.node_id} "
                        f"(pid {self.victim.process.pid}): it said {said}"
                    )
                await trio.sleep(delay)
                began = trio.current_time()
                async with trio.open_nursery() as nursery:
                    if kill:
                        self.victim.kill()
                        nursery.start_soon(self._lease_left, thread_id)
                    else:
                        await stream.send_all(b"x")
                    await _until(seen, updates, lambda status: status not in ("running", None))
                    ended = trio.current_time()
            self._check(seen.get_state(), kill)
        return ended - began

    def stuck(self, kill: bool, cluster: _Cluster) -> str:
        """What a flow that did not end within its hang guard shows."""
        state = None if self.seen is None else self.seen.get_state()
        shown = "nothing" if state is None else f"runs {[r.status for r in state.runs]}"
        tails = "; ".join(f"{node.node_id}: {_tail(node.stderr)}" for node in cluster.nodes)
        return (
            f"a flow {'killing' if kill else 'releasing'} {self.victim.node_id} did not end "
            f"within its hang guard; the watcher on {self.watcher.node_id} showed {shown}; "
            f"the nodes' stderr: {tails}"
        )

    async def _lease_left(self, thread_id: str) -> None:
        """Once the killed process is gone: the lease row still names it, with how long it
        had left."""
        await self.victim.process.wait()
        query = (
            "SELECT node_id, extract(epoch FROM expires_at - clock_timestamp())::float8"
            " FROM pai_thread_owners WHERE thread_id = %s"
        )
        row = await trio.to_thread.run_sync(lambda: self.db.execute(query, (thread_id,)).fetchone())
        if row is None or row[0] != self.victim.node_id:
            raise NodeFailed(
                f"the lease of {thread_id} at the kill of {self.victim.node_id} is {row}: the "
                "run was not owned by the killed node"
            )
        self.remaining = float(row[1])

    def _check(self, state: ThreadState, kill: bool) -> None:
        runs = [run.status for run in state.runs]
        last = state.messages[-1].parts if state.messages else ()
        calls = [(p.state, p.error_text) for p in last if isinstance(p, ToolPart)]
        texts = [p.text for p in last if isinstance(p, TextPart)]
        if kill:
            ok = (
                len(calls) == 1
                and calls[0][0] == "output-error"
                and INTERRUPTED in (calls[0][1] or "")
            )
        else:
            ok = [c[0] for c in calls] == ["output-available"]
        if runs != ["completed"] or not ok or texts != [app.ANSWER]:
            raise NodeFailed(
                f"the run of {state.thread_id} ({'killed' if kill else 'released'} on "
                f"{self.victim.node_id}) ended as runs {runs}, tool parts {calls}, texts {texts}"
            )


async def _until(
    seen: ClientThread, updates: ClientWatch[Any], done: Callable[[str | None], bool]
) -> None:
    """Until the status of the thread's last run, as the watcher was shown it, is ``done``."""

    def status() -> str | None:
        runs = seen.get_state().runs
        return runs[-1].status if runs else None

    if done(status()):
        return
    async for _ in updates:
        if done(status()):
            return
    raise NodeFailed(f"the watch of {seen.thread_id} ended with the run {status()!r}")
