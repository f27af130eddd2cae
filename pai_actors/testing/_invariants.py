"""The invariants a simulation (``testing._simulation``) and the state machine
(``testing._state_machine``) check, after every step and at the end.

Each check returns the violations it found, as sentences naming the thread, the call and
what was seen (an empty list: it holds). They read the store and what the instrumented
tools saw (:class:`~pai_actors.testing._probe.Probe`); none of them changes anything.

- **parts agree with records**: every call record's part (``to_part``) is the part its
  message shows; each part has at most one pending suspension, the last; a terminal part
  has no pending action; a part is cancelled exactly when its record says so, and then its
  ``errorText`` names the reason;
- **pending actions are what the parts show**: the store's open actions of a thread are the
  parts' pending suspensions, approvals and client outputs, no more, no fewer; the views a
  client is shown name them and show their input as their calls do;
- **at rest** (every run idle): no run is ``running``; a ``waiting`` run has a pending
  action; every call is terminal or pending;
- **an action resolves once**: an action a client was told was accepted is resolved in the
  record (its episode, approval or output is no longer pending), with what was submitted,
  whatever happened after (a crash, a restart); a cancelled action's call records its
  reason, a failed one's its error; no action is accepted twice;
- **cancellation**: an ``execute`` that was cancelled saw its ``ctx.signal`` aborted, with
  the reason its call records, and let ``trio.Cancelled`` through (one that was handed
  ``trio.Cancelled`` and returned or raised something else swallowed it; one aborted after
  its last checkpoint returns, and its output is dropped); no ``execute`` exited after its
  call's cancellation was recorded (it was stopped first); a child tool's ``execute``
  ended before its parent's;
- **live**: at a settled moment an ``execute`` that runs belongs to a call recorded
  ``executing`` in a ``running`` run, and a child tool's runs inside its parent's;
- **no overlap**: two ``execute`` of one call never ran at once; each entry (a call's
  initial one, the resume of an action) entered ``execute`` at most once (unless its
  registration reruns interrupted calls, or a runtime crashed);
- **stopped** (a runtime closed gracefully, as for a deploy): no run is ``running``; an
  unfinished call waits in a ``waiting`` run, on an open action, on its sub-agents, or
  with an accepted answer whose resume has not begun (kept for the next runtime);
- **no task left**: once the runtime closed, no ``execute`` runs and trio's task count is
  back to what it was before the runtime opened.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from .._core.call_record import CallRecord
from .._core.calls import to_part
from .._core.clock import EPOCH
from .._core.parts import ToolPart
from .._core.pending import PendingActionView
from .._core.records import RunRecord, StoredCall
from .._store.base import Store
from ._probe import Execution, Probe

CANCELLED = "The tool call was cancelled"
TERMINAL = ("output-available", "output-error", "output-denied")

RESOLUTION = 1e-6
"""A recorded instant keeps microseconds: trio time ``0.1 + 0.2`` is recorded as ``0.3``."""

How = Literal["submit", "cancel", "fail"]


@dataclass(frozen=True, slots=True)
class Resolution:
    """An action a client was told was accepted: how, and with what (the payload, the
    reason, the error)."""

    thread_id: str
    tool_call_id: str
    action_id: str
    how: How
    detail: Any


def cancelled_text(reason: str | None) -> str:
    """The ``errorText`` of a call cancelled with ``reason``."""
    return f"{CANCELLED}: {reason}" if reason else f"{CANCELLED}."


async def thread_parts(store: Store, thread_id: str) -> dict[str, ToolPart]:
    """The thread's tool parts by call id, as its messages show them."""
    return {
        part.tool_call_id: part
        for message in await store.list_messages(thread_id)
        for part in message.tool_parts
    }


async def thread_tree(store: Store, roots: Iterable[str]) -> list[str]:
    """``roots`` and the sub-agent threads their calls started, at every depth: those that
    exist, each once (roots first, in order)."""
    found: list[str] = []
    todo = list(roots)
    while todo:
        thread_id = todo.pop(0)
        if thread_id in found or await store.get_thread(thread_id) is None:
            continue
        found.append(thread_id)
        for call in await store.list_calls(thread_id):
            todo.extend(call.record.sub_threads)
    return found


