"""Deadlines on pending actions: what happens when one passes (:data:`OnDeadline`), when it
is due (:func:`deadline_at`), and the transition that applies it (:func:`expire`).

A suspension, an approval and a client-supplied output may declare a deadline: a delay from
the moment the action opens (a ``timedelta``), or, for ``ctx.suspend``, an instant. The
instant is stored in the call's record (``expires_at`` of its episode or approval,
``output_expires_at`` for the output action). When it passes, the runtime resolves the action
as its definition declares:

- :class:`CancelAtDeadline` (the default): the action and its call end as cancelled, with the
  ``reason`` (:data:`DEADLINE_REASON` unless given);
- :class:`FailAtDeadline`: the call ends in ``output-error`` with ``error`` as its
  ``errorText``, which the model reads;
- :class:`ResolveAtDeadline`: the ``payload`` is submitted, as a client would submit it (a
  suspension resumes with it, an approval is answered with it, an output action's call gets it
  as its output).

Pure, as the rest of the core: :func:`expire` is a transition ``(record, ...) ->
Submission`` over :mod:`_core.calls`, so a deadline and a client's submission are judged the
same way and written through the store's optimistic concurrency: whichever commits first
resolves the action, and the other finds it resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeAlias

from .actions import ActionResult
from .call_record import CallRecord, CallSpec
from .calls import Submission, cancel_action, fail_action, submit
from .errors import DefinitionError, OutputNotJSON, ValidationFailed
from .json import JsonValue, to_json_value
from .schema import Schema

DEADLINE_REASON = "the deadline passed"
"""The reason an action cancelled at its deadline is given, unless its definition gives one
(the call's ``errorText`` reads ``"The tool call was cancelled: the deadline passed"``)."""


@dataclass(frozen=True, slots=True)
class CancelAtDeadline:
    """At the deadline, cancel the action and its call, with ``reason`` (the default)."""

    reason: str = DEADLINE_REASON

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise DefinitionError(
                f"CancelAtDeadline(reason=...) takes a non-empty str, got {self.reason!r}; "
                f"leave it out for {DEADLINE_REASON!r}"
            )


@dataclass(frozen=True, slots=True)
class FailAtDeadline:
    """At the deadline, fail the action: its call ends in ``output-error`` with ``error`` as
    the ``errorText`` the model reads (a sentence: what happened, what to do instead)."""

    error: str

    def __post_init__(self) -> None:
        if not isinstance(self.error, str) or not self.error.strip():
            raise DefinitionError(
                f"FailAtDeadline(error=...) takes a non-empty str, the errorText the model "
                f"reads, got {self.error!r}"
            )


@dataclass(frozen=True, slots=True)
class ResolveAtDeadline:
    """At the deadline, submit ``payload`` to the action, as a client would: a suspension
    resumes with it (validated by its ``resume_schema``), an approval is answered with it
    (``{"approved": False}`` denies), an output action's call gets it as its output.

    ``payload`` must be JSON (checked here); where it is declared, it is also checked against
    the schema it will be validated by (``define_tool``, ``ToolRegistration``)."""

    payload: JsonValue

    def __post_init__(self) -> None:
        try:
            payload = to_json_value(self.payload, what="ResolveAtDeadline(payload)")
        except OutputNotJSON as exc:
            raise DefinitionError(f"{exc}; give a JSON value") from exc
        object.__setattr__(self, "payload", payload)


OnDeadline: TypeAlias = CancelAtDeadline | FailAtDeadline | ResolveAtDeadline
"""What happens to a pending action at its deadline."""

_ON_DEADLINE = (CancelAtDeadline, FailAtDeadline, ResolveAtDeadline)


def check_delay(value: object, *, where: str, error: type[Exception] = DefinitionError) -> None:
    """Raise ``error`` unless ``value`` is ``None`` or a positive ``timedelta``."""
    if value is None:
        return
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise error(
            f"{where} must be a positive timedelta (how long the action waits from when it "
            f"opens), or None for no deadline, got {value!r}"
        )


def check_on_deadline(
    value: object, *, where: str, schema: Schema | None = None, what: str = "payload"
) -> OnDeadline:
    """``value`` if it is an :data:`OnDeadline`, else :class:`DefinitionError`; a
    :class:`ResolveAtDeadline`'s payload must also pass ``schema`` (when given)."""
    if not isinstance(value, _ON_DEADLINE):
        raise DefinitionError(
            f"{where} must be CancelAtDeadline(reason=...), FailAtDeadline(error) or "
            f"ResolveAtDeadline(payload), got {value!r}"
        )
    if isinstance(value, ResolveAtDeadline) and schema is not None:
        try:
            schema.parse(value.payload, what=what)
        except ValidationFailed as exc:
            raise DefinitionError(
                f"{where}: the default payload would be refused at the deadline: {exc}"
            ) from exc
    return value


def deadline_at(now: datetime, deadline: timedelta | datetime | None) -> datetime | None:
    """When an action that opens at ``now`` expires: ``now + deadline`` for a delay, the
    instant itself for a (timezone-aware) ``datetime``; ``None`` for no deadline."""
    if deadline is None:
        return None
    if isinstance(deadline, timedelta):
        return now + deadline
    return deadline


def check_deadline(value: object) -> timedelta | datetime | None:
    """``ctx.suspend(..., deadline=value)``: ``value`` if it is a ``timedelta``, a
    timezone-aware ``datetime`` or ``None``; else ``TypeError`` / ``ValueError`` (a bug in
    the tool: its call ends in ``output-error`` saying so)."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"ctx.suspend(deadline={value!r}): a datetime deadline must be timezone-aware; "
                "use datetime(..., tzinfo=UTC), or a timedelta from now"
            )
        return value
    raise TypeError(
        f"ctx.suspend(deadline=...) takes a timedelta (from now) or a timezone-aware datetime, "
        f"got {value!r}"
    )


def pending_expiry(record: CallRecord, action_id: str) -> datetime | None:
    """The deadline of the call's pending action ``action_id`` (``None``: it is not pending,
    or has no deadline)."""
    approval = record.approval
    if approval is not None and approval.id == action_id:
        return approval.expires_at if approval.state == "pending" else None
    if action_id == record.tool_call_id and record.output_action is not None:
        return record.output_expires_at if record.output_action == "pending" else None
    pending = record.pending_episode
    if pending is not None and pending.action_id == action_id:
        return pending.expires_at
    return None


def expire(
    record: CallRecord, spec: CallSpec, action_id: str, outcome: OnDeadline, *, at: datetime
) -> Submission:
    """The deadline of the pending action ``action_id`` passed (``at`` is now): resolve it as
    ``outcome`` declares, through the same transitions a client's ``cancel``, ``fail`` or
    ``submit`` takes.

    Rejected, and nothing changes, when the action is no longer pending (a submission won the
    race), has no deadline, or its deadline is after ``at``. A :class:`ResolveAtDeadline`
    payload its schema refuses now (the definition changed since it was declared) fails the
    action instead, saying why: a deadline always resolves its action.
    """
    expiry = pending_expiry(record, action_id)
    if expiry is None:
        return Submission(
            record,
            ActionResult.rejected(
                f"action {action_id!r} is not pending with a deadline (resolved already, or it "
                "has none); nothing to expire"
            ),
            (),
        )
    if expiry > at:
        return Submission(
            record,
            ActionResult.rejected(
                f"action {action_id!r} expires at {expiry.isoformat()}, after {at.isoformat()}"
            ),
            (),
        )
    if isinstance(outcome, CancelAtDeadline):
        return cancel_action(record, action_id, outcome.reason, at=at)
    if isinstance(outcome, FailAtDeadline):
        return fail_action(record, action_id, outcome.error, at=at)
    submitted = submit(record, spec, action_id, outcome.payload, at=at)
    if submitted.result.status == "accepted":
        return submitted
    return fail_action(
        record,
        action_id,
        f"the deadline passed, and its default payload was refused: {submitted.result.error}",
        at=at,
    )


def on_deadline_to_json(outcome: OnDeadline) -> dict[str, JsonValue]:
    """An :data:`OnDeadline` as JSON (how a run stores a client tool's):
    ``{"kind": "cancel", "reason"}``, ``{"kind": "fail", "error"}`` or
    ``{"kind": "resolve", "payload"}``."""
    if isinstance(outcome, CancelAtDeadline):
        return {"kind": "cancel", "reason": outcome.reason}
    if isinstance(outcome, FailAtDeadline):
        return {"kind": "fail", "error": outcome.error}
    return {"kind": "resolve", "payload": outcome.payload}


def on_deadline_from_json(value: object) -> OnDeadline:
    """The :data:`OnDeadline` :func:`on_deadline_to_json` wrote (:class:`DefinitionError`
    for anything else)."""
    if isinstance(value, dict):
        kind = value.get("kind")
        if kind == "cancel" and value.keys() <= {"kind", "reason"}:
            return CancelAtDeadline(value.get("reason", DEADLINE_REASON))
        if kind == "fail" and value.keys() == {"kind", "error"}:
            return FailAtDeadline(value["error"])
        if kind == "resolve" and value.keys() == {"kind", "payload"}:
            return ResolveAtDeadline(value["payload"])
    raise DefinitionError(
        f"not a deadline outcome: {value!r}; use {{'kind': 'cancel', 'reason': ...}}, "
        "{'kind': 'fail', 'error': ...} or {'kind': 'resolve', 'payload': ...}"
    )
