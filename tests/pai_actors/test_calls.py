"""The sans-IO tool-call core: one test per transition and rejection, then a state machine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from pydantic import BaseModel

from pai_actors import (
    ActionResult,
    CancelAtDeadline,
    FailAtDeadline,
    OnDeadline,
    ResolveAtDeadline,
    SuspendPoint,
    define_tool,
    json_schema,
)
from pai_actors._core.call_record import (
    ActionOpened,
    ActionResolved,
    CallRecord,
    CallSpec,
    Execute,
    Finished,
    Resume,
)
from pai_actors._core.calls import (
    cancel_action,
    cancel_call,
    fail_action,
    finish_exception,
    finish_failure,
    finish_output,
    input_available,
    input_delta,
    new_call,
    request_approval,
    submit,
    suspend,
    to_part,
    write_data,
)
from pai_actors._core.deadlines import expire, pending_expiry
from pai_actors._core.errors import InvalidTransition

T0 = datetime(2025, 1, 2, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)


class Query(BaseModel):
    q: int


class Approval(BaseModel):
    summary: str


class Decision(BaseModel):
    approved: bool


class Answer(BaseModel):
    answer: str


SEND = CallSpec.for_tool(
    define_tool(
        id="send",
        description="d",
        input_schema=Query,
        output_schema=Answer,
        suspend={"approval": SuspendPoint(suspend_schema=Approval, resume_schema=Decision)},
        execute=lambda ctx: None,
    )
)
ASK = CallSpec.for_tool(
    define_tool(id="ask", description="d", input_schema=Query, output_schema=Answer)
)


def _running() -> CallRecord:
    record, effects = input_available(new_call("send", "c1"), SEND, {"q": "3"})
    assert effects == (Execute(Query(q=3)),)
    return record


def _suspended(action_id: str = "a1") -> CallRecord:
    record, effects = suspend(
        _running(), SEND, "approval", {"summary": "s"}, action_id=action_id, at=T0
    )
    assert effects == (ActionOpened(action_id, "send.approval", "approval", {"summary": "s"}),)
    return record


def _awaiting() -> CallRecord:
    record, effects = input_available(new_call("ask", "c2"), ASK, {"q": 1})
    assert effects == (ActionOpened("c2", "ask", None, {"q": 1}),)
    return record


def test_input_streams_then_becomes_available() -> None:
    record = new_call("send", "c1")
    assert to_part(record).to_wire()["state"] == "input-streaming"
    record = input_delta(record, '{"q')
    assert record.input == {}  # partial JSON, as the AI SDK shows it
    record = input_delta(record, '": "ab')
    assert record.input == {"q": "ab"}  # a trailing string shows as far as it came
    record = input_delta(record, '", "n": tr')
    assert record.input == {"q": "ab"}  # an incomplete literal is left out
    record = input_delta(record, "ue}")
    assert record.input == {"q": "ab", "n": True}
    record, _ = input_available(record, SEND, {"q": 3})
    part = to_part(record)
    assert (part.state, part.input, part.pending_suspension) == ("input-available", {"q": 3}, None)


def test_streamed_input_with_nothing_parsable_yet_shows_no_input() -> None:
    record = input_delta(new_call("send", "c1"), " ")
    assert record.input is None


def test_invalid_model_input_is_an_output_error_that_never_executes() -> None:
    record, effects = input_available(new_call("send", "c1"), SEND, {"q": "x"})
    text = (
        "input does not match its schema (1 error):\n"
        "  input['q']: Input should be a valid integer, unable to parse string as an integer"
    )
    assert effects == (Finished("output-error", None, text),)
    assert to_part(record).to_wire() == {
        "type": "tool-send",
        "toolCallId": "c1",
        "state": "output-error",
        "rawInput": {"q": "x"},
        "errorText": text,
        "data": {},
        "suspensions": [],
        "pendingSuspension": None,
        "cancelled": None,
    }


def test_invalid_dynamic_input_stays_input() -> None:
    spec = CallSpec.external(json_schema({"type": "object", "required": ["a"]}))
    record, _ = input_available(new_call("pick", "c3", dynamic=True), spec, {})
    part = to_part(record).to_wire()
    assert part["input"] == {}
    assert (
        part["errorText"]
        == "input does not match its schema (1 error):\n  input: 'a' is a required property"
    )


def test_output_is_parsed_and_normalised() -> None:
    record, effects = finish_output(_running(), SEND, Answer(answer="ok"))
    assert effects == (Finished("output-available", {"answer": "ok"}, None),)
    assert to_part(record).to_wire()["output"] == {"answer": "ok"}


def test_null_output_without_schema_is_success() -> None:
    spec = CallSpec.external()
    record, _ = input_available(new_call("t", "c"), CallSpec(None, None, {}, True), {})
    record, _ = finish_output(record, spec, None)
    assert to_part(record).to_wire()["output"] is None
    assert to_part(record).to_wire()["state"] == "output-available"


def test_non_json_output_is_an_output_error() -> None:
    record, _ = input_available(new_call("t", "c"), CallSpec(None, None, {}, True), {})
    record, _ = finish_output(record, CallSpec(None, None, {}, True), {"s": {1, 2}})
    assert record.error_text == (
        "output['s'] is a set ({1, 2}), which JSON cannot represent; use a list instead "
        "(sorted(...) keeps its order stable)"
    )


def test_output_failing_its_schema_is_an_output_error() -> None:
    record, _ = finish_output(_running(), SEND, {"answer": 1})
    assert record.error_text == (
        "output does not match its schema (1 error):\n"
        "  output['answer']: Input should be a valid string"
    )


def test_fail_and_raise_keep_the_text_verbatim() -> None:
    record, effects = finish_failure(_running(), "No brief 7. List them first.")
    assert effects == (Finished("output-error", None, "No brief 7. List them first."),)
    record, _ = finish_exception(_running(), "boom")
    assert to_part(record).error_text == "boom"


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        (None, "The tool call was cancelled."),
        ("user left", "The tool call was cancelled: user left"),
    ],
)
def test_cancelled_call(reason: str | None, text: str) -> None:
    record, effects = cancel_call(_running(), reason, at=T1)
    assert effects == (Finished("output-error", None, text),)
    wire = to_part(record).to_wire()
    assert wire["errorText"] == text
    assert wire["cancelled"] == {"reason": reason, "at": "2025-01-02T00:00:01Z"}
    assert cancel_call(record, "again", at=T1) == (record, ())


def test_cancelling_a_suspended_call_cancels_its_episode() -> None:
    record, effects = cancel_call(_suspended(), None, at=T1)
    assert effects[0] == ActionResolved("a1", "cancelled")
    part = to_part(record)
    assert part.pending_suspension is None
    assert part.suspensions[0].state == "cancelled"


def test_suspend_opens_a_pending_episode() -> None:
    part = to_part(_suspended())
    assert part.state == "input-available"
    assert part.to_wire()["pendingSuspension"] == {
        "actionId": "a1",
        "name": "approval",
        "input": {"summary": "s"},
        "suspendedAt": "2025-01-02T00:00:00Z",
        "state": "pending",
    }


def test_suspend_at_an_undeclared_point_or_with_bad_input_fails_the_call() -> None:
    record, _ = suspend(_running(), SEND, "nope", {}, action_id="a", at=T0)
    assert record.error_text == (
        "tool 'send' suspended at 'nope', which it does not declare "
        "(declared suspend points: 'approval')"
    )
    record, _ = suspend(_running(), SEND, "approval", {}, action_id="a", at=T0)
    assert record.error_text == (
        "suspend input does not match its schema (1 error):\n"
        "  suspend input['summary']: Field required"
    )


def test_submit_resumes_and_the_call_may_suspend_again() -> None:
    record, result, effects = submit(_suspended(), SEND, "a1", {"approved": True}, at=T1)
    assert result == ActionResult.accepted()
    assert effects == (
        ActionResolved("a1", "submitted"),
        Resume("approval", Decision(approved=True), "a1", "send.approval"),
    )
    record, _ = suspend(record, SEND, "approval", {"summary": "again"}, action_id="a2", at=T1)
    wire = to_part(record).to_wire()
    assert [s["state"] for s in wire["suspensions"]] == ["submitted", "pending"]
    assert wire["suspensions"][0]["resume"] == {"approved": True}
    assert wire["suspensions"][0]["resolvedAt"] == "2025-01-02T00:00:01Z"
    assert wire["pendingSuspension"]["actionId"] == "a2"


def test_invalid_resume_is_rejected_and_the_action_stays_pending() -> None:
    record = _suspended()
    after, result, effects = submit(record, SEND, "a1", {"approved": "maybe"}, at=T1)
    assert result == ActionResult.rejected(
        "resume does not match its schema (1 error):\n"
        "  resume['approved']: Input should be a valid boolean, unable to interpret input"
    )
    assert (after, effects) == (record, ())


def test_unknown_and_resolved_actions_are_rejected() -> None:
    record = _suspended()
    assert submit(record, SEND, "zz", {}, at=T1).result == ActionResult.rejected(
        "no such action 'zz' on tool call 'c1' ('send'); use the action_id of one of its "
        "pending actions"
    )
    record, _, _ = submit(record, SEND, "a1", {"approved": False}, at=T1)
    for outcome in (
        submit(record, SEND, "a1", {"approved": True}, at=T1),
        cancel_action(record, "a1", at=T1),
        fail_action(record, "a1", "x", at=T1),
    ):
        assert outcome == (
            record,
            ActionResult.rejected(
                "action 'a1' is already resolved (submitted); an action resolves once"
            ),
            (),
        )


def test_cancel_action_cancels_the_call() -> None:
    record, result, effects = cancel_action(_suspended(), "a1", "not now", at=T1)
    assert result == ActionResult.accepted()
    assert effects == (
        ActionResolved("a1", "cancelled"),
        Finished("output-error", None, "The tool call was cancelled: not now"),
    )
    assert to_part(record).suspensions[0].state == "cancelled"


def test_fail_action_fails_the_call_with_str_of_the_error() -> None:
    record, result, effects = fail_action(_suspended(), "a1", ValueError("no signer"), at=T1)
    assert result == ActionResult.accepted()
    assert effects == (
        ActionResolved("a1", "failed"),
        Finished("output-error", None, "no signer"),
    )
    assert to_part(record).cancelled is None


def test_output_action_of_a_tool_without_execute() -> None:
    record = _awaiting()
    rejected = submit(record, ASK, "c2", {"answer": 3}, at=T1)
    assert rejected.result == ActionResult.rejected(
        "output does not match its schema (1 error):\n"
        "  output['answer']: Input should be a valid string"
    )
    assert rejected.record == record
    done, result, effects = submit(record, ASK, "c2", {"answer": "yes"}, at=T1)
    assert result == ActionResult.accepted()
    assert effects == (
        ActionResolved("c2", "submitted"),
        Finished("output-available", {"answer": "yes"}, None),
    )
    assert to_part(done).suspensions == ()
    assert submit(done, ASK, "c2", {"answer": "again"}, at=T1).result == ActionResult.rejected(
        "action 'c2' is already resolved (submitted); an action resolves once"
    )


def test_output_action_cancel_and_fail() -> None:
    record, _, _ = cancel_action(_awaiting(), "c2", at=T1)
    assert record.error_text == "The tool call was cancelled."
    assert record.output_action == "cancelled"
    record, _, _ = fail_action(_awaiting(), "c2", "worker died", at=T1)
    assert (record.error_text, record.output_action) == ("worker died", "failed")


def test_data_items_replace_in_place_and_transient_ones_stay_out() -> None:
    record, _ = write_data(_running(), "progress", 0.1, item_id="p", at=T0)
    record, _ = write_data(record, "progress", {"step": 2}, item_id="q", at=T0)
    record, _ = write_data(record, "progress", 0.9, item_id="p", at=T1)
    same, effects = write_data(record, "progress", 1, item_id="t", at=T1, transient=True)
    assert same == record
    assert len(effects) == 1
    assert to_part(record).to_wire()["data"] == {
        "progress": [
            {"id": "p", "value": 0.9, "updatedAt": "2025-01-02T00:00:01Z"},
            {"id": "q", "value": {"step": 2}, "updatedAt": "2025-01-02T00:00:00Z"},
        ]
    }


def test_events_the_runtime_never_sends_raise_invalid_transition() -> None:
    with pytest.raises(InvalidTransition, match="cannot take an output while suspended"):
        finish_output(_suspended(), SEND, None)
    record, _, _ = submit(_suspended("a1"), SEND, "a1", {"approved": True}, at=T1)
    with pytest.raises(InvalidTransition, match="already used"):
        suspend(record, SEND, "approval", {"summary": "s"}, action_id="a1", at=T0)
    with pytest.raises(ValueError, match="timezone-aware"):
        cancel_call(_running(), None, at=datetime(2025, 1, 1))


_DEADLINES = st.sampled_from([None, timedelta(0), timedelta(seconds=5)])


class CallMachine(RuleBasedStateMachine):
    """Random suspends, submissions, cancels and failures against the invariants."""

    def __init__(self) -> None:
        super().__init__()
        self.spec = SEND
        self.record = new_call("send", "c1")
        self.issued: list[str] = []
        self.resolved: dict[str, object] = {}
        self.clock = T0

    @initialize(execute=st.booleans(), approval=st.booleans(), deadline=_DEADLINES)
    def start(self, execute: bool, approval: bool, deadline: timedelta | None) -> None:
        self.spec = SEND if execute else ASK
        name = "send" if execute else "ask"
        expires_at = None if deadline is None else T0 + deadline
        self.record, _ = input_available(
            new_call(name, "c1"), self.spec, {"q": 1}, output_expires_at=expires_at
        )
        if not execute:
            self.issued.append("c1")
        elif approval:  # a registration with needs_approval: the call waits for it first
            self.record, _ = request_approval(
                self.record, approval_id="c1.approval", at=T0, expires_at=expires_at
            )
            self.issued.append("c1.approval")

    def _tick(self) -> datetime:
        self.clock += timedelta(seconds=1)
        return self.clock

    @rule(deadline=_DEADLINES)
    def suspend_now(self, deadline: timedelta | None) -> None:
        if self.record.phase != "executing":
            return
        action_id = f"a{len(self.issued)}"
        self.issued.append(action_id)
        at = self._tick()
        self.record, _ = suspend(
            self.record,
            self.spec,
            "approval",
            {"summary": "s"},
            action_id=action_id,
            at=at,
            expires_at=None if deadline is None else at + deadline,
        )

    def _action_id(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from([*self.issued, "unknown", "c1"]))

    def _apply(self, outcome: tuple[CallRecord, ActionResult, tuple[object, ...]]) -> None:
        record, result, effects = outcome
        if result.status == "rejected":
            assert record == self.record
            assert effects == ()
            assert result.error
        else:
            assert record != self.record
        self.record = record

    @rule(
        data=st.data(),
        payload=st.sampled_from(
            [
                {"approved": True},
                {"approved": False, "reason": "no"},
                {"approved": "x"},
                {"answer": "ok"},
                {"answer": 1},
                None,
                {1, 2},
            ]
        ),
    )
    def submit_payload(self, data: st.DataObject, payload: object) -> None:
        self._apply(submit(self.record, self.spec, self._action_id(data), payload, at=self._tick()))

    @rule(data=st.data(), reason=st.sampled_from([None, "", "stop"]))
    def cancel_an_action(self, data: st.DataObject, reason: str | None) -> None:
        self._apply(cancel_action(self.record, self._action_id(data), reason, at=self._tick()))

    @rule(data=st.data())
    def fail_an_action(self, data: st.DataObject) -> None:
        self._apply(fail_action(self.record, self._action_id(data), "failed", at=self._tick()))

    @rule(
        data=st.data(),
        outcome=st.sampled_from(
            [
                CancelAtDeadline(),
                CancelAtDeadline("too late"),
                FailAtDeadline("Nobody answered in time."),
                ResolveAtDeadline({"approved": False}),
                ResolveAtDeadline({"approved": True}),
                ResolveAtDeadline({"answer": "ok"}),
                ResolveAtDeadline({"approved": "x"}),  # refused by every schema: it fails
            ]
        ),
        wait=st.sampled_from([0, 3, 30]),
    )
    def expire_an_action(self, data: st.DataObject, outcome: OnDeadline, wait: int) -> None:
        action_id = self._action_id(data)
        expiry = pending_expiry(self.record, action_id)
        self.clock += timedelta(seconds=wait)
        step = expire(self.record, self.spec, action_id, outcome, at=self.clock)
        self._apply(step)
        due = expiry is not None and expiry <= self.clock
        assert (step.result.status == "accepted") == due  # only a due deadline resolves
        if due:
            assert pending_expiry(step.record, action_id) is None  # resolved, once

    @rule(reason=st.sampled_from([None, "shutdown"]))
    def cancel_the_call(self, reason: str | None) -> None:
        self.record, _ = cancel_call(self.record, reason, at=self._tick())

    @rule(output=st.sampled_from([{"answer": "ok"}, {"answer": 2}, None]))
    def finish(self, output: object) -> None:
        if self.record.phase == "executing":
            self.record, _ = finish_output(self.record, self.spec, output)

    @invariant()
    def at_most_one_pending_episode(self) -> None:
        pending = [e for e in self.record.episodes if e.state == "pending"]
        assert len(pending) <= 1
        assert (self.record.phase == "suspended") == bool(pending)
        assert (self.record.phase == "awaiting_output") == (self.record.output_action == "pending")

    @invariant()
    def resolved_episodes_never_change(self) -> None:
        for episode in self.record.episodes:
            if episode.state != "pending":
                assert self.resolved.setdefault(episode.action_id, episode) == episode
        if self.record.output_action not in (None, "pending"):
            assert self.resolved.setdefault("c1", self.record.output_action) == (
                self.record.output_action
            )
        approval = self.record.approval
        if approval is not None and approval.state != "pending":
            assert self.resolved.setdefault(approval.id, approval) == approval

    @invariant()
    def an_approval_gates_execution(self) -> None:
        approval = self.record.approval
        if approval is None:
            return
        assert (self.record.phase == "awaiting_approval") == (approval.state == "pending")
        if self.record.phase in ("executing", "suspended"):
            assert approval.approved is True  # only an approved call runs
        if self.record.finish == "output-denied":
            assert approval.approved is False
        if approval.approved is False:
            assert self.record.finish == "output-denied"

    @invariant()
    def projection_agrees_with_the_record(self) -> None:
        part = to_part(self.record)
        assert part.state == self.record.state
        assert part.expires_at == self.record.expires_at
        pending = self.record.pending_episode
        if pending is not None:
            assert part.expires_at == pending.expires_at
        assert (part.pending_suspension is None) == (self.record.pending_episode is None)
        assert part.state in (
            "input-available",
            "approval-requested",
            "approval-responded",
            "output-available",
            "output-error",
            "output-denied",
        )
        # An approval shows while it is requested and once it is answered; one that ended
        # unanswered (cancelled, failed) does not (the AI SDK refuses it on an ended part).
        approval = self.record.approval
        shown = approval is not None and approval.state in ("pending", "submitted")
        assert (part.approval is not None) == shown
        assert (part.cancelled is not None) == (
            part.error_text is not None
            and part.error_text.startswith("The tool call was cancelled")
        )
        assert type(part).model_validate(part.to_wire()) == part


TestCallMachine = CallMachine.TestCase
