"""pai_actors.testing's scripted model: ScriptedModel, tool_call and text."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from pai_actors import (
    MAX_SAFE_INTEGER,
    Finish,
    JsonValue,
    ModelAssistantMessage,
    ModelEvent,
    ModelRequest,
    ModelTool,
    ModelToolCallPart,
    ModelUserMessage,
    PaiError,
    TextDelta,
    ToolCallEvent,
    ToolInputDelta,
    ToolInputStart,
)
from pai_actors._core.step import accumulate_step
from pai_actors.testing import ScriptedModel, ScriptedModelError, text, tool_call

OBJECT: dict[str, JsonValue] = {"type": "object"}


def _request(*tools: str, prompt: str = "go") -> ModelRequest:
    return ModelRequest(
        "Be brief.", [ModelUserMessage(prompt)], {name: ModelTool(name, OBJECT) for name in tools}
    )


async def _events(model: ScriptedModel, request: ModelRequest) -> list[ModelEvent]:
    return [event async for event in model.stream(request)]


async def test_a_text_step_writes_the_text_and_stops() -> None:
    model = ScriptedModel([text("Sent.")])
    assert await _events(model, _request()) == [TextDelta("Sent."), Finish("stop")]


async def test_a_tool_call_step_finishes_with_tool_calls() -> None:
    model = ScriptedModel([[tool_call("requestApproval", {"summary": "Send invoice"})]])
    assert await _events(model, _request("requestApproval")) == [
        ToolCallEvent("call_1", "requestApproval", {"summary": "Send invoice"}),
        Finish("tool-calls"),
    ]


async def test_steps_are_played_in_order_one_per_request() -> None:
    model = ScriptedModel([[tool_call("a", {})], text("Done.")])
    first = await accumulate_step(model.stream(_request("a")))
    second = await accumulate_step(model.stream(_request("a")))
    assert [first.finish_reason, second.finish_reason] == ["tool-calls", "stop"]
    assert second.text == "Done."


async def test_requests_are_recorded_in_order() -> None:
    model = ScriptedModel([text("1"), text("2")])
    first, second = _request(prompt="one"), _request(prompt="two")
    await _events(model, first)
    await _events(model, second)
    assert model.requests == [first, second]


async def test_a_request_is_recorded_when_stream_is_called() -> None:
    model = ScriptedModel([text("1")])
    request = _request()
    model.stream(request)
    assert model.requests == [request]


async def test_tool_call_ids_go_on_after_the_calls_of_the_conversation() -> None:
    model = ScriptedModel([[tool_call("a", {}), tool_call("a", {})], [tool_call("a", {})]])
    first = await accumulate_step(model.stream(_request("a")))
    assert [call.tool_call_id for call in first.tool_calls] == ["call_1", "call_2"]
    history = ModelAssistantMessage(
        [ModelToolCallPart(c.tool_call_id, c.tool_name, c.input) for c in first.tool_calls]
    )
    later = ModelRequest("Be brief.", [ModelUserMessage("go"), history], _request("a").tools)
    second = await accumulate_step(model.stream(later))
    assert [call.tool_call_id for call in second.tool_calls] == ["call_3"]
    # Another conversation (or a new model on the same one) numbers from its own history.
    other = ScriptedModel([[tool_call("a", {})], [tool_call("a", {})]])
    assert (await accumulate_step(other.stream(_request("a")))).tool_calls[0].tool_call_id == (
        "call_1"
    )
    assert (await accumulate_step(other.stream(later))).tool_calls[0].tool_call_id == "call_3"


async def test_a_given_id_is_used_and_not_counted() -> None:
    model = ScriptedModel([[tool_call("a", {}, id="mine"), tool_call("a", {})]])
    step = await accumulate_step(model.stream(_request("a")))
    assert [call.tool_call_id for call in step.tool_calls] == ["mine", "call_1"]


async def test_a_streamed_call_emits_start_deltas_and_the_call() -> None:
    model = ScriptedModel([[tool_call("a", {"summary": "Send invoice"}, stream=True)]])
    assert await _events(model, _request("a")) == [
        ToolInputStart("call_1", "a"),
        ToolInputDelta("call_1", '{"summar'),
        ToolInputDelta("call_1", 'y":"Send'),
        ToolInputDelta("call_1", " invoice"),
        ToolInputDelta("call_1", '"}'),
        ToolCallEvent("call_1", "a", {"summary": "Send invoice"}),
        Finish("tool-calls"),
    ]


async def test_a_short_streamed_input_still_arrives_in_two_fragments() -> None:
    model = ScriptedModel([[tool_call("a", {}, stream=True)]])
    events = await _events(model, _request("a"))
    assert events[1:3] == [ToolInputDelta("call_1", "{"), ToolInputDelta("call_1", "}")]


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_streamed_deltas_spell_the_json_input(value: Any) -> None:
    model = ScriptedModel([[tool_call("a", value, stream=True)]])

    async def check() -> None:
        events = await _events(model, _request("a"))
        deltas = "".join(e.delta for e in events if isinstance(e, ToolInputDelta))
        assert json.loads(deltas) == value
        assert deltas == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        replay = ScriptedModel([[tool_call("a", value, stream=True)]])
        step = await accumulate_step(replay.stream(_request("a")))
        assert step.tool_calls == (ToolCallEvent("call_1", "a", value),)

    trio.run(check)


async def test_text_and_tool_calls_keep_their_scripted_order() -> None:
    model = ScriptedModel([[text("Checking."), tool_call("a", {}), text("Done.")]])
    assert await _events(model, _request("a")) == [
        TextDelta("Checking."),
        ToolCallEvent("call_1", "a", {}),
        TextDelta("Done."),
        Finish("tool-calls"),
    ]


async def test_a_single_tool_call_is_a_step() -> None:
    model = ScriptedModel([tool_call("a", {})])
    step = await accumulate_step(model.stream(_request("a")))
    assert step.finish_reason == "tool-calls"


async def test_an_empty_step_only_finishes() -> None:
    model = ScriptedModel([[]])
    assert await _events(model, _request()) == [Finish("stop")]


async def test_a_callable_step_decides_from_the_request() -> None:
    def answer(request: ModelRequest) -> Any:
        return text(f"{len(request.messages)} message(s), tools {sorted(request.tools)}")

    model = ScriptedModel([answer])
    step = await accumulate_step(model.stream(_request("a", "b")))
    assert step.text == "1 message(s), tools ['a', 'b']"


async def test_an_async_callable_step_is_awaited() -> None:
    async def call(request: ModelRequest) -> Any:
        await trio.lowlevel.checkpoint()
        return [tool_call("a", {"prompt": request.instructions})]

    model = ScriptedModel([call])
    step = await accumulate_step(model.stream(_request("a")))
    assert step.tool_calls == (ToolCallEvent("call_1", "a", {"prompt": "Be brief."}),)


async def test_raw_events_are_emitted_verbatim_without_the_tool_check() -> None:
    hallucinated = ToolCallEvent("x", "notOffered", {})
    model = ScriptedModel([[hallucinated]])
    assert await _events(model, _request("a")) == [hallucinated, Finish("tool-calls")]


async def test_a_step_with_a_raw_finish_gets_no_automatic_one() -> None:
    model = ScriptedModel([[text("cut"), Finish("length")]])
    assert await _events(model, _request()) == [TextDelta("cut"), Finish("length")]


async def test_the_stream_checkpoints_so_a_cancelled_reader_stops() -> None:
    model = ScriptedModel([text("a")])
    stream = model.stream(_request())
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await stream.__anext__()


async def test_concurrent_readers_interleave_at_the_checkpoints() -> None:
    model = ScriptedModel([text("a"), text("b")])
    seen: list[tuple[str, ModelEvent]] = []

    async def read(name: str) -> None:
        async for event in model.stream(_request()):
            seen.append((name, event))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read, "first")
        nursery.start_soon(read, "second")
    # trio may start either task first; each gets one whole step, in its own order
    by_reader = {name: [event for n, event in seen if n == name] for name in ("first", "second")}
    assert sorted(by_reader.values(), key=repr) == [
        [TextDelta("a"), Finish("stop")],
        [TextDelta("b"), Finish("stop")],
    ]
    assert seen[0][0] != seen[1][0]  # the second reader ran before the first finished


# -- errors ------------------------------------------------------------------------------------


async def test_running_out_of_steps_names_the_count_and_the_tools() -> None:
    model = ScriptedModel([[tool_call("requestApproval", {})], text("Sent.")])
    request = _request("requestApproval", "lookup")
    await _events(model, request)
    await _events(model, request)
    with pytest.raises(ScriptedModelError) as info:
        await _events(model, request)
    assert str(info.value) == (
        "ScriptedModel ran out of steps: it received request 3 but only 2 steps were "
        "scripted; that request offered the tools ['lookup', 'requestApproval']. Script "
        "another step, or find out why the run asked the model again"
    )
    assert len(model.requests) == 3


async def test_running_out_of_a_single_step_says_was() -> None:
    model = ScriptedModel([text("a")])
    await _events(model, _request())
    with pytest.raises(ScriptedModelError, match="but only 1 step was scripted; that request"):
        await _events(model, _request())


async def test_calling_a_tool_that_was_not_offered_lists_the_offered_tools() -> None:
    model = ScriptedModel([[text("Sending."), tool_call("sendInvoice", {})]])
    with pytest.raises(ScriptedModelError) as info:
        await _events(model, _request("lookup", "requestApproval"))
    assert str(info.value) == (
        "step 1 calls the tool 'sendInvoice', which the request did not offer (offered: "
        "['lookup', 'requestApproval']); script a call to an offered tool, or check that the "
        "agent registers 'sendInvoice' and that it is enabled"
    )


async def test_an_unoffered_tool_fails_the_step_before_any_event() -> None:
    model = ScriptedModel([[text("Sending."), tool_call("sendInvoice", {})]])
    seen: list[ModelEvent] = []

    async def read() -> None:
        async for event in model.stream(_request()):
            seen.append(event)

    with pytest.raises(ScriptedModelError):
        await read()
    assert seen == []


def test_a_step_that_is_a_bare_string_is_refused_at_construction() -> None:
    with pytest.raises(ScriptedModelError) as info:
        ScriptedModel([["Sent."]])  # type: ignore[list-item]
    assert str(info.value) == (
        "step 1 holds 'Sent.', which is not a step item; use text('Sent.') (or a raw model event)"
    )


def test_a_step_that_is_not_a_step_is_refused_at_construction() -> None:
    with pytest.raises(ScriptedModelError, match=r"^step 2 is 42, which is not a step; a step"):
        ScriptedModel([text("a"), 42])  # type: ignore[list-item]


def test_a_single_step_instead_of_a_list_is_refused() -> None:
    with pytest.raises(ScriptedModelError) as info:
        ScriptedModel(text("Sent."))  # type: ignore[arg-type]
    assert str(info.value) == (
        "ScriptedModel takes a list of steps, got text('Sent.'); "
        "write ScriptedModel([text('Sent.')])"
    )


async def test_a_callable_step_returning_a_non_step_is_an_error() -> None:
    def bad(request: ModelRequest) -> Any:
        return "Sent."

    model = ScriptedModel([bad])
    with pytest.raises(ScriptedModelError, match=r"^step 1 \(<function .*bad.*\) returned a"):
        await _events(model, _request())


def test_tool_call_input_must_be_json() -> None:
    with pytest.raises(ScriptedModelError) as info:
        tool_call("a", {"when": {1, 2}})
    assert str(info.value).startswith("tool_call('a', ...): input['when'] is a set")
    assert str(info.value).endswith("; a model can only send JSON input")


def test_tool_call_needs_a_name() -> None:
    with pytest.raises(ScriptedModelError, match=r"^tool_call\(\) needs the tool's registration"):
        tool_call("", {})


def test_tool_call_id_must_be_a_non_empty_str() -> None:
    with pytest.raises(ScriptedModelError, match=r"id must be a non-empty str or None"):
        tool_call("a", {}, id="")


def test_text_takes_a_str() -> None:
    with pytest.raises(ScriptedModelError) as info:
        text(3)  # type: ignore[arg-type]
    assert str(info.value) == "text() takes a str, got 3; write text(str(value))"


def test_scripted_model_error_is_a_pai_error() -> None:
    assert issubclass(ScriptedModelError, PaiError)
    assert ScriptedModelError.__module__ == "pai_actors.testing"


# -- reprs -------------------------------------------------------------------------------------


def test_step_items_repr_as_the_calls_that_make_them() -> None:
    assert repr(text("Sent.")) == "text('Sent.')"
    assert repr(tool_call("a", {"x": 1})) == "tool_call('a', {'x': 1})"
    assert (
        repr(tool_call("a", [], id="c", stream=True)) == "tool_call('a', [], id='c', stream=True)"
    )
    assert eval(repr(tool_call("a", [], id="c", stream=True))) == tool_call(
        "a", [], id="c", stream=True
    )


def test_scripted_model_repr_is_constructor_like() -> None:
    model = ScriptedModel([[tool_call("requestApproval", {"summary": "x"})], text("Sent.")])
    assert repr(model) == (
        "ScriptedModel([[tool_call('requestApproval', {'summary': 'x'})], text('Sent.')])"
    )
