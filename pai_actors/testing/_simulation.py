"""Deterministic simulation of a user's agents: many conversations, scripted clients that
approve, deny, submit invalid answers, cancel, go silent or reconnect, and injected faults
(failed store writes, crashes and restarts, model errors and stalls, clock jumps), all under
``trio.testing.MockClock``, checked against the runtime's invariants after every step.

The same seed gives the same result, byte for byte: the event trace (sorted by virtual
time, conversation and step), the store's contents (:meth:`SimulationResult.dump`, in a
canonical order) and every id. What the seed decides: each client's choices and pauses
(a random stream per conversation, so a conversation's choices do not depend on what the
others do), each model step's faults (from the seed and the request), the commits that
fail or crash, and trio's scheduling (``simulate`` seeds it). A different seed explores a
different interleaving of the external events.

A crash throws the runtime away as ``SIGKILL`` would: the commit it happens at is written,
then every later write and read of that runtime fails, its tasks are cancelled, and what it
held in memory is gone; a fresh runtime opens the same store (as a restarted process
would) and the clients reconnect to it, their answers from the lost one unknown.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import json
import os
import random
import shlex
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import trio
import trio.testing

from .._core.errors import PaiError, StoreConflict, StoreError, ThreadNotFound
from .._core.model import Model, ModelEvent, ModelRequest
from .._core.pending import PendingActionView
from .._runtime.runtime import DEFAULT_MAX_ACTIVE_RUNS, AgentRuntime
from .._store.base import Store, Transaction, Write
from .._store.memory import MemoryStore
from .._tools.agent import AgentDefinition, Pai
from ._cluster import NodeStore, SharedMemory, create_node_runtime, keep_node
from ._invariants import (
    Resolution,
    check_at_rest,
    check_closed,
    check_executions,
    check_resolutions,
    check_thread,
)
from ._probe import Probe, instrument
from ._scripted_model import ScriptedModel

Behaviour = Literal[
    "approve", "deny", "invalid", "cancel_action", "fail_action", "cancel_run", "silent",
    "reconnect",
]  # fmt: skip
BEHAVIOURS: tuple[Behaviour, ...] = (
    "approve",
    "deny",
    "invalid",
    "cancel_action",
    "fail_action",
    "cancel_run",
    "silent",
    "reconnect",
)
SEED_ENV = "PAI_SIM_SEED"
"""Set it to replay a failed simulation with its seed (``simulate`` reads it)."""

StepFunction = Callable[[ModelRequest], Any]
Models = Model | StepFunction | Mapping[str, Model | StepFunction]


@dataclass(frozen=True)
class Workload:
    """What the simulated clients do.

    ``threads`` conversations, each on a thread of its own (``sim-1``, ``sim-2``, ...)
    of ``scope``, with ``agent`` (an id of a :class:`~pai_actors.Pai`; ``None``: the
    runtime's default agent). Each sends ``messages`` one per turn, the next once the
    run of the previous one is idle with nothing pending. Whenever its thread waits on
    pending actions, a client pauses ``think`` seconds (drawn), then picks one of them and
    a behaviour (weighted by ``behaviours``):

    - ``approve``: a valid answer (``{"approved": True}`` for an approval; else
      ``answer(action, rng)``, or a minimal instance of the action's schema); sometimes
      the same answer again, which must be rejected;
    - ``deny``: ``{"approved": False}`` for an approval, ``fail_action`` otherwise;
    - ``invalid``: an answer the schema refuses: it must be rejected, the action pending;
    - ``cancel_action``, ``fail_action``, ``cancel_run``: with a reason;
    - ``silent``: the client stops acting (its actions stay pending to the end);
    - ``reconnect``: a new watch of the thread, whose snapshot must equal its state.

    After an act, a client waits for its thread to be idle before it looks again with
    probability ``settle``; otherwise it looks (and acts) while the thread's tools still
    run, so that its cancellations and answers race them.
    """

    threads: int = 1
    messages: Sequence[str] = ("Hello",)
    behaviours: Mapping[Behaviour, float] = field(
        default_factory=lambda: {
            "approve": 6.0,
            "deny": 1.0,
            "invalid": 1.0,
            "cancel_action": 1.0,
            "fail_action": 0.5,
            "cancel_run": 0.5,
            "silent": 0.25,
            "reconnect": 1.0,
        }
    )
    think: Sequence[float] = (0.0, 0.5, 1.0)
    settle: float = 0.5
    agent: str | None = None
    scope: str = "simulation"
    answer: Callable[[PendingActionView, random.Random], Any] | None = None

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"Workload(threads={self.threads!r}): use at least 1")
        if not self.messages:
            raise ValueError("Workload(messages=()): give each conversation a message")
        unknown = sorted(set(self.behaviours) - set(BEHAVIOURS))
        if unknown:
            raise ValueError(f"unknown behaviours {unknown}; use some of {list(BEHAVIOURS)}")
        if not any(weight > 0 for weight in self.behaviours.values()):
            raise ValueError("Workload(behaviours=...) needs a behaviour with a weight > 0")


@dataclass(frozen=True)
class Faults:
    """What goes wrong, numbered or drawn from the seed.

    Commits are numbered from 1 over the whole simulation, in the order the store receives
    them (the same in every replay of a seed). ``fail_commits``: those that fail
    (:class:`~pai_actors.StoreError`, nothing written; the runtime must survive it as it
    promises). ``crash_after_commits``: those right after which the runtime crashes (``0``:
    before the first); a fresh one opens the store. ``commit_failure_rate`` and
    ``crash_rate`` do the same at random (per commit, from the seed).
    ``model_error_rate``: the share of model steps whose stream breaks (after a drawn
    number of events); ``model_stall_rate``: the share that stall ``stall_seconds`` of
    virtual time first. ``clock_jumps``: ``(at, by)`` pairs: at virtual second ``at`` the
    clock jumps ``by`` seconds (deadlines pass).
    """

    fail_commits: frozenset[int] = frozenset()
    crash_after_commits: frozenset[int] = frozenset()
    commit_failure_rate: float = 0.0
    crash_rate: float = 0.0
    model_error_rate: float = 0.0
    model_stall_rate: float = 0.0
    stall_seconds: float = 60.0
    clock_jumps: Sequence[tuple[float, float]] = ()
    max_crashes: int = 10


@dataclass(frozen=True, order=True)
class TraceEvent:
    """One line of the trace: at virtual second ``at``, conversation ``thread`` (``0``:
    the simulation itself), its ``seq``-th event, ``what`` happened."""

    at: float
    thread: int
    seq: int
    what: str

    def __str__(self) -> str:
        who = "sim" if self.thread == 0 else f"c{self.thread}"
        return f"{self.at:10.3f} {who:>5} {self.what}"


@dataclass(frozen=True)
class SimulationResult:
    """What a simulation did and found. ``violations``: the invariants that did not hold
    (empty: all held); ``trace``: its events; ``dump()``: the store's contents;
    ``commits``: how many commits the store received; ``faults``: what was injected;
    ``replay``: a command that runs it again with the same seed."""

    seed: int
    trace: tuple[TraceEvent, ...]
    store_dump: bytes
    violations: tuple[str, ...]
    commits: int
    faults: tuple[str, ...]
    processes: int
    replay: str

    def dump(self) -> bytes:
        """The store's contents as canonical JSON (threads by id, each with its record,
        messages, runs and calls)."""
        return self.store_dump

    def trace_text(self) -> str:
        """The trace, one event a line."""
        return "\n".join(map(str, self.trace))

    def raise_for_violations(self) -> None:
        """Raise :class:`SimulationFailure` if an invariant did not hold."""
        if self.violations:
            raise SimulationFailure(self)


class SimulationFailure(AssertionError):
    """A simulation found violations: the message lists them, with the seed and the command
    that replays the run exactly."""

    def __init__(self, result: SimulationResult) -> None:
        self.result = result
        lines = [f"  - {v}" for v in result.violations[:20]]
        if len(result.violations) > 20:
            lines.append(f"  ... and {len(result.violations) - 20} more")
        shown = "\n".join(lines)
        super().__init__(
            f"simulation with seed {result.seed} broke {len(result.violations)} invariant(s):\n"
            f"{shown}\nreplay it: {result.replay}"
        )


class Simulation:
    """A simulation of ``agents`` (an :class:`~pai_actors.AgentDefinition` or a
    :class:`~pai_actors.Pai`, with their real tools) driven by ``workload`` under ``faults``.

    ``model``: a :class:`~pai_actors.Model` (a :class:`ScriptedModel`, say), a function of
    the :class:`~pai_actors.ModelRequest` returning a step (as :class:`ScriptedModel` takes
    them), or a mapping from agent id to either. Run it with ``await sim.run()`` inside
    ``trio.run(..., clock=trio.testing.MockClock(autojump_threshold=0))`` (pytest-trio's
    ``autojump_clock`` fixture), or with :func:`simulate`, which does that and seeds trio's
    scheduler too."""

    def __init__(
        self,
        agents: AgentDefinition | Pai,
        *,
        model: Models,
        workload: Workload | None = None,
        seed: int = 0,
        faults: Faults | None = None,
        check_every_step: bool = True,
        max_active_runs: int | None = DEFAULT_MAX_ACTIVE_RUNS,
        nodes: int = 1,
        lease: float = 10.0,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"Simulation(nodes={nodes!r}): use at least 1")
        self.seed = seed
        self.nodes = nodes
        self.lease = lease
        self.workload = workload if workload is not None else Workload()
        self.faults = faults if faults is not None else Faults()
        self.check_every_step = check_every_step
        self.probe = Probe()
        self._agents = instrument(agents, self.probe)
        self._reruns = _reruns(agents)
        self._model = _models(model, self)
        self._max_active_runs = max_active_runs
        # What survives every crash: the committed state (with several nodes, the data they
        # share, with its leases and requests: ``testing._cluster``).
        self._shared = SharedMemory() if nodes > 1 else None
        self.store = MemoryStore() if self._shared is None else self._shared.store
        self._events: list[TraceEvent] = []
        self._seqs: dict[int, int] = {}
        self._violations: list[str] = []
        self._resolutions: list[Resolution] = []
        self._injected: list[str] = []
        self._commits = 0
        self._store_rng = random.Random(f"{seed}:store")
        self._current: dict[int, _Process] = {}  # node -> its runtime now
        self._ready = {node: trio.Event() for node in range(nodes)}
        self._processes = 0
        self._crashes = 0
        self._nursery: trio.Nursery | None = None
        self._thread_ids: list[str] = []
        self._checked: dict[tuple[str, str], tuple[int, int]] = {}  # (see check_thread)

    # -- the trace ---------------------------------------------------------------------------

    def note(self, thread: int, what: str) -> None:
        """Add ``what`` to the trace, for conversation ``thread`` (``0``: the simulation)."""
        seq = self._seqs.get(thread, 0) + 1
        self._seqs[thread] = seq
        self._events.append(TraceEvent(round(trio.current_time(), 6), thread, seq, what))

    def violation(self, what: str) -> None:
        """Record a broken invariant (the run goes on; the result lists them all)."""
        self._violations.append(f"[t={trio.current_time():g}] {what}")

    def injected(self, what: str) -> None:
        self._injected.append(what)
        self.note(0, f"fault: {what}")

    # -- running -----------------------------------------------------------------------------

    async def run(self) -> SimulationResult:
        """Run the workload to its end and return what it did and found."""
        if not isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
            raise PaiError(
                "a Simulation runs under trio.testing.MockClock(autojump_threshold=0) (virtual "
                "time); call simulate(), or use pytest-trio's autojump_clock fixture"
            )
        tasks_before = trio.lowlevel.current_statistics().tasks_living
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for node in range(self.nodes):
                await self._open(node)
            if self.faults.clock_jumps:
                nursery.start_soon(self._jump_clock)
            async with trio.open_nursery() as clients:
                for number in range(1, self.workload.threads + 1):
                    clients.start_soon(self._client, number)
            await self._finish()
            nursery.cancel_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        tasks_after = trio.lowlevel.current_statistics().tasks_living
        self._violations.extend(check_closed(self.probe, tasks_before, tasks_after))
        return SimulationResult(
            seed=self.seed,
            trace=tuple(sorted(self._events)),
            store_dump=await dump_store(self.store, self._thread_ids),
            violations=tuple(self._violations),
            commits=self._commits,
            faults=tuple(self._injected),
            processes=self._processes,
            replay=replay_command(self.seed),
        )

    async def _open(self, node: int) -> None:
        """Open a runtime of ``node`` on the store (the first, or the one after a crash)."""
        assert self._nursery is not None
        self._processes += 1
        self.probe.process = self._processes
        inner: Any = self.store
        if self._shared is not None:
            inner = NodeStore(self._shared, f"n{node + 1}", lease=self.lease)
        process = _Process(self._processes, _SimStore(inner, self), node=node)
        process.store.process = process
        await self._nursery.start(self._serve, process)
        self._current[node] = process
        self._ready[node].set()

    async def _serve(self, process: _Process, *, task_status: Any) -> None:
        """One runtime's life, in its own cancel scope (a crash cancels it)."""
        from . import create_test_runtime

        with process.scope:
            try:
                if self._shared is None:
                    runtime = create_test_runtime(
                        self._agents,
                        model=self._model,
                        store=cast(Store, process.store),
                        max_active_runs=self._max_active_runs,
                    )
                else:  # a node: ids of its own, and what `pai-actors serve` runs beside it
                    runtime = create_node_runtime(
                        self._agents,
                        model=self._model,
                        store=cast(NodeStore, process.store),
                        max_active_runs=self._max_active_runs,
                    )
                async with runtime as rt, trio.open_nursery() as duties:
                    if self._shared is not None:
                        await duties.start(keep_node, rt, process.store.inner)
                    process.runtime = rt
                    task_status.started()
                    await process.closing.wait()
                    duties.cancel_scope.cancel()
            except Exception:
                if not process.crashed:
                    raise  # a runtime that fails to close is a bug the simulation found
        process.closed.set()

    def _crash(self, process: _Process, commit: int) -> None:
        """The runtime dies right after ``commit``: its memory is gone, a fresh one opens."""
        if process.crashed:
            return
        process.crashed = True
        process.store.die()
        self.probe.crashed.add(process.number)
        self._crashes += 1
        self.injected(f"crash after commit {commit} (runtime {process.number}{process.on})")
        self._ready[process.node] = trio.Event()
        process.scope.cancel()
        for scope in process.requests:
            scope.cancel()
        assert self._nursery is not None
        self._nursery.start_soon(self._restart, process)

    async def _restart(self, process: _Process) -> None:
        await process.closed.wait()
        await self._open(process.node)
        self.note(0, f"runtime {self._processes}{process.on} opened the store")

    async def _runtime(self, node: int = 0) -> tuple[_Process, AgentRuntime]:
        while True:
            await self._ready[node].wait()
            process = self._current.get(node)
            if process is not None and not process.crashed and process.runtime is not None:
                return process, process.runtime

    def _node(self) -> int:
        """The node a request goes to: drawn by the asking client (a load balancer that
        knows nothing of the threads), the first node for the simulation's own requests."""
        rng = _node_choice.get()
        return 0 if self.nodes == 1 or rng is None else rng.randrange(self.nodes)

    async def request(
        self,
        call: Callable[[AgentRuntime], Any],
        *,
        blocking: bool = False,
        node: int | None = None,
    ) -> Any:
        """``await call(runtime)`` on the current runtime; :data:`LOST` if that runtime
        crashed before it answered (its fate unknown, as over a broken connection).
        ``blocking``: the call waits for the runtime (``wait_idle``, a watch), which a
        crash must interrupt."""
        process, rt = await self._runtime(self._node() if node is None else node)
        if not blocking:  # it fails fast once its runtime crashed (the store refuses it)
            try:
                return await call(rt)
            except Exception:  # whatever a crashed runtime raises, it is lost with it
                if not process.crashed:
                    raise
            return LOST
        with trio.CancelScope() as scope:  # a crash cancels a wait on the lost runtime
            process.requests[scope] = None
            try:
                return await call(rt)
            except Exception:  # whatever a crashed runtime raises, it is lost with it
                if not process.crashed:
                    raise
            finally:
                del process.requests[scope]
        return LOST

    async def _jump_clock(self) -> None:
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, trio.testing.MockClock)
        for at, by in sorted(self.faults.clock_jumps):
            await trio.sleep_until(at)
            clock.jump(by)
            self.injected(f"clock jumped {by:g} s")

    # -- the store's faults -------------------------------------------------------------------

    def _next_commit(self, process: _Process) -> tuple[int, bool, bool]:
        """Number the commit arriving now: whether it fails, whether the runtime crashes
        right after it."""
        self._commits += 1
        k = self._commits
        faults = self.faults
        roll_fail, roll_crash = self._store_rng.random(), self._store_rng.random()
        fail = k in faults.fail_commits or roll_fail < faults.commit_failure_rate
        if k == 1 and 0 in faults.crash_after_commits:  # before the first: nothing written
            return k, False, True
        crash = (
            k in faults.crash_after_commits or roll_crash < faults.crash_rate
        ) and self._crashes < faults.max_crashes
        return k, fail, crash and not fail

    # -- a client ----------------------------------------------------------------------------

    async def _client(self, number: int) -> None:
        rng = random.Random(f"{self.seed}:client:{number}")
        _node_choice.set(random.Random(f"{self.seed}:nodes:{number}"))
        thread_id = f"sim-{number}"
        self._thread_ids.append(thread_id)
        client = _Client(self, number, thread_id, rng)
        await client.run()

    async def _finish(self) -> None:
        """Every client is done: let the runtime settle, check it at rest, close it, and
        check what is stored against what the clients were told and what the tools saw."""
        threads = await self._all_threads(self._thread_ids)
        for node in range(self.nodes):
            await self._runtime(node)  # (each node up again after its last crash)
            for thread_id in threads:
                settle = functools.partial(_settle, thread_id=thread_id)
                await self.request(settle, blocking=True, node=node)
        if self.nodes > 1:
            await self._until_no_run_runs(threads)
        await trio.testing.wait_all_tasks_blocked()
        self._violations.extend(await check_at_rest(self.store, threads, self._checked))
        for node in range(self.nodes):
            process, _rt = await self._runtime(node)
            process.closing.set()
            await process.closed.wait()
        self.note(0, "runtime closed" if self.nodes == 1 else "every node closed")
        self._thread_ids[:] = threads
        for thread_id in threads:
            active = await self.store.get_active_run(thread_id)
            if active is not None and active.status == "running":
                self.violation(f"thread {thread_id!r}: run {active.run_id!r} running after close")
        self._violations.extend(await check_resolutions(self.store, self._resolutions))
        self._violations.extend(await check_executions(self.store, self.probe, reruns=self._reruns))

    async def _until_no_run_runs(self, threads: Sequence[str]) -> None:
        """With several nodes, until no thread has a ``running`` run (a node's ``wait_idle``
        waits for the runs it drives; another node's go on, or are taken over after a
        lease); a violation if that takes longer than a day of virtual time."""
        with trio.move_on_after(86_400) as gave_up:
            while True:
                runs = [await self.store.get_active_run(t) for t in threads]
                if not any(run is not None and run.status == "running" for run in runs):
                    return
                await trio.sleep(self.lease / 4)
        if gave_up.cancelled_caught:
            self.violation("runs still running a virtual day after the clients stopped")

    async def _all_threads(self, roots: Sequence[str]) -> list[str]:
        """``roots`` and the sub-agent threads their calls started, at every depth."""
        found: list[str] = []
        todo = sorted(roots)
        while todo:
            thread_id = todo.pop(0)
            if thread_id in found or await self.store.get_thread(thread_id) is None:
                continue
            found.append(thread_id)
            for call in await self.store.list_calls(thread_id):
                todo.extend(call.record.sub_threads)
        return found

    async def step_checked(self, thread_id: str) -> None:
        """The invariants that hold at any moment, on ``thread_id`` and its sub-threads."""
        if not self.check_every_step:
            return
        todo = [thread_id]
        while todo:
            thread = todo.pop()
            for problem in await check_thread(self.store, thread, self._checked):
                self.violation(problem)
            for call in await self.store.list_calls(thread):
                todo.extend(call.record.sub_threads)

    def resolved(self, action: PendingActionView, how: Any, detail: Any) -> None:
        ref = action.ref
        self._resolutions.append(
            Resolution(ref.thread_id, ref.tool_call_id, ref.action_id, how, detail)
        )