async def check_thread(
    store: Store, thread_id: str, seen: dict[tuple[str, str], tuple[int, int]] | None = None
) -> list[str]:
    """The invariants that hold at any moment of ``thread_id``, read from ``store``: the
    parts agree with the call records and with the open actions. ``seen``: the revisions
    (of each call, and of its run) already checked, kept across calls, so that a call
    checked before and unchanged since is not checked again."""
    problems: list[str] = []
    # One consistent view: every read is a checkpoint, and a commit may land between two;
    # read again until the calls (and runs) were the same before and after the others.
    while True:
        calls = await store.list_calls(thread_id)
        runs = {run.run_id: run for run in await store.list_runs(thread_id)}
        parts = await thread_parts(store, thread_id)
        listed = {a.ref.action_id for a in await store.list_pending_actions(thread_id)}
        again = await store.list_calls(thread_id)
        again_runs = await store.list_runs(thread_id)
        if [c.revision for c in again] == [c.revision for c in calls] and [
            r.revision for r in again_runs
        ] == [r.revision for r in runs.values()]:
            break
    for call in calls:
        run = runs.get(call.run_id)
        if seen is not None:
            key = (thread_id, call.record.tool_call_id)
            revisions = (call.revision, -1 if run is None else run.revision)
            if seen.get(key) == revisions:
                continue
            seen[key] = revisions
        where = f"thread {thread_id!r} call {call.record.tool_call_id!r}"
        part = parts.get(call.record.tool_call_id)
        if part is None:
            problems.append(f"{where}: a call record without a part in its messages")
            continue
        expected = to_part(call.record)
        if part != expected:
            problems.append(
                f"{where}: the part {part.to_wire()} is not its record's {expected.to_wire()}"
            )
        problems.extend(_part_problems(where, part, run))
    shown = {action for call in calls for action in _pending_ids(call)}
    if shown != listed:
        problems.append(
            f"thread {thread_id!r}: open actions {sorted(listed)} but the calls show "
            f"{sorted(shown)}"
        )
    return problems


async def check_views(store: Store, views: Iterable[PendingActionView]) -> list[str]:
    """The pending actions a client is shown are what their calls show pending: the run,
    the message, the name (``<tool>.<suspend point>``, or the tool's for an approval or an
    output a client supplies) and the input (the suspension's, or the call's)."""
    problems: list[str] = []
    for view in views:
        ref = view.ref
        where = f"thread {ref.thread_id!r} action {ref.action_id!r} ({view.name!r})"
        call = await store.get_call(ref.thread_id, ref.tool_call_id)
        if call is None or ref.action_id not in _pending_ids(call):
            problems.append(f"{where}: shown pending, yet its call does not show it")
            continue
        record, episode = call.record, call.record.pending_episode
        if episode is not None and episode.action_id == ref.action_id:
            expected = (record.action_name(episode.name), episode.input)
        else:
            expected = (record.action_name(None), record.input)
        shown = (view.name, view.input)
        if (ref.run_id, ref.message_id) != (call.run_id, call.message_id) or shown != expected:
            problems.append(
                f"{where}: shown as {shown!r} of run {ref.run_id!r} and message "
                f"{ref.message_id!r}; its call shows {expected!r} of {call.run_id!r} and "
                f"{call.message_id!r}"
            )
    return problems


def _part_problems(where: str, part: ToolPart, run: RunRecord | None) -> list[str]:
    problems: list[str] = []
    states = [s.state for s in part.suspensions]
    if states.count("pending") > 1 or "pending" in states[:-1]:
        problems.append(f"{where}: a pending suspension that is not the last one: {states}")
    if part.state in TERMINAL:
        if part.pending_suspension is not None:
            problems.append(f"{where}: {part.state} with a pending suspension")
        cancelled = part.state == "output-error" and (part.error_text or "").startswith(CANCELLED)
        if (part.cancelled is not None) != cancelled:
            problems.append(
                f"{where}: errorText {part.error_text!r} and cancelled {part.cancelled} disagree"
            )
        if part.cancelled is not None and part.error_text != cancelled_text(part.cancelled.reason):
            problems.append(f"{where}: cancelled with errorText {part.error_text!r}")
    elif run is not None and not run.active:
        problems.append(f"{where}: {part.state} in a run that is {run.status}")
    return problems


