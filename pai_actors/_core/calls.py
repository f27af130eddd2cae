"""The sans-IO core of one tool call: pure transitions between immutable :class:`CallRecord`\\ s.

Each event of a call (input streaming and arriving, ``execute`` returning, failing, raising or
suspending, the call being cancelled, a pending action being submitted, cancelled or failed)
is a function ``(record, ...) -> (record, [ActionResult,] effects)``. Nothing here does I/O
or reads a clock: timestamps and action ids come in as arguments, and the effects tell the
runtime's actor what to do next. An event the runtime should never send in the record's
phase raises :class:`InvalidTransition`; a client's submission never raises: it is accepted
or rejected, and a rejection leaves the record exactly as it was.

    phase            native state       leaves by
    streaming        input-streaming    input_available -> executing | awaiting_output | done
    executing        input-available    finish_output | finish_failure | finish_exception
                                        -> done; suspend -> suspended
    suspended        input-available    submit -> executing; cancel_action | fail_action -> done
    awaiting_output  input-available    submit | cancel_action | fail_action -> done
    (any but done)                      cancel_call -> done (output-error, cancelled)

A pending action's deadline (``_core.deadlines.expire``) resolves it through ``submit``,
``cancel_action`` or ``fail_action``, as its definition declares.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from pydantic_core import from_json

from .actions import ActionResult
from .call_record import (
    ActionOpened,
    ActionResolved,
    Approval,
    CallRecord,
    CallSpec,
    Cancellation,
    DataItem,
    DataWritten,
    Effect,
    Episode,
    EpisodeState,
    Execute,
    Finish,
    Finished,
    Phase,
    Resume,
    replace,
)
from .errors import InvalidTransition, OutputNotJSON, ValidationFailed
from .json import JsonValue, to_json_value
from .parts import CancelledInfo, SuspensionView, ToolApproval, ToolDataItem, ToolPart
from .schema import Schema, frozen_mapping, json_schema

CANCELLED_TEXT = "The tool call was cancelled."


class Step(NamedTuple):
    """A record after an event, and what to do next."""

    record: CallRecord
    effects: tuple[Effect, ...]


class Submission(NamedTuple):
    """A record after a submission, its :class:`ActionResult`, and what to do next."""

    record: CallRecord
    result: ActionResult
    effects: tuple[Effect, ...]


def cancelled_text(reason: str | None) -> str:
    """``"The tool call was cancelled."``, or ``"...cancelled: <reason>"`` given a reason."""
    return f"The tool call was cancelled: {reason}" if reason else CANCELLED_TEXT


def new_call(name: str, tool_call_id: str, *, dynamic: bool = False) -> CallRecord:
    """A call whose input has started streaming (``input-streaming``)."""
    return CallRecord(name=name, tool_call_id=tool_call_id, dynamic=dynamic)


def input_delta(record: CallRecord, delta: str) -> CallRecord:
    """Append a fragment of the input's JSON text; ``input`` shows it once it parses."""
    _expect(record, "an input delta", "streaming")
    text = record.input_text + delta
    try:  # partial JSON, as the AI SDK shows it: '{"summary":"Sen' -> {"summary": "Sen"}
        partial = to_json_value(from_json(text, allow_partial="trailing-strings"))
    except (ValueError, OutputNotJSON):  # nothing usable yet: keep the last parse
        partial = record.input
    return replace(record, input_text=text, input=partial)


def not_offered(record: CallRecord, offered: list[str]) -> Step:
    """The model called a tool it was not offered in this step (a disabled or unknown one,
    or one no longer registered): the call ends in ``output-error`` and never executes."""
    text = (
        f"the model called the tool {record.name!r}, which is not offered to it here "
        f"(offered: {', '.join(map(repr, offered)) or 'none'})"
    )
    return _finish(record, "output-error", None, text)


