"""The adapter conformance suite: every adapter, through its official SDK, against a local
server speaking its provider's streaming format (``fixtures/``, see its README).

Text, a tool call split across chunks, parallel tool calls, reasoning, usage, finish
reasons, every fault (HTTP errors, rate limits after retries, timeouts, errors inside the
stream, malformed streams, arguments that are not JSON, an unreachable server) and
cancellation in the middle of a stream (the server sees the connection close). Network
tests: loopback, port 0, real clock, each under ``trio.fail_after``.
"""

from __future__ import annotations

from contextlib import aclosing

import pytest
import trio

from pai_actors import (
    Finish,
    ModelProviderError,
    ModelReasoningPart,
    ModelRequest,
    ModelTool,
    ModelUserMessage,
    ReasoningDelta,
    ReasoningEnd,
    TextDelta,
    ToolCallEvent,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from pai_actors._core.step import ModelStep, StepAccumulator

from .providers import API_KEY, PROVIDERS, Provider, error_bodies, events_of, with_key
from .sse_server import Reply, open_provider_server, split_events

pytestmark = pytest.mark.parametrize("provider", PROVIDERS, ids=repr)

TIMEOUT = 20  # seconds: a bound for a stuck test, never a measurement

REQUEST = ModelRequest(
    "Be brief.",
    [ModelUserMessage("What is the weather in Paris?")],
    {
        "get_weather": ModelTool(
            "The weather in a city.",
            {"type": "object", "properties": {"location": {"type": "string"}}},
        )
    },
)


def step_of(events: list[object]) -> ModelStep:
    """The step the events make, checked against the model protocol as the run loop does."""
    accumulator = StepAccumulator()
    for event in events:
        accumulator.feed(event)  # type: ignore[arg-type]
    return accumulator.result()


async def play(provider: Provider, reply: Reply, **options: object) -> list[object]:
    with trio.fail_after(TIMEOUT):
        async with open_provider_server() as server:
            server.reply(reply)
            events: list[object] = list(
                await events_of(provider.make(server.url, **options), REQUEST)
            )
            assert [r.path for r in server.requests] == [provider.path]
            return events


async def fault(provider: Provider, *replies: Reply, **options: object) -> ModelProviderError:
    with trio.fail_after(TIMEOUT):
        async with open_provider_server() as server:
            server.reply(*replies)
            with pytest.raises(ModelProviderError) as info:
                await events_of(provider.make(server.url, **options), REQUEST)
    error = info.value
    assert error.provider == provider.provider
    assert str(error).startswith(provider.provider) or provider.provider in str(error)
    assert API_KEY not in str(error)
    assert API_KEY not in repr(error)
    return error


async def test_text(provider: Provider) -> None:
    events = await play(provider, Reply(provider.fixture("text")))
    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta("Hello"),
        TextDelta(" there"),
        TextDelta("!"),
    ]
    step = step_of(events)
    assert (step.text, step.tool_calls, step.finish_reason) == ("Hello there!", (), "stop")
    assert step.usage is not None
    assert step.usage.output_tokens == 3
    assert step.usage.input_tokens == 20
    assert step.usage.total_tokens == 23
    assert step.provider_metadata is not None
    assert provider.provider in step.provider_metadata


async def test_tool_call_split_across_chunks(provider: Provider) -> None:
    events = await play(provider, Reply(provider.fixture("tool_call")))
    [start] = [e for e in events if isinstance(e, ToolInputStart)]
    deltas = [e.delta for e in events if isinstance(e, ToolInputDelta)]
    [call] = [e for e in events if isinstance(e, ToolCallEvent)]
    assert start.tool_name == call.tool_name == "get_weather"
    assert start.tool_call_id == call.tool_call_id
    assert deltas == ['{"locati', 'on": "P', 'aris"}']
    assert call.input == {"location": "Paris"}
    assert events.index(start) < events.index(call) < len(events) - 1
    step = step_of(events)
    assert step.tool_calls == (call,)
    assert step.finish_reason == "tool-calls"
    assert isinstance(events[-1], Finish)