def _pending_ids(call: StoredCall) -> list[str]:
    """The ids of the pending actions a call shows: its pending suspension, its requested
    approval, or the output a client is to supply."""
    record = call.record
    ids = [e.action_id for e in record.episodes if e.state == "pending"]
    if record.approval is not None and record.approval.state == "pending":
        ids.append(record.approval.id)
    if record.output_action == "pending":
        ids.append(record.tool_call_id)
    return ids


async def check_at_rest(
    store: Store,
    thread_ids: Iterable[str],
    seen: dict[tuple[str, str], tuple[int, int]] | None = None,
) -> list[str]:
    """Once every run is idle: nothing runs, and a waiting run waits on something (and
    :func:`check_thread` holds, with ``seen``)."""
    problems: list[str] = []
    for thread_id in thread_ids:
        problems.extend(await check_thread(store, thread_id, seen))
        active = await store.get_active_run(thread_id)
        if active is None:
            continue
        if active.status == "running":
            problems.append(f"thread {thread_id!r}: run {active.run_id!r} idle, yet running")
        elif not await store.list_pending_actions(thread_id) and not await _waits_on_agents(
            store, thread_id, active
        ):
            problems.append(f"thread {thread_id!r}: run {active.run_id!r} waits on nothing")
    return problems


async def _waits_on_agents(store: Store, thread_id: str, run: RunRecord) -> bool:
    """Whether a call of ``run`` waits for its sub-agents (whose actions are theirs)."""
    return any(
        call.run_id == run.run_id and call.record.phase == "awaiting_agents"
        for call in await store.list_calls(thread_id)
    )


async def check_resolutions(store: Store, resolutions: Iterable[Resolution]) -> list[str]:
    """Every accepted resolution is in the record, as it was accepted, and none twice."""
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for resolution in resolutions:
        key = (resolution.thread_id, resolution.action_id)
        where = f"thread {resolution.thread_id!r} action {resolution.action_id!r}"
        if key in seen:
            problems.append(f"{where}: accepted twice")
            continue
        seen.add(key)
        call = await store.get_call(resolution.thread_id, resolution.tool_call_id)
        if call is None:
            problems.append(f"{where}: accepted, but its call is gone")
            continue
        problems.extend(_resolution_problems(where, call, resolution))
    return problems


def _resolution_problems(where: str, call: StoredCall, resolution: Resolution) -> list[str]:
    record = call.record
    expected = {"submit": "submitted", "cancel": "cancelled", "fail": "failed"}[resolution.how]
    for episode in record.episodes:
        if episode.action_id == resolution.action_id:
            if episode.state != expected:
                return [f"{where}: {resolution.how} accepted, yet its episode is {episode.state}"]
            if resolution.how == "submit" and episode.resume != resolution.detail:
                return [f"{where}: resumed with {episode.resume!r}, not {resolution.detail!r}"]
            return _ended_problems(where, record, resolution)
    approval = record.approval
    if approval is not None and approval.id == resolution.action_id:
        if approval.state != expected:
            return [f"{where}: {resolution.how} accepted, yet its approval is {approval.state}"]
        return _ended_problems(where, record, resolution)
    if resolution.action_id == record.tool_call_id:  # a client-supplied output
        if record.output_action == "pending" or record.phase != "done":
            return [f"{where}: {resolution.how} accepted, yet the output is {record.phase}"]
        if resolution.how == "submit" and record.output != resolution.detail:
            return [f"{where}: output {record.output!r}, not the accepted {resolution.detail!r}"]
        return _ended_problems(where, record, resolution)
    return [f"{where}: accepted, but its call records no such action"]


def _ended_problems(where: str, record: CallRecord, resolution: Resolution) -> list[str]:
    """A cancelled action ends its call cancelled with its reason; a failed one, in
    ``output-error`` with its error."""
    if resolution.how == "cancel":
        cancelled = record.cancelled
        if cancelled is None or cancelled.reason != (resolution.detail or None):
            return [
                f"{where}: cancelled with {resolution.detail!r}, yet its call records "
                f"{cancelled!r} ({record.error_text!r})"
            ]
    if resolution.how == "fail" and (
        record.error_text != resolution.detail or record.cancelled is not None
    ):
        return [
            f"{where}: failed with {resolution.detail!r}, yet its call's error is "
            f"{record.error_text!r}"
        ]
    return []