LOST = object()
"""What :meth:`Simulation.request` returns when the runtime crashed under the request."""

_node_choice: contextvars.ContextVar[random.Random | None] = contextvars.ContextVar(
    "pai_actors_simulation_node_choice", default=None
)
"""A client's draws of the node each of its requests goes to (its task's own)."""


@dataclass(eq=False)
class _Process:
    """One runtime of a simulation (a process, as far as crashes go)."""

    number: int
    store: _SimStore
    node: int = 0
    runtime: AgentRuntime | None = None
    crashed: bool = False
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    closing: trio.Event = field(default_factory=trio.Event)
    closed: trio.Event = field(default_factory=trio.Event)
    requests: dict[trio.CancelScope, None] = field(default_factory=dict)  # (ordered)

    @property
    def on(self) -> str:
        """`` on node n<k>`` when the simulation has several nodes (for the trace)."""
        return (
            "" if not isinstance(self.store.inner, NodeStore) else f" on {self.store.inner.node_id}"
        )


class _SimStore:
    """A runtime's view of the simulation's store: its commits are numbered, failed or
    crashed as the faults say; once its runtime crashed, everything it asks fails."""

    def __init__(self, inner: MemoryStore | NodeStore, sim: Simulation) -> None:
        self._inner = inner
        self._sim = sim
        self.process: _Process | None = None
        self.data_store = inner  # (a test runtime's ids continue the generations it holds)

    def transaction(self) -> Transaction:
        return Transaction(self)

    def _check_alive(self) -> None:
        if self.process is not None and self.process.crashed:
            raise StoreError("this runtime crashed (simulated): nothing it asks reaches the store")

    @property
    def inner(self) -> Any:
        return self._inner

    def die(self) -> None:
        """Its runtime crashed: from now on every read fails too (a node's leases are no
        longer renewed: they run out, and another node takes its threads over)."""
        kill = getattr(self._inner, "kill", None)
        if kill is not None:
            kill()
        self.__dict__.update(
            (name, _refuse)
            for name in list(self.__dict__)
            if name.startswith(("get_", "list_", "read_"))
        )

    async def commit(self, writes: Sequence[Write]) -> None:
        self._check_alive()
        await trio.lowlevel.checkpoint_if_cancelled()
        assert self.process is not None
        k, fail, crash = self._sim._next_commit(self.process)
        if crash and k == 1 and 0 in self._sim.faults.crash_after_commits:
            self._sim._crash(self.process, 0)
            raise StoreError("the runtime crashed (simulated) before its first commit")
        if fail:
            self._sim.injected(f"commit {k} failed")
            raise StoreError(f"simulated failure of commit {k}: nothing of it was written")
        await self._inner.commit(writes)
        if crash:
            self._sim._crash(self.process, k)
            raise StoreError(f"the runtime crashed (simulated) right after commit {k}")

    def __getattr__(self, name: str) -> Any:  # the reads: the store's own, until it dies
        attribute = getattr(self._inner, name)
        if self.process is not None and self.process.crashed:
            if inspect.iscoroutinefunction(attribute):
                return _refuse
            # (a node's constants, its id and lease, stay what they were)
            return _refuse_now if callable(attribute) else attribute
        if callable(attribute) and name.startswith(("get_", "list_", "read_")):
            setattr(self, name, attribute)  # (no wrapper: a read costs what it costs)
        return attribute


