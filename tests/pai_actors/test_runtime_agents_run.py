"""ctx.agents.run: another registered agent run as part of the calling tool call."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    AgentNotFound,
    AgentRunError,
    AgentRunResult,
    ModelToolMessage,
    ToolContext,
    ToolRegistration,
    create_pai,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Question(BaseModel):
    question: str


class City(BaseModel):
    city: str


def tool_parts(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type != "text"]


def research_pai(seen: list[Any], research: Any) -> Any:
    def weather(ctx: ToolContext) -> Any:
        seen.append(("weather", ctx.agent_id, ctx.thread.tool_call_id))
        return {"city": ctx.input.city, "sky": "clear"}

    weather_tool = define_tool(
        id="t.weather.v1", description="Weather.", input_schema=City, execute=weather
    )
    ask_tool = define_tool(
        id="t.ask-researcher.v1",
        description="Ask the researcher.",
        input_schema=Question,
        execute=research,
    )
    return create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool}),
            "researcher": define_agent(
                name="Researcher", instructions="Research.", tools={"weather": weather_tool}
            ),
        }
    )


async def test_a_tool_runs_another_agent_and_gets_its_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []

    async def research(ctx: ToolContext) -> Any:
        result = await ctx.agents.run("researcher", ctx.input.question)
        seen.append(result)
        return result.text

    def researcher_step(request: Any) -> Any:  # the sub-agent's second step reads the result
        [result] = [p for m in request.messages if isinstance(m, ModelToolMessage)
                    for p in m.parts]  # fmt: skip
        return text(f"It is {result.output['value']['sky']} in Oslo.")

    model = ScriptedModel(
        [
            [tool_call("ask", {"question": "Weather in Oslo?"})],  # front, step 1
            [tool_call("weather", {"city": "Oslo"})],  # researcher, step 1
            researcher_step,  # researcher, step 2
            text("The researcher says it is clear."),  # front, step 2
        ]
    )
    with trio.fail_after(10):
        async with create_test_runtime(research_pai(seen, research), model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "How is the weather in Oslo?")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    [part] = tool_parts(state)  # the sub-run's calls are not conversation parts
    assert (part.state, part.output) == ("output-available", "It is clear in Oslo.")
    assert seen[0] == ("weather", "researcher", f"{part.tool_call_id}/researcher.1/call_1")
    assert seen[1] == AgentRunResult(text="It is clear in Oslo.", steps=2)
    assert model.requests[1].instructions == "Research."
    assert sorted(model.requests[1].tools) == ["weather"]
    assert [r.status for r in state.runs] == ["completed"]


async def test_cancelling_the_run_cancels_the_sub_run_and_its_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []
    entered = trio.Event()

    async def research(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("researcher", "go")).text

    pai = research_pai(seen, research)
    stuck: list[Any] = []

    async def stuck_weather(ctx: ToolContext) -> Any:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            stuck.append((ctx.signal.aborted, ctx.signal.reason))

    stuck_tool = define_tool(
        id="t.stuck.v1", description="Stuck.", input_schema=City, execute=stuck_weather
    )
    pai = create_pai(
        {
            "front": pai.agents["front"],
            "researcher": define_agent(name="Researcher", tools={"weather": stuck_tool}),
        }
    )
    model = ScriptedModel(
        [[tool_call("ask", {"question": "q"})], [tool_call("weather", {"city": "Oslo"})]]
    )
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=model) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await entered.wait()
            await rt.cancel_run(run_id, "user left")
            state = await rt.get_state(thread_id)
    assert stuck == [(True, "user left")]
    [part] = tool_parts(state)
    assert part.error_text == "The tool call was cancelled: user left"


async def test_an_unknown_agent_and_a_runaway_sub_run_are_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    errors: list[BaseException] = []

    async def research(ctx: ToolContext) -> Any:
        for agent_id, steps in (("nobody", 1), ("researcher", 2)):
            try:
                await ctx.agents.run(agent_id, "loop", max_steps=steps)
            except (AgentNotFound, AgentRunError) as exc:
                errors.append(exc)
        return "handled"

    looping = [tool_call("weather", {"city": "Oslo"})]
    model = ScriptedModel([[tool_call("ask", {"question": "q"})], looping, looping, text("ok")])
    with trio.fail_after(10):
        async with create_test_runtime(research_pai([], research), model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert tool_parts(state)[0].output == "handled"
    unknown, runaway = errors
    assert isinstance(unknown, AgentNotFound)
    assert "'front', 'researcher'" in str(unknown)
    assert isinstance(runaway, AgentRunError)
    assert "did not answer within 2 model steps" in str(runaway)


async def test_a_tool_needing_a_person_cannot_finish_in_a_sub_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def research(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("researcher", "pay")).text

    def pay(ctx: ToolContext) -> Any:
        raise AssertionError("never runs without its approval")

    pay_tool = define_tool(id="t.pay.v1", description="Pay.", input_schema=City, execute=pay)
    ask_tool = define_tool(
        id="t.ask.v1", description="Ask.", input_schema=Question, execute=research
    )
    pai = create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool}),
            "researcher": define_agent(
                name="R", tools={"pay": ToolRegistration(pay_tool, needs_approval=True)}
            ),
        }
    )

    def report(request: Any) -> Any:
        [result] = [p for m in request.messages if isinstance(m, ModelToolMessage)
                    for p in m.parts]  # fmt: skip
        return text(result.output["value"])

    model = ScriptedModel(
        [[tool_call("ask", {"question": "q"})], [tool_call("pay", {"city": "x"})], report,
         text("ok")]
    )  # fmt: skip
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert tool_parts(state)[0].output == (
        "the tool 'pay' needs a client or a person to finish, which a sub-agent run does not have"
    )


def test_max_steps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive int"):
        trio.run(_run_with_zero_steps)


async def _run_with_zero_steps() -> None:
    errors: list[Exception] = []

    async def research(ctx: ToolContext) -> Any:
        try:
            await ctx.agents.run("researcher", "x", max_steps=0)
        except ValueError as exc:
            errors.append(exc)
        return "ok"

    model = ScriptedModel([[tool_call("ask", {"question": "q"})], text("ok")])
    async with create_test_runtime(research_pai([], research), model=model) as rt:
        thread_id = await rt.create_thread("s")
        await rt.send(thread_id, "go")
        await rt.wait_idle(thread_id)
    raise errors[0]


async def test_a_plain_def_tool_of_a_sub_run_runs_in_a_worker_thread_as_at_top_level() -> None:
    """One path calls execute: a plain ``def`` tool of a sub-agent run runs in a worker
    thread (``sync_tools="thread"``), as it does when the model calls it at top level; it
    used to run on the trio thread inside ctx.agents.run."""
    where: list[tuple[str, bool]] = []

    def weather(ctx: ToolContext) -> Any:
        where.append((ctx.thread.tool_call_id, trio.lowlevel.in_trio_task()))
        return {"city": ctx.input.city, "sky": "clear"}

    async def research(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("researcher", ctx.input.question)).text

    weather_tool = define_tool(
        id="t.weather.v1", description="Weather.", input_schema=City, execute=weather
    )
    ask_tool = define_tool(
        id="t.ask-researcher.v1", description="Ask.", input_schema=Question, execute=research
    )
    pai = create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool, "weather": weather_tool}),
            "researcher": define_agent(name="Researcher", tools={"weather": weather_tool}),
        }
    )
    model = ScriptedModel(
        [
            [tool_call("weather", {"city": "Bergen"})],  # front, step 1: at top level
            [tool_call("ask", {"question": "Weather in Oslo?"})],  # front, step 2
            [tool_call("weather", {"city": "Oslo"})],  # researcher, step 1: in the sub-run
            text("Clear."),  # researcher, step 2
            text("Both are clear."),  # front, step 3
        ]
    )
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=model, sync_tools="thread") as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "How is the weather?")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    top, ask = tool_parts(state)
    assert (ask.state, ask.output) == ("output-available", "Clear.")
    assert where == [
        (top.tool_call_id, False),  # a worker thread, not a trio task
        (f"{ask.tool_call_id}/researcher.1/call_1", False),  # the same in the sub-run
    ]