def input_available(
    record: CallRecord,
    spec: CallSpec,
    raw_input: object,
    *,
    output_expires_at: datetime | None = None,
) -> Step:
    """The model's input is complete: validate it and start the call.

    Valid: ``Execute(parsed)`` for a tool with ``execute``; otherwise the implicit output
    action opens (``action_id == tool_call_id``, named after the tool), with the deadline
    ``output_expires_at`` (``None``: none). Invalid: the call ends in ``output-error`` with
    the validation errors as ``errorText``, and never executes.
    """
    _expect(record, "the complete input", "streaming")
    try:
        data = to_json_value(raw_input, what="input")
        parsed = data if spec.input is None else spec.input.parse(data, what="input")
    except (OutputNotJSON, ValidationFailed) as exc:
        raw: JsonValue = _json_or_none(raw_input)
        if record.dynamic:
            record = replace(record, input=raw, input_text="")
        else:
            record = replace(record, input=None, raw_input=raw, input_text="")
        return _finish(record, "output-error", None, str(exc))
    record = replace(record, input=data, input_text="")
    if spec.has_execute:
        return Step(replace(record, phase="executing", entry_started=True), (Execute(parsed),))
    opened = ActionOpened(record.tool_call_id, record.action_name(None), None, data)
    record = replace(
        record,
        phase="awaiting_output",
        output_action="pending",
        output_expires_at=_checked_instant(output_expires_at),
    )
    return Step(record, (opened,))


def finish_output(record: CallRecord, spec: CallSpec, output: object) -> Step:
    """``execute`` returned ``output``: parse it by the output schema, store it as JSON.

    ``None`` is a successful null output. An output that fails the schema or cannot
    round-trip through JSON ends the call in ``output-error`` saying why.
    """
    _expect(record, "an output", "executing")
    try:
        value = _output_json(spec.output, output)
    except (OutputNotJSON, ValidationFailed) as exc:
        return _finish(record, "output-error", None, str(exc))
    return _finish(record, "output-available", value, None)


def finish_failure(record: CallRecord, message: str) -> Step:
    """``execute`` returned ``ctx.fail(message)``: ``output-error`` with the text verbatim."""
    _expect(record, "a failure", "executing")
    return _finish(record, "output-error", None, message)


def finish_exception(record: CallRecord, error_text: str) -> Step:
    """``execute`` raised; ``error_text`` is the message (or what ``map_error`` made of it)."""
    _expect(record, "an exception", "executing")
    return _finish(record, "output-error", None, error_text)


def abandon_call(record: CallRecord, error_text: str, *, at: datetime) -> Step:
    """The runtime could not carry the call on (its actor failed): end it in
    ``output-error`` with ``error_text``, whatever its phase; a pending episode or output
    action resolves as ``"failed"``. A finished call is left as it is."""
    _aware(at)
    if record.phase == "done":
        return Step(record, ())
    return _finish(_resolve_pending(record, "failed", at), "output-error", None, error_text)


APPROVAL_RESPONSE: Schema = json_schema(
    {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "reason": {"type": ["string", "null"]},
        },
        "required": ["approved"],
        "additionalProperties": False,
    }
)
"""What an approval accepts: ``{"approved": bool, "reason": str | None}``."""


def request_approval(
    record: CallRecord, *, approval_id: str, at: datetime, expires_at: datetime | None = None
) -> Step:
    """The registration needs the user's approval before this call runs: it waits
    (``approval-requested``) at a pending action whose input is the call's input, until
    ``expires_at`` when it has a deadline."""
    _expect(record, "an approval request", "executing")
    _aware(at)
    if record.episodes or record.approval is not None:
        raise InvalidTransition(f"call {record.tool_call_id!r} already started; approve before")
    approval = Approval(id=approval_id, requested_at=at, expires_at=_checked_instant(expires_at))
    record = replace(record, phase="awaiting_approval", approval=approval)
    return Step(record, (ActionOpened(approval_id, record.action_name(None), None, record.input),))


