"""The run and tool-call actors: the trio shell around the pure tool-call core.

A run is an actor under the runtime's root supervisor; it opens a ``calls`` supervisor, so
each tool call is a temporary actor under its run, and cancelling a run (its cancel scope)
cancels its calls. A call actor writes each new :class:`CallRecord` with its tool part in one
store transaction before acting on the effects. A suspended call's actor exits (passivation:
the record is durable).

An accepted submission is durable intent: the call is stored ``executing`` with its latest
episode ``submitted`` (and no result). The runtime only wakes the run (:class:`CallChanged`);
the run actor, each time it looks at its calls (when it starts, also after an activation in a
new runtime, and after each message), spawns a resume actor for every such call of the run
that has no live actor (``LiveRun.live_calls``: nothing is spawned twice). A resume actor
re-reads its call and does nothing unless it still is such a call.

The run actor is the only writer of its run record. Its mailbox receives :class:`CallChanged`;
after each it re-reads its run's calls from the store and continues when all of its step's
are done, or marks itself ``waiting`` when none is running.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, replace
from typing import Any

import trio

from supervisors import Mailbox, Supervisor, open_supervisor

from .._core.actions import PendingActionRef
from .._core.call_record import CallRecord, CallSpec, DataWritten
from .._core.calls import (
    Step,
    abandon_call,
    cancel_call,
    episode_view,
    finish_exception,
    finish_failure,
    finish_output,
    not_offered,
    start_entry,
    suspend,
    unstart_entry,
    write_data,
)
from .._core.errors import StoreConflict
from .._core.model import ModelRequest
from .._core.parts import ToolDataItem
from .._core.records import StoredCall
from .._core.state import RunStatus
from .._core.trigger import is_notification
from .._core.updates import ToolDataUpdated
from .._tools.agent import RuntimeScope
from .._tools.context import (
    AbortController,
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
from .children import ChildCalls, child_registrations
from .history import model_messages
from .invoke import call_context, invoke
from .live import LiveRun, RunMessage
from .prepare import (
    describe_children,
    prepare_tools,
    resolve_children,
    resolve_runtime_context,
)
from .run_io import (
    RUNTIME_CLOSING,
    needs_observing,
    observe_output,
    read_step,
    stage_call,
    tool_context,
    write_call,
)
from .services import Services

CLEANUP_SECONDS = 10.0
_PARENT_RETURNED = "the parent call returned"
_log = logging.getLogger("pai_actors")


@dataclass(frozen=True, slots=True)
class StartCall:
    """A call actor's message: run ``execute`` from its initial entry with ``input``, the
    parsed input (already validated when the model step was stored)."""

    input: Any


@dataclass(frozen=True, slots=True)
class ResumeCall:
    """A call actor's message: re-enter ``execute`` with a resume entry built from the
    call's accepted submission, as stored when the actor reads it (none: nothing to do)."""


CallMessage = StartCall | ResumeCall
"""What a call actor's mailbox receives: its entry. An abort is not a message queued
behind it: it cancels the actor at once (the call's :class:`AbortController`, then the run's
cancel scope), and the run records the call."""


def resumable(record: CallRecord, action_id: str | None = None) -> bool:
    """Whether ``record`` is an accepted submission whose resume has not run to a result:
    ``executing`` after a ``submitted`` episode, or after an approval with no episode yet
    (that of ``action_id``, if given); see ``CallRecord.resume_action_id``."""
    resume = record.resume_action_id
    return resume is not None and (action_id is None or resume == action_id)


