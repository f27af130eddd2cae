"""The model side: requests, model-facing messages, events, and reading a step's stream."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import pytest

from pai_actors import (
    Finish,
    Model,
    ModelAssistantMessage,
    ModelEvent,
    ModelMessage,
    ModelRequest,
    ModelSystemMessage,
    ModelTextPart,
    ModelTool,
    ModelToolCallPart,
    ModelToolMessage,
    ModelToolResultPart,
    ModelUserMessage,
    PaiError,
    TextDelta,
    ToolCallEvent,
    ToolInputDelta,
    ToolInputStart,
)
from pai_actors._core.errors import ModelProtocolError
from pai_actors._core.step import ModelStep, StepAccumulator, accumulate_step, json_equal


async def _stream(events: Iterable[object]) -> AsyncIterator[ModelEvent]:
    for event in events:
        yield event  # type: ignore[misc]  # deliberately not only events, in some tests


async def _read(*events: object) -> ModelStep:
    return await accumulate_step(_stream(events))


# -- requests and messages -----------------------------------------------------------------


def test_request_copies_messages_to_a_tuple_and_tools_to_a_dict() -> None:
    messages = [ModelUserMessage("hi")]
    tools = {"lookup": ModelTool("Look up.", {"type": "object"})}
    request = ModelRequest("Be brief.", messages, tools)
    messages.append(ModelUserMessage("later"))
    tools.clear()
    assert request.messages == (ModelUserMessage("hi"),)
    assert request.tools == {"lookup": ModelTool("Look up.", {"type": "object"})}


def test_request_repr_is_constructor_like() -> None:
    request = ModelRequest(
        "Be brief.", [ModelUserMessage("hi")], {"t": ModelTool("T.", {"type": "object"})}
    )
    assert eval(repr(request)) == request


def test_request_rejects_a_message_that_is_not_model_facing() -> None:
    with pytest.raises(ModelProtocolError) as info:
        ModelRequest(None, [{"role": "user", "content": "hi"}])  # type: ignore[list-item]
    assert str(info.value) == (
        "ModelRequest messages cannot hold {'role': 'user', 'content': 'hi'}; use "
        "ModelSystemMessage, ModelUserMessage, ModelAssistantMessage or ModelToolMessage"
    )


def test_request_rejects_a_tool_that_is_not_a_model_tool() -> None:
    with pytest.raises(ModelProtocolError, match=r"tool 'x' is 'X\.'; give a ModelTool"):
        ModelRequest(None, [], {"x": "X."})  # type: ignore[dict-item]


def test_messages_have_the_ai_sdk_wire_shape() -> None:
    messages: list[ModelMessage] = [
        ModelSystemMessage("Note."),
        ModelUserMessage("Send it."),
        ModelAssistantMessage(
            [ModelTextPart("Sending."), ModelToolCallPart("call_1", "send", {"n": 1})]
        ),
        ModelToolMessage([ModelToolResultPart("call_1", "send", {"type": "json", "value": 1})]),
    ]
    assert [m.to_wire() for m in messages] == [
        {"role": "system", "content": "Note."},
        {"role": "user", "content": [{"type": "text", "text": "Send it."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Sending."},
                {
                    "type": "tool-call",
                    "toolCallId": "call_1",
                    "toolName": "send",
                    "input": {"n": 1},
                },
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call_1",
                    "toolName": "send",
                    "output": {"type": "json", "value": 1},
                }
            ],
        },
    ]
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool"]


def test_message_parts_are_kept_as_a_tuple() -> None:
    message = ModelAssistantMessage([ModelTextPart("a")])
    assert message.parts == (ModelTextPart("a"),)
    assert eval(repr(message)) == message


def test_assistant_message_rejects_a_tool_result_part() -> None:
    result = ModelToolResultPart("c", "t", {"type": "text", "value": "ok"})
    with pytest.raises(ModelProtocolError) as info:
        ModelAssistantMessage([result])  # type: ignore[list-item]  # the point of the test
    assert str(info.value) == (
        f"ModelAssistantMessage cannot hold {result!r}; "
        "its parts are ModelReasoningPart, ModelTextPart or ModelToolCallPart"
    )


@pytest.mark.parametrize(
    "output",
    [
        {"type": "text", "value": "ok"},
        {"type": "error-text", "value": "The tool call was cancelled."},
        {"type": "json", "value": {"a": [1, None]}},
        {"type": "error-json", "value": {"code": "tool_failed"}},
        {"type": "content", "value": [{"type": "text", "text": "chart"}]},
    ],
)
def test_tool_result_accepts_every_ai_sdk_output_type(output: dict[str, object]) -> None:
    assert ModelToolResultPart("c", "t", output).output == output  # type: ignore[arg-type]


def test_tool_result_rejects_an_unknown_output_type() -> None:
    with pytest.raises(ModelProtocolError) as info:
        ModelToolResultPart("c", "t", {"type": "html", "value": "<b>"})
    assert str(info.value) == (
        "the output of tool call 'c' has the unknown type 'html'; use "
        '{"type": "text" | "error-text", "value": str}, {"type": "json" | "error-json", '
        '"value": <JSON>} or {"type": "content", "value": [...]}'
    )


def test_tool_result_rejects_a_bare_value() -> None:
    with pytest.raises(ModelProtocolError, match=r"^the output of tool call 'c' 'ok' is not a"):
        ModelToolResultPart("c", "t", "ok")  # type: ignore[arg-type]


def test_tool_result_rejects_text_that_is_not_a_str() -> None:
    with pytest.raises(ModelProtocolError) as info:
        ModelToolResultPart("c", "t", {"type": "text", "value": 3})
    assert str(info.value) == (
        "the output of tool call 'c' of type 'text' has the value 3; its value must be a str"
    )


def test_tool_result_rejects_a_value_that_is_not_json() -> None:
    with pytest.raises(ModelProtocolError, match=r"\['value'\]\['n'\] is nan"):
        ModelToolResultPart("c", "t", {"type": "json", "value": {"n": float("nan")}})


# -- events ----------------------------------------------------------------------------------


def test_finish_rejects_an_unknown_reason() -> None:
    with pytest.raises(ModelProtocolError) as info:
        Finish("done")  # type: ignore[arg-type]
    assert str(info.value) == (
        "Finish reason 'done' is not one of 'stop', 'tool-calls', 'length', "
        "'content-filter', 'error', 'other', 'unknown'; map the provider's reason to one of "
        "them ('other' when none fits)"
    )


def test_model_protocol_error_is_a_pai_error() -> None:
    assert issubclass(ModelProtocolError, PaiError)


def test_a_class_with_stream_is_a_model() -> None:
    class Echo:
        def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            return _stream([TextDelta(str(request.instructions)), Finish("stop")])

    model: Model = Echo()  # checked by mypy: structural typing
    assert model.stream(ModelRequest("x")) is not None


# -- reading a step --------------------------------------------------------------------------


async def test_text_deltas_are_concatenated() -> None:
    step = await _read(TextDelta("Hel"), TextDelta("lo."), Finish("stop"))
    assert step == ModelStep("Hello.", (), "stop")


async def test_tool_calls_are_kept_in_order() -> None:
    first = ToolCallEvent("call_1", "a", {})
    second = ToolCallEvent("call_2", "b", [1])
    step = await _read(TextDelta("Both."), first, second, Finish("tool-calls"))
    assert step == ModelStep("Both.", (first, second), "tool-calls")


async def test_a_streamed_call_completes_with_the_input_its_deltas_spell() -> None:
    call = ToolCallEvent("c", "a", {"x": 1})
    events = [ToolInputStart("c", "a"), ToolInputDelta("c", '{"x"'), ToolInputDelta("c", ":1}")]
    step = await _read(*events, call, Finish("tool-calls"))
    assert step.tool_calls == (call,)


async def test_a_started_call_without_deltas_takes_its_input_as_given() -> None:
    call = ToolCallEvent("c", "a", {"x": 1})
    step = await _read(ToolInputStart("c", "a"), call, Finish("tool-calls"))
    assert step.tool_calls == (call,)


def test_accumulator_exposes_partial_input_while_a_call_streams() -> None:
    accumulator = StepAccumulator()
    accumulator.feed(ToolInputStart("c", "a"))
    accumulator.feed(ToolInputDelta("c", '{"x":'))
    assert dict(accumulator.streaming) == {"c": '{"x":'}
    accumulator.feed(ToolInputDelta("c", "1}"))
    accumulator.feed(ToolCallEvent("c", "a", {"x": 1}))
    assert dict(accumulator.streaming) == {}
    assert not accumulator.finished


async def test_a_delta_for_an_unknown_call_is_an_error() -> None:
    with pytest.raises(ModelProtocolError) as info:
        await _read(ToolInputDelta("call_9", '{"a'), Finish("stop"))
    assert str(info.value) == (
        "ToolInputDelta(tool_call_id='call_9', delta='{\"a') arrived for tool call 'call_9' "
        "without a ToolInputStart; stream a call's input between "
        "ToolInputStart('call_9', <tool name>) and its ToolCallEvent"
    )


async def test_a_delta_after_the_call_completed_is_an_error() -> None:
    with pytest.raises(ModelProtocolError, match="after the ToolCallEvent that completed it"):
        await _read(
            ToolInputStart("c", "a"),
            ToolCallEvent("c", "a", {}),
            ToolInputDelta("c", "{}"),
            Finish("tool-calls"),
        )


async def test_an_input_that_does_not_match_the_streamed_json_is_an_error() -> None:
    with pytest.raises(ModelProtocolError) as info:
        await _read(
            ToolInputStart("c", "a"),
            ToolInputDelta("c", '{"x":1}'),
            ToolCallEvent("c", "a", {"x": 2}),
            Finish("tool-calls"),
        )
    assert str(info.value) == (
        "ToolCallEvent(tool_call_id='c', tool_name='a', input={'x': 2}) does not match its "
        "streamed input '{\"x\":1}' (which parses to {'x': 1}); the ToolInputDeltas of a "
        "call must spell the JSON text of its ToolCallEvent's input"
    )


async def test_true_does_not_match_a_streamed_one() -> None:
    with pytest.raises(ModelProtocolError, match="does not match its streamed input '1'"):
        await _read(
            ToolInputStart("c", "a"),
            ToolInputDelta("c", "1"),
            ToolCallEvent("c", "a", True),
            Finish("tool-calls"),
        )


async def test_streamed_input_that_is_not_json_is_an_error() -> None:
    with pytest.raises(
        ModelProtocolError, match=r"^the streamed input of tool call 'c' is not valid JSON \("
    ):
        await _read(
            ToolInputStart("c", "a"),
            ToolInputDelta("c", '{"x":'),
            ToolCallEvent("c", "a", {"x": None}),
            Finish("tool-calls"),
        )


async def test_streamed_nan_is_not_json() -> None:
    with pytest.raises(ModelProtocolError, match="NaN is not JSON"):
        await _read(
            ToolInputStart("c", "a"),
            ToolInputDelta("c", "NaN"),
            ToolCallEvent("c", "a", None),
            Finish("tool-calls"),
        )


async def test_a_call_that_changes_its_tool_name_is_an_error() -> None:
    with pytest.raises(ModelProtocolError) as info:
        await _read(ToolInputStart("c", "a"), ToolCallEvent("c", "b", {}), Finish("tool-calls"))
    assert str(info.value) == (
        "ToolCallEvent(tool_call_id='c', tool_name='b', input={}) names the tool 'b', but its "
        "ToolInputStart named 'a'; a call keeps the tool it started with"
    )


async def test_a_reused_tool_call_id_is_an_error() -> None:
    with pytest.raises(ModelProtocolError) as info:
        await _read(ToolCallEvent("c", "a", {}), ToolCallEvent("c", "a", {}), Finish("stop"))
    assert str(info.value) == (
        "ToolCallEvent(tool_call_id='c', tool_name='a', input={}) reuses the tool_call_id 'c' "
        "of an earlier call in this step; give every tool call its own tool_call_id"
    )


async def test_finish_while_a_call_streams_is_an_error() -> None:
    with pytest.raises(ModelProtocolError) as info:
        await _read(ToolInputStart("c", "a"), ToolInputDelta("c", "{"), Finish("tool-calls"))
    assert str(info.value) == (
        "Finish(reason='tool-calls') arrived while tool calls were still streaming their "
        "input: 'c' ('a'); complete each with a ToolCallEvent before Finish"
    )


async def test_an_event_after_finish_is_an_error() -> None:
    with pytest.raises(ModelProtocolError) as info:
        await _read(Finish("stop"), TextDelta("more"))
    assert str(info.value) == (
        "TextDelta(text='more') arrived after Finish(reason='stop'); Finish must be the last "
        "event of a step (start a new step with a new stream)"
    )


async def test_a_stream_without_finish_is_an_error() -> None:
    with pytest.raises(ModelProtocolError) as info:
        await _read(TextDelta("Hi"))
    assert str(info.value) == (
        "the model stream ended without a Finish event; a model must end every step with "
        "Finish(reason), e.g. Finish('stop') or Finish('tool-calls')"
    )


async def test_something_that_is_not_an_event_is_an_error() -> None:
    with pytest.raises(ModelProtocolError) as info:
        await _read("Hi", Finish("stop"))
    assert str(info.value) == (
        "the model stream yielded 'Hi' (str), which is not a model event; yield TextDelta, "
        "ToolInputStart, ToolInputDelta, ToolCallEvent or Finish"
    )


async def test_the_stream_is_closed_when_the_protocol_breaks() -> None:
    closed = []

    async def events() -> AsyncIterator[ModelEvent]:
        try:
            yield Finish("stop")
            yield TextDelta("late")
            yield TextDelta("never read")
        finally:
            closed.append(True)

    with pytest.raises(ModelProtocolError):
        await accumulate_step(events())
    assert closed == [True]


def test_json_equal_tells_bools_from_numbers_but_not_ints_from_floats() -> None:
    assert json_equal({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert not json_equal([True], [1])
    assert not json_equal({"a": 0}, {"a": False})
    assert not json_equal({"a": 1}, {"b": 1})
    assert not json_equal([1], [1, 1])
    assert not json_equal("1", 1)
