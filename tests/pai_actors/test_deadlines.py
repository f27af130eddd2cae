"""Deadlines on pending actions, the pure part: the outcomes and their checks at definition
time, the ``expire`` transition for each kind of action, and the deadline a record shows.
(The runtime's timer: ``test_runtime_deadlines.py``.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from pai_actors import (
    DEADLINE_REASON,
    CancelAtDeadline,
    ClientTool,
    DefinitionError,
    FailAtDeadline,
    ResolveAtDeadline,
    SuspendPoint,
    ToolDefinitionError,
    ToolRegistration,
    define_tool,
)
from pai_actors._core.call_record import CallRecord, CallSpec, Resume
from pai_actors._core.calls import input_available, new_call, request_approval, suspend, to_part
from pai_actors._core.deadlines import (
    check_deadline,
    deadline_at,
    expire,
    on_deadline_from_json,
    on_deadline_to_json,
)
from pai_actors._core.records import StoredCall
from pai_actors._store.base import has_open_action, open_actions

T0 = datetime(2025, 1, 2, tzinfo=UTC)
HOUR = timedelta(hours=1)


class Query(BaseModel):
    q: int


class Decision(BaseModel):
    approved: bool


class Answer(BaseModel):
    answer: str


def _review(**point: Any) -> Any:
    return define_tool(
        id="review",
        description="d",
        input_schema=Query,
        suspend={"review": SuspendPoint(suspend_schema=Query, resume_schema=Decision, **point)},
        execute=lambda ctx: None,
    )


REVIEW = CallSpec.for_tool(_review())
ASK = CallSpec.for_tool(
    define_tool(id="ask", description="d", input_schema=Query, output_schema=Answer)
)


def _suspended(expires_at: datetime | None = T0 + HOUR) -> CallRecord:
    record, _ = input_available(new_call("review", "c1"), REVIEW, {"q": 1})
    record, _ = suspend(
        record, REVIEW, "review", {"q": 1}, action_id="c1.1", at=T0, expires_at=expires_at
    )
    return record


def _awaiting_approval() -> CallRecord:
    record, _ = input_available(new_call("review", "c1"), REVIEW, {"q": 1})
    record, _ = request_approval(record, approval_id="c1.approval", at=T0, expires_at=T0 + HOUR)
    return record


def _awaiting_output() -> CallRecord:
    record, _ = input_available(new_call("ask", "c1"), ASK, {"q": 1}, output_expires_at=T0 + HOUR)
    return record


# The record shows its pending action's deadline, and the part and the open action do too.


def test_each_kind_of_action_stores_and_shows_its_deadline() -> None:
    for record, action_id in [
        (_suspended(), "c1.1"),
        (_awaiting_approval(), "c1.approval"),
        (_awaiting_output(), "c1"),
    ]:
        assert record.expires_at == T0 + HOUR
        part = to_part(record)
        assert part.expires_at == T0 + HOUR
        assert part.to_wire()["expiresAt"] == "2025-01-02T01:00:00Z"
        stored = StoredCall(thread_id="t", run_id="r", message_id="m", record=record)
        [action] = open_actions(stored)
        assert (action.ref.action_id, action.expires_at) == (action_id, T0 + HOUR)
    part = to_part(_suspended())
    assert part.pending_suspension is not None
    assert part.pending_suspension.to_wire()["expiresAt"] == "2025-01-02T01:00:00Z"


def test_a_store_tells_a_call_with_an_open_action_as_open_actions_lists_them() -> None:
    # (``has_open_action`` sets a stored call's ``open`` column without making the actions)
    executing, _ = input_available(new_call("review", "c1"), REVIEW, {"q": 1})
    resolved = [
        expire(_suspended(), REVIEW, "c1.1", ResolveAtDeadline({"approved": True}), at=T0 + HOUR),
        expire(_awaiting_approval(), REVIEW, "c1.approval", FailAtDeadline("late"), at=T0 + HOUR),
        expire(_awaiting_output(), ASK, "c1", ResolveAtDeadline({"answer": "M"}), at=T0 + HOUR),
    ]
    records = [
        (new_call("review", "c1"), False),
        (executing, False),
        (_suspended(), True),
        (_awaiting_approval(), True),
        (_awaiting_output(), True),
        *((step.record, False) for step in resolved),
    ]
    for record, is_open in records:
        stored = StoredCall(thread_id="t", run_id="r", message_id="m", record=record)
        assert has_open_action(stored) is is_open, record
        assert bool(open_actions(stored)) is is_open, record


def test_without_a_deadline_nothing_is_written() -> None:
    part = to_part(_suspended(expires_at=None))
    assert part.expires_at is None
    wire = part.to_wire()
    assert "expiresAt" not in wire
    assert "expiresAt" not in wire["pendingSuspension"]  # type: ignore[operator]


def test_a_resolved_action_keeps_its_deadline_but_the_part_shows_none() -> None:
    step = expire(_suspended(), REVIEW, "c1.1", CancelAtDeadline(), at=T0 + HOUR)
    assert step.record.expires_at is None
    assert step.record.episodes[0].expires_at == T0 + HOUR  # the fact, kept in the history
    part = to_part(step.record)
    assert "expiresAt" not in part.to_wire()
    assert part.suspensions[0].to_wire()["expiresAt"] == "2025-01-02T01:00:00Z"


def test_an_expires_at_must_be_timezone_aware() -> None:
    record, _ = input_available(new_call("review", "c1"), REVIEW, {"q": 1})
    with pytest.raises(ValueError, match="timezone-aware"):
        suspend(
            record,
            REVIEW,
            "review",
            {"q": 1},
            action_id="a",
            at=T0,
            expires_at=datetime(2025, 1, 2),
        )


# expire: each outcome on each kind of action.


def test_cancel_at_the_deadline() -> None:
    step = expire(_suspended(), REVIEW, "c1.1", CancelAtDeadline(), at=T0 + HOUR)
    assert step.result.status == "accepted"
    record = step.record
    assert (record.phase, record.finish, record.episodes[0].state) == (
        "done",
        "output-error",
        "cancelled",
    )
    assert record.error_text == "The tool call was cancelled: the deadline passed"
    assert record.cancelled is not None
    assert (record.cancelled.reason, record.cancelled.at) == (DEADLINE_REASON, T0 + HOUR)


def test_fail_at_the_deadline() -> None:
    step = expire(
        _awaiting_approval(), REVIEW, "c1.approval", FailAtDeadline("Too late."), at=T0 + HOUR
    )
    assert step.result.status == "accepted"
    assert (step.record.finish, step.record.error_text) == ("output-error", "Too late.")
    assert step.record.approval is not None
    assert step.record.approval.state == "failed"


def test_resolve_a_suspension_with_its_default() -> None:
    outcome = ResolveAtDeadline({"approved": False})
    step = expire(_suspended(), REVIEW, "c1.1", outcome, at=T0 + HOUR)
    assert step.result.status == "accepted"
    assert step.record.phase == "executing"
    assert step.record.episodes[0].resume == {"approved": False}
    assert Resume("review", Decision(approved=False), "c1.1", "review.review") in step.effects


def test_resolve_an_approval_and_an_output_with_their_defaults() -> None:
    denied = expire(
        _awaiting_approval(),
        REVIEW,
        "c1.approval",
        ResolveAtDeadline({"approved": False, "reason": "no answer"}),
        at=T0 + HOUR,
    )
    assert (denied.record.finish, denied.record.approval.reason) == ("output-denied", "no answer")  # type: ignore[union-attr]
    answered = expire(
        _awaiting_output(), ASK, "c1", ResolveAtDeadline({"answer": "M"}), at=T0 + 2 * HOUR
    )
    assert (answered.record.finish, answered.record.output) == ("output-available", {"answer": "M"})
    assert answered.record.output_action == "submitted"


def test_a_default_the_schema_refuses_now_fails_the_action_saying_why() -> None:
    step = expire(_awaiting_output(), ASK, "c1", ResolveAtDeadline({"nope": 1}), at=T0 + HOUR)
    assert step.result.status == "accepted"
    assert step.record.output_action == "failed"
    assert step.record.error_text is not None
    assert step.record.error_text.startswith(
        "the deadline passed, and its default payload was refused: output does not match"
    )


@pytest.mark.parametrize(
    ("record", "action_id", "at", "why"),
    [
        (_suspended(), "c1.1", T0 + HOUR - timedelta(microseconds=1), "expires at"),
        (_suspended(expires_at=None), "c1.1", T0 + HOUR, "not pending with a deadline"),
        (_suspended(), "c1.9", T0 + HOUR, "not pending with a deadline"),
        (
            expire(_suspended(), REVIEW, "c1.1", CancelAtDeadline(), at=T0 + HOUR).record,
            "c1.1",
            T0 + 2 * HOUR,
            "not pending with a deadline",
        ),
    ],
)
def test_expire_refuses_what_is_not_due_and_changes_nothing(
    record: CallRecord, action_id: str, at: datetime, why: str
) -> None:
    step = expire(record, REVIEW, action_id, CancelAtDeadline(), at=at)
    assert step.result.status == "rejected"
    assert why in (step.result.error or "")
    assert step.record is record
    assert step.effects == ()


# The outcomes, deadlines and their checks at definition time.


def test_outcomes_check_themselves_and_round_trip_as_json() -> None:
    for outcome in (
        CancelAtDeadline(),
        CancelAtDeadline("the user left"),
        FailAtDeadline("No answer."),
        ResolveAtDeadline({"approved": False}),
        ResolveAtDeadline(None),
    ):
        assert on_deadline_from_json(on_deadline_to_json(outcome)) == outcome
    assert on_deadline_from_json({"kind": "cancel"}) == CancelAtDeadline()
    for bad in (None, {"kind": "later"}, {"kind": "fail"}, {"kind": "cancel", "x": 1}):
        with pytest.raises(DefinitionError, match="not a deadline outcome"):
            on_deadline_from_json(bad)
    with pytest.raises(DefinitionError, match="non-empty str"):
        CancelAtDeadline("")
    with pytest.raises(DefinitionError, match="errorText the model reads"):
        FailAtDeadline(" ")
    with pytest.raises(DefinitionError, match="give a JSON value"):
        ResolveAtDeadline({"at": T0})
    assert ResolveAtDeadline((1, 2)).payload == [1, 2]  # normalised to JSON


def test_deadline_at_and_check_deadline() -> None:
    assert deadline_at(T0, None) is None
    assert deadline_at(T0, HOUR) == T0 + HOUR
    assert deadline_at(T0, T0 - HOUR) == T0 - HOUR  # one already past expires at once
    assert check_deadline(HOUR) == HOUR
    assert check_deadline(None) is None
    with pytest.raises(ValueError, match="timezone-aware"):
        check_deadline(datetime(2025, 1, 1))
    with pytest.raises(TypeError, match="takes a timedelta"):
        check_deadline(3600)


def test_a_suspend_point_default_is_checked_by_define_tool() -> None:
    _review(deadline=HOUR, on_deadline=ResolveAtDeadline({"approved": True}))
    _review(on_deadline=FailAtDeadline("late"))  # ctx.suspend(deadline=...) gives the time
    with pytest.raises(ToolDefinitionError, match=r"suspend\['review'\].on_deadline: the default"):
        _review(on_deadline=ResolveAtDeadline({"approved": "maybe"}))
    with pytest.raises(
        ToolDefinitionError, match=r"suspend\['review'\].deadline must be a positive"
    ):
        _review(deadline=timedelta(0))
    with pytest.raises(ToolDefinitionError, match="must be CancelAtDeadline"):
        _review(on_deadline="cancel")


def test_registration_deadlines_are_checked_at_construction() -> None:
    review = _review()
    ask = define_tool(id="ask", description="d", input_schema=Query, output_schema=Answer)
    ToolRegistration(
        review,
        needs_approval=True,
        approval_deadline=HOUR,
        on_approval_deadline=ResolveAtDeadline({"approved": False, "reason": "late"}),
    )
    ToolRegistration(
        ask, output_deadline=HOUR, on_output_deadline=ResolveAtDeadline({"answer": "M"})
    )
    cases: list[tuple[dict[str, Any], Any, str]] = [
        ({"approval_deadline": HOUR}, review, "asks for none; set needs_approval"),
        ({"output_deadline": HOUR}, review, "this tool has an execute"),
        ({"output_deadline": -HOUR}, ask, "output_deadline must be a positive timedelta"),
        (
            {"on_output_deadline": FailAtDeadline("late")},
            ask,
            "which is not set; give output_deadline",
        ),
        (
            {"output_deadline": HOUR, "on_output_deadline": ResolveAtDeadline({"answer": 3})},
            ask,
            "the default payload would be refused at the deadline: output",
        ),
        (
            {
                "needs_approval": True,
                "approval_deadline": HOUR,
                "on_approval_deadline": ResolveAtDeadline({"approved": "no"}),
            },
            review,
            "the default payload would be refused at the deadline: approval",
        ),
    ]
    for kwargs, tool, message in cases:
        with pytest.raises(DefinitionError, match=message):
            ToolRegistration(tool, **kwargs)
    shown = repr(ToolRegistration(ask, output_deadline=HOUR))
    assert "output_deadline=datetime.timedelta(seconds=3600)" in shown
    assert "on_output_deadline" not in shown


def test_client_tool_deadlines_are_checked_at_construction() -> None:
    tool = ClientTool("pick", "Pick.", {"type": "object"}, deadline=HOUR)
    assert (tool.deadline, tool.on_deadline) == (HOUR, CancelAtDeadline())
    with pytest.raises(DefinitionError, match="ClientTool 'pick': deadline must be a positive"):
        ClientTool("pick", "Pick.", {"type": "object"}, deadline=timedelta(0))
    with pytest.raises(DefinitionError, match="ClientTool 'pick': on_deadline must be"):
        ClientTool("pick", "Pick.", {"type": "object"}, on_deadline=None)  # type: ignore[arg-type]
