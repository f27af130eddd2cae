"""The model protocol's events for real models: reasoning, usage, provider metadata, and how
a step reads them (backward compatible: a step without them reads as before)."""

from __future__ import annotations

import pytest

from pai_actors import (
    Finish,
    ModelAssistantMessage,
    ModelProtocolError,
    ModelReasoningPart,
    ReasoningDelta,
    ReasoningEnd,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from pai_actors._core.step import ModelStep, StepAccumulator


def read(*events: object) -> ModelStep:
    accumulator = StepAccumulator()
    for event in events:
        accumulator.feed(event)  # type: ignore[arg-type]
    return accumulator.result()


def test_reasoning_parts_are_closed_by_an_end_or_by_any_other_event() -> None:
    signed = {"anthropic": {"signature": "s"}}
    step = read(
        ReasoningDelta("Think"),
        ReasoningDelta("ing."),
        ReasoningEnd(signed),
        ReasoningEnd({"anthropic": {"redactedData": "x"}}),  # a part without text
        ReasoningDelta("More."),
        TextDelta("Answer."),
        Finish("stop"),
    )
    assert step.reasoning == (
        ModelReasoningPart("Thinking.", signed),
        ModelReasoningPart("", {"anthropic": {"redactedData": "x"}}),
        ModelReasoningPart("More."),
    )
    assert step.text == "Answer."


def test_the_open_reasoning_is_visible_while_it_streams() -> None:
    accumulator = StepAccumulator()
    accumulator.feed(ReasoningDelta("a"))
    accumulator.feed(ReasoningDelta("b"))
    assert accumulator.reasoning == "ab"
    accumulator.feed(ReasoningEnd())
    assert accumulator.reasoning == ""


def test_usage_and_metadata_come_from_finish() -> None:
    usage = Usage(input_tokens=10, output_tokens=5, reasoning_tokens=2)
    step = read(TextDelta("x"), Finish("stop", usage, {"openai": {"id": "r1"}}))
    assert step.usage == usage
    assert usage.total_tokens == 15
    assert step.provider_metadata == {"openai": {"id": "r1"}}
    assert read(Finish("stop")) == ModelStep("", (), "stop")  # as before


def test_reprs_stay_constructor_like() -> None:
    assert repr(Finish("stop")) == "Finish(reason='stop')"
    finish = Finish("length", Usage(1, 2), {"anthropic": {"id": "m"}})
    assert eval(repr(finish)) == finish
    part = ModelReasoningPart("t", {"anthropic": {"signature": "s"}})
    assert eval(repr(ModelAssistantMessage([part]))) == ModelAssistantMessage([part])


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: Usage(input_tokens=-1), "Usage input_tokens is -1"),
        (lambda: Usage(output_tokens=True), "Usage output_tokens is True"),
        (lambda: Finish("stop", usage=3), "Finish usage is 3"),  # type: ignore[arg-type]
        (lambda: ReasoningEnd({"anthropic": "s"}), "provider_metadata of a ReasoningEnd"),  # type: ignore[dict-item]
        (lambda: ReasoningEnd({"a": {"x": float("nan")}}), "provider_metadata must be JSON"),
    ],
)
def test_malformed_events_are_refused_at_construction(make: object, problem: str) -> None:
    with pytest.raises(ModelProtocolError, match=problem):
        make()  # type: ignore[operator]


def test_a_tool_call_still_completes_a_reasoning_part() -> None:
    step = read(ReasoningDelta("Call it."), ToolCallEvent("c1", "t", {}), Finish("tool-calls"))
    assert step.reasoning == (ModelReasoningPart("Call it."),)
    assert [c.tool_call_id for c in step.tool_calls] == ["c1"]