def _with(call: Callable[[AgentRuntime, bool], Any], again: bool, rt: AgentRuntime) -> Any:
    return call(rt, again)


async def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise StoreError("this runtime crashed (simulated): nothing it asks reaches the store")


def _refuse_now(*args: Any, **kwargs: Any) -> Any:
    raise StoreError("this runtime crashed (simulated): nothing it asks reaches the store")


class _Client:
    """One simulated conversation's client."""

    def __init__(self, sim: Simulation, number: int, thread_id: str, rng: random.Random) -> None:
        self.sim = sim
        self.number = number
        self.thread_id = thread_id
        self.rng = rng
        self.silent = False
        weights = sim.workload.behaviours
        self.behaviours = [b for b in BEHAVIOURS if weights.get(b, 0) > 0]
        self.weights = [weights[b] for b in self.behaviours]

    def note(self, what: str) -> None:
        self.sim.note(self.number, what)

    async def _ask(self, call: Callable[[AgentRuntime], Any], *, blocking: bool = False) -> Any:
        """A request that changes nothing a client decided (a read, a creation, a send that
        looks first): asked again while a commit of it fails; :data:`LOST` on a crash."""
        while True:
            try:
                return await self.sim.request(call, blocking=blocking)
            except StoreError as exc:  # a failed commit (a fault): nothing of it was written
                self.note(f"store error, asking again: {exc}")

    async def run(self) -> None:
        sim, workload = self.sim, self.sim.workload
        await trio.sleep(self.rng.choice(workload.think))
        await self._create()
        for text in workload.messages:
            if not await self._send(text):
                return
            settle = True
            while not self.silent:
                # Half the time the client waits for the thread to be idle before it looks;
                # else it looks while the thread's tools still run (its act then races them).
                state = None
                if settle:
                    state = await self._ask(
                        lambda rt: _settle(rt, thread_id=self.thread_id), blocking=True
                    )
                    if state is LOST:
                        continue
                    await sim.step_checked(self.thread_id)
                actions = await self._ask(lambda rt: rt.pending_actions(self.thread_id))
                if actions is LOST:
                    continue
                if not actions:
                    if state is None:  # the thread works: the client may stop it meanwhile
                        settle = True
                        if self.rng.choices(self.behaviours, self.weights)[0] == "cancel_run":
                            await self._stop()
                        continue
                    state = await self._ask(lambda rt: rt.get_state(self.thread_id))
                    if state is LOST:
                        continue
                    self.note(f"idle: runs {[r.status for r in state.runs]}")
                    break
                pause = self.rng.choice(workload.think)
                if pause:
                    await trio.sleep(pause)
                await self._act(actions[self.rng.randrange(len(actions))])
                settle = self.rng.random() < workload.settle
                if not settle:  # (else checked once settled, just below)
                    await sim.step_checked(self.thread_id)
            if self.silent:
                return

    async def _create(self) -> None:
        scope, agent = self.sim.workload.scope, self.sim.workload.agent
        await self._until_done(functools.partial(_create, self.thread_id, scope, agent))
        self.note("created")

    async def _send(self, text: str) -> bool:
        await self._until_done(functools.partial(_send_once, self.thread_id, text))
        self.note(f"sent {text!r}")
        return True

    async def _until_done(self, call: Callable[[AgentRuntime, bool], Any]) -> None:
        """``call(runtime, again)`` until it is answered; ``again`` once an earlier attempt
        failed or was lost (it may have been done: look first)."""
        again = False
        while True:
            try:
                if await self.sim.request(functools.partial(_with, call, again)) is not LOST:
                    return
            except StoreError as exc:  # a failed commit (a fault)
                self.note(f"store error, asking again: {exc}")
            again = True

    async def _act(self, action: PendingActionView) -> None:
        behaviour = self.rng.choices(self.behaviours, self.weights)[0]
        name = f"{action.name} ({action.ref.thread_id}:{action.ref.action_id})"
        try:
            await self._do(behaviour, action, name)
        except StoreError as exc:  # a failed commit: the action is as it was
            self.note(f"{behaviour} {name}: store error ({exc})")

    async def _do(self, behaviour: Behaviour, action: PendingActionView, name: str) -> None:
        sim = self.sim
        approval = _is_approval(action)
        if behaviour == "silent":
            self.silent = True
            self.note(f"silent, leaving {name} pending")
            return
        if behaviour == "reconnect":
            await sim.request(lambda rt: self._reconnect(rt), blocking=True)
            return
        if behaviour == "cancel_run":
            reason = "stopped by the simulated client"
            state = await sim.request(lambda rt: rt.cancel_run(action.ref.run_id, reason))
            self.note(f"cancel_run {action.ref.run_id}: {_shown(state)}")
            return
        if behaviour in ("approve", "deny", "invalid"):
            if behaviour == "invalid":
                payload: Any = _INVALID
            elif approval:
                payload = {"approved": behaviour == "approve"}
            elif behaviour == "deny":
                await self._fail(action, name)
                return
            else:
                payload = self._answer(action)
            result = await sim.request(lambda rt: rt.submit_action(action.ref, payload))
            self.note(f"{behaviour} {name}: {_shown(result)}")
            if result is LOST:
                return
            if result.status == "accepted":
                sim.resolved(action, "submit", _submitted(payload))
                if behaviour == "invalid":
                    return  # the schema takes anything
                if self.rng.random() < 0.25:  # the same answer again: refused
                    again = await sim.request(lambda rt: rt.submit_action(action.ref, payload))
                    if again is not LOST and again.status != "rejected":
                        sim.violation(f"{name}: a second submission was {again.status}")
            elif behaviour == "invalid":
                await self._still_pending(action, name)
            return
        if behaviour == "cancel_action":
            reason = "cancelled by the simulated client"
            result = await sim.request(lambda rt: rt.cancel_action(action.ref, reason))
            self.note(f"cancel_action {name}: {_shown(result)}")
            if result is not LOST and result.status == "accepted":
                sim.resolved(action, "cancel", reason)
            return
        await self._fail(action, name)

    async def _stop(self) -> None:
        """Cancel the thread's active run while it works (a user's stop button)."""
        state = await self._ask(lambda rt: rt.get_state(self.thread_id))
        active = (
            None if state is LOST else next((r for r in state.runs if r.status == "running"), None)
        )
        if active is None:
            return
        reason = "stopped by the simulated client"
        try:
            result = await self.sim.request(lambda rt: rt.cancel_run(active.run_id, reason))
        except StoreError as exc:
            self.note(f"stop {active.run_id}: store error ({exc})")
            return
        self.note(f"stop {active.run_id}: {_shown(result)}")
        await self.sim.step_checked(self.thread_id)

    async def _fail(self, action: PendingActionView, name: str) -> None:
        error = "failed by the simulated client"
        result = await self.sim.request(lambda rt: rt.fail_action(action.ref, error))
        self.note(f"fail_action {name}: {_shown(result)}")
        if result is not LOST and result.status == "accepted":
            self.sim.resolved(action, "fail", error)

    async def _still_pending(self, action: PendingActionView, name: str) -> None:
        """Nothing of a rejected answer is recorded: the action is still pending, or was
        resolved since by something else (the run failed or was cancelled meanwhile), never
        with that answer."""
        ref = action.ref
        call = await self.sim.store.get_call(ref.thread_id, ref.tool_call_id)
        if call is None:
            return
        record = call.record
        applied = any(
            e.action_id == ref.action_id and e.state == "submitted" and e.resume == _INVALID
            for e in record.episodes
        ) or (ref.action_id == record.tool_call_id and record.output == _INVALID)
        if applied:
            self.sim.violation(f"{name}: a rejected answer was recorded")

    def _answer(self, action: PendingActionView) -> Any:
        answer = self.sim.workload.answer
        if answer is not None:
            return answer(action, self.rng)
        return example(action.resume_schema or {}, self.rng)

    async def _reconnect(self, rt: AgentRuntime) -> None:
        async with rt.watch(self.thread_id, snapshot=True) as updates:
            snapshot = updates.snapshot
        state = await rt.get_state(self.thread_id)
        same = snapshot is not None and snapshot.messages == state.messages
        self.note(f"reconnected: snapshot {'matches' if same else 'differs'}")
        if snapshot is not None and snapshot.runs == state.runs and not same:
            self.sim.violation(f"thread {self.thread_id!r}: a watch's snapshot is not its state")