async def run_actor(services: Services, live: LiveRun, mailbox: Mailbox[RunMessage]) -> None:
    """Drive one run until the model answers without tool calls, or it is cancelled."""
    failure: str | None = None
    try:
        with live.scope:
            async with open_supervisor(name="calls") as calls:
                live.calls = calls
                try:
                    await _loop(services, live, calls, mailbox)
                except Exception as exc:  # the model or the tools' preparation failed
                    failure = str(exc) or repr(exc)
                    for controller in list(live.controllers):
                        controller.abort("the run failed")
                    live.scope.cancel()  # stop its calls; they are recorded below
        if failure is not None:
            with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                await record_cancelled(services, live.thread_id, live.run_id, "the run failed")
                await _set_status(services, live, "failed", error=failure)
        elif live.scope.cancelled_caught or live.cancelling:  # (cancelled while passivating)
            with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                await record_cancelled(services, live.thread_id, live.run_id, live.cancel_reason)
                await _set_status(services, live, "cancelled")
    except BaseException:
        if not services.closing():
            raise
        # The runtime is closing (trio.Cancelled, perhaps inside a group from the calls'
        # supervisor). A run cancel_run is cancelling is recorded cancelled, as that call
        # promises. Otherwise: record the running calls, keep the pending ones, and
        # re-raise. A run that was waiting on its calls stays active, for the next runtime
        # to go on with (even once every call is done: an accepted submission the model has
        # not seen yet); one in the middle of a model step is cancelled unless a pending
        # call is kept.
        if live.cancelling:
            with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                await record_cancelled(services, live.thread_id, live.run_id, live.cancel_reason)
                await _set_status(services, live, "cancelled")
            raise
        parked = not live.stepping
        with trio.move_on_after(CLEANUP_SECONDS, shield=True):
            if live.handoff is not None:  # a suspension the run had yet to write: keep it
                with contextlib.suppress(StoreConflict):  # (its commit landed after all)
                    await _write_handoff(services, live, live.handoff)
            pending = await record_cancelled(
                services,
                live.thread_id,
                live.run_id,
                RUNTIME_CLOSING,
                keep_pending=True,
                started=live.resumes_started,
            )
            # "waiting": no process runs it now; it goes on when a runtime loads the thread.
            await _set_status(services, live, "waiting" if pending or parked else "cancelled")
        raise
    finally:
        services.run_ended(live)


async def _loop(
    services: Services, live: LiveRun, calls: Supervisor, mailbox: Mailbox[RunMessage]
) -> None:
    agent = live.agent
    thread = live.thread
    scope = RuntimeScope(thread.scope_key, thread.user_key, thread.thread_id, live.identity)
    if not live.context_resolved:
        live.runtime_context = await resolve_runtime_context(agent, scope)
        live.context_resolved = True
    if live.resume_message_id is not None and not await _wait_calls(
        services, live, calls, mailbox, live.resume_message_id
    ):
        return  # passivated
    while True:
        message_id = await _step(services, live, calls)
        if message_id is None:
            return  # completed
        if not message_id:
            continue  # a notification arrived during the step: another step answers it
        if not await _wait_calls(services, live, calls, mailbox, message_id):
            return  # passivated


async def _step(services: Services, live: LiveRun, calls: Supervisor) -> str | None:
    """One model step: its request, its response stored, its calls spawned. Returns the
    message id whose calls to wait on, ``None`` once the run completed, or ``""`` when it
    must step again. (A function of its own so that the request, the history and the
    prepared tools are garbage once the step is stored, not kept while the run waits.)"""
    agent = live.agent
    thread_id = live.thread_id
    live.stepping = True
    await _set_status(services, live, "running")
    prepared = await prepare_tools(
        agent,
        runtime_context=live.runtime_context,
        identity=live.identity,
        client_data=live.client_data,
        client_tools=live.client_tools,
    )
    messages = await services.store.list_messages(thread_id)
    seen = {m.id for m in messages}
    history = await model_messages(messages, agent.tools)
    request = ModelRequest(agent.instructions, history, dict(prepared.tools))
    message_id = services.new_id("msg", thread_id)
    stored = await read_step(services, live, request, message_id, prepared.client_tools)
    live.stepping = False
    services.message_index[message_id] = (live.thread_id, live.run_id)
    if not stored and live.run.status == "completed":  # stored with its final answer
        services.notify(live.thread_id)
        return None
    if not stored:
        # A notification (ctx.trigger) that arrived during this step was not in its
        # request: the run goes on to another step rather than leave it unanswered.
        if services.notified(thread_id):  # only then can there be one it did not see
            latest = await services.store.list_messages(thread_id)
            if any(is_notification(m) and m.id not in seen for m in latest):
                return ""
        await _set_status(services, live, "completed")
        return None
    for call, tool_input in stored:
        if call.record.phase == "executing":
            _spawn_call(services, live, calls, call, StartCall(tool_input))
    return message_id