async def check_executions(
    store: Store, probe: Probe, *, reruns: Mapping[str, bool] | None = None
) -> list[str]:
    """What the tools saw against what was recorded: cancelled executes saw their signal
    aborted with the recorded reason and ended before the cancellation was recorded; a
    child ended before its parent; no two executes of a call overlapped; each entry (a
    call's initial one, a resume) entered ``execute`` once (``reruns``: tool names whose
    registration reruns interrupted calls, exempt; and every entry once a runtime
    crashed). Executions of a process that crashed are left out of the signal checks: no
    one could record anything for them."""
    problems = list(probe.overlaps)
    by_key = {execution.key: execution for execution in probe.executions}
    crashed_processes = probe.crashed
    for execution in probe.executions:
        where = (
            f"execute of {execution.tool!r} (call {execution.tool_call_id!r} of thread "
            f"{execution.thread_id!r}, process {execution.process})"
        )
        parent = by_key.get(execution.parent) if execution.parent is not None else None
        if parent is not None and parent.exit_order < execution.exit_order:
            problems.append(f"{where}: a child tool's execute ended after its parent's")
        if execution.process in crashed_processes or execution.parent is not None:
            continue
        call = await store.get_call(execution.thread_id, execution.tool_call_id)
        cancelled = None if call is None else call.record.cancelled
        if (
            execution.outcome != "cancelled"
            and execution.cancel_delivered
            and cancelled is not None
        ):
            problems.append(
                f"{where}: {execution.outcome} after it was handed trio.Cancelled (its signal "
                f"said {execution.reason!r}), though its call is recorded cancelled: it "
                "swallowed trio.Cancelled (catch it only to clean up, then raise it again)"
            )
        if execution.outcome == "cancelled" and cancelled is not None:
            if not execution.aborted:
                problems.append(f"{where}: cancelled, yet its ctx.signal was not aborted")
            elif execution.reason != cancelled.reason:
                problems.append(
                    f"{where}: its signal said {execution.reason!r}, its call records "
                    f"{cancelled.reason!r}"
                )
        if cancelled is not None and execution.exited > _seconds(cancelled.at) + RESOLUTION:
            problems.append(
                f"{where}: exited at {execution.exited:g} s, after its cancellation was "
                f"recorded at {_seconds(cancelled.at):g} s"
            )
    if crashed_processes:
        return problems
    for (thread_id, action_id), count in probe.resumed.items():
        exempt = reruns is not None and any(
            e.thread_id == thread_id and e.action_id == action_id and reruns.get(e.tool, False)
            for e in probe.executions
        )
        if count > 1 and not exempt:
            problems.append(
                f"thread {thread_id!r} action {action_id!r}: its resume entered execute "
                f"{count} times"
            )
    initial = Counter(
        (e.thread_id, e.tool_call_id, e.tool)
        for e in probe.executions
        if e.action_id is None and e.parent is None
    )
    for (thread_id, call_id, tool), count in initial.items():
        if count > 1 and not (reruns is not None and reruns.get(tool, False)):
            problems.append(
                f"thread {thread_id!r} call {call_id!r}: its initial entry entered execute "
                f"{count} times"
            )
    return problems


async def check_stopped(
    store: Store, probe: Probe, thread_ids: Iterable[str], process: int
) -> list[str]:
    """After runtime ``process`` closed gracefully (not crashed): no run is ``running``, and
    every unfinished call is kept for the next runtime, in a ``waiting`` run: it waits on an
    open action or on its sub-agents, or holds an accepted answer whose resume has not
    begun (an ``execute`` the close interrupted is recorded ended, not left running)."""
    problems: list[str] = []
    for thread_id in thread_ids:
        runs = {run.run_id: run for run in await store.list_runs(thread_id)}
        problems.extend(
            f"thread {thread_id!r}: run {run.run_id!r} running after its runtime closed"
            for run in runs.values()
            if run.status == "running"
        )
        for call in await store.list_calls(thread_id):
            record = call.record
            if record.phase == "done":
                continue
            where = f"thread {thread_id!r} call {record.tool_call_id!r}"
            run = runs.get(call.run_id)
            if run is not None and run.status != "waiting":
                problems.append(f"{where}: {record.phase} in a {run.status} run after the close")
            if record.phase in ("suspended", "awaiting_approval", "awaiting_output"):
                if not _pending_ids(call):
                    problems.append(f"{where}: {record.phase} on no open action after the close")
                continue
            if record.phase == "awaiting_agents":
                continue
            resume = record.resume_action_id
            began = any(
                (e.thread_id, e.tool_call_id, e.action_id, e.process)
                == (thread_id, record.tool_call_id, resume, process)
                for e in probe.executions
            )
            if record.phase != "executing" or resume is None or began:
                problems.append(
                    f"{where}: {record.phase} (entry started: {record.entry_started}) after "
                    "its runtime closed: an execute the close interrupted is recorded ended, "
                    "an answer whose resume did not begin is kept to resume"
                )
    return problems