_INVALID = {"pai_simulation": "an answer no schema of this action asks for"}


def _submitted(payload: Any) -> Any:
    """What a record keeps of an accepted payload (JSON, as stored)."""
    return json.loads(json.dumps(payload))


def _is_approval(action: PendingActionView) -> bool:
    schema = action.resume_schema or {}
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return isinstance(properties, Mapping) and "approved" in properties


def _shown(result: Any) -> str:
    if result is LOST:
        return "lost (the runtime crashed)"
    status = getattr(result, "status", result)
    error = getattr(result, "error", None)
    return f"{status}" + (f" ({error.splitlines()[0][:80]})" if error else "")


async def _settle(rt: AgentRuntime, *, thread_id: str) -> bool:
    """Until the thread is loaded (recovered, after a crash) and idle."""
    await rt.wait_idle(thread_id)
    return True


async def _create(
    thread_id: str, scope: str, agent: str | None, rt: AgentRuntime, again: bool
) -> None:
    """Create the thread; ``again``: unless it exists (created before a crash hid the
    answer, or before a failed commit of the same request... which wrote nothing)."""
    if again:
        try:
            await rt.get_thread(thread_id)
            return
        except ThreadNotFound:
            pass
    try:
        await rt.create_thread(scope, thread_id=thread_id, agent_id=agent)
    except StoreConflict:  # created by the attempt whose answer a crash hid
        await rt.get_thread(thread_id)


