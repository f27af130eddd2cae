"""The wire models: exact camelCase JSON per state, and every shape reads back as it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel, ValidationError

from pai_actors import (
    ActionResult,
    Message,
    PendingActionOrigin,
    PendingActionRef,
    RunState,
    SuspensionView,
    ThreadState,
    ToolApproval,
    ToolPart,
    define_tool,
    get_tool_name,
)
from pai_actors._core.call_record import CallSpec
from pai_actors._core.calls import (
    cancel_action,
    cancel_call,
    fail_action,
    finish_exception,
    input_available,
    new_call,
    request_approval,
    submit,
    to_part,
)
from pai_actors._core.wire import iso

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
SIDECARS: dict[str, Any] = {
    "data": {},
    "suspensions": [],
    "pendingSuspension": None,
    "cancelled": None,
}


class Query(BaseModel):
    q: int


SEND = CallSpec.for_tool(
    define_tool(id="send", description="d", input_schema=Query, execute=lambda ctx: None)
)


def _round_trip(part: ToolPart) -> dict[str, Any]:
    wire = part.to_wire()
    assert ToolPart.model_validate(wire) == part
    return wire


def test_input_streaming_omits_input_until_there_is_one() -> None:
    part = ToolPart(type="tool-lookup", tool_call_id="c1", state="input-streaming")
    assert _round_trip(part) == {
        "type": "tool-lookup",
        "toolCallId": "c1",
        "state": "input-streaming",
        **SIDECARS,
    }


def test_input_available_static_part() -> None:
    part = ToolPart(type="tool-lookup", tool_call_id="c1", state="input-available", input={"q": 1})
    assert part.tool_name == "lookup"
    assert not part.dynamic
    assert _round_trip(part) == {
        "type": "tool-lookup",
        "toolCallId": "c1",
        "state": "input-available",
        "input": {"q": 1},
        **SIDECARS,
    }


def test_output_available_always_carries_output_even_null() -> None:
    part = ToolPart(
        type="tool-lookup", tool_call_id="c1", state="output-available", input={}, output=None
    )
    assert _round_trip(part) == {
        "type": "tool-lookup",
        "toolCallId": "c1",
        "state": "output-available",
        "input": {},
        "output": None,
        **SIDECARS,
    }


def test_output_error_with_cancelled_sidecar() -> None:
    part = ToolPart.model_validate(
        {
            "type": "tool-lookup",
            "toolCallId": "c1",
            "state": "output-error",
            "input": {},
            "errorText": "The tool call was cancelled: user left",
            "cancelled": {"reason": "user left", "at": "2025-01-02T03:04:05Z"},
        }
    )
    assert part.error_text == "The tool call was cancelled: user left"
    assert part.cancelled is not None
    assert part.cancelled.at == T0
    assert _round_trip(part) == {
        "type": "tool-lookup",
        "toolCallId": "c1",
        "state": "output-error",
        "input": {},
        "errorText": "The tool call was cancelled: user left",
        **SIDECARS,
        "cancelled": {"reason": "user left", "at": "2025-01-02T03:04:05Z"},
    }


def test_invalid_static_input_is_raw_input_as_the_ai_sdk_writes_it() -> None:
    part = ToolPart(
        type="tool-lookup",
        tool_call_id="c1",
        state="output-error",
        raw_input={"q": "x"},
        error_text="bad",
    )
    wire = _round_trip(part)
    assert "input" not in wire
    assert wire["rawInput"] == {"q": "x"}


def test_dynamic_tool_carries_tool_name() -> None:
    part = ToolPart(
        type="dynamic-tool", tool_name="pick", tool_call_id="c2", state="input-available", input={}
    )
    assert part.dynamic
    assert _round_trip(part) == {
        "type": "dynamic-tool",
        "toolName": "pick",
        "toolCallId": "c2",
        "state": "input-available",
        "input": {},
        **SIDECARS,
    }


@pytest.mark.parametrize(
    ("state", "approval"),
    [
        ("approval-requested", {"id": "a1"}),
        ("approval-responded", {"id": "a1", "approved": True}),
        ("output-denied", {"id": "a1", "approved": False, "reason": "no"}),
    ],
)
def test_approval_states_carry_approval(state: str, approval: dict[str, Any]) -> None:
    wire = {"type": "tool-send", "toolCallId": "c", "state": state, "input": {}}
    part = ToolPart.model_validate({**wire, "approval": approval})
    assert _round_trip(part) == {**wire, "approval": approval, **SIDECARS}


@pytest.mark.parametrize(
    ("state", "approval", "problem"),
    [
        ("input-available", {"id": "a1"}, "has no approval"),
        ("approval-requested", {"id": "a1", "approved": True}, "without an answer"),
        ("approval-responded", {"id": "a1"}, "needs an answered approval"),
        ("output-denied", {"id": "a1", "approved": True}, "needs a denied approval"),
        ("output-available", {"id": "a1", "approved": False}, "only as granted"),
        ("output-available", {"id": "a1"}, "only as granted"),
        ("output-error", {"id": "a1", "approved": False}, "only as granted"),
        ("approval-requested", {"id": "a1", "reason": "why"}, "comes with its answer"),
    ],
)
def test_an_approval_only_on_the_arms_the_ai_sdk_allows_it(
    state: str, approval: dict[str, Any], problem: str
) -> None:
    # The AI SDK's safeValidateUIMessages (ai 6 and 7) refuses each of these parts.
    extra: dict[str, Any] = {"output": 1} if state == "output-available" else {}
    if state == "output-error":
        extra = {"errorText": "x"}
    wire = {"type": "tool-send", "toolCallId": "c", "state": state, "input": {}, **extra}
    with pytest.raises(ValidationError, match=problem):
        ToolPart.model_validate({**wire, "approval": approval})


@pytest.mark.parametrize("granted", [True, False])
@pytest.mark.parametrize(
    "ended",
    [{"state": "output-error", "errorText": "x"}, {"state": "output-available", "output": None}],
)
def test_an_ended_part_carries_a_granted_approval_or_none(
    ended: dict[str, Any], granted: bool
) -> None:
    wire: dict[str, Any] = {"type": "tool-send", "toolCallId": "c", **ended, "input": {}}
    if granted:
        wire["approval"] = {"id": "a1", "approved": True}
    assert _round_trip(ToolPart.model_validate(wire)) == {**wire, **SIDECARS}


def test_an_error_part_stored_with_an_unanswered_approval_reads_without_it() -> None:
    # Issue 14: before the fix, a call whose approval was cancelled or failed was stored as
    # an output-error part with {"id"} only, which the AI SDK refuses. Such a stored part
    # still reads (an old thread loads), and shows no approval from then on.
    wire = {
        "type": "tool-send",
        "toolCallId": "c",
        "state": "output-error",
        "input": {"q": 1},
        "errorText": "The tool call was cancelled.",
        "approval": {"id": "c.approval"},
    }
    part = ToolPart.model_validate(wire)
    assert part.approval is None
    assert "approval" not in part.to_wire()
    assert wire["approval"] == {"id": "c.approval"}  # the caller's dict is not changed
    message = Message.model_validate({"id": "m", "role": "assistant", "parts": [wire]})
    assert message.parts == (part,)
    with pytest.raises(ValidationError, match="only as granted"):  # built in Python: refused
        ToolPart(
            type="tool-send",
            tool_call_id="c",
            state="output-error",
            error_text="x",
            approval=ToolApproval(id="c.approval"),
        )


@pytest.mark.parametrize("end", ["cancel_action", "fail_action", "cancel_call"])
def test_a_call_whose_approval_ended_without_an_answer_shows_no_approval(end: str) -> None:
    # Issue 14, at the projection: the record keeps the approval (cancelled or failed),
    # the part does not show it, and the part is one the AI SDK accepts.
    record, _ = input_available(new_call("send", "c"), SEND, {"q": 1})
    record, _ = request_approval(record, approval_id="c.approval", at=T0)
    assert to_part(record).to_wire()["approval"] == {"id": "c.approval"}
    if end == "cancel_action":
        record = cancel_action(record, "c.approval", "changed my mind", at=T0).record
    elif end == "fail_action":
        record = fail_action(record, "c.approval", "card expired", at=T0).record
    else:
        record = cancel_call(record, "the run was cancelled", at=T0).record
    assert record.approval is not None
    assert (record.approval.state, record.approval.approved) == (
        "failed" if end == "fail_action" else "cancelled",
        None,
    )
    part = to_part(record)
    assert part.state == "output-error"
    assert part.approval is None
    assert "approval" not in part.to_wire()
    assert ToolPart.model_validate(part.to_wire()) == part


def test_a_granted_or_denied_approval_stays_on_the_ended_part() -> None:
    record, _ = input_available(new_call("send", "c"), SEND, {"q": 1})
    record, _ = request_approval(record, approval_id="c.approval", at=T0)
    granted = submit(record, SEND, "c.approval", {"approved": True}, at=T0).record
    failed = finish_exception(granted, "boom").record
    assert to_part(failed).to_wire()["approval"] == {"id": "c.approval", "approved": True}
    denied = submit(record, SEND, "c.approval", {"approved": False, "reason": "no"}, at=T0)
    assert to_part(denied.record).to_wire()["approval"] == {
        "id": "c.approval",
        "approved": False,
        "reason": "no",
    }


def test_suspensions_and_pending_suspension() -> None:
    pending = {
        "actionId": "a2",
        "name": "approval",
        "input": {"summary": "s"},
        "suspendedAt": "2025-01-02T03:04:05Z",
        "state": "pending",
    }
    submitted = {
        **pending,
        "actionId": "a1",
        "state": "submitted",
        "resolvedAt": "2025-01-02T03:04:05Z",
        "resume": None,
    }
    cancelled = {**submitted, "actionId": "a0", "state": "cancelled"}
    del cancelled["resume"]
    wire = {
        "type": "tool-send",
        "toolCallId": "c",
        "state": "input-available",
        "input": {},
        "data": {"progress": [{"id": "d1", "value": 0.5, "updatedAt": "2025-01-02T03:04:05Z"}]},
        "suspensions": [cancelled, submitted, pending],
        "pendingSuspension": pending,
        "cancelled": None,
    }
    part = ToolPart.model_validate(wire)
    assert part.pending_suspension == SuspensionView.model_validate(pending)
    assert part.pending_suspension is not None
    assert part.pending_suspension.action_id == "a2"
    assert _round_trip(part) == wire


@pytest.mark.parametrize(
    ("wire", "problem"),
    [
        ({"type": "text", "toolCallId": "c", "state": "input-available"}, "type"),
        ({"type": "tool-", "toolCallId": "c", "state": "input-available"}, "names no tool"),
        ({"type": "dynamic-tool", "toolCallId": "c", "state": "input-available"}, "toolName"),
        (
            {"type": "tool-a", "toolName": "b", "toolCallId": "c", "state": "input-streaming"},
            "disagree",
        ),
        ({"type": "tool-a", "toolCallId": "c", "state": "output-available"}, "carries output"),
        (
            {"type": "tool-a", "toolCallId": "c", "state": "input-available", "output": 1},
            "no output",
        ),
        ({"type": "tool-a", "toolCallId": "c", "state": "output-error"}, "needs errorText"),
        ({"type": "tool-a", "toolCallId": "c", "state": "output-denied"}, "needs a denied"),
        ({"type": "tool-a", "toolCallId": "c", "state": "done"}, "state"),
        ({"type": "tool-a", "toolCallId": "c", "state": "input-streaming", "extra": 1}, "extra"),
        (
            {
                "type": "tool-a",
                "toolCallId": "c",
                "state": "input-available",
                "input": float("nan"),
            },
            "nan",
        ),
    ],
)
def test_parts_that_put_a_field_on_the_wrong_arm_are_refused(
    wire: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem):
        ToolPart.model_validate(wire)


def test_pending_suspension_must_match_the_pending_episode() -> None:
    view = {
        "actionId": "a",
        "name": "n",
        "input": None,
        "suspendedAt": "2025-01-02T03:04:05Z",
        "state": "pending",
    }
    wire = {"type": "tool-a", "toolCallId": "c", "state": "input-available", "input": {}}
    with pytest.raises(ValidationError, match="pendingSuspension"):
        ToolPart.model_validate({**wire, "suspensions": [view]})
    with pytest.raises(ValidationError, match="resolvedAt"):
        SuspensionView.model_validate({**view, "state": "failed"})


def test_get_tool_name_reads_parts_and_wire_dicts() -> None:
    static = ToolPart(type="tool-lookup", tool_call_id="c", state="input-streaming")
    dynamic = ToolPart(
        type="dynamic-tool", tool_name="pick", tool_call_id="c", state="input-streaming"
    )
    assert get_tool_name(static) == "lookup"
    assert get_tool_name(static.to_wire()) == "lookup"
    assert get_tool_name(dynamic) == "pick"
    assert get_tool_name(dynamic.to_wire()) == "pick"
    with pytest.raises(TypeError, match="not a tool part: type 'text'"):
        get_tool_name({"type": "text", "text": "hi"})


def test_message_wire_and_round_trip() -> None:
    message = Message(
        id="m1",
        role="assistant",
        parts=[
            {"type": "text", "text": "Checking."},
            {"type": "tool-lookup", "toolCallId": "c", "state": "input-available", "input": {}},
        ],
    )
    wire = message.to_wire()
    assert wire == {
        "id": "m1",
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "Checking."},
            {
                "type": "tool-lookup",
                "toolCallId": "c",
                "state": "input-available",
                "input": {},
                **SIDECARS,
            },
        ],
    }
    assert Message.model_validate(wire) == message
    note = Message(
        id="m2",
        role="system",
        parts=[{"type": "text", "text": "done"}],
        metadata={"notification": {"hidden": True, "data": None}},
    )
    assert note.to_wire()["metadata"] == {"notification": {"hidden": True, "data": None}}
    assert Message.model_validate(note.to_wire()) == note
    with pytest.raises(ValidationError):
        Message(id="m3", role="tool", parts=[])  # type: ignore[arg-type]  # the point


def test_thread_and_run_state() -> None:
    state = ThreadState(
        thread_id="t1",
        messages=[Message(id="m", role="user", parts=[{"type": "text", "text": "hi"}])],
        runs=[RunState(run_id="r1", status="failed", error="boom")],
    )
    wire = state.to_wire()
    assert wire == {
        "version": 1,
        "threadId": "t1",
        "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        "runs": [{"runId": "r1", "status": "failed", "error": "boom"}],
    }
    assert ThreadState.model_validate(wire) == state
    assert state.runs[0].run_id == "r1"
    with pytest.raises(ValidationError):
        ThreadState.model_validate({**wire, "version": 2})


def test_action_values() -> None:
    assert ActionResult.accepted().to_wire() == {"status": "accepted", "error": None}
    assert ActionResult.rejected("no").to_wire() == {"status": "rejected", "error": "no"}
    with pytest.raises(ValidationError):
        ActionResult(status="rejected")
    origin = PendingActionOrigin(
        thread_id="t", tool_name="send", message_id="m", tool_call_id="c", run_id="r"
    )
    assert origin.to_wire() == {
        "kind": "tool",
        "threadId": "t",
        "toolName": "send",
        "messageId": "m",
        "toolCallId": "c",
        "runId": "r",
    }
    ref = PendingActionRef(
        **origin.model_dump(exclude={"suspend_name"}),
        suspend_name="approval",
        action_id="a1",
        name="send.approval",
    )
    wire = ref.to_wire()
    assert wire == {
        "kind": "tool",
        "threadId": "t",
        "toolName": "send",
        "suspendName": "approval",
        "messageId": "m",
        "toolCallId": "c",
        "runId": "r",
        "actionId": "a1",
        "name": "send.approval",
    }
    assert PendingActionRef.model_validate(wire) == ref
    assert ref.origin == origin.model_copy(update={"suspend_name": "approval"})
    with pytest.raises(ValidationError):
        ref.action_id = "other"  # type: ignore[misc]  # frozen


def test_an_instant_is_written_in_its_own_zone_however_often_it_is_written() -> None:
    # (``iso`` keeps the texts it made: instants equal in two zones are equal datetimes)
    utc = datetime(2025, 1, 2, 12, 30, tzinfo=UTC)
    paris = utc.astimezone(timezone(timedelta(hours=1)))
    assert utc == paris
    for _ in range(2):
        assert iso(utc) == "2025-01-02T12:30:00Z"
        assert iso(paris) == "2025-01-02T13:30:00+01:00"
        assert iso(utc.replace(tzinfo=None)) == "2025-01-02T12:30:00"
    # A wall time that comes twice (clocks turned back): equal datetimes, two offsets.
    first = datetime(2025, 10, 26, 2, 30, tzinfo=ZoneInfo("Europe/Paris"))
    second = first.replace(fold=1)
    assert first == second
    for _ in range(2):
        assert iso(first) == "2025-10-26T02:30:00+02:00"
        assert iso(second) == "2025-10-26T02:30:00+01:00"