def _respond(record: CallRecord, approval: Approval, payload: object, at: datetime) -> Submission:
    try:
        response = APPROVAL_RESPONSE.parse(to_json_value(payload, what="approval"), what="approval")
    except (OutputNotJSON, ValidationFailed) as exc:
        return Submission(record, ActionResult.rejected(str(exc)), ())
    assert isinstance(response, dict)
    approved, reason = bool(response["approved"]), response.get("reason")
    responded = replace(
        approval, state="submitted", approved=approved, reason=reason, resolved_at=at
    )
    resolved = ActionResolved(approval.id, "submitted")
    if approved:
        record = replace(record, phase="executing", approval=responded, entry_started=False)
        return Submission(record, ActionResult.accepted(), (resolved,))
    step = _finish(replace(record, approval=responded), "output-denied", None, None)
    return Submission(step.record, ActionResult.accepted(), (resolved, *step.effects))


def start_entry(record: CallRecord) -> CallRecord:
    """The actor is about to re-enter ``execute`` for the call's accepted submission (or
    re-run it): from now on, a process that stops means the call was interrupted."""
    _expect(record, "the start of an entry", "executing")
    if record.entry_started:
        raise InvalidTransition(f"call {record.tool_call_id!r} already started its entry")
    return replace(record, entry_started=True)


def unstart_entry(record: CallRecord) -> CallRecord:
    """A closing runtime found the re-entry it had marked started never began ``execute``:
    mark it not started again, so that the next runtime runs it (it is stored intent)."""
    _expect(record, "an entry that did not start", "executing")
    return replace(record, entry_started=False)


def link_sub_thread(record: CallRecord, thread_id: str) -> CallRecord:
    """``execute`` started a sub-agent run on the thread ``thread_id`` (``ctx.agents.run``):
    the call records it (once: a re-entry that meets the same run again changes nothing).
    ``sub_threads`` is kept in the order of the thread ids, so that the same sub-runs give
    the same record whatever order concurrent tasks of ``execute`` started them in."""
    _expect(record, "a sub-agent run", "executing")
    if thread_id in record.sub_threads:
        return record
    return replace(record, sub_threads=tuple(sorted((*record.sub_threads, thread_id))))


def await_agents(record: CallRecord) -> CallRecord:
    """``execute`` stopped because a sub-agent run it awaits waits on a pending action: the
    call waits for its sub-agent runs to end (no actor runs it meanwhile), then enters
    ``execute`` again from the entry it stopped in (:func:`agents_done`)."""
    _expect(record, "waiting for sub-agent runs", "executing")
    if not record.sub_threads:
        raise InvalidTransition(f"call {record.tool_call_id!r} started no sub-agent run")
    return replace(record, phase="awaiting_agents", entry_started=False)


def agents_done(record: CallRecord) -> CallRecord:
    """Every sub-agent run the call waits for ended: it is to enter ``execute`` again, from
    the same entry as before (its ``resume_action_id``: the submission it went on from, or
    its initial entry), where ``ctx.agents.run`` returns each ended run's answer at once."""
    _expect(record, "the end of its sub-agent runs", "awaiting_agents")
    return replace(record, phase="executing", entry_started=False)


INTERRUPTED_TEXT = (
    "The tool call was interrupted: the process running it stopped before it finished, "
    "and it was not run again."
)


def interrupt_call(
    record: CallRecord, *, rerun: bool, at: datetime, error_text: str = INTERRUPTED_TEXT
) -> Step:
    """A runtime found the call started (or still streaming) with nothing running it: the
    process stopped (or the call's actor failed before it recorded the outcome). With
    ``rerun`` (the registration opts in), an ``executing`` call's entry is to run again;
    otherwise the call ends in ``output-error`` with ``error_text``. Only an unfinished call
    whose entry started can be interrupted."""
    _aware(at)
    if record.phase == "executing" and record.entry_started and rerun:
        return Step(replace(record, entry_started=False), ())
    if record.phase == "streaming" or (record.phase == "executing" and record.entry_started):
        return _finish(record, "output-error", None, error_text)
    raise InvalidTransition(
        f"call {record.tool_call_id!r} ({record.phase}) is not running, so it cannot have "
        "been interrupted"
    )


