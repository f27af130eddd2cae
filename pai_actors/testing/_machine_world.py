"""The trio side of :class:`~pai_actors.testing.AgentStateMachine`: a :class:`World` runs a
user's agents on test runtimes over a :class:`~pai_actors.MemoryStore` that survives
crashes (``testing._processes``), does what the rules ask (a client's requests, each a
task), moves virtual time deadline by deadline, and checks the invariants of
``testing._invariants`` after each rule and at the end (and the machine's own checks, given
an :class:`Observation`). After a crash or a restart the clients reconnect (a
``get_state`` of each thread).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import trio
import trio.testing

from .._core.errors import ThreadBusy, ThreadNotFound
from .._core.pending import PendingActionView
from .._runtime.runtime import AgentRuntime
from .._store.base import Store
from .._store.memory import MemoryStore
from .._tools.agent import AgentDefinition, Pai
from ._invariants import (
    How,
    Resolution,
    check_at_rest,
    check_cancelled_run,
    check_closed,
    check_executions,
    check_live,
    check_resolutions,
    check_stopped,
    check_thread,
    check_views,
    thread_tree,
)
from ._probe import Probe, instrument
from ._processes import CLOSED, LOST, Process, Processes
from ._scripted_model import ScriptedModel
from ._simulation import Models, _reruns, _submitted

FAILED = "failed by the state machine"
Timing = Literal["settled", "deadline"]
"""When a request starts: at a settled moment (every task blocked), or in the tick of the
next deadline, racing what wakes then (a tool's sleep ending, a model step, a timer)."""
MAX_JUMPS = 100_000
"""Deadlines one job may pass (a tool sleeping in a short loop for a long time)."""


@dataclass(frozen=True)
class Observation:
    """What a machine's own checks (:meth:`AgentStateMachine.check`) are given, after a rule
    or at the end (``final``: the runtime closed): the committed data (``store``, which
    every runtime shares), the conversations' threads and their sub-agents' (``threads``,
    those that exist), what the tools saw (``probe``: every ``execute`` that exited, how,
    and what its signal said), and the model the runtimes were given (``model``: a
    function of the request is played by a :class:`ScriptedModel`, whose ``requests``
    holds every request; a mapping for a :class:`~pai_actors.Pai`). Read it; change
    nothing."""

    store: Store
    threads: tuple[str, ...]
    probe: Probe
    model: Any
    final: bool


Check = Callable[[Observation], Awaitable[Iterable[str]]]
"""A machine's own checks: the violations they found in an :class:`Observation`."""


@dataclass(frozen=True)
class WorldConfig:
    """What a :class:`World` runs: ``agents`` (with ``model``, and ``capabilities``' bindings),
    conversations in ``scope`` talking to ``agent``; ``settle_seconds``: the virtual time
    the end may take to come to rest (and the runtime to close); ``check``: the machine's
    own checks."""

    agents: AgentDefinition | Pai
    model: Models
    scope: str
    agent: str | None
    settle_seconds: float
    max_active_runs: int | None
    capabilities: Any = None
    check: Check | None = None


@dataclass(frozen=True)
class Report:
    """What a rule's job found: the pending actions, how many resolutions were accepted,
    the threads with an active run, whether a deadline is ahead (time passing would do
    something), the violations so far (and the first exception behind one), the trace."""

    pending: tuple[PendingActionView, ...]
    accepted: int
    active: frozenset[str]
    timers: bool
    violations: tuple[str, ...]
    error: BaseException | None
    trace: tuple[str, ...]


class World:
    """The trio side of a state machine: its store, runtimes, requests in flight, trace and
    violations. Every method runs in the machine's trio run, the rules' jobs one at a time
    (:meth:`step`, then :meth:`finish`).

    Concurrency contract: a job starts requests as tasks and returns once every task is
    blocked; a request may end in a later job (once time passed). Violations accumulate.
    """

    def __init__(self, config: WorldConfig) -> None:
        self.config = config
        self.clock = trio.testing.MockClock()  # moves only when a job jumps it
        self.store = MemoryStore()  # what survives every crash: the committed state
        self.probe = Probe()
        self.agents = instrument(config.agents, self.probe)
        self.reruns = _reruns(config.agents)
        self.model = _as_models(config.model)
        self.threads: list[str] = []
        self.in_flight: dict[int, str] = {}
        self._loaded: set[tuple[int, str]] = set()  # (runtime, thread): read by that runtime
        self._seen: dict[tuple[str, str], tuple[int, int]] = {}  # revisions checked already
        self.accepted: list[tuple[PendingActionView, Resolution]] = []
        self.violations: list[str] = []
        self.error: BaseException | None = None
        self.trace: list[str] = []
        self.tasks_before = 0
        self._keys = itertools.count(1)
        self._started = 0  # requests started so far
        self._nursery: trio.Nursery | None = None
        self._processes: Processes | None = None

    async def main(self, serve: Callable[[], Awaitable[None]]) -> None:
        """The trio run: the first runtime opens, the rules' jobs are served, then it ends."""
        self.tasks_before = trio.lowlevel.current_statistics().tasks_living
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._processes = Processes(
                self.store,
                open_runtime=self._open_runtime,
                nursery=nursery,
                probe=self.probe,
                opened=self._opened,
                note=self.note,
                violation=self.violation,
            )
            self._processes.open()
            await serve()
            nursery.cancel_scope.cancel()

    @property
    def processes(self) -> Processes:
        assert self._processes is not None, "World.main() is not running"
        return self._processes

    def _open_runtime(self, store: Store) -> AgentRuntime:
        from . import create_test_runtime

        return create_test_runtime(
            self.agents,
            model=self.model,
            store=store,
            capabilities=self.config.capabilities,
            max_active_runs=self.config.max_active_runs,
        )

    def _opened(self, process: Process) -> None:
        if process.number > 1:  # the clients reconnect
            for thread_id in self.threads:
                self._spawn(f"reconnect to {thread_id!r}", _reconnect(thread_id))

    # -- the trace and the violations ---------------------------------------------------------

    def note(self, what: str) -> None:
        self.trace.append(f"{trio.current_time():9.3f}  {what}")

    def violation(self, what: str, error: BaseException | None = None) -> None:
        self.violations.append(f"[t={trio.current_time():g}] {what}")
        self.note(f"VIOLATION {what}")
        if self.error is None:
            self.error = error

    # -- a rule's job -------------------------------------------------------------------------

    async def step(self, job: Callable[[], Awaitable[None]] | None) -> Report:
        """Do ``job``, let everything that can happen without time happen, read the pending
        actions and check the invariants."""
        if job is not None:
            await job()
        pending = await self._read_pending()
        for problem in await check_views(self.store, pending):
            self.violation(problem)
        for thread_id in await thread_tree(self.store, self.threads):
            for problem in await check_thread(self.store, thread_id, self._seen):
                self.violation(problem)
        for problem in await check_executions(self.store, self.probe, reruns=self.reruns):
            self.violation(problem)
        for problem in await check_live(self.store, self.probe):
            self.violation(problem)
        await self._check(final=False)
        return await self._report(pending)

    async def _check(self, *, final: bool) -> None:
        """The machine's own checks."""
        if self.config.check is None:
            return
        threads = tuple(await thread_tree(self.store, self.threads))
        observation = Observation(self.store, threads, self.probe, self.model, final)
        for problem in await self.config.check(observation):
            self.violation(problem)

    async def _report(self, pending: tuple[PendingActionView, ...]) -> Report:
        active = frozenset(
            [t for t in self.threads if await self.store.get_active_run(t) is not None]
        )
        return Report(
            pending=pending,
            accepted=len(self.accepted),
            active=active,
            timers=trio.lowlevel.current_statistics().seconds_to_next_deadline < math.inf,
            violations=tuple(self.violations),
            error=self.error,
            trace=tuple(self.trace),
        )

    async def _read_pending(self) -> tuple[PendingActionView, ...]:
        """The threads' pending actions, once reading them changes nothing (the first read
        of a thread by a runtime loads it, which may recover it after a crash)."""
        views: list[PendingActionView] = []
        for _ in range(5):
            await self._settle()
            views, fresh = [], False
            for thread_id in await self._existing(self.threads):
                got = await self.processes.request(_pending_of(thread_id))
                if got is LOST:
                    fresh = True
                    break
                views.extend(got)
                if (self.processes.count, thread_id) not in self._loaded:
                    self._loaded.add((self.processes.count, thread_id))
                    fresh = True
            if not fresh:
                return tuple(views)
        return tuple(views)

    async def _existing(self, thread_ids: Sequence[str]) -> list[str]:
        """The threads that exist (a creation lost to a crash made none)."""
        return [t for t in thread_ids if await self.store.get_thread(t) is not None]

    # -- the rules' requests ------------------------------------------------------------------

    async def send(self, thread_id: str, text: str) -> None:
        if thread_id not in self.threads:
            self.threads.append(thread_id)
        scope, agent = self.config.scope, self.config.agent
        call = functools.partial(_send, thread_id=thread_id, text=text, scope=scope, agent=agent)
        self._spawn(f"send {text!r} to {thread_id!r}", call)

    async def submit(
        self,
        action: PendingActionView,
        payload: Any,
        valid: bool,
        *,
        racing: bool = False,
        timing: Timing = "settled",
    ) -> None:
        """``racing``: another request races it (it may be refused for what that did)."""
        ref, settled = action.ref, self._at(timing)
        alone = settled and not self.in_flight and not racing
        name = f"{'' if valid else 'invalid '}submit {payload!r} to {_named(action)}"

        async def pending() -> bool:
            listed = await self.store.list_pending_actions(ref.thread_id)
            return ref.action_id in {a.ref.action_id for a in listed}

        async def then(result: Any) -> None:
            self.note(f"{name}: {_shown(result)}")
            if result is CLOSED:  # refused by a runtime closing (a restart): not applied
                if not await pending():
                    self.violation(f"{name}: refused as the runtime closed, yet applied")
            elif result.status == "accepted":
                resolution = Resolution(
                    ref.thread_id, ref.tool_call_id, ref.action_id, "submit", _submitted(payload)
                )
                self.accepted.append((action, resolution))
            elif valid and alone:
                self.violation(
                    f"{name}: a valid answer to a pending action was rejected ({result.error}); "
                    "if answer() gave something its schema refuses, override answer()"
                )
            elif not valid and alone and not await pending():
                self.violation(f"{name}: rejected, yet the action is no longer pending")

        self._spawn(name, lambda rt: rt.submit_action(ref, payload), then, closed=True)

    async def resolve(
        self, action: PendingActionView, how: How, detail: str | None, *, timing: Timing = "settled"
    ) -> None:
        ref, settled = action.ref, self._at(timing)
        alone = settled and not self.in_flight
        name = f"{how} {_named(action)} ({detail!r})"

        async def then(result: Any) -> None:
            self.note(f"{name}: {_shown(result)}")
            if result.status == "accepted":
                resolution = Resolution(ref.thread_id, ref.tool_call_id, ref.action_id, how, detail)
                self.accepted.append((action, resolution))
            elif alone:
                self.violation(f"{name}: a pending action refused it ({result.error})")

        if how == "cancel":
            self._spawn(name, lambda rt: rt.cancel_action(ref, detail), then)
        else:
            self._spawn(name, lambda rt: rt.fail_action(ref, detail or FAILED), then)

    async def resolve_again(self, index: int, how: How) -> None:
        action, first = self.accepted[index]
        ref = action.ref
        name = f"{how} again {_named(action)} (accepted before: {first.how})"

        async def then(result: Any) -> None:
            self.note(f"{name}: {_shown(result)}")
            if result.status != "rejected":
                self.violation(f"{name}: an action accepted before was {result.status} again")

        if how == "submit":
            payload = first.detail if first.how == "submit" else {"approved": True}
            self._spawn(name, lambda rt: rt.submit_action(ref, payload), then)
        elif how == "cancel":
            self._spawn(name, lambda rt: rt.cancel_action(ref, "again"), then)
        else:
            self._spawn(name, lambda rt: rt.fail_action(ref, FAILED), then)

    async def cancel_run(
        self,
        thread_id: str,
        reason: str | None,
        *,
        timing: Timing = "settled",
        submit: tuple[PendingActionView, Any] | None = None,
    ) -> None:
        """Cancel the thread's latest run (``timing``: when); ``submit``: an action of it
        and a valid answer, submitted in the same tick."""
        runs = await self.store.list_runs(thread_id)
        if not runs:
            self.note(f"cancel_run of {thread_id!r}: no run (its send was lost)")
            return
        run = runs[-1]
        unfinished: list[str] | None = [
            c.record.tool_call_id
            for c in await self.store.list_calls(thread_id)
            if c.run_id == run.run_id and c.record.phase != "done"
        ]
        if not self._at(timing):
            unfinished = None  # what wakes in its tick may end calls first
        spared: tuple[str, ...] = ()
        if submit is not None:  # (no checkpoint until both requests started)
            await self.submit(submit[0], submit[1], True, racing=True)
            spared = (submit[0].ref.tool_call_id,)
        alone, started = len(self.in_flight) <= len(spared), self._started
        name = f"cancel_run {run.run_id!r} ({reason!r})"

        async def then(result: Any) -> None:
            self.note(f"{name}: {_shown(result)}")
            if not alone or self._started != started + 1:
                return  # another request might have ended the run or its calls
            for problem in await check_cancelled_run(
                self.store, self.probe, run, reason, unfinished, spared
            ):
                self.violation(problem)

        self._spawn(name, lambda rt: rt.cancel_run(run.run_id, reason), then)

    async def restart(self, racing: Callable[[], Awaitable[None]] | None, checkpoints: int) -> None:
        """Close the runtime gracefully (a deploy) and open a fresh one on the same data;
        ``racing`` starts a request, which runs ``checkpoints`` checkpoints before the close
        begins. Checks what the close left (:func:`check_stopped`)."""
        processes = self.processes
        process = processes.live()
        if process is None:
            self.note("restart: no runtime")
            return
        if racing is not None:
            await racing()
            for _ in range(checkpoints):
                await trio.lowlevel.checkpoint()
        processes.retire()
        end = self.clock.current_time() + self.config.settle_seconds
        if not await self._until(process.closed.is_set, end):
            seconds = self.config.settle_seconds
            self.violation(f"runtime {process.number} did not close in {seconds:g} s (a restart)")
            return
        processes.cancel_requests(process)
        await self._settle()
        if process.crashed:  # during its close: its successor opens as after any crash
            return
        threads = await thread_tree(self.store, self.threads)
        for problem in await check_stopped(self.store, self.probe, threads, process.number):
            self.violation(problem)
        processes.open()

    async def advance(self, seconds: float) -> None:
        end = self.clock.current_time() + seconds
        await self._until(lambda: False, end)
        self.clock.jump(max(0.0, end - self.clock.current_time()))
        await self._settle()

    async def crash(self, after_commits: int) -> None:
        if after_commits == 0:
            self.processes.crash()
        else:
            self.processes.arm(after_commits)
            self.note(f"a crash armed: right after the {_nth(after_commits)} next commit")

    # -- requests -----------------------------------------------------------------------------

    def _spawn(
        self,
        what: str,
        call: Callable[[AgentRuntime], Awaitable[Any]],
        then: Callable[[Any], Awaitable[None]] | None = None,
        *,
        closed: bool = False,
    ) -> None:
        """Start a client's request: it ends now or in a later rule (once time passed).
        ``then`` is given its answer (and :data:`CLOSED` too, with ``closed``)."""
        assert self._nursery is not None
        key = next(self._keys)
        self.in_flight[key] = what
        self._started += 1
        self._nursery.start_soon(self._request_task, key, what, call, then, closed)

    async def _request_task(
        self,
        key: int,
        what: str,
        call: Callable[[AgentRuntime], Awaitable[Any]],
        then: Callable[[Any], Awaitable[None]] | None,
        closed: bool,
    ) -> None:
        try:
            result = await self.processes.request(call)
            if result is LOST:
                self.note(f"{what}: lost (the runtime crashed or closed)")
            elif result is CLOSED and not closed:
                self.note(f"{what}: refused (the runtime was closing)")
            elif then is not None:
                await then(result)
            else:
                self.note(f"{what}: {_shown(result)}")
        except Exception as exc:
            self.violation(f"{what} raised {exc!r}", exc)
        finally:
            del self.in_flight[key]

    # -- time ---------------------------------------------------------------------------------

    def _at(self, timing: Timing) -> bool:
        """Get to the moment ``timing`` names (a ``"deadline"``: jump to it, so that what it
        wakes runs in the same tick as the request started next): whether that moment is a
        settled one (there was no deadline ahead to jump to)."""
        if timing == "settled":
            return True
        wait = trio.lowlevel.current_statistics().seconds_to_next_deadline
        if wait == math.inf:
            return True
        self.clock.jump(max(0.0, wait))
        return False

    async def _settle(self) -> None:
        """Until every task is blocked: what can happen without time has happened."""
        await trio.testing.wait_all_tasks_blocked()

    async def _until(self, done: Callable[[], bool], end: float) -> bool:
        """Let time pass deadline by deadline until ``done()`` or virtual time ``end``."""
        for _ in range(MAX_JUMPS):
            await self._settle()
            if done():
                return True
            if not self._jump(end):
                return False
        self.violation(f"{MAX_JUMPS} deadlines passed in one rule: a tool that sleeps in a loop?")
        return False

    def _jump(self, end: float) -> bool:
        """Jump to the next deadline if it comes before ``end``."""
        wait = max(0.0, trio.lowlevel.current_statistics().seconds_to_next_deadline)
        if self.clock.current_time() + wait > end:
            return False
        self.clock.jump(wait)
        return True

    # -- the end ------------------------------------------------------------------------------

    async def finish(self) -> Report:
        """Come to rest, check it, close the runtime, check what was stored against what
        the clients were told and what the tools saw, and that nothing is left running."""
        threads = await self._rest()
        if threads is not None:
            for problem in await check_at_rest(self.store, threads, self._seen):
                self.violation(problem)
        await self._close()
        threads = await thread_tree(self.store, self.threads)
        for thread_id in threads:
            active = await self.store.get_active_run(thread_id)
            if active is not None and active.status == "running":
                self.violation(f"thread {thread_id!r}: run {active.run_id!r} running after close")
        resolutions = [resolution for _, resolution in self.accepted]
        for problem in await check_resolutions(self.store, resolutions):
            self.violation(problem)
        for problem in await check_executions(self.store, self.probe, reruns=self.reruns):
            self.violation(problem)
        tasks_now = trio.lowlevel.current_statistics().tasks_living
        for problem in check_closed(self.probe, self.tasks_before, tasks_now):
            self.violation(problem)
        await self._check(final=True)
        return await self._report(())

    async def _rest(self) -> list[str] | None:
        """Let time pass until every run is idle and no request is in flight: the threads
        (sub-agents' included); ``None`` (a violation) if that takes ``settle_seconds``."""
        end = self.clock.current_time() + self.config.settle_seconds
        busy: list[str] = []
        for _ in range(MAX_JUMPS):
            number = self.processes.count
            busy = await self._busy()
            if not busy and not self.in_flight:
                return await thread_tree(self.store, self.threads)
            if self.processes.count != number:
                continue  # a crash meanwhile: ask the fresh runtime
            if not self._jump(end):
                break
        requests = sorted(self.in_flight.values())
        self.violation(
            f"not at rest within {self.config.settle_seconds:g} virtual seconds of the last "
            f"rule: threads {busy} busy, requests {requests} in flight (a tool that never "
            "returns?)"
        )
        return None

    async def _busy(self) -> list[str]:
        """The threads that are not idle once every task is blocked."""
        threads = await self._existing(self.threads)
        idle: set[str] = set()

        async def wait(thread_id: str) -> None:
            if await self.processes.request(lambda rt: rt.wait_idle(thread_id)) is not LOST:
                idle.add(thread_id)

        async with trio.open_nursery() as nursery:
            for thread_id in threads:
                nursery.start_soon(wait, thread_id)
            await self._settle()
            nursery.cancel_scope.cancel()
        if self.processes.live() is None:
            return ["(no runtime)"]
        return [t for t in threads if t not in idle]

    async def _close(self) -> None:
        """Close the runtime (time passes for its grace periods), then end what is still in
        flight."""
        processes = self.processes
        processes.close()
        process = processes.current
        end = self.clock.current_time() + self.config.settle_seconds
        if process is not None and not await self._until(process.closed.is_set, end):
            self.violation(f"the runtime did not close in {self.config.settle_seconds:g} s")
        processes.cancel_requests()
        await self._settle()


def _as_models(model: Models) -> Any:
    """``model`` as the test runtime takes it: a function of the request becomes a
    :class:`ScriptedModel` that plays it for every request."""
    if isinstance(model, Mapping):
        return {name: _as_model(value) for name, value in model.items()}
    return _as_model(model)


def _as_model(model: Any) -> Any:
    return model if hasattr(model, "stream") else ScriptedModel([model], repeat_last=True)


async def _send(rt: AgentRuntime, *, thread_id: str, text: str, scope: str, agent: Any) -> str:
    """Send ``text`` to the thread, creating it first if it is new (or its creation was
    lost to a crash)."""
    try:
        await rt.get_thread(thread_id)
    except ThreadNotFound:
        await rt.create_thread(scope, thread_id=thread_id, agent_id=agent)
    try:
        return f"run {await rt.send(thread_id, text)!r}"
    except ThreadBusy:
        return "refused: the thread has an active run"


def _pending_of(thread_id: str) -> Callable[[AgentRuntime], Awaitable[Any]]:
    return lambda rt: rt.pending_actions(thread_id)


def _reconnect(thread_id: str) -> Callable[[AgentRuntime], Awaitable[str]]:
    async def reconnect(rt: AgentRuntime) -> str:
        try:
            state = await rt.get_state(thread_id)
        except ThreadNotFound:
            return "no such thread (its creation was lost)"
        return f"runs {[run.status for run in state.runs]}"

    return reconnect


def _named(action: PendingActionView) -> str:
    return f"{action.name} ({action.ref.thread_id}:{action.ref.action_id})"


def _shown(result: Any) -> str:
    if isinstance(result, str):
        return result
    if result is CLOSED:
        return "refused: the runtime was closing"
    status = getattr(result, "status", result)
    error = getattr(result, "error", None)
    return f"{status}" + (f" ({error.splitlines()[0][:80]})" if error else "")


def _nth(k: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(k, f"{k}th")
