"""Token streaming, reasoning and usage: what a model step streams reaches watchers as it
arrives (``MessageDelta``), the message is stored once, complete; reasoning is stored and
given back to the model; usage is stored per step and summed per run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from pai_actors import (
    FilePart,
    Finish,
    MessageAppended,
    MessageDelta,
    ModelAssistantMessage,
    ModelEvent,
    ModelFilePart,
    ModelReasoningPart,
    ModelRequest,
    ModelSettings,
    ModelToolMessage,
    ModelUserMessage,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningPart,
    ResumeEntry,
    SqliteStore,
    StepStartPart,
    SuspendPoint,
    TextDelta,
    TextPart,
    ThreadUpdate,
    ToolCallEvent,
    ToolContext,
    Usage,
    create_agent_runtime,
    define_agent,
    define_tool,
    json_schema,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

agent = define_agent(name="streamer", tools={})


class GatedModel:
    """Writes ``Hel``, then waits for ``gate`` before writing ``lo`` and finishing."""

    def __init__(self) -> None:
        self.gate = trio.Event()
        self.started = trio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ReasoningDelta("think")
        yield TextDelta("Hel")
        self.started.set()
        await self.gate.wait()
        yield TextDelta("lo")
        yield Finish("stop")


async def until_appended(updates: AsyncIterator[ThreadUpdate]) -> list[ThreadUpdate]:
    seen: list[ThreadUpdate] = []
    async for update in updates:
        seen.append(update)
        if isinstance(update, MessageAppended) and update.message.role == "assistant":
            return seen
    raise AssertionError(f"the watch ended first: {seen!r}")


def deltas(updates: list[ThreadUpdate]) -> list[tuple[str, str]]:
    return [(u.part, u.delta) for u in updates if isinstance(u, MessageDelta)]


async def test_watchers_see_the_text_as_it_streams_and_a_late_one_gets_it_so_far() -> None:
    model = GatedModel()
    async with create_test_runtime(agent, model=model) as rt:
        thread_id = await rt.create_thread(scope_key="s")
        async with rt.watch(thread_id, deltas=True) as early, rt.watch(thread_id) as plain:
            await rt.send(thread_id, "hi")
            await model.started.wait()
            # the step is streaming: its fragments so far are buffered for the early watcher
            first = [early.receive_nowait() for _ in range(3)]  # run-status, user msg, ...
            async with rt.watch(thread_id, deltas=True) as late:
                model.gate.set()
                early_rest = await until_appended(early)
                late_all = await until_appended(late)
                plain_all = await until_appended(plain)
        state = await rt.get_state(thread_id)
    early_all = first + early_rest
    assert deltas(early_all) == [("reasoning", "think"), ("text", "Hel"), ("text", "lo")]
    # the late watcher: what was streamed before it came, as one fragment each, then the rest
    assert deltas(late_all) == [("reasoning", "think"), ("text", "Hel"), ("text", "lo")]
    assert [type(u).__name__ for u in late_all] == [
        "MessageDelta",
        "MessageDelta",
        "MessageDelta",
        "MessageAppended",
    ]
    [message_delta, *_] = [u for u in late_all if isinstance(u, MessageDelta)]
    stored = state.messages[-1]
    assert message_delta.message_id == stored.id
    assert stored.parts == (StepStartPart(), ReasoningPart(text="think"), TextPart(text="Hello"))
    # a watch that did not ask for deltas sees the stored changes only
    assert deltas(plain_all) == []
    assert [type(u).__name__ for u in plain_all][-1] == "MessageAppended"
    # deltas are never stored: the stored state has no trace of them
    assert [m.role for m in state.messages] == ["user", "assistant"]


async def test_a_deltas_wire_shape() -> None:
    delta = MessageDelta(thread_id="t", run_id="r", message_id="m", part="text", delta="Hi")
    assert delta.to_wire() == {
        "type": "message-delta",
        "threadId": "t",
        "runId": "r",
        "messageId": "m",
        "step": 0,
        "part": "text",
        "delta": "Hi",
    }
    assert MessageDelta.model_validate(delta.to_wire()) == delta
    typed = MessageDelta(
        thread_id="t", run_id="r", message_id="m", part="tool-input", delta='{"a', tool_call_id="c"
    )
    assert typed.to_wire()["toolCallId"] == "c"
    assert MessageDelta.model_validate(typed.to_wire()) == typed


async def test_a_streamed_tool_inputs_raw_text_reaches_the_watchers_that_take_deltas(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each fragment of a call's input, as the model writes it, is a ``tool-input`` delta of
    that call, after the part that holds it appeared (``input-streaming``); joined, they
    are the input's JSON text. Never stored."""
    from pai_actors import define_tool

    echo = define_tool(
        id="t.echo.v1",
        description="Echo.",
        input_schema=dict,
        execute=lambda ctx: ctx.input,
    )
    streaming = define_agent(name="a", tools={"echo": echo})
    model = ScriptedModel(
        [[tool_call("echo", {"words": "a long enough input"}, stream=True)], text("done")]
    )
    async with create_test_runtime(streaming, model=model) as rt:
        thread_id = await rt.create_thread(scope_key="s")
        async with rt.watch(thread_id, deltas=True) as watch:
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            seen = []
            while True:
                try:
                    seen.append(watch.receive_nowait())
                except trio.WouldBlock:
                    break
    typed = [u for u in seen if isinstance(u, MessageDelta) and u.part == "tool-input"]
    assert len(typed) >= 2
    assert {u.tool_call_id for u in typed} == {"call_1"}
    assert json.loads("".join(u.delta for u in typed)) == {"words": "a long enough input"}
    first = seen.index(typed[0])
    assert any(
        getattr(u, "part", None) is not None and getattr(u.part, "state", "") == "input-streaming"
        for u in seen[:first]
    )