def cancel_call(record: CallRecord, reason: str | None, *, at: datetime) -> Step:
    """The run, request or runtime was cancelled: end the call as cancelled.

    A pending episode or output action resolves as ``"cancelled"``. A finished call is left
    as it is (cancellation raced with its end).
    """
    _aware(at)
    if record.phase == "done":
        return Step(record, ())
    return _cancel(record, reason, at)


def suspend(
    record: CallRecord,
    spec: CallSpec,
    name: str,
    input: object,
    *,
    action_id: str,
    at: datetime,
    expires_at: datetime | None = None,
) -> Step:
    """``execute`` returned ``ctx.suspend(name, input)``: open a new pending episode, with
    the deadline ``expires_at`` (``None``: none).

    The native state stays ``input-available``. An undeclared suspend point or an input that
    fails its ``suspend_schema`` is a bug in the tool: the call ends in ``output-error``.
    """
    _expect(record, "a suspension", "executing")
    _aware(at)
    if any(e.action_id == action_id for e in record.episodes):
        raise InvalidTransition(f"action id {action_id!r} is already used by this call")
    point = spec.suspend.get(name)
    if point is None:
        declared = ", ".join(repr(n) for n in spec.suspend) or "none"
        return _finish(
            record,
            "output-error",
            None,
            f"tool {record.name!r} suspended at {name!r}, which it does not declare "
            f"(declared suspend points: {declared})",
        )
    try:
        shown = _output_json(point[0], input, what="suspend input")
    except (OutputNotJSON, ValidationFailed) as exc:
        return _finish(record, "output-error", None, str(exc))
    episode = Episode(
        action_id=action_id,
        name=name,
        input=shown,
        suspended_at=at,
        expires_at=_checked_instant(expires_at),
    )
    record = replace(
        record, phase="suspended", episodes=(*record.episodes, episode), entry_started=False
    )
    opened = ActionOpened(action_id, record.action_name(name), name, shown)
    return Step(record, (opened,))


def submit(
    record: CallRecord, spec: CallSpec, action_id: str, payload: object, *, at: datetime
) -> Submission:
    """Submit ``payload`` to the pending action ``action_id``.

    A suspension's payload is parsed by its ``resume_schema``; accepted, the episode is
    ``"submitted"`` and the call re-enters ``execute`` (``Resume``). The output action's
    payload is parsed by the output schema (any JSON without one); accepted, it becomes the
    call's output. Invalid payloads, unknown and resolved actions are rejected.
    """
    _aware(at)
    found = _find(record, action_id)
    if isinstance(found, ActionResult):
        return Submission(record, found, ())
    if isinstance(found, Approval):
        return _respond(record, found, payload, at)
    if found is None:  # the output action
        try:
            output = _output_json(spec.output, to_json_value(payload, what="output"))
        except (OutputNotJSON, ValidationFailed) as exc:
            return Submission(record, ActionResult.rejected(str(exc)), ())
        record = replace(record, output_action="submitted")
        step = _finish(record, "output-available", output, None)
        resolved = ActionResolved(action_id, "submitted")
        return Submission(step.record, ActionResult.accepted(), (resolved, *step.effects))
    resume_schema = spec.suspend[found.name][1] if found.name in spec.suspend else None
    try:
        resume_json = to_json_value(payload, what="resume")
        parsed = (
            resume_json
            if resume_schema is None
            else resume_schema.parse(resume_json, what="resume")
        )
    except (OutputNotJSON, ValidationFailed) as exc:
        return Submission(record, ActionResult.rejected(str(exc)), ())
    record = _resolve_episode(record, found, "submitted", at, resume_json, phase="executing")
    record = replace(record, entry_started=False)
    effects: tuple[Effect, ...] = (
        ActionResolved(action_id, "submitted"),
        Resume(found.name, parsed, action_id, record.action_name(found.name)),
    )
    return Submission(record, ActionResult.accepted(), effects)