async def check_cancelled_run(
    store: Store,
    probe: Probe,
    run: RunRecord,
    reason: str | None,
    unfinished: Collection[str] | None,
    spared: Collection[str] = (),
) -> list[str]:
    """After ``cancel_run`` of ``run`` (as it was when asked) returned with ``reason``,
    nothing else in flight: the run is over, and no ``execute`` of its thread runs. If it
    was active when asked and ``unfinished`` names its calls unfinished then (``None``: not
    known, as when the cancellation raced what woke in its tick), it is ``cancelled``, and
    each of them is recorded cancelled with ``reason`` (but those in ``spared``, which a
    request racing the cancellation may have finished)."""
    thread_id = run.thread_id
    where = f"thread {thread_id!r}: cancel_run of {run.run_id!r} returned"
    now = next((r for r in await store.list_runs(thread_id) if r.run_id == run.run_id), None)
    if now is None or now.active:
        return [f"{where}, yet the run is {None if now is None else now.status}"]
    problems = [
        f"{where}, yet an execute of call {call!r} still runs"
        for thread, call in probe.live.values()
        if thread == thread_id
    ]
    if not run.active or unfinished is None:
        return problems
    if now.status != "cancelled":
        problems.append(f"{where} while it was {run.status}, yet it ended {now.status}")
    calls = {c.record.tool_call_id: c.record for c in await store.list_calls(thread_id)}
    for call_id in sorted(set(unfinished) - set(spared)):
        record = calls.get(call_id)
        cancelled = None if record is None else record.cancelled
        if cancelled is None or cancelled.reason != (reason or None):
            problems.append(
                f"{where}: call {call_id!r}, unfinished when it was asked, records "
                f"{None if record is None else (record.finish, record.error_text)!r}, not its "
                f"cancellation with {reason!r}"
            )
    return problems


async def check_live(store: Store, probe: Probe) -> list[str]:
    """At a settled moment (every task blocked): an ``execute`` that runs belongs to a call
    recorded ``executing`` in a ``running`` run, and a child tool's runs inside its
    parent's (no child outlives its parent)."""
    problems: list[str] = []
    live = set(probe.live.values())
    for thread_id, call_id in sorted(live):
        top = call_id.split("/")[0]  # a child's id: its parent's, "/", its own
        where = f"thread {thread_id!r}: an execute of call {call_id!r} runs"
        if top != call_id and (thread_id, top) not in live:
            problems.append(f"{where}, yet its parent's does not")
        call = await store.get_call(thread_id, top)
        runs = {r.run_id: r for r in await store.list_runs(thread_id)}
        run = None if call is None else runs.get(call.run_id)
        if call is None or call.record.phase != "executing" or run is None:
            problems.append(f"{where}, recorded {None if call is None else call.record.phase}")
        elif run.status != "running":
            problems.append(f"{where}, in run {run.run_id!r}, which is {run.status}")
    return problems


def check_closed(probe: Probe, tasks_before: int, tasks_now: int) -> list[str]:
    """After the runtime closed: no ``execute`` runs, no task is left."""
    problems = [
        f"execute of call {call!r} of {thread!r} still runs after the runtime closed"
        for thread, call in probe.live.values()
    ]
    if tasks_now != tasks_before:
        problems.append(
            f"{tasks_now - tasks_before} trio task(s) left after the runtime closed "
            f"({tasks_before} before it opened, {tasks_now} now)"
        )
    return problems


def _seconds(at: datetime) -> float:
    """A recorded instant as trio time (the test runtime's clock: ``EPOCH`` + seconds)."""
    return (at - EPOCH).total_seconds()


def executions_of(probe: Probe, thread_id: str) -> list[Execution]:
    """The executions of ``thread_id``'s calls, in the order they exited."""
    return [e for e in probe.executions if e.thread_id == thread_id]