async def test_reasoning_is_stored_and_given_back_to_the_model_with_its_metadata() -> None:
    async def lookup(ctx: ToolContext) -> str:
        return "42"

    tool = define_tool(
        id="test.lookup.v1",
        description="Look up.",
        input_schema=json_schema({"type": "object"}),
        execute=lookup,
    )
    signed = {"anthropic": {"signature": "sig-1"}}
    model = ScriptedModel(
        [
            [
                ReasoningDelta("I should "),
                ReasoningDelta("look it up."),
                ReasoningEnd(signed),
                ToolCallEvent("call_1", "lookup", {}),
                Finish("tool-calls"),
            ],
            [TextDelta("It is 42."), Finish("stop")],
        ]
    )
    with_tool = define_agent(name="reasoner", tools={"lookup": tool})
    async with create_test_runtime(with_tool, model=model) as rt:
        thread_id = await rt.create_thread(scope_key="s")
        await rt.send(thread_id, "what is it?")
        await rt.wait_idle(thread_id)
        state = await rt.get_state(thread_id)
    assistant = state.messages[1]
    assert assistant.parts[1] == ReasoningPart(
        text="I should look it up.", provider_metadata=signed
    )
    assert assistant.to_wire()["parts"][1] == {  # type: ignore[index]
        "type": "reasoning",
        "text": "I should look it up.",
        "providerMetadata": signed,
    }
    second = model.requests[1].messages
    [given] = [m for m in second if isinstance(m, ModelAssistantMessage)]
    assert given.parts[0] == ModelReasoningPart("I should look it up.", signed)
    assert any(isinstance(m, ModelToolMessage) for m in second)
    assert state.messages[-1].parts[-2:] == (StepStartPart(), TextPart(text="It is 42."))