def cancel_action(
    record: CallRecord, action_id: str, reason: str | None = None, *, at: datetime
) -> Submission:
    """Cancel the pending action ``action_id``: it resolves ``"cancelled"``, the call too."""
    _aware(at)
    found = _find(record, action_id)
    if isinstance(found, ActionResult):
        return Submission(record, found, ())
    step = _cancel(record, reason, at)
    return Submission(step.record, ActionResult.accepted(), step.effects)


def fail_action(
    record: CallRecord, action_id: str, error: str | BaseException, *, at: datetime
) -> Submission:
    """Fail the pending action ``action_id``: it resolves ``"failed"``, and the call ends in
    ``output-error`` with ``errorText == str(error)``."""
    _aware(at)
    found = _find(record, action_id)
    if isinstance(found, ActionResult):
        return Submission(record, found, ())
    record = _resolve_pending(record, "failed", at)
    step = _finish(record, "output-error", None, str(error))
    resolved = ActionResolved(action_id, "failed")
    return Submission(step.record, ActionResult.accepted(), (resolved, *step.effects))


def write_data(
    record: CallRecord,
    channel: str,
    value: object,
    *,
    item_id: str,
    at: datetime,
    transient: bool = False,
) -> Step:
    """``execute`` wrote a tool-data item (already parsed by its channel's schema).

    A durable item replaces the item of the same id in place, or is appended; a transient
    one only goes to live watchers (``DataWritten``) and never into the record. Raises
    :class:`OutputNotJSON` when ``value`` is not JSON.
    """
    _expect(record, "tool data", "executing")
    _aware(at)
    item = DataItem(item_id, to_json_value(value, what=f"data[{channel!r}]"), at)
    effect = DataWritten(channel, item, transient)
    if transient:
        return Step(record, (effect,))
    items = record.data.get(channel, ())
    if any(old.id == item_id for old in items):
        items = tuple(item if old.id == item_id else old for old in items)
    else:
        items = (*items, item)
    data = frozen_mapping({**record.data, channel: items})
    return Step(replace(record, data=data), (effect,))


def to_part(record: CallRecord) -> ToolPart:
    """Project a record to the tool part clients see (native state plus pai's sidecars).

    Built without validation (:meth:`WireModel.trusted`): the record's values are lossless
    JSON already, and its transitions keep the arms consistent. This runs on every transition of
    every call, so it must be cheap; the tests check that every projection validates.
    """
    suspensions = tuple(episode_view(e) for e in record.episodes)
    pending = next((s for s in suspensions if s.state == "pending"), None)
    cancelled = record.cancelled
    # The part shows an approval while it is requested and once it is answered. One that
    # ended without an answer (its action cancelled or failed, or its run cancelled) is not
    # shown: the AI SDK allows an approval on an ended part only as granted (or, on
    # output-denied, as denied). The record keeps it.
    approval = record.approval
    if approval is not None and approval.state not in ("pending", "submitted"):
        approval = None
    return ToolPart.trusted(
        type="dynamic-tool" if record.dynamic else f"tool-{record.name}",
        tool_name=record.name,
        tool_call_id=record.tool_call_id,
        state=record.state,
        input=record.input,
        raw_input=record.raw_input,
        output=record.output,
        error_text=record.error_text,
        approval=None
        if approval is None
        else ToolApproval.trusted(
            id=approval.id, approved=approval.approved, reason=approval.reason
        ),
        data={
            channel: tuple(
                ToolDataItem.trusted(id=i.id, value=i.value, updated_at=i.updated_at) for i in items
            )
            for channel, items in record.data.items()
        },
        suspensions=suspensions,
        pending_suspension=pending,
        cancelled=None
        if cancelled is None
        else CancelledInfo.trusted(reason=cancelled.reason, at=cancelled.at),
        expires_at=record.expires_at,
        sub_threads=record.sub_threads,
    )


# Helpers.


def episode_view(episode: Episode) -> SuspensionView:
    """An episode as clients see it (a member of a part's ``suspensions``)."""
    return SuspensionView.trusted(
        action_id=episode.action_id,
        name=episode.name,
        input=episode.input,
        suspended_at=episode.suspended_at,
        state=episode.state,
        resolved_at=episode.resolved_at,
        resume=episode.resume,
        expires_at=episode.expires_at,
    )


