"""The tool-call actor: one incarnation of a call from its entry to its next suspension or
its end, and the supervision that restarts it after a failure that is not the tool's.

A call's actor runs under its run's ``calls`` supervisor and receives the protocol of
``_runtime.address``: a :class:`Start` or a :class:`Resume` (its entry), or an
:class:`Abort` at any moment. It writes each new :class:`CallRecord` with its tool part in one
store transaction before acting on it, and ends when the call suspends (passivation: the
stored record is all that remains; a later :class:`Resume` starts a new actor) or finishes.

Supervision. A tool's own failure (``execute`` raising, ``map_context`` raising, an output
its schema refuses) is the call's outcome, never a restart. A failure of the runtime's own
work (a store write that fails: recording the outcome, recording that a re-entry started,
recording that ``on_output`` observed the output) crashes the actor, and its supervisor
restarts it (``transient``) after a backoff (:func:`backoff`), from the call's last durable
record: an accepted submission not yet started is resumed; an entry that had started is
recorded interrupted, or run again when its registration says ``rerun_interrupted`` (the same
rule a restarted process follows, so no call runs twice without consent); a suspended or
finished call is left as it is. More than :data:`RESTART_INTENSITY` restarts within
:data:`RESTART_PERIOD` seconds and the supervisor gives up: the run fails with an error that
names the call and the last failure, and its other calls are aborted.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from typing import Any

import trio

from supervisors import Mailbox, Supervisor, open_supervisor

from .._core.call_record import CallRecord, CallSpec, DataWritten
from .._core.calls import (
    Step,
    agents_done,
    await_agents,
    episode_view,
    finish_exception,
    finish_failure,
    finish_output,
    interrupt_call,
    not_offered,
    start_entry,
    suspend,
    write_data,
)
from .._core.deadlines import deadline_at
from .._core.errors import StoreConflict
from .._core.parts import ToolDataItem
from .._core.records import StoredCall
from .._core.updates import ToolDataUpdated
from .._tools.agent_runner import AgentRunner, SubRunWaiting
from .._tools.context import (
    InitialEntry,
    ResumeEntry,
    ToolContext,
    ToolDataWriter,
    ToolFailResult,
    ToolSuspendResult,
    ToolThread,
    tool_failure_details,
)
from .._tools.registration import ToolRegistration
from .address import CallAddress, Entry, Resume, Start
from .children import ChildCalls, child_registrations
from .invoke import call_context, invoke
from .live import LiveRun
from .prepare import describe_children, resolve_children
from .run_io import RUN_FAILED, observe_output, tool_context, write_call
from .services import Services
from .subagents import CALLER_ENDED, SubRuns, ended
from .tracing import CallSpan, SpanParent, call_span, suspension

_PARENT_RETURNED = "the parent call returned"
_log = logging.getLogger("pai_actors")

RESTART_INTENSITY = 5
"""At most this many restarts of a run's call actors ..."""
RESTART_PERIOD = 60.0
"""... within this many seconds; one more and the run fails."""
RESTART_BACKOFF = 0.1
"""The wait before a call actor's first restart, in seconds; it doubles with each restart of
the call, up to :data:`RESTART_BACKOFF_CAP`."""
RESTART_BACKOFF_CAP = 5.0

RESTARTED_TEXT = "the tool call failed inside the runtime: {error}"
"""The ``errorText`` of a call whose actor failed after its entry started and was not run
again (``{error}``: the last failure's repr)."""


def backoff(restarts: int) -> float:
    """Seconds to wait before the ``restarts``-th restart of a call's actor (1, 2, ...)."""
    return float(min(RESTART_BACKOFF_CAP, RESTART_BACKOFF * 2.0 ** (restarts - 1)))


def resumable(record: CallRecord, action_id: str | None = None) -> bool:
    """Whether ``record`` is an accepted submission whose resume has not run to a result:
    ``executing`` after a ``submitted`` episode, or after an approval with no episode yet
    (that of ``action_id``, if given); see ``CallRecord.resume_action_id``."""
    resume = record.resume_action_id
    return resume is not None and (action_id is None or resume == action_id)


def resume_of(call: StoredCall) -> Resume | None:
    """The :class:`Resume` a stored call's accepted submission stands for (its durable
    form), or ``None`` when it holds none (see :func:`resumable`)."""
    record = call.record
    action_id = record.resume_action_id
    if action_id is None:
        return None
    if record.episodes:
        episode = record.episodes[-1]
        return Resume(call.action_ref(action_id, episode.name), episode.resume)
    approval = record.approval
    payload = (
        {"approved": True, "reason": approval.reason}
        if approval is not None and approval.id == action_id
        else None  # an interrupted call its registration runs again
    )
    return Resume(call.action_ref(action_id, None), payload)