async def test_usage_is_summed_per_turn_and_per_run_across_a_restart(
    tmp_path: Path,
) -> None:
    async def lookup(ctx: ToolContext) -> str:
        return "42"

    tool = define_tool(
        id="test.lookup.v1",
        description="Look up.",
        input_schema=json_schema({"type": "object"}),
        execute=lookup,
    )
    model = ScriptedModel(
        [
            [
                ToolCallEvent("call_1", "lookup", {}),
                Finish("tool-calls", usage=Usage(input_tokens=10, output_tokens=5)),
            ],
            [
                TextDelta("42."),
                Finish(
                    "stop",
                    usage=Usage(input_tokens=20, output_tokens=3, reasoning_tokens=1),
                    provider_metadata={"openai": {"responseId": "resp_1"}},
                ),
            ],
        ]
    )
    counted = define_agent(name="counted", tools={"lookup": tool}, model=model)
    path = tmp_path / "usage.db"
    with SqliteStore(path) as store:
        async with create_agent_runtime(counted, store=store) as rt:
            thread_id = await rt.create_thread(scope_key="s")
            await rt.send(thread_id, "count")
            await rt.wait_idle(thread_id)
    with SqliteStore(path) as store:
        async with create_agent_runtime(counted, store=store) as rt:
            state = await rt.get_state(thread_id)
    [turn] = [m for m in state.messages if m.role == "assistant"]
    assert [p.type for p in turn.parts] == ["step-start", "tool-lookup", "step-start", "text"]
    assert turn.metadata == {  # summed over the turn's steps; the last step's provider's
        "usage": {"inputTokens": 30, "outputTokens": 8, "totalTokens": 38, "reasoningTokens": 1},
        "providerMetadata": {"openai": {"responseId": "resp_1"}},
    }
    [run] = state.runs
    assert run.status == "completed"
    assert run.usage == {
        "inputTokens": 30,
        "outputTokens": 8,
        "totalTokens": 38,
        "reasoningTokens": 1,
    }
    assert run.to_wire()["usage"] == run.usage


async def test_a_run_without_usage_says_none_and_keeps_its_wire_shape() -> None:
    async with create_test_runtime(agent, model=ScriptedModel([[TextDelta("ok")]])) as rt:
        thread_id = await rt.create_thread(scope_key="s")
        await rt.send(thread_id, "hi")
        await rt.wait_idle(thread_id)
        state = await rt.get_state(thread_id)
    [run] = state.runs
    assert run.usage is None
    assert set(run.to_wire()) == {"runId", "status", "error"}
    assert state.messages[-1].metadata is None


async def test_model_settings_of_the_agent_and_the_request_reach_every_step_after_a_restart(
    tmp_path: Path,
) -> None:
    async def approve(ctx: ToolContext) -> str:
        if isinstance(ctx.entry, ResumeEntry):
            return "approved"
        return ctx.suspend("approval", {})

    tool = define_tool(
        id="test.approve.v1",
        description="Approve.",
        input_schema=json_schema({"type": "object"}),
        suspend={
            "approval": SuspendPoint(
                suspend_schema=json_schema({"type": "object"}),
                resume_schema=json_schema({"type": "object"}),
            )
        },
        execute=approve,
    )
    model = ScriptedModel(
        [[ToolCallEvent("call_1", "approve", {}), Finish("tool-calls")], [TextDelta("ok")]]
    )
    tuned = define_agent(
        name="tuned",
        tools={"approve": tool},
        model=model,
        model_settings=ModelSettings(temperature=0.1, max_tokens=100),
    )
    path = tmp_path / "settings.db"
    with SqliteStore(path) as store:
        async with create_agent_runtime(tuned, store=store) as rt:
            thread_id = await rt.create_thread(scope_key="s")
            await rt.send(
                thread_id,
                "go",
                model_settings=ModelSettings(temperature=0.7, tool_choice="approve"),
            )
            await rt.wait_idle(thread_id)
    with SqliteStore(path) as store:
        async with create_agent_runtime(tuned, store=store) as rt:
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({})).status == "accepted"
            await rt.wait_idle(thread_id)
            await rt.send(thread_id, "again")  # a request without settings: the agent's
            await rt.wait_idle(thread_id)
    run_settings = ModelSettings(temperature=0.7, max_tokens=100, tool_choice="approve")
    agent_settings = ModelSettings(temperature=0.1, max_tokens=100)
    assert [r.settings for r in model.requests] == [run_settings, run_settings, agent_settings]