async def _send_once(thread_id: str, text: str, rt: AgentRuntime, again: bool) -> Any:
    """Send ``text``; ``again``: unless the thread's last user message is it already (sent
    before a crash hid the answer)."""
    if not again:
        return await rt.send(thread_id, text)
    state = await rt.get_state(thread_id)
    users = [m for m in state.messages if m.role == "user"]
    if users and users[-1].parts and getattr(users[-1].parts[0], "text", None) == text:
        if state.runs:
            return state.runs[-1].run_id
    return await rt.send(thread_id, text)


def example(schema: Mapping[str, Any], rng: random.Random) -> Any:
    """A small instance of a JSON Schema (the common keywords: ``type``, ``properties`` and
    ``required``, ``enum``, ``const``, ``items``/``minItems``, ``minimum``, ``anyOf`` /
    ``oneOf``, ``$defs`` references); a schema it cannot satisfy gives ``None``."""
    return _example(schema, rng, schema)


def _example(schema: Any, rng: random.Random, root: Mapping[str, Any]) -> Any:
    if not isinstance(schema, Mapping):
        return None
    if "$ref" in schema:
        ref = str(schema["$ref"])
        target: Any = root
        for key in ref.removeprefix("#/").split("/"):
            target = target.get(key, {}) if isinstance(target, Mapping) else {}
        return _example(target, rng, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(list(schema["enum"]))
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return _example(schema[key][0], rng, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {
            name: _example(properties.get(name, {}), rng, root)
            for name in schema.get("required", [])
        }
    if kind == "array":
        return [
            _example(schema.get("items", {}), rng, root) for _ in range(schema.get("minItems", 0))
        ]
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return float(schema.get("minimum", 0))
    if kind == "boolean":
        return rng.random() < 0.5
    return None


class _FaultyModel:
    """A model whose steps break or stall as the simulation's faults draw (from the seed
    and the request, so the same step does the same in every replay)."""

    def __init__(self, inner: Model, sim: Simulation) -> None:
        self._inner = inner
        self._sim = sim

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        faults = self._sim.faults
        digest = hashlib.sha256(repr(request.messages).encode()).hexdigest()[:16]
        rng = random.Random(f"{self._sim.seed}:model:{digest}")
        if rng.random() < faults.model_stall_rate:
            self._sim.injected(f"model step {digest} stalled {faults.stall_seconds:g} s")
            await trio.sleep(faults.stall_seconds)
        cut = rng.randrange(4) if rng.random() < faults.model_error_rate else None
        count = 0
        events = self._inner.stream(request)
        try:
            async for event in events:
                if cut is not None and count >= cut:
                    break
                yield event
                count += 1
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
        if cut is not None:
            self._sim.injected(f"model step {digest} broke after {count} event(s)")
            raise ConnectionResetError(f"simulated model stream error after {count} event(s)")


def _models(model: Models, sim: Simulation) -> Any:
    if isinstance(model, Mapping):
        return {name: _model(value, sim) for name, value in model.items()}
    return _model(model, sim)


def _model(model: Model | StepFunction, sim: Simulation) -> Model:
    inner: Model
    if hasattr(model, "stream"):  # a Model
        inner = cast(Model, model)
    else:  # a function of the request: one scripted step, played for every request
        inner = ScriptedModel([model], repeat_last=True)
    faults = sim.faults
    if faults.model_error_rate or faults.model_stall_rate:
        return _FaultyModel(inner, sim)
    return inner


def _reruns(agents: AgentDefinition | Pai) -> dict[str, bool]:
    """Tool names whose registration reruns interrupted calls."""
    found: dict[str, bool] = {}
    for agent in agents.agents.values() if isinstance(agents, Pai) else (agents,):
        for name, registration in agent.tools.items():
            found[name] = found.get(name, False) or registration.rerun_interrupted
    return found


async def dump_store(store: MemoryStore, thread_ids: Sequence[str]) -> bytes:
    """The threads' stored contents as canonical JSON (sorted keys, threads by id)."""
    threads = []
    for thread_id in sorted(thread_ids):
        thread = await store.get_thread(thread_id)
        if thread is None:
            continue
        threads.append(
            {
                "thread": thread.model_dump(mode="json"),
                "messages": [m.to_wire() for m in await store.list_messages(thread_id)],
                "runs": [r.model_dump(mode="json") for r in await store.list_runs(thread_id)],
                "calls": [c.model_dump(mode="json") for c in await store.list_calls(thread_id)],
            }
        )
    return json.dumps(threads, sort_keys=True, separators=(",", ":")).encode()


def replay_command(seed: int) -> str:
    """A shell command that runs the current test (or script) again with ``seed``."""
    test = os.environ.get("PYTEST_CURRENT_TEST")
    if test is not None:
        command = f"pytest {shlex.quote(test.rsplit(' ', 1)[0])}"
    else:
        command = shlex.join([os.path.basename(sys.executable), *sys.argv])
    return f"{SEED_ENV}={seed} {command}"


def simulate(
    agents: AgentDefinition | Pai,
    *,
    model: Models,
    workload: Workload | None = None,
    seed: int = 0,
    faults: Faults | None = None,
    check_every_step: bool = True,
    scheduler_seed: int | None = None,
    max_active_runs: int | None = DEFAULT_MAX_ACTIVE_RUNS,
    nodes: int = 1,
    lease: float = 10.0,
) -> SimulationResult:
    """Run a :class:`Simulation` in a trio run of its own, under
    ``MockClock(autojump_threshold=0)``, with trio's scheduler seeded (``scheduler_seed``,
    by default the seed) so that a seed replays exactly. ``PAI_SIM_SEED`` in the
    environment overrides ``seed`` (what a failure's replay command sets). Returns the
    result; call :meth:`SimulationResult.raise_for_violations` to fail a test on a broken
    invariant."""
    seed = int(os.environ.get(SEED_ENV, seed))
    simulation = Simulation(
        agents,
        model=model,
        workload=workload,
        seed=seed,
        faults=faults,
        check_every_step=check_every_step,
        max_active_runs=max_active_runs,
        nodes=nodes,
        lease=lease,
    )
    with seeded_scheduler(seed if scheduler_seed is None else scheduler_seed):
        return trio.run(simulation.run, clock=trio.testing.MockClock(autojump_threshold=0))


class seeded_scheduler:
    """Within it, trio's scheduler takes its random choices (the order of tasks woken
    in the same tick) from ``seed`` (trio keeps that generator private: see
    ``trio._core._run``)."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._state: Any = None

    def __enter__(self) -> None:
        from trio._core import _run  # there is no public handle on either

        self._state = (_run._r.getstate(), _run._ALLOW_DETERMINISTIC_SCHEDULING)
        _run._r.seed(self._seed)
        # The tasks woken in one tick run in an order drawn from the seed, not in the order
        # they were woken (which can follow object addresses: sets of tasks, of scopes).
        setattr(_run, "_ALLOW_DETERMINISTIC_SCHEDULING", True)  # noqa: B010 (Final there)

    def __exit__(self, *exc: object) -> None:
        from trio._core import _run

        _run._r.setstate(self._state[0])
        setattr(_run, "_ALLOW_DETERMINISTIC_SCHEDULING", self._state[1])  # noqa: B010