def _expect(record: CallRecord, event: str, *phases: Phase) -> None:
    if record.phase not in phases:
        raise InvalidTransition(
            f"tool call {record.tool_call_id!r} ({record.name!r}) cannot take {event} while "
            f"{record.phase}; it takes it only while {' or '.join(phases)}"
        )


def _aware(at: datetime) -> None:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"timestamps must be timezone-aware, got {at!r}; use datetime.now(UTC)")


def _checked_instant(at: datetime | None) -> datetime | None:
    if at is not None:
        _aware(at)
    return at


def _json_or_none(value: object) -> JsonValue:
    try:
        return to_json_value(value, what="input")
    except OutputNotJSON:
        return None


def _output_json(schema: Schema | None, value: object, *, what: str = "output") -> JsonValue:
    if schema is None:
        return to_json_value(value, what=what)
    return schema.dump(schema.parse(value, what=what), what=what)


def _find(record: CallRecord, action_id: str) -> Episode | Approval | ActionResult | None:
    """The pending episode or approval ``action_id`` names, ``None`` for the pending output
    action, or the rejection to answer with."""
    approval = record.approval
    if approval is not None and action_id == approval.id:
        if approval.state == "pending":
            return approval
        return _already_resolved(action_id, approval.state)
    if record.output_action is not None and action_id == record.tool_call_id:
        if record.output_action == "pending":
            return None
        return _already_resolved(action_id, record.output_action)
    for episode in record.episodes:
        if episode.action_id == action_id:
            if episode.state == "pending":
                return episode
            return _already_resolved(action_id, episode.state)
    return ActionResult.rejected(
        f"no such action {action_id!r} on tool call {record.tool_call_id!r} "
        f"({record.name!r}); use the action_id of one of its pending actions"
    )


def _already_resolved(action_id: str, state: EpisodeState) -> ActionResult:
    return ActionResult.rejected(
        f"action {action_id!r} is already resolved ({state}); an action resolves once"
    )


def _resolve_episode(
    record: CallRecord,
    episode: Episode,
    state: EpisodeState,
    at: datetime,
    resume: JsonValue = None,
    *,
    phase: Phase,
) -> CallRecord:
    done = replace(episode, state=state, resolved_at=at, resume=resume)
    episodes = tuple(done if e is episode else e for e in record.episodes)
    return replace(record, episodes=episodes, phase=phase)


def _resolve_pending(record: CallRecord, state: EpisodeState, at: datetime) -> CallRecord:
    """Resolve whatever is pending (a suspension, the approval or the output action) as
    ``state``."""
    pending = record.pending_episode
    if pending is not None:
        record = _resolve_episode(record, pending, state, at, phase=record.phase)
    if record.approval is not None and record.approval.state == "pending":
        record = replace(record, approval=replace(record.approval, state=state, resolved_at=at))
    if record.output_action == "pending":
        record = replace(record, output_action=state)
    return record


def _cancel(record: CallRecord, reason: str | None, at: datetime) -> Step:
    pending = record.pending_episode
    approval = record.approval
    action_id = (
        pending.action_id
        if pending is not None
        else approval.id
        if approval is not None and approval.state == "pending"
        else record.tool_call_id
        if record.output_action == "pending"
        else None
    )
    record = _resolve_pending(record, "cancelled", at)
    cancelled = Cancellation(reason or None, at)
    step = _finish(record, "output-error", None, cancelled_text(reason), cancelled=cancelled)
    if action_id is None:
        return step
    return Step(step.record, (ActionResolved(action_id, "cancelled"), *step.effects))


def _finish(
    record: CallRecord,
    state: Finish,
    output: JsonValue,
    error_text: str | None,
    *,
    cancelled: Cancellation | None = None,
) -> Step:
    record = replace(
        record,
        phase="done",
        finish=state,
        output=output,
        error_text=error_text,
        input_text="",
        cancelled=cancelled if cancelled is not None else record.cancelled,
    )
    return Step(record, (Finished(state, output, error_text),))