async def _wait_calls(
    services: Services,
    live: LiveRun,
    calls: Supervisor,
    mailbox: Mailbox[RunMessage],
    message_id: str,
) -> bool:
    """Return ``True`` once every call of the message ``message_id`` is done (and observed),
    or ``False`` when the run passivates: nothing of it runs and it waits only on pending
    actions, so its actor ends, leaving the stored run ``waiting`` (a submission, or loading
    the thread, activates it again from the store).

    Each look spawns a resume actor for every accepted submission of the run without one,
    and runs ``on_output`` for every output no actor observed (a submitted output, or one
    whose observation a closing runtime cut short). ``live.busy`` is clear only while the
    run waits for its next message, so ``wait_idle`` never sees a look half done.
    """
    while True:
        live.busy = True
        live.changed = False
        handoff = live.handoff  # cleared once written (a closing run writes it otherwise)
        run_calls = [
            c for c in await services.store.list_calls(live.thread_id) if c.run_id == live.run_id
        ]
        if handoff is not None:  # judge the run by the suspension, as it will be stored
            record = handoff[1]
            run_calls = [
                c.model_copy(update={"record": record})
                if c.record.tool_call_id == record.tool_call_id
                else c
                for c in run_calls
            ]
        for call in run_calls:
            if call.record.tool_call_id in live.live_calls:
                continue
            if resumable(call.record):
                _spawn_call(services, live, calls, call, ResumeCall())
            elif needs_observing(live, call.record):
                await observe_output(services, live, call)
        if live.active_calls == 0 and not live.changed:
            step_calls = [c for c in run_calls if c.message_id == message_id]
            if all(c.record.phase == "done" for c in step_calls):
                if handoff is not None:  # (a call of an earlier message)
                    await _write_handoff(services, live, handoff)
                return True
            await _set_status(services, live, "waiting", handoff=handoff)
            if handoff is not None:
                live.handoff = handoff = None
            if live.active_calls == 0 and not live.changed:  # still: nothing to do but wait
                live.passivated = True
                live.waiting_message_id = message_id
                return False
        if handoff is not None:  # the run does not wait yet: the suspension is written alone
            await _write_handoff(services, live, handoff)
        if live.active_calls > 0 and live.status == "waiting":  # a resume runs
            await _set_status(services, live, "running")
        live.busy = False
        services.notify(live.thread_id)
        await mailbox.receive()


async def _write_handoff(
    services: Services, live: LiveRun, handoff: tuple[StoredCall, CallRecord]
) -> None:
    """Write a call's last record that its actor left to the run (see ``_CallDriver.run``)."""
    await write_call(services, *handoff)
    live.handoff = None


async def _set_status(
    services: Services,
    live: LiveRun,
    status: RunStatus,
    *,
    error: str | None = None,
    handoff: tuple[StoredCall, CallRecord] | None = None,
) -> None:
    """Record the run's ``status`` (and ``handoff``, a call's last write, with it)."""
    if live.run.status != status or live.run.error != error or handoff is not None:
        async with services.transaction() as tx:
            if handoff is not None:
                stage_call(tx, *handoff)
            staged = tx.put_run(live.run.model_copy(update={"status": status, "error": error}))
        live.run = staged  # only once committed: a conflict leaves the old revision
    if status in ("running", "waiting"):
        live.status = status
    services.notify(live.thread_id)


async def record_cancelled(
    services: Services,
    thread_id: str,
    run_id: str,
    reason: str | None,
    *,
    keep_pending: bool = False,
    started: frozenset[str] | set[str] = frozenset(),
    end_run: bool = False,
) -> bool:
    """Record every unfinished call of the run as cancelled (with ``keep_pending``, only the
    running ones); return whether a pending call was kept. With ``end_run``, the run is
    recorded cancelled in the same commit, unless it is over (then nothing is written).

    With ``keep_pending``, an accepted submission (:func:`resumable`) whose resume has not
    begun ``execute`` (its action id is not in ``started``) is kept too: a later runtime resumes it.

    All of them are written in one transaction (a run of ten thousand calls is one commit);
    if a call changed meanwhile (a submission resolved it), the calls are read and judged
    again.
    """
    while True:
        run = await services.store.get_run(run_id) if end_run else None
        if end_run and (run is None or not run.active):
            return False
        kept = False
        cancelled: list[tuple[StoredCall, CallRecord]] = []
        for call in await services.store.list_calls(thread_id):
            record = call.record
            if call.run_id != run_id or record.phase == "done":
                continue
            reentry = record.reentry_action_id
            if keep_pending and (
                record.phase in ("suspended", "awaiting_output", "awaiting_approval")
                or resumable(record)
                or (reentry is not None and reentry not in started)
            ):
                kept = True
                if record.phase == "executing" and record.entry_started:  # never began
                    cancelled.append((call, unstart_entry(record)))
                continue
            cancelled.append((call, cancel_call(record, reason, at=services.now()).record))
        try:
            async with services.transaction() as tx:
                for call, record in cancelled:
                    stage_call(tx, call, record)
                if run is not None:
                    tx.put_run(run.model_copy(update={"status": "cancelled"}))
        except StoreConflict:  # a call (or the run) changed meanwhile: judge them all again
            continue
        return kept