async def test_send_refuses_model_settings_that_are_not_model_settings() -> None:
    async with create_test_runtime(agent, model=ScriptedModel([[TextDelta("ok")]])) as rt:
        thread_id = await rt.create_thread(scope_key="s")
        with pytest.raises(TypeError, match="takes a ModelSettings"):
            await rt.send(thread_id, "hi", model_settings={"temperature": 1})  # type: ignore[arg-type]


PNG = "data:image/png;base64,iVBORw0KGgo="


async def test_a_users_files_are_stored_with_the_message_and_reach_the_model(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([[TextDelta("A cat.")], [TextDelta("Still a cat.")]])
    seeing = define_agent(name="seeing", tools={}, model=model)
    photo = FilePart(media_type="image/png", url=PNG, filename="cat.png")
    path = tmp_path / "files.db"
    with SqliteStore(path) as store:
        async with create_agent_runtime(seeing, store=store) as rt:
            thread_id = await rt.create_thread(scope_key="s")
            await rt.send(thread_id, "What is this?", files=[photo])
            await rt.wait_idle(thread_id)
    with SqliteStore(path) as store:
        async with create_agent_runtime(seeing, store=store) as rt:
            state = await rt.get_state(thread_id)
            await rt.send(thread_id, "And now?")
            await rt.wait_idle(thread_id)
    assert state.messages[0].parts == (TextPart(text="What is this?"), photo)
    assert state.messages[0].to_wire()["parts"][1] == {  # type: ignore[index]
        "type": "file",
        "mediaType": "image/png",
        "url": PNG,
        "filename": "cat.png",
    }
    first = model.requests[0].messages[0]
    assert first == ModelUserMessage("What is this?", [ModelFilePart("image/png", PNG, "cat.png")])
    assert model.requests[1].messages[0] == first  # read back from the file


async def test_send_refuses_files_that_are_not_file_parts() -> None:
    async with create_test_runtime(agent, model=ScriptedModel([[TextDelta("ok")]])) as rt:
        thread_id = await rt.create_thread(scope_key="s")
        with pytest.raises(TypeError, match="takes FilePart values"):
            await rt.send(thread_id, "hi", files=[{"url": PNG}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="neither a data: URL nor an http"):
        FilePart(media_type="image/png", url="file:///etc/passwd")
    with pytest.raises(ValueError, match="is not a media type"):
        FilePart(media_type="png", url=PNG)


class BurstModel:
    """Writes ``words`` fragments without a checkpoint between them (as a fast local server
    does when one read holds many chunks)."""

    def __init__(self, words: int) -> None:
        self.words = words

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        for i in range(self.words):
            yield TextDelta(f"w{i} ")
        yield Finish("stop")


async def test_a_model_faster_than_its_watcher_joins_fragments_and_drops_no_watch() -> None:
    model = BurstModel(500)
    async with create_test_runtime(agent, model=model) as rt:
        thread_id = await rt.create_thread(scope_key="s")
        async with rt.watch(thread_id, deltas=True, capacity=8) as updates:
            await rt.send(thread_id, "go")
            seen = await until_appended(updates)
            [run] = (await rt.get_state(thread_id)).runs
    expected = "".join(f"w{i} " for i in range(500))
    fragments = [u.delta for u in seen if isinstance(u, MessageDelta)]
    assert "".join(fragments) == expected  # every fragment, in order
    assert len(fragments) < 500  # some were joined while the watcher was behind
    [appended] = [
        u for u in seen if isinstance(u, MessageAppended) and u.message.role == "assistant"
    ]
    assert appended.message.parts == (StepStartPart(), TextPart(text=expected))
    assert run.status == "completed"
