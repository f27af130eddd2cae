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
  parts' pending suspensions, approvals and client outputs, no more, no fewer;
- **at rest** (every run idle): no run is ``running``; a ``waiting`` run has a pending
  action; every call is terminal or pending;
- **an action resolves once**: an action a client was told was accepted is resolved in the
  record (its episode, approval or output is no longer pending), with what was submitted,
  whatever happened after (a crash, a restart); no action is accepted twice;
- **cancellation**: an ``execute`` that was cancelled saw its ``ctx.signal`` aborted, with
  the reason its call records, and let ``trio.Cancelled`` through (one that returned or
  raised something else after the abort swallowed it); no ``execute`` exited after its
  call's cancellation was recorded (it was stopped first); a child tool's ``execute``
  ended before its parent's;
- **no overlap**: two ``execute`` of one call never ran at once; the resume of an action
  entered ``execute`` at most once (unless its registration reruns interrupted calls);
- **no task left**: once the runtime closed, no ``execute`` runs and trio's task count is
  back to what it was before the runtime opened.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from .._core.calls import to_part
from .._core.clock import EPOCH
from .._core.parts import ToolPart
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
    parts = await thread_parts(store, thread_id)
    calls = await store.list_calls(thread_id)
    runs = {run.run_id: run for run in await store.list_runs(thread_id)}
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
    listed = {action.ref.action_id for action in await store.list_pending_actions(thread_id)}
    if shown != listed:
        problems.append(
            f"thread {thread_id!r}: open actions {sorted(listed)} but the calls show "
            f"{sorted(shown)}"
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
            return []
    approval = record.approval
    if approval is not None and approval.id == resolution.action_id:
        if approval.state != expected:
            return [f"{where}: {resolution.how} accepted, yet its approval is {approval.state}"]
        return []
    if resolution.action_id == record.tool_call_id:  # a client-supplied output
        if record.output_action == "pending" or record.phase != "done":
            return [f"{where}: {resolution.how} accepted, yet the output is {record.phase}"]
        if resolution.how == "submit" and record.output != resolution.detail:
            return [f"{where}: output {record.output!r}, not the accepted {resolution.detail!r}"]
        return []
    return [f"{where}: accepted, but its call records no such action"]


async def check_executions(
    store: Store, probe: Probe, *, reruns: Mapping[str, bool] | None = None
) -> list[str]:
    """What the tools saw against what was recorded: cancelled executes saw their signal
    aborted with the recorded reason and ended before the cancellation was recorded; a
    child ended before its parent; no two executes of a call overlapped; a resume entered
    ``execute`` once (``reruns``: tool names whose registration reruns interrupted calls,
    exempt). Executions of a process that crashed are left out of the signal checks: no
    one could record anything for them."""
    problems = list(probe.overlaps)
    by_key = {execution.key: execution for execution in probe.executions}
    crashed_processes = {e.process for e in probe.executions} - {probe.process}
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
        if execution.outcome != "cancelled" and execution.aborted and cancelled is not None:
            problems.append(
                f"{where}: {execution.outcome} after its ctx.signal was aborted "
                f"({execution.reason!r}), though its call is recorded cancelled: it swallowed "
                "trio.Cancelled (catch it only to clean up, then raise it again)"
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
    for (thread_id, action_id), count in probe.resumed.items():
        exempt = reruns is not None and any(
            e.thread_id == thread_id and e.action_id == action_id and reruns.get(e.tool, False)
            for e in probe.executions
        )
        if count > 1 and not exempt and not crashed_processes:
            problems.append(
                f"thread {thread_id!r} action {action_id!r}: its resume entered execute "
                f"{count} times"
            )
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