def action_ref(call: StoredCall, action_id: str, suspend_name: str | None) -> PendingActionRef:
    record = call.record
    return PendingActionRef(
        thread_id=call.thread_id,
        tool_name=record.name,
        suspend_name=suspend_name,
        message_id=call.message_id,
        tool_call_id=record.tool_call_id,
        run_id=call.run_id,
        action_id=action_id,
        name=record.action_name(suspend_name),
    )


def _spawn_call(
    services: Services,
    live: LiveRun,
    calls: Supervisor,
    call: StoredCall,
    message: CallMessage,
) -> None:
    """Start ``call`` as a temporary actor under the run and send it ``message``, its entry.

    One actor per activation of the call: it ends when the call suspends (passivation: the
    stored record is all that remains) or finishes; a resume starts a new one.
    """
    tool_call_id = call.record.tool_call_id
    controller = AbortController()

    async def tool_call(mailbox: Mailbox[CallMessage]) -> None:
        driver = _CallDriver(services, live, call, controller)
        try:
            await driver.run(await mailbox.receive())
        except Exception as exc:  # a bug or a store failure: never leave the call unrecorded
            _log.exception("the actor of call %r failed", tool_call_id)
            await _record_crash(services, driver, exc)
        finally:
            live.controllers.discard(controller)
            live.live_calls.discard(tool_call_id)
            live.active_calls -= 1
            live.wake()

    live.controllers.add(controller)
    live.live_calls.add(tool_call_id)
    live.active_calls += 1
    try:
        ref = calls.spawn(tool_call, restart="temporary", capacity=1)
        ref.tell_nowait(message)
    except BaseException:
        live.controllers.discard(controller)
        live.live_calls.discard(tool_call_id)
        live.active_calls -= 1
        raise


async def _record_crash(services: Services, driver: _CallDriver, exc: Exception) -> None:
    """End a call whose actor failed unexpectedly in ``output-error`` (if it is unfinished)."""
    with trio.move_on_after(CLEANUP_SECONDS, shield=True):
        try:
            call = await services.store.get_call(driver.call.thread_id, driver.call.tool_call_id)
            if call is None:
                return
            text = f"the tool call failed inside the runtime: {exc!r}"
            step = abandon_call(call.record, text, at=services.now())
            if step.record != call.record:
                await write_call(services, call, step.record)
        except Exception:  # the store fails too: the run's cancel or close records it
            _log.exception("recording the failure of call %r failed", driver.record.tool_call_id)