def spawn_call(
    services: Services,
    live: LiveRun,
    calls: Supervisor,
    call: StoredCall,
    entry: Entry,
    trace: SpanParent | None,
) -> None:
    """Start ``call``'s actor under the run's ``calls`` supervisor and send it ``entry``
    (``live.addresses`` holds its address until the call's actor is over); each entry's span
    starts under ``trace`` (``None``: tracing is off).

    One actor per activation of the call: it ends when the call suspends or finishes. An
    incarnation that crashed is restarted by the supervisor (see the module docstring) and
    keeps the address; the address is released only when an incarnation ends otherwise.
    """
    address = CallAddress(call.record.tool_call_id)
    live.addresses[address.key] = address
    try:
        address.ref = calls.spawn(
            _CallActor(services, live, calls, call, address, trace),
            restart="transient",
            capacity=1,
        )
    except BaseException:
        del live.addresses[address.key]
        raise
    address.tell(entry)


class _CallActor:
    """The actor function of one call's activation (each incarnation calls it with its
    mailbox). An object with slots rather than a closure: one object where a closure over
    its six values was nine, alive as long as the call is, for the garbage collector."""

    __slots__ = ("address", "call", "calls", "live", "services", "trace")
    __name__ = "tool_call"  # (its actors' names: ``tool_call-N``)

    def __init__(
        self,
        services: Services,
        live: LiveRun,
        calls: Supervisor,
        call: StoredCall,
        address: CallAddress,
        trace: SpanParent | None,
    ) -> None:
        self.services, self.live, self.calls = services, live, calls
        self.call, self.address, self.trace = call, address, trace

    async def __call__(self, mailbox: Mailbox[Entry]) -> None:
        services, live, call, address = self.services, self.live, self.call, self.address
        address.ref = mailbox.ref  # (the same ref, but for a restarted incarnation)
        crashed = False
        try:
            if address.aborted is not None:  # a restart after an abort: nothing to run
                return
            if not address.restarts:
                driver = _CallDriver(services, live, call, address, self.trace)
                await driver.run(await mailbox.receive())
            else:
                await _restarted(services, live, call, address, self.trace)
        except Exception as exc:
            crashed = True  # its supervisor restarts it, or gives up and fails the run
            address.restarts += 1
            address.failure = exc
            if address.restarts == 1:  # (only once a call failed: a listener costs each exit)
                self.calls.add_exit_listener(partial(_abort_if_gave_up, live, self.calls))
            _log.exception(
                "the actor of call %r failed (restart %d)", address.key, address.restarts
            )
            raise
        finally:
            if not crashed:
                if live.addresses.get(address.key) is address:
                    del live.addresses[address.key]
                live.wake()


def _abort_if_gave_up(live: LiveRun, calls: Supervisor, record: object) -> None:
    """An actor under the run's ``calls`` supervisor exited: if the supervisor gave up (a
    call's actor failed past the restart intensity), abort every call of the run in this
    same step, as the supervisor cancels them."""
    if calls.gave_up is not None:
        live.abort_calls(RUN_FAILED)


async def _restarted(
    services: Services,
    live: LiveRun,
    call: StoredCall,
    address: CallAddress,
    trace: SpanParent | None,
) -> None:
    """A restarted incarnation: after its backoff, go on from the call's durable record."""
    await trio.sleep(backoff(address.restarts))
    current = await services.store.get_call(call.thread_id, call.record.tool_call_id)
    if current is None:
        return
    driver = _CallDriver(services, live, current, address, trace)
    record = current.record
    if record.phase == "done":  # recorded; only its observation may be missing
        await observe_output(services, live, current)
        return
    if record.phase == "executing" and record.entry_started:  # it may have run: interrupted
        registration = None if record.dynamic else live.agent.tools.get(record.name)
        rerun = registration is not None and registration.rerun_interrupted
        text = RESTARTED_TEXT.format(error=repr(address.failure))
        step = interrupt_call(record, rerun=rerun, at=services.now(), error_text=text)
        await driver.write(step.record)
    entry = resume_of(driver.call)
    if entry is not None:  # an accepted submission not started yet (or a call to run again)
        await driver.run(entry)


