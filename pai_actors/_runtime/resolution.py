"""Resolving a pending action: :func:`resolve` (``submit_action``, ``cancel_action`` and
``fail_action`` of :class:`AgentRuntime` all go through it).

The submission is judged by the pure core (``_core.calls``) against the stored call, written
with the call's part in one transaction (a conflict: judge it again), and then the call's
run is woken, or activated when its actor is not alive; the run sends the call the
``Resume`` its stored record stands for. Nothing here can lose an accepted submission: the
stored call is the intent, and the run's actor resumes it whenever it looks at its calls.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .._core.actions import ActionResult, PendingActionRef
from .._core.call_record import CallRecord, CallSpec
from .._core.calls import Submission, agents_done
from .._core.errors import StoreConflict, ThreadOwnedElsewhere
from .._core.records import RunRecord, StoredCall
from .._core.wire import updated
from .call import resumable
from .live import LiveRun
from .run import CLEANUP_SECONDS
from .run_io import stage_call, write_call
from .services import Services
from .subagents import ended
from .warm import waited


async def resolve(
    services: Services, ref: PendingActionRef, decide: Callable[[CallRecord, CallSpec], Submission]
) -> ActionResult:
    """Resolve the action ``ref`` names as ``decide(record, spec)`` judges it.

    Rejected (nothing written): no such action in that thread, the judgement rejects it,
    or its run is over or being cancelled. Accepted: written, then the run is woken.
    """
    while True:
        call = await services.store.get_call(ref.thread_id, ref.tool_call_id)
        spec = None
        if call is not None and call.thread_id == ref.thread_id:
            thread = await services.thread(call.thread_id)
            spec = services.spec_for(call, services.agent_of(thread))
        if call is None or spec is None:
            return ActionResult.rejected(
                f"no such action {ref.action_id!r} in thread {ref.thread_id!r}; use a "
                "ref from pending_actions()"
            )
        outcome = decide(call.record, spec)
        if outcome.result.status == "rejected":
            return outcome.result
        run = await services.store.get_run(call.run_id)
        if run is None or not run.active:
            status = "missing" if run is None else run.status
            return ActionResult.rejected(
                f"the run {call.run_id!r} of action {ref.action_id!r} is {status}; its "
                "actions can no longer be resolved"
            )
        if services.is_cancelling(call.run_id):
            return ActionResult.rejected(
                f"the run {call.run_id!r} was cancelled; action {ref.action_id!r} can no "
                "longer be resolved"
            )
        try:
            stored = await write_resumable(services, call, outcome.record, run)
        except ThreadOwnedElsewhere:  # another node drives the thread: not for this one
            raise
        except StoreConflict:  # resolved or changed meanwhile: judge it again
            continue
        services.keep_warm.resolved(waited(outcome.record))  # (how long it waited)
        await wake(services, stored)
        return outcome.result


async def write_resumable(
    services: Services, call: StoredCall, record: CallRecord, run: RunRecord
) -> StoredCall:
    """Write the judged call and its part; when the submission makes the call resumable
    and the run is passivated (``waiting``, no actor alive or starting) or kept warm (its
    actor listens, nothing of it runs: ``_runtime.warm``), record the run ``running`` in the
    same commit, the status its actor would write first on resuming the call.

    Safe across a crash for the same reason the actor's own write is: a ``running`` run
    with a resumable call and no actor is activated on the next load.
    """
    if not (run.status == "waiting" and resumable(record)):
        return await write_call(services, call, record)
    live = services.live_run(run.run_id)
    warm = live is not None and _warm(live, run)
    if not (warm or services.passivated(run.run_id)):
        return await write_call(services, call, record)
    async with services.transaction() as tx:
        stored = stage_call(tx, call, record)
        staged = tx.put_run(updated(run, status="running"))
    if live is not None and not live.passivated and live.run.revision < staged.revision:
        # (its actor, still alive, must not write the revision it had again: it holds this
        # one from now on; the wake that follows makes it look before it can passivate)
        live.run = staged
        live.status = "running"
    if services.closing():  # its activation will not happen here: leave the run waiting, as found
        with trio.move_on_after(CLEANUP_SECONDS, shield=True):
            await services.park(run.run_id)
    return stored


def _warm(live: LiveRun, run: RunRecord) -> bool:
    """Whether the run's actor listens with nothing of it running, holding ``run`` as
    stored: the submission may write its ``running`` (see :func:`write_resumable`)."""
    return (
        not live.busy
        and live.status == "waiting"
        and live.active_calls == 0
        and live.run.revision == run.revision
    )


async def wake(services: Services, call: StoredCall) -> None:
    """Wake the call's run after an accepted resolution, now durable (activating the run if
    it has no actor): the run reads the call and sends it the :class:`Resume` it stands
    for."""
    live = services.live_run(call.run_id)
    if live is None:
        services.activate_soon(call)
        return
    live.changed = True
    services.notify(live.thread_id)
    live.wake()


async def settle_caller(services: Services, thread_id: str, tool_call_id: str) -> None:
    """If the call waits for its sub-runs and every one of them ended, make it enter
    ``execute`` again: written as an accepted submission is (its run recorded running when
    it is passivated), then its run woken or activated. Safe to call any number of times,
    from any task: a call that does not wait, or whose runs have not all ended, is left as
    it is."""
    while True:
        call = await services.store.get_call(thread_id, tool_call_id)
        if call is None or call.record.phase != "awaiting_agents":
            return
        if not await ended(services, call.record.sub_threads):
            return
        run = await services.store.get_run(call.run_id)
        if run is None or not run.active or services.is_cancelling(call.run_id):
            return  # its run is over, or its cancellation records the call
        try:
            stored = await write_resumable(services, call, agents_done(call.record), run)
        except ThreadOwnedElsewhere:  # another node drives the thread: not for this one
            raise
        except StoreConflict:  # changed meanwhile (a sibling's end settled it): look again
            continue
        await wake(services, stored)
        return