class _CallDriver:
    """One activation of a call: from its entry to its next suspension or its end."""

    def __init__(
        self, services: Services, live: LiveRun, call: StoredCall, controller: AbortController
    ) -> None:
        self.services = services
        self.live = live
        self.call = call
        self.controller = controller

    @property
    def record(self) -> CallRecord:
        return self.call.record

    async def write(self, record: CallRecord) -> None:
        self.call = await write_call(self.services, self.call, record)

    async def run(self, message: CallMessage) -> None:
        services = self.services
        if isinstance(message, ResumeCall):  # only of a submission still waiting for it
            current = await services.store.get_call(self.call.thread_id, self.record.tool_call_id)
            if current is None or not resumable(current.record):
                return
            self.call = current
        spec = services.spec_for(self.call, self.live.agent)
        if spec is None:  # no longer registered (loading refuses such threads; a safety net)
            offered = list(self.live.agent.tools)
            await self.write(not_offered(self.record, offered).record)
            return
        thread = ToolThread(
            self.live.thread_id, self.live.run_id, self.record.tool_call_id, self.record.name
        )
        # Everything from here is inside this handler: an exception
        # (resume-time parsing, ``map_context``, ``execute``, a malformed result) ends the
        # call in ``output-error`` and the run goes on; only cancellation propagates.
        try:
            if isinstance(message, StartCall):
                step = await self._execute(InitialEntry(), spec, message.input, thread)
            elif not self.record.episodes:  # approved, or re-run: its first execution
                started = self.record.resume_action_id
                parsed = self._parsed_input(spec)
                step = await self._execute(InitialEntry(), spec, parsed, thread, started)
            else:
                entry = self._resume_entry(spec)
                started = entry.action.action_id
                parsed = self._parsed_input(spec)
                step = await self._execute(entry, spec, parsed, thread, started)
        except Exception as exc:
            step = finish_exception(self.record, await services.error_text(exc, thread))
        live = self.live
        if step.record.phase == "suspended" and live.active_calls == 1 and live.handoff is None:
            # The run's last live call stops at a suspension, so the run is about to wait:
            # the run writes the suspension with its "waiting", in one commit (it writes it
            # alone if it does not wait after all; a closing runtime's run keeps it).
            live.handoff = (self.call, step.record)
            live.changed = True  # look again before waiting or passivating
            return
        await self.write(step.record)
        self.call = await observe_output(services, self.live, self.call)

    def _parsed_input(self, spec: CallSpec) -> Any:
        """The stored input as the tool's input schema parses it (for a re-entry)."""
        if spec.input is None:
            return self.record.input
        return spec.input.parse(self.record.input, what="input")

    def _resume_entry(self, spec: CallSpec) -> ResumeEntry:
        """The entry of the stored call's accepted submission (its latest episode)."""
        episode = self.record.episodes[-1]
        schemas = spec.suspend.get(episode.name)
        resume = (
            episode.resume if schemas is None else schemas[1].parse(episode.resume, what="resume")
        )
        ref = action_ref(self.call, episode.action_id, episode.name)
        return ResumeEntry(episode.name, resume, ref)

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
        ctx = call_context(
            services,
            self.live,
            agent_id=self.live.agent_id,
            thread=thread,
            signal=self.controller.signal,
            input=tool_input,
            context=context,
            data=ToolDataWriter(self._write_data, self._list_data),
            entry=entry,
            suspend_history=[episode_view(e).to_wire() for e in self.record.episodes],
        )
        if registration.tool.tools:
            return await self._execute_with_children(registration, ctx, spec, started)
        if started is not None:  # a re-entry: started, durably, before ``execute`` runs
            await self.write(start_entry(self.record))
            self.live.resumes_started.add(started)  # no checkpoint between this and execute
        try:
            result = await invoke(services, self.live, registration.tool, ctx)
        except Exception as exc:
            return finish_exception(self.record, await services.error_text(exc, thread))
        return self._outcome(result, spec)

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
                parent_signal=ctx.signal,
            )
            if started is not None:  # a re-entry: started, durably, before ``execute`` runs
                await self.write(start_entry(self.record))
                live.resumes_started.add(started)  # no checkpoint between this and execute
            try:
                result = await invoke(
                    self.services, live, registration.tool, replace(ctx, tools=calls.map)
                )
            except Exception as exc:
                result = exc
            finally:
                calls.close(_PARENT_RETURNED)  # children it did not await: aborted, then
                supervisor.cancel(_PARENT_RETURNED)  # cancelled in the same moment
        if calls.fatal is not None:  # a child's lifecycle hook failed: fatal to the parent
            result = calls.fatal
        if isinstance(result, Exception):
            return finish_exception(self.record, await self.services.error_text(result, ctx.thread))
        return self._outcome(result, spec)

    def _outcome(self, result: Any, spec: CallSpec) -> Step:
        """The step for what ``execute`` returned: a suspension, a failure or an output."""
        services = self.services
        if isinstance(result, ToolSuspendResult):
            return suspend(
                self.record,
                spec,
                result.name,
                result.input,
                # Derived from the call, not drawn from new_id: unique in the thread and the
                # same on every run of a test, whatever order trio runs concurrent calls in.
                action_id=f"{self.record.tool_call_id}.{len(self.record.episodes) + 1}",
                at=services.now(),
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
        step = write_data(
            self.record,
            name,
            dumped,
            item_id=item_id
            or self.services.new_id("data", self.call.thread_id, self.record.tool_call_id),
            at=self.services.now(),
            transient=transient,
        )
        if not transient:
            await self.write(step.record)
            return
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
