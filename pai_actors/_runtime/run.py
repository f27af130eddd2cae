"""The run actor: the trio shell that drives one run's model steps and its calls.

A run is an actor under the runtime's root supervisor; it opens a ``calls`` supervisor, so
each tool call is an actor under its run (``_runtime.call``; restarted after a failure that
is not the tool's, at most ``RESTART_INTENSITY`` times within ``RESTART_PERIOD``: past that the
run fails). Every way a run ends early (``cancel_run``, a failure, the runtime closing) sends
each of its live calls an ``Abort`` (``LiveRun.abort_calls``) and then cancels the run's
scope; the run records every unfinished call in one commit with its own status.

An accepted submission is durable intent: the call is stored ``executing`` with its latest
episode ``submitted`` (and no result). The submitter, once that is written, wakes the run
(or has it activated when it has no actor); the run actor, each time it looks at its calls
(when it starts, also after an activation in a new runtime, and after each message), spawns
an actor for every such call of the run that has none (``LiveRun.addresses``: nothing is
spawned twice) and sends it the ``Resume`` the stored call stands for
(``_runtime.call.resume_of``): the message is always its durable form, so a restart cannot
lose it and a second look cannot send it twice.

The run actor is the only writer of its run record. Its mailbox receives :class:`CallChanged`;
after each it re-reads its run's calls from the store and continues when all of its step's
are done, or marks itself ``waiting`` when none is running.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import trio

from supervisors import Mailbox, RestartIntensityExceeded, Supervisor, open_supervisor

from .._core.call_record import ActionResolved, CallRecord
from .._core.calls import cancel_call, unstart_entry
from .._core.errors import AgentRunError, StoreConflict, ThreadOwnedElsewhere
from .._core.model import ModelRequest
from .._core.parts import message_steps
from .._core.records import StoredCall
from .._core.state import RunStatus
from .._core.trigger import is_notification
from .._core.wire import updated
from .._tools.agent import RuntimeScope
from .address import Start
from .call import (
    RESTART_INTENSITY,
    RESTART_PERIOD,
    resumable,
    resume_of,
    spawn_call,
)
from .history import model_messages
from .live import LiveRun, RunActorPhase, RunMessage
from .prepare import prepare_tools, resolve_runtime_context
from .run_io import (
    RUN_FAILED,
    RUNTIME_CLOSING,
    needs_observing,
    observe_output,
    read_step,
    stage_call,
    step_settings,
    write_call,
)
from .services import Services
from .tracing import RunTrace, call_parent, end_run, model_step, start_run, suspension

_log = logging.getLogger("pai_actors.runtime")

CLEANUP_SECONDS = 10.0


async def run_actor(services: Services, live: LiveRun, mailbox: Mailbox[RunMessage]) -> None:
    """Drive one run until the model answers without tool calls, or it is cancelled."""
    trace: RunTrace | None = None
    failure: str | None = None
    error: BaseException | None = None
    try:
        trace = start_run(live, services.now)  # None unless OpenTelemetry is set up
        with live.scope:
            try:
                async with open_supervisor(
                    name="calls", intensity=RESTART_INTENSITY, period=RESTART_PERIOD
                ) as calls:
                    live.calls = calls
                    try:
                        await _loop(services, live, calls, mailbox, trace)
                    except Exception as exc:  # the model or the tools' preparation failed
                        failure, error = str(exc) or repr(exc), exc
                        live.abort_calls(RUN_FAILED)
                        live.scope.cancel()  # stop the run; its calls are recorded below
            except RestartIntensityExceeded as exc:  # a call's actor kept failing
                failure, error = _gave_up(live, exc), exc
        if failure is not None:
            with trio.move_on_after(CLEANUP_SECONDS, shield=True), _unless_taken_over(live):
                await record_cancelled(
                    services, live.thread_id, live.run_id, RUN_FAILED, trace=trace
                )
                await _set_status(services, live, "failed", error=failure)
        # (cancel_run may have come as it passivated: its scope then caught nothing)
        elif live.scope.cancelled_caught or services.is_cancelling(live.run_id):
            with trio.move_on_after(CLEANUP_SECONDS, shield=True), _unless_taken_over(live):
                await record_cancelled(
                    services, live.thread_id, live.run_id, live.cancel_reason, trace=trace
                )
                await _set_status(services, live, "cancelled")
    except BaseException as exc:
        error = exc
        if not services.closing():
            raise
        # The runtime is closing (trio.Cancelled, perhaps inside a group from the calls'
        # supervisor). A run cancel_run is cancelling is recorded cancelled, as that call
        # promises. Otherwise: record the running calls, keep the pending ones, and
        # re-raise. A run that was waiting on its calls stays active, for the next runtime
        # to go on with (even once every call is done: an accepted submission the model has
        # not seen yet); one in the middle of a model step is cancelled unless a pending
        # call is kept.
        if services.is_cancelling(live.run_id):
            with trio.move_on_after(CLEANUP_SECONDS, shield=True), _unless_taken_over(live):
                await record_cancelled(
                    services, live.thread_id, live.run_id, live.cancel_reason, trace=trace
                )
                await _set_status(services, live, "cancelled")
            raise
        parked = not live.stepping
        with trio.move_on_after(CLEANUP_SECONDS, shield=True), _unless_taken_over(live):
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
        try:
            if trace is not None:
                closing = RUNTIME_CLOSING if services.closing() else None
                end_run(trace, live, failure=failure, error=error, reason=closing)
        finally:
            services.run_ended(live)


@contextlib.contextmanager
def _unless_taken_over(live: LiveRun) -> Iterator[None]:
    """What a run records as it ends, unless another node took its thread over meanwhile
    (its lease lapsed): that node records what is left, this one writes nothing more."""
    try:
        yield
    except ThreadOwnedElsewhere:
        _log.info("run %r ended here after another node took its thread over", live.run_id)


def _gave_up(live: LiveRun, exc: RestartIntensityExceeded) -> str:
    """The run's error when its ``calls`` supervisor gave up: which call kept failing, and
    how (its last failure)."""
    failing = max(live.addresses.values(), key=lambda a: a.restarts, default=None)
    if failing is None or failing.failure is None:
        return str(exc)
    return (
        f"the tool call {failing.key!r} failed inside the runtime {failing.restarts} times "
        f"(the last time with {failing.failure!r}); its run restarts its calls at most "
        f"{RESTART_INTENSITY} times within {RESTART_PERIOD:g}s, so the run failed. Fix what "
        "the error names (the store or its connection), then send the request again"
    )


async def _loop(
    services: Services,
    live: LiveRun,
    calls: Supervisor,
    mailbox: Mailbox[RunMessage],
    trace: RunTrace | None,
) -> None:
    agent = live.agent
    thread = live.thread
    scope = RuntimeScope(thread.scope_key, thread.user_key, thread.thread_id, live.identity)
    if not live.context_resolved:
        live.runtime_context = await resolve_runtime_context(agent, scope)
        live.context_resolved = True
    if live.resume_message_id is not None and not await _wait_calls(
        services, live, calls, mailbox, live.resume_message_id, trace
    ):
        return  # passivated
    while True:
        message_id = await _step(services, live, calls, trace)
        if message_id is None:
            return  # completed
        if not message_id:
            continue  # a notification arrived during the step: another step answers it
        if not await _wait_calls(services, live, calls, mailbox, message_id, trace):
            return  # passivated


async def _step(
    services: Services, live: LiveRun, calls: Supervisor, trace: RunTrace | None
) -> str | None:
    """One model step: its request, its response stored, its calls spawned. Returns the
    message id whose calls to wait on, ``None`` once the run completed, or ``""`` when it
    must step again. (A function of its own so that what the step was asked with is garbage
    once it is stored, not kept while the run waits.)"""
    agent = live.agent
    thread_id = live.thread_id
    live.phase = RunActorPhase.STEPPING
    await _set_status(services, live, "running")
    prepared = await prepare_tools(
        agent,
        runtime_context=live.runtime_context,
        identity=live.identity,
        client_data=live.client_data,
        client_tools=live.client_tools,
    )
    messages = await services.store.list_messages(thread_id)
    max_steps = live.run.max_steps
    taken = sum(len(message_steps(m.parts)) for m in messages if m.role == "assistant")
    if max_steps is not None and taken >= max_steps:
        raise AgentRunError(
            f"agent {live.agent_id!r} did not answer within {max_steps} model steps; raise "
            "max_steps or give it a clearer task",
            agent_id=live.agent_id,
        )
    history = await model_messages(messages, agent.tools)
    request = ModelRequest(agent.instructions, history, dict(prepared.tools), step_settings(live))
    # A turn is one assistant message: a step after another step of the run continues it;
    # after any other message (the run's prompt, a notification) it begins a new one.
    turn = messages[-1] if messages and messages[-1].role == "assistant" else None
    message_id = services.new_id("msg", thread_id) if turn is None else turn.id
    # Messages are kept in order (a replaced one keeps its place): those the step's
    # request did not have come after the first ``seen``.
    seen = len(messages)
    client_tools = prepared.client_tools
    with model_step(trace, live.model, request) as step:
        reading = read_step(services, live, request, turn, message_id, client_tools)
        # (the request is read_step's now: it drops it once the model answered, so neither
        # it, nor the history and the tools' schemas in it, is kept while the step is
        # written)
        del request, history, prepared, messages
        stored = await reading
    live.phase = RunActorPhase.LOOKING
    services.message_index[message_id] = (live.thread_id, live.run_id)
    if not stored and live.run.status == "completed":  # stored with its final answer
        services.notify(live.thread_id)
        return None
    if not stored:
        # A notification (ctx.trigger) that arrived during this step was not in its
        # request: the run goes on to another step rather than leave it unanswered.
        if services.notified(thread_id):  # only then can there be one it did not see
            latest = await services.store.list_messages(thread_id)
            if any(is_notification(m) for m in latest[seen:]):
                return ""
        await _set_status(services, live, "completed")
        return None
    parent = call_parent(trace, step)
    for call, tool_input in stored:
        if call.record.phase == "executing":
            spawn_call(services, live, calls, call, Start(tool_input), parent)
    return message_id


async def _wait_calls(
    services: Services,
    live: LiveRun,
    calls: Supervisor,
    mailbox: Mailbox[RunMessage],
    message_id: str,
    trace: RunTrace | None,
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
        live.phase = RunActorPhase.LOOKING
        live.changed = False
        handoff = live.handoff  # cleared once written (a closing run writes it otherwise)
        # (comprehensions in helpers: here, their variables would be cells, objects alive
        # for as long as the run waits, for the garbage collector to scan)
        run_calls = calls_of_run(await services.store.list_calls(live.thread_id), live.run_id)
        if handoff is not None:  # judge the run by the suspension, as it will be stored
            run_calls = _with_record(run_calls, handoff[1])
        for call in run_calls:
            tool_call_id = call.record.tool_call_id
            if tool_call_id in live.addresses:
                continue
            resume = resume_of(call)  # the Resume its accepted submission stands for
            if resume is not None:
                spawn_call(services, live, calls, call, resume, call_parent(trace))
            elif needs_observing(live, call.record):
                await observe_output(services, live, call)
        if live.active_calls == 0 and not live.changed:
            if _all_done(run_calls, message_id):
                if handoff is not None:  # (a call of an earlier message)
                    await _write_handoff(services, live, handoff)
                return True
            await _set_status(services, live, "waiting", handoff=handoff)
            if handoff is not None:
                live.handoff = handoff = None
            if live.active_calls == 0 and not live.changed:  # still: nothing to do but wait
                if await _kept_warm(services, live, mailbox):
                    continue  # a submission (or a change) came while it listened
                live.phase = RunActorPhase.PASSIVATED
                live.waiting_message_id = message_id
                return False
        if handoff is not None:  # the run does not wait yet: the suspension is written alone
            await _write_handoff(services, live, handoff)
        if live.active_calls > 0 and live.status == "waiting":  # a resume runs
            await _set_status(services, live, "running")
        live.phase = RunActorPhase.LISTENING
        services.notify(live.thread_id)
        del run_calls  # (garbage while the run waits for its next message: read again then)
        await mailbox.receive()


async def _kept_warm(services: Services, live: LiveRun, mailbox: Mailbox[RunMessage]) -> bool:
    """Keep the waiting run's actor (and its slot) listening for up to the runtime's
    ``keep_warm`` window, when recent pending actions were resolved that quickly
    (``_runtime.warm``): ``True`` once a message or change came, so the run looks again;
    ``False`` when it should passivate now (no window, or nothing came within it). Its
    state is already written (``waiting``): a close or a crash meanwhile loses nothing."""
    keep_warm = services.keep_warm
    seconds = keep_warm.window()
    if not seconds or services.closing():
        return False
    live.phase = RunActorPhase.LISTENING  # idle for wait_idle, as a passivated run is
    services.notify(live.thread_id)
    with trio.move_on_after(seconds):
        await mailbox.receive()
        return True
    live.phase = RunActorPhase.LOOKING
    if live.changed or live.active_calls:  # (woken as the window closed)
        return True
    keep_warm.went_cold()
    return False


def calls_of_run(calls: list[StoredCall], run_id: str) -> list[StoredCall]:
    """Those of ``calls`` made by the run ``run_id``."""
    return [c for c in calls if c.run_id == run_id]


def _with_record(calls: list[StoredCall], record: CallRecord) -> list[StoredCall]:
    """``calls``, the one of ``record`` with it."""
    return [
        updated(c, record=record) if c.record.tool_call_id == record.tool_call_id else c
        for c in calls
    ]


def _all_done(calls: list[StoredCall], message_id: str) -> bool:
    """Whether every call of the message ``message_id`` is done."""
    return all(c.record.phase == "done" for c in calls if c.message_id == message_id)


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
    while live.run.status != status or live.run.error != error or handoff is not None:
        try:
            async with services.transaction() as tx:
                if handoff is not None:
                    stage_call(tx, *handoff)
                staged = tx.put_run(updated(live.run, status=status, error=error))
        except StoreConflict:
            # A submission to the run while it was kept warm records it ``running`` in its
            # own commit (``_runtime.resolution``), and the run (woken by another, or
            # cancelled) may write before that submitter hands it the new revision: it
            # takes the newer revision of its still active run from the store and writes
            # over it (nothing when it is what it meant to write).
            stored = await services.store.get_run(live.run_id)
            if stored is None or not stored.active or stored.revision <= live.run.revision:
                raise
            live.run = stored
            continue
        live.run = staged  # only once committed: a conflict leaves the old revision
        break
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
    trace: RunTrace | None = None,
) -> bool:
    """Record every unfinished call of the run as cancelled (with ``keep_pending``, only the
    running ones); return whether a pending call was kept. With ``end_run``, the run is
    recorded cancelled in the same commit, unless it is over (then nothing is written).
    The actions this cancels end their waits' spans under ``trace`` (the run's activation).

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
        resolved: list[tuple[CallRecord, str]] = []  # the actions cancelled, for their spans
        for call in await services.store.list_calls(thread_id):
            record = call.record
            if call.run_id != run_id or record.phase == "done":
                continue
            reentry = record.reentry_action_id
            if keep_pending and (
                record.phase
                in ("suspended", "awaiting_output", "awaiting_approval", "awaiting_agents")
                or resumable(record)
                or (reentry is not None and reentry not in started)
            ):
                kept = True
                if record.phase == "executing" and record.entry_started:  # never began
                    cancelled.append((call, unstart_entry(record)))
                continue
            step = cancel_call(record, reason, at=services.now())
            cancelled.append((call, step.record))
            if trace is not None:
                resolved.extend(
                    (step.record, e.action_id)
                    for e in step.effects
                    if isinstance(e, ActionResolved)
                )
        try:
            async with services.transaction() as tx:
                for call, record in cancelled:
                    stage_call(tx, call, record)
                if run is not None:
                    tx.put_run(run.model_copy(update={"status": "cancelled"}))
        except ThreadOwnedElsewhere:  # not this node's to write: not a race to judge again
            raise
        except StoreConflict:  # a call (or the run) changed meanwhile: judge them all again
            continue
        parent = call_parent(trace)
        for record, action_id in resolved:
            suspension(parent, record, action_id)
        for _, record in cancelled:  # and the sub-runs of the calls it cancelled, with them
            if record.sub_threads and record.phase == "done":
                services.cancel_sub_threads_soon(record.sub_threads, reason)
        return kept