async def test_parallel_tool_calls(provider: Provider) -> None:
    events = await play(provider, Reply(provider.fixture("parallel_tool_calls")))
    step = step_of(events)
    assert [(c.tool_name, c.input) for c in step.tool_calls] == [
        ("add", {"a": 2, "b": 3}),
        ("multiply", {"a": 4, "b": 5}),
    ]
    assert len({c.tool_call_id for c in step.tool_calls}) == 2
    assert step.finish_reason == "tool-calls"
    assert step.usage is not None
    assert step.usage.output_tokens == 50
    # each call's deltas spell its input, however the provider interleaved them
    for call in step.tool_calls:
        text = "".join(
            e.delta
            for e in events
            if isinstance(e, ToolInputDelta) and e.tool_call_id == call.tool_call_id
        )
        assert text.replace(" ", "") == f'{{"a":{call.input["a"]},"b":{call.input["b"]}}}'  # type: ignore[index,call-overload]


async def test_reasoning(provider: Provider) -> None:
    events = await play(provider, Reply(provider.fixture("reasoning")))
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == [
        "The user",
        " greets me.",
    ]
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert all(
        i < first_text for i, e in enumerate(events) if isinstance(e, ReasoningDelta | ReasoningEnd)
    )
    step = step_of(events)
    assert step.text == "Hello there!"
    assert step.finish_reason == "stop"
    [part] = step.reasoning
    assert part.text == "The user greets me."
    assert step.usage is not None
    assert step.usage.output_tokens == 12
    if provider.name == "anthropic":  # the signature, to give the thinking back next step
        assert part == ModelReasoningPart(
            "The user greets me.",
            {"anthropic": {"signature": "EtYDCkYICxgCKkAVHEWRYo6RgSMs4ZZDX4gW16kdfp2E"}},
        )
    if provider.name == "openai_responses":
        assert part.provider_metadata == {
            "openai": {
                "itemId": "rs_027ec5e155f266ec016a3c12675f308191aa4cbc320785b520",
                "encryptedContent": "gAAAAABqPBJmJTvJgPss",
            }
        }
        assert step.usage.reasoning_tokens == 9


async def test_usage_is_reported(provider: Provider) -> None:
    events = await play(provider, Reply(provider.fixture("tool_call")))
    finish = events[-1]
    assert isinstance(finish, Finish)
    assert isinstance(finish.usage, Usage)
    assert finish.usage.output_tokens == 18
    assert finish.usage.total_tokens == (finish.usage.input_tokens or 0) + 18


async def test_stop_reasons(provider: Provider) -> None:
    for wire, reason in [*provider.stops.items(), ("something_new", "unknown")]:
        body = provider.with_stop(provider.fixture("text"), wire)
        events = await play(provider, Reply(body))
        assert events[-1] == Finish(
            reason,
            events[-1].usage,  # type: ignore[union-attr]
            events[-1].provider_metadata,  # type: ignore[union-attr]
        ), wire


# -- faults ----------------------------------------------------------------------------------


async def test_an_unauthorized_key_names_the_status_and_the_key_variable(
    provider: Provider,
) -> None:
    body = with_key(error_bodies()[provider.errors]["401"])
    error = await fault(provider, Reply.error(401, body))
    assert error.status == 401
    assert not error.retryable
    assert "HTTP 401" in str(error)
    assert "_API_KEY" in str(error)
    assert "[redacted]" in str(error)  # the server echoed the key: it was cut out


async def test_a_rate_limit_fails_after_the_sdk_retries(provider: Provider) -> None:
    body = error_bodies()[provider.errors]["429"]
    limited = Reply.error(429, body, retry_after_ms="1")
    with trio.fail_after(TIMEOUT):
        async with open_provider_server() as server:
            server.reply(limited, limited, limited)
            model = provider.make(server.url, max_retries=2)
            with pytest.raises(ModelProviderError) as info:
                await events_of(model, REQUEST)
            assert len(server.requests) == 3  # the first try and the SDK's 2 retries
    error = info.value
    assert (error.status, error.retryable) == (429, True)
    assert "HTTP 429" in str(error)
    assert "retried 2 time(s)" in str(error)