class _CallDriver:
    """One incarnation of a call's actor: from its entry to its next suspension or its end.

    ``fault`` is the exception of a write of the runtime's own that failed (recording that
    a re-entry started): not the tool's, so it is raised out of the actor for its
    supervisor, never made the call's outcome. ``span`` is the entry's span (see
    ``_runtime.tracing``), under ``trace``.
    """

    def __init__(
        self,
        services: Services,
        live: LiveRun,
        call: StoredCall,
        address: CallAddress,
        trace: SpanParent | None,
    ) -> None:
        self.services = services
        self.live = live
        self.call = call
        self.address = address
        self.trace = trace
        self.span = CallSpan()  # records nothing until the entry's span starts
        self.fault: Exception | None = None
        self._lock: trio.Lock | None = None
        self.sub_runs: SubRuns | None = None  # this entry's, once execute is called

    @property
    def lock(self) -> trio.Lock:
        """Taken by the writes ``execute``'s tasks make of the call (tool data, sub-run
        starts), so that concurrent ones each write the latest revision (made when first
        needed: most calls make none)."""
        if self._lock is None:
            self._lock = trio.Lock()
        return self._lock

    @property
    def record(self) -> CallRecord:
        return self.call.record

    async def write(self, record: CallRecord) -> None:
        self.call = await write_call(self.services, self.call, record)

    async def _start_entry(self, started: str) -> None:
        """Record, durably, that the re-entry from ``started`` begins ``execute`` now (the
        caller calls ``execute`` with no checkpoint after this returns)."""
        try:  # (its tool part does not change: only the record is written)
            self.call = await write_call(
                self.services, self.call, start_entry(self.record), part=False
            )
        except Exception as exc:
            self.fault = exc
            raise
        self.live.resumes_started.add(started)

    async def run(self, message: Entry) -> None:
        services = self.services
        if isinstance(message, Resume) and not resumable(self.record, message.action.action_id):
            return  # resolved otherwise meanwhile (cancelled with its run, say)
        spec = services.spec_for(self.call, self.live.agent)
        if spec is None:  # no longer registered (loading refuses such threads; a safety net)
            offered = list(self.live.agent.tools)
            await self.write(not_offered(self.record, offered).record)
            return
        thread = ToolThread(
            self.live.thread_id, self.live.run_id, self.record.tool_call_id, self.record.name
        )
        self.span = self._span(message, thread)
        try:
            with self.span:
                await self._enter(message, spec, thread)
        finally:
            # The entry's SubRuns holds this driver: dropped here, the driver, its actor and
            # all they hold are freed when the actor ends, not left to the garbage collector
            # (a hundred objects a call, each collection costing them again).
            self.sub_runs = None

    async def _enter(self, message: Entry, spec: CallSpec, thread: ToolThread) -> None:
        """Run ``execute`` from ``message`` and record its outcome (inside the entry's span)."""
        services = self.services
        # Everything from here is inside this handler: an exception
        # (resume-time parsing, ``map_context``, ``execute``, a malformed result) ends the
        # call in ``output-error`` and the run goes on; only cancellation and a failure of
        # the runtime's own writes propagate.
        try:
            if isinstance(message, Start):
                step = await self._execute(InitialEntry(), spec, message.input, thread)
            else:
                started = message.action.action_id
                parsed = self._parsed_input(spec)
                entry = (  # approved, or run again: its first execution, from the initial one
                    self._resume_entry(spec, message) if self.record.episodes else InitialEntry()
                )
                step = await self._execute(entry, spec, parsed, thread, started)
        except Exception as exc:
            if exc is self.fault:
                raise
            step = await self._failed(exc, thread)
        self.span.settled(step.record)
        live = self.live
        if step.record.phase == "suspended" and live.active_calls == 1 and live.handoff is None:
            # The run's last live call stops at a suspension, so the run is about to wait:
            # the run writes the suspension with its "waiting", in one commit (it writes it
            # alone if it does not wait after all; a closing runtime's run keeps it).
            live.handoff = (self.call, step.record)
            live.changed = True  # look again before waiting or passivating
            return
        await self.write(step.record)
        record = self.record
        if record.phase == "awaiting_agents":
            await self._settle_if_ended()
            return
        unfinished = None if self.sub_runs is None else self.sub_runs.unfinished
        if unfinished:  # it ended: a sub-run it did not wait for is cancelled
            services.cancel_sub_threads_soon(tuple(sorted(unfinished)), CALLER_ENDED)
        self.call = await observe_output(services, self.live, self.call)

    async def _settle_if_ended(self) -> None:
        """The call now waits for its sub-runs: if they all ended already (before the wait
        was stored, so their ends found nothing to settle), it enters ``execute`` again
        (its run resumes it when this actor ends). A sub-run that ends after the wait was
        stored settles it itself (``resolution.settle_caller``); either may come first."""
        if not await ended(self.services, self.record.sub_threads):
            return
        try:
            await self.write(agents_done(self.record))
        except StoreConflict:  # a sub-run's end settled it meanwhile
            pass

    def _span(self, message: Entry, thread: ToolThread) -> CallSpan:
        """The span of this entry; for a resume, after the span of the wait it ends (its
        suspension or approval, recorded once: not again by a restarted incarnation)."""
        signal = self.address.controller.signal
        restarts = self.address.restarts
        if isinstance(message, Start):
            return call_span(self.trace, thread, signal, restarts=restarts)
        action_id = message.action.action_id
        waited = None if restarts else suspension(self.trace, self.record, action_id)
        return call_span(
            self.trace,
            thread,
            signal,
            entry="resume" if self.record.episodes else "initial",
            action_id=action_id,
            restarts=restarts,
            links=(waited,),
        )

    async def _failed(self, exc: Exception, thread: ToolThread) -> Step:
        """The call's outcome when ``execute`` (or what runs around it: resume-time parsing,
        ``map_context``, a child's hook) raised ``exc``: ``output-error`` with its text."""
        self.span.failed(exc)
        return finish_exception(self.record, await self.services.error_text(exc, thread))

    def _parsed_input(self, spec: CallSpec) -> Any:
        """The stored input as the tool's input schema parses it (for a re-entry)."""
        if spec.input is None:
            return self.record.input
        return spec.input.parse(self.record.input, what="input")

    def _resume_entry(self, spec: CallSpec, message: Resume) -> ResumeEntry:
        """The entry of the accepted submission ``message`` carries: its payload as the
        suspension's resume schema parses it, and its action."""
        name = message.action.suspend_name
        assert name is not None, "a suspension's action has its suspend name"
        schemas = spec.suspend.get(name)
        payload = message.payload
        resume = payload if schemas is None else schemas[1].parse(payload, what="resume")
        return ResumeEntry(name, resume, message.action)

    async def _execute(
        self,
        entry: InitialEntry | ResumeEntry,
        spec: CallSpec,
        tool_input: Any,
        thread: ToolThread,
        started: str | None = None,
    ) -> Step:
        """Run ``execute`` from ``entry``; ``started``: the accepted action it goes on from
        (recorded as started right before ``execute``, with no checkpoint in between)."""
        services = self.services
        registration = self.live.agent.tools.get(self.record.name)
        assert registration is not None
        assert registration.tool.execute is not None
        context = await tool_context(services, self.live, registration)
        self.sub_runs = SubRuns(services, self.live, self)
        ctx = call_context(
            services,
            self.live,
            agent_id=self.live.agent_id,
            thread=thread,
            signal=self.address.controller.signal,
            input=tool_input,
            context=context,
            data=ToolDataWriter(self._write_data, self._list_data),
            agents=AgentRunner(services.agents, self.sub_runs),
            entry=entry,
            suspend_history=[episode_view(e).to_wire() for e in self.record.episodes],
        )
        if registration.tool.tools:
            return await self._execute_with_children(registration, ctx, spec, started)
        if started is not None:  # a re-entry: started, durably, before ``execute`` runs
            await self._start_entry(started)  # no checkpoint between this and execute
        try:
            result = await invoke(services, self.live, registration.tool, ctx)
        except Exception as exc:
            return await self._failed(exc, thread)
        except BaseException as exc:
            return await self._stopped(exc, thread)
        return self._outcome(result, spec)

    async def _stopped(self, exc: BaseException, thread: ToolThread) -> Step:
        """``execute`` raised ``exc``, not an ``Exception``: when it stopped for its sub-runs
        (:class:`SubRunWaiting`, alone or in a group with the tool's own failures), the call
        waits for them (or fails with those failures); anything else (a cancellation) goes
        on up."""
        if isinstance(exc, SubRunWaiting):
            return Step(await_agents(self.record), ())
        if isinstance(exc, BaseExceptionGroup):
            waiting, rest = exc.split(SubRunWaiting)
            if waiting is not None and rest is None:
                return Step(await_agents(self.record), ())
            if waiting is not None and isinstance(rest, Exception):
                return await self._failed(rest, thread)
        raise exc

    async def _execute_with_children(
        self,
        registration: ToolRegistration,
        ctx: ToolContext,
        spec: CallSpec,
        started: str | None,
    ) -> Step:
        """``execute`` of a tool with children: each child's registration resolved once
        first (a failure: the parent never starts), the children run as actors under a
        supervisor that lives as long as this invocation (see ``_runtime.children``)."""
        live = self.live
        name = self.record.name
        children = child_registrations(registration.tool.tools)
        states = await resolve_children(
            name,
            registration,
            context=ctx.context,
            identity=live.identity,
            client_data=live.client_data,
            invocation=True,
        )
        infos = await describe_children(
            name,
            registration,
            context=ctx.context,
            states=states,
            identity=live.identity,
            client_data=live.client_data,
            invocation=True,
        )
        async with open_supervisor(name="children") as supervisor:
            calls = ChildCalls(
                self.services,
                live,
                ctx.thread,
                parent_context=ctx.context,
                registrations=children,
                enabled=states,
                infos=infos,
                supervisor=supervisor,
                parent_address=self.address,
                trace=self.span.children(),
                agents=ctx.agents,
            )
            if started is not None:  # a re-entry: started, durably, before ``execute`` runs
                await self._start_entry(started)  # no checkpoint between this and execute
            stopped: BaseException | None = None
            try:
                result = await invoke(
                    self.services, live, registration.tool, replace(ctx, tools=calls.map)
                )
            except Exception as exc:
                result = exc
            except (SubRunWaiting, BaseExceptionGroup) as exc:
                stopped = result = exc
            finally:
                calls.close(_PARENT_RETURNED)  # an Abort to each child it did not await
                supervisor.cancel(_PARENT_RETURNED)
        if calls.fatal is not None:  # a child's lifecycle hook failed: fatal to the parent
            result = calls.fatal
        elif stopped is not None:
            return await self._stopped(stopped, ctx.thread)
        if isinstance(result, Exception):
            return await self._failed(result, ctx.thread)
        return self._outcome(result, spec)

    def _outcome(self, result: Any, spec: CallSpec) -> Step:
        """The step for what ``execute`` returned: a suspension, a failure or an output."""
        services = self.services
        if isinstance(result, ToolSuspendResult):
            now = services.now()
            deadline = result.deadline
            if deadline is None:  # the point's own, if it declares one
                registration = self.live.agent.tools.get(self.record.name)
                point = None if registration is None else registration.tool.config.suspend
                declared = None if point is None else point.get(result.name)
                deadline = None if declared is None else declared.deadline
            return suspend(
                self.record,
                spec,
                result.name,
                result.input,
                # Derived from the call, not drawn from new_id: unique in the thread and the
                # same on every run of a test, whatever order trio runs concurrent calls in.
                action_id=f"{self.record.tool_call_id}.{len(self.record.episodes) + 1}",
                at=now,
                expires_at=deadline_at(now, deadline),
            )
        if isinstance(result, ToolFailResult):
            return finish_failure(self.record, tool_failure_details(result)["message"])
        return finish_output(self.record, spec, result)

    def _new_data_id(self) -> str:
        return self.services.new_id("data", self.call.thread_id, self.record.tool_call_id)

    async def _write_data(
        self, name: str, value: object, item_id: str | None, transient: bool
    ) -> None:
        schemas = self.live.agent.tools[self.record.name].tool._schemas.data
        schema = schemas.get(name)
        if schema is None:
            declared = ", ".join(map(repr, schemas)) or "none"
            raise ValueError(
                f"tool {self.record.name!r} has no data channel {name!r} (declared: "
                f"{declared}); declare it in define_tool(data_schemas=...)"
            )
        what = f"data[{name!r}]"
        dumped = schema.dump(schema.parse(value, what=what), what=what)
        item_id = item_id or self._new_data_id()
        at = self.services.now()
        if not transient:
            async with self.lock:  # (the record as it is once the lock is ours)
                step = write_data(self.record, name, dumped, item_id=item_id, at=at)
                await self.write(step.record)
            return
        step = write_data(self.record, name, dumped, item_id=item_id, at=at, transient=True)
        for effect in step.effects:
            if isinstance(effect, DataWritten):
                self.services.publish(
                    ToolDataUpdated(
                        thread_id=self.call.thread_id,
                        tool_call_id=self.record.tool_call_id,
                        channel=effect.channel,
                        item=ToolDataItem(
                            id=effect.item.id,
                            value=effect.item.value,
                            updated_at=effect.item.updated_at,
                        ),
                    )
                )

    async def _list_data(self, name: str) -> list[ToolDataItem]:
        return await self.services.store.list_tool_data(
            self.call.thread_id, self.record.tool_call_id, name
        )