async def test_a_server_error(provider: Provider) -> None:
    error = await fault(provider, Reply.error(500, error_bodies()[provider.errors]["500"]))
    assert (error.status, error.retryable) == (500, True)
    assert "HTTP 500" in str(error)
    assert "try again later" in str(error)


async def test_a_timeout(provider: Provider) -> None:
    error = await fault(provider, Reply(silent=True), timeout=0.5)
    assert (error.status, error.code, error.retryable) == (None, "timeout", True)
    assert "did not answer within 0.5 s" in str(error)


async def test_a_stream_that_stalls(provider: Provider) -> None:
    error = await fault(provider, Reply(provider.fixture("text"), hang_at="Hello"), timeout=0.5)
    assert (error.status, error.code) == (None, "timeout")
    assert "stopped sending in the middle of the stream for 0.5 s" in str(error)


async def test_an_error_inside_the_stream(provider: Provider) -> None:
    events = split_events(provider.fixture("text"))
    body = "".join(events[:2]) + error_bodies()["stream_errors"][provider.name]
    error = await fault(provider, Reply(body))
    assert "error in the stream" in str(error)
    assert error.retryable


async def test_a_stream_that_ends_too_early_is_malformed(provider: Provider) -> None:
    events = split_events(provider.fixture("text"))
    error = await fault(provider, Reply("".join(events[:3])))
    assert error.code == "malformed_stream"
    assert "malformed stream" in str(error)
    assert "ended" in str(error)


async def test_a_connection_dropped_in_the_middle_of_the_stream(provider: Provider) -> None:
    error = await fault(provider, Reply(provider.fixture("text"), cut_after=3))
    assert error.code == "connection_error"
    assert error.retryable
    assert "in the middle of the stream" in str(error)


async def test_an_event_that_is_not_json_is_malformed(provider: Provider) -> None:
    events = split_events(provider.fixture("text"))
    broken = events[1].replace("{", "{oops", 1)
    error = await fault(provider, Reply("".join([events[0], broken, *events[2:]])))
    assert error.code == "malformed_stream"
    assert "not JSON" in str(error)


async def test_tool_arguments_that_are_not_json(provider: Provider) -> None:
    body = provider.fixture("tool_call").replace('aris\\"}', "aris")
    error = await fault(provider, Reply(body))
    assert error.code == "invalid_tool_arguments"
    assert "get_weather" in str(error)
    assert "not JSON" in str(error)


async def test_an_unreachable_server(provider: Provider) -> None:
    with trio.fail_after(TIMEOUT):
        listener = trio.socket.socket()
        await listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.close()  # nothing listens there now
        model = provider.make(f"http://127.0.0.1:{port}")
        with pytest.raises(ModelProviderError) as info:
            await events_of(model, REQUEST)
    assert info.value.code == "connection_error"
    assert "could not reach" in str(info.value)
    assert str(port) in str(info.value)


# -- cancellation ----------------------------------------------------------------------------


async def test_cancelling_mid_stream_closes_the_response_at_once(provider: Provider) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_provider_server() as server:
            server.reply(Reply(provider.fixture("text"), hang_at="Hello"))
            model = provider.make(server.url)
            seen: list[object] = []
            with trio.CancelScope() as scope:
                async with aclosing(model.stream(REQUEST)) as stream:  # type: ignore[type-var]
                    async for event in stream:
                        seen.append(event)
                        if isinstance(event, TextDelta):
                            scope.cancel()  # the next checkpoint, inside the stream, raises
            assert scope.cancelled_caught
            assert seen[-1] == TextDelta("Hello")
            await server.closed.wait()  # the server saw the connection close


async def test_closing_the_stream_early_closes_the_response(provider: Provider) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_provider_server() as server:
            server.reply(Reply(provider.fixture("text"), hang_at="Hello"))
            stream = provider.make(server.url).stream(REQUEST)
            async for event in stream:
                if isinstance(event, TextDelta):
                    break
            await stream.aclose()  # type: ignore[attr-defined]  # what the run loop does
            await server.closed.wait()
