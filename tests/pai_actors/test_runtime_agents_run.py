"""ctx.agents.run: another registered agent run as a sub-agent run of the calling tool call,
on a thread of its own, with every tool feature (see ``_runtime.subagents``)."""

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
    InitialEntry,
    ModelToolMessage,
    PaiError,
    ResumeEntry,
    SubAgentOrigin,
    SuspendPoint,
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


class Summary(BaseModel):
    summary: str


class Decision(BaseModel):
    approved: bool


def tool_parts(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]


def last_result(request: Any) -> Any:
    """The output of the last tool result a request holds."""
    [*_, result] = [p for m in request.messages if isinstance(m, ModelToolMessage) for p in m.parts]
    return result.output


def echo_result(request: Any) -> Any:
    """A model step that answers with the last tool result it read."""
    output = last_result(request)
    return text(str(output["value"]))


def ask_tool(research: Any, id: str = "t.ask.v1") -> Any:
    return define_tool(id=id, description="Ask.", input_schema=Question, execute=research)


def weather_tool(seen: list[Any] | None = None) -> Any:
    def weather(ctx: ToolContext) -> Any:
        if seen is not None:
            seen.append(("weather", ctx.agent_id, ctx.thread.thread_id, ctx.thread.tool_call_id))
        return {"city": ctx.input.city, "sky": "clear"}

    return define_tool(
        id="t.weather.v1", description="Weather.", input_schema=City, execute=weather
    )


def research_pai(seen: list[Any], research: Any) -> Any:
    return create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool(research)}),
            "researcher": define_agent(
                name="Researcher", instructions="Research.", tools={"weather": weather_tool(seen)}
            ),
        }
    )


async def test_a_tool_runs_another_agent_on_a_thread_of_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []
    entries: list[Any] = []

    async def research(ctx: ToolContext) -> Any:
        entries.append(ctx.entry)
        result = await ctx.agents.run("researcher", ctx.input.question)
        seen.append(result)
        return result.text

    def researcher_step(request: Any) -> Any:  # the sub-agent's second step reads the result
        return text(f"It is {last_result(request)['value']['sky']} in Oslo.")

    front = ScriptedModel(
        [[tool_call("ask", {"question": "Weather in Oslo?"})], text("It is clear.")]
    )
    researcher = ScriptedModel([[tool_call("weather", {"city": "Oslo"})], researcher_step])
    with trio.fail_after(10):
        async with create_test_runtime(
            research_pai(seen, research), model={"front": front, "researcher": researcher}
        ) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "How is the weather in Oslo?")
            await rt.wait_idle(thread_id)  # the whole tree
            state = await rt.get_state(thread_id)
            [part] = tool_parts(state)
            [sub_thread_id] = part.sub_threads
            sub = await rt.get_state(sub_thread_id)
            sub_record = await rt.get_thread(sub_thread_id)
            with pytest.raises(PaiError, match="takes no messages from clients"):
                await rt.send(sub_thread_id, "hello")
    assert (part.state, part.output) == ("output-available", "It is clear in Oslo.")
    assert part.to_wire()["subThreads"] == [sub_thread_id]
    assert sub_thread_id.startswith(f"{thread_id}/{part.tool_call_id}/researcher-")
    # its own conversation: the prompt, the sub-agent's call as a part, its answer
    assert [m.role for m in sub.messages] == ["user", "assistant"]  # one turn, two steps
    assert sub.messages[0].parts[0].text == "Weather in Oslo?"
    [weather] = tool_parts(sub)
    assert weather.output == {"city": "Oslo", "sky": "clear"}
    assert [r.status for r in sub.runs] == ["completed"]
    assert seen[0] == ("weather", "researcher", sub_thread_id, weather.tool_call_id)
    assert seen[1] == AgentRunResult("It is clear in Oslo.", 2, sub_thread_id)
    assert researcher.requests[0].instructions == "Research."
    assert sorted(researcher.requests[0].tools) == ["weather"]
    assert [r.status for r in state.runs] == ["completed"]
    # execute ran twice: it started the sub-run, then read its answer
    assert entries == [InitialEntry(), InitialEntry()]
    assert sub_record.parent is not None
    assert (sub_record.parent.thread_id, sub_record.parent.tool_call_id) == (
        thread_id,
        part.tool_call_id,
    )
    assert (sub_record.parent.tool_name, sub_record.parent.depth) == ("ask", 1)
    assert sub_record.scope_key == "s"


def approval_pai(events: list[str], *, deadline: Any = None, on_deadline: Any = None) -> Any:
    async def research(ctx: ToolContext) -> Any:
        events.append("front:execute")
        result = await ctx.agents.run("payer", "Pay the invoice.")
        events.append("front:answer")
        return result.text

    def pay(ctx: ToolContext) -> Any:
        events.append("payer:pay")
        return {"paid": ctx.input.city}

    pay_tool = define_tool(id="t.pay.v1", description="Pay.", input_schema=City, execute=pay)
    extra: dict[str, Any] = {}
    if deadline is not None:
        extra["approval_deadline"] = deadline
    if on_deadline is not None:
        extra["on_approval_deadline"] = on_deadline
    return create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool(research)}),
            "payer": define_agent(
                name="Payer",
                tools={"pay": ToolRegistration(pay_tool, needs_approval=True, **extra)},
            ),
        }
    )


def approval_models(events: list[str]) -> dict[str, Any]:
    def payer_answers(request: Any) -> Any:
        events.append("payer:answer")
        return echo_result(request)

    return {
        "front": ScriptedModel([[tool_call("ask", {"question": "q"})], echo_result]),
        "payer": ScriptedModel([[tool_call("pay", {"city": "Oslo"})], payer_answers]),
    }


async def test_a_sub_agents_approval_is_the_outer_threads_pending_action(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[str] = []
    with trio.fail_after(10):
        async with create_test_runtime(approval_pai(events), model=approval_models(events)) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "Pay it.")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            [scoped] = await rt.scope_pending_actions("s")
            state = await rt.get_state(thread_id)
            [part] = tool_parts(state)
            [sub_thread_id] = part.sub_threads
            waiting = (part.state, [r.status for r in state.runs])
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            final = await rt.get_state(thread_id)
    assert waiting == ("input-available", ["waiting"])
    assert action.name == "pay"
    assert action.ref.thread_id == sub_thread_id
    assert action.input == {"city": "Oslo"}
    assert action.origin_chain == (
        SubAgentOrigin(
            thread_id=thread_id,
            run_id=run_id,
            message_id=state.messages[1].id,
            tool_call_id=part.tool_call_id,
            tool_name="ask",
            agent_id="payer",
            sub_thread_id=sub_thread_id,
        ),
    )
    assert (scoped.ref, scoped.origin_chain) == (action.ref, action.origin_chain)
    # the sub-agent's call, then the sub-agent, then the calling tool
    assert events == ["front:execute", "payer:pay", "payer:answer", "front:execute", "front:answer"]
    [done] = tool_parts(final)
    assert done.output == "{'paid': 'Oslo'}"
    assert [r.status for r in final.runs] == ["completed"]


async def test_a_denied_approval_in_a_sub_agent_reaches_the_calling_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[str] = []
    models = approval_models(events)
    with trio.fail_after(10):
        async with create_test_runtime(approval_pai(events), model=models) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "Pay it.")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            await action.submit({"approved": False, "reason": "too much"})
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
            [denied] = tool_parts(await rt.get_state(part.sub_threads[0]))
    assert denied.state == "output-denied"
    assert "payer:pay" not in events
    assert part.state == "output-available"  # the sub-agent answered; so did the caller


class Invoice(BaseModel):
    amount: int


def suspend_pai(entries: list[Any]) -> Any:
    async def delegate(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("clerk", "File it.")).text

    async def confirm(ctx: ToolContext) -> Any:
        entries.append(ctx.entry)
        if isinstance(ctx.entry, ResumeEntry):
            await ctx.data.write("status", {"step": "confirmed"}, id="s")
            saved = await ctx.files.save(b"receipt", "text/plain", "receipt.txt")
            return {"approved": ctx.entry.resume.approved, "file": saved.filename}
        await ctx.data.write("status", {"step": "asking"}, id="s")
        return ctx.suspend("approval", {"summary": f"file {ctx.input.amount}?"})

    status = define_tool(
        id="t.confirm.v1",
        description="Confirm.",
        input_schema=Invoice,
        suspend={"approval": SuspendPoint(suspend_schema=Summary, resume_schema=Decision)},
        data_schemas={"status": dict},
        execute=confirm,
    )
    return create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool(delegate)}),
            "clerk": define_agent(name="Clerk", tools={"confirm": status}),
        }
    )


async def test_a_named_suspension_tool_data_and_files_in_a_sub_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entries: list[Any] = []
    models = {
        "front": ScriptedModel([[tool_call("ask", {"question": "q"})], echo_result]),
        "clerk": ScriptedModel([[tool_call("confirm", {"amount": 3})], echo_result]),
    }
    with trio.fail_after(10):
        async with create_test_runtime(suspend_pai(entries), model=models) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
            [asking] = tool_parts(await rt.get_state(part.sub_threads[0]))
            rejected = await action.submit({"approved": "maybe"})
            still = await rt.pending_actions(thread_id)
            accepted = await action.submit({"approved": True})
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
            [confirmed] = tool_parts(await rt.get_state(part.sub_threads[0]))
    assert action.name == "confirm.approval"
    assert action.input == {"summary": "file 3?"}
    assert action.resume_schema is not None
    assert "approved" in str(action.resume_schema)
    assert asking.data["status"][0].value == {"step": "asking"}
    assert asking.pending_suspension is not None
    assert rejected.status == "rejected"  # the sub-agent keeps waiting
    assert [a.ref for a in still] == [action.ref]
    assert accepted.status == "accepted"
    assert confirmed.data["status"][0].value == {"step": "confirmed"}
    assert confirmed.output == {"approved": True, "file": "receipt.txt"}
    assert isinstance(entries[1], ResumeEntry)
    assert part.state == "output-available"


async def test_a_client_supplied_output_in_a_sub_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def delegate(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("asker", "Ask the user.")).text

    pick = define_tool(id="t.pick.v1", description="Pick.", input_schema=City, output_schema=City)
    pai = create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool(delegate)}),
            "asker": define_agent(name="Asker", tools={"pick": pick}),
        }
    )
    models = {
        "front": ScriptedModel([[tool_call("ask", {"question": "q"})], echo_result]),
        "asker": ScriptedModel([[tool_call("pick", {"city": "?"})], echo_result]),
    }
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=models) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"town": 1})).status == "rejected"
            assert (await action.submit({"city": "Rome"})).status == "accepted"
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
    assert action.name == "pick"
    assert part.output == "{'city': 'Rome'}"


async def test_child_tools_trigger_and_a_nested_sub_agent_in_a_sub_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A sub-agent's tool has children, triggers its own thread, and runs a sub-agent of its
    own (depth 2), whose sub-run a child tool starts: it is the parent call's."""

    async def delegate(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("middle", "Go deeper.")).text

    async def deeper(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("leaf", "Say leaf.")).text

    child = define_tool(
        id="t.deeper.v1", description="Deeper.", input_schema=Question, execute=deeper
    )

    async def dig(ctx: ToolContext) -> Any:
        found = await ctx.tools.deeper.execute({"question": "x"})
        await ctx.trigger("dig finished")
        return {"found": found}

    dig_tool = define_tool(
        id="t.dig.v1",
        description="Dig.",
        input_schema=Question,
        tools={"deeper": child},
        execute=dig,
    )
    pai = create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool(delegate)}),
            "middle": define_agent(name="Middle", tools={"dig": dig_tool}),
            "leaf": define_agent(name="Leaf", tools={}),
        }
    )

    def middle_answers(request: Any) -> Any:
        notified = [m for m in request.messages if "dig finished" in str(m)]
        return text(f"{last_result(request)['value']['found']} (notified: {bool(notified)})")

    models = {
        "front": ScriptedModel([[tool_call("ask", {"question": "q"})], echo_result]),
        "middle": ScriptedModel([[tool_call("dig", {"question": "q"})], middle_answers]),
        "leaf": ScriptedModel([text("leaf")]),
    }
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=models) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
            [middle] = part.sub_threads
            [dig] = tool_parts(await rt.get_state(middle))
            [leaf] = dig.sub_threads
            leaf_thread = await rt.get_thread(leaf)
    assert part.output == "leaf (notified: True)"
    assert leaf.startswith(f"{middle}/{dig.tool_call_id}/leaf-")
    assert leaf_thread.parent is not None
    assert leaf_thread.parent.depth == 2


async def test_sub_agents_nest_no_deeper_than_max_agent_depth(
    autojump_clock: trio.testing.MockClock,
) -> None:
    errors: list[str] = []

    async def delegate(ctx: ToolContext) -> Any:
        try:
            return (await ctx.agents.run("front", "again")).text
        except AgentRunError as exc:
            errors.append(str(exc))
            return "too deep"

    pai = create_pai({"front": define_agent(name="Front", tools={"ask": ask_tool(delegate)})})
    # front asks at depth 0, 1 and 2, where the ask for depth 3 is refused; each answers
    step = ScriptedModel(
        [[tool_call("ask", {"question": "q"})]] * 3 + [echo_result], repeat_last=True
    )
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=step, max_agent_depth=2) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
    assert part.output == "too deep"
    assert "nest at most 2 deep (this one would be 3 deep)" in errors[0]


async def test_run_all_fans_out_and_resumes_the_caller_once_all_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Three specialists at once; two wait on approvals, answered one at a time: the caller
    enters execute again only once both were answered and every sub-run ended."""
    entries: list[int] = []

    async def orchestrate(ctx: ToolContext) -> Any:
        entries.append(1)
        results = await ctx.agents.run_all([("alpha", "a"), ("beta", "b"), ("gamma", "c")])
        return " | ".join(r.text for r in results)

    def pay(ctx: ToolContext) -> Any:
        return {"paid": ctx.input.city}

    pay_tool = define_tool(id="t.pay.v1", description="Pay.", input_schema=City, execute=pay)
    approved = ToolRegistration(pay_tool, needs_approval=True)
    pai = create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool(orchestrate)}),
            "alpha": define_agent(name="A", tools={"pay": approved}),
            "beta": define_agent(name="B", tools={}),
            "gamma": define_agent(name="C", tools={"pay": approved}),
        }
    )
    models = {
        "front": ScriptedModel([[tool_call("ask", {"question": "q"})], echo_result]),
        "alpha": ScriptedModel([[tool_call("pay", {"city": "A"})], text("alpha paid")]),
        "beta": ScriptedModel([text("beta done")]),
        "gamma": ScriptedModel([[tool_call("pay", {"city": "C"})], text("gamma paid")]),
    }
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=models) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            first, second = await rt.pending_actions(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
            await first.submit({"approved": True})
            await rt.wait_idle(thread_id)
            [after_one] = tool_parts(await rt.get_state(thread_id))
            remaining = await rt.pending_actions(thread_id)
            await second.submit({"approved": True})
            await rt.wait_idle(thread_id)
            [done] = tool_parts(await rt.get_state(thread_id))
    assert [a.origin_chain[0].agent_id for a in (first, second)] == ["alpha", "gamma"]
    assert len(part.sub_threads) == 3
    assert after_one.state == "input-available"  # still waiting for gamma
    assert [a.ref for a in remaining] == [second.ref]
    assert done.output == "alpha paid | beta done | gamma paid"
    assert entries == [1, 1]  # started all three at once; entered again once


async def test_sub_runs_in_a_nursery_with_keys(autojump_clock: trio.testing.MockClock) -> None:
    async def orchestrate(ctx: ToolContext) -> Any:
        answers: dict[str, str] = {}

        async def one(name: str) -> None:
            answers[name] = (await ctx.agents.run("echo", f"say {name}", key=name)).text

        async with trio.open_nursery() as nursery:
            for name in ("x", "y", "z"):
                nursery.start_soon(one, name)
        return ",".join(answers[n] for n in ("x", "y", "z"))

    pai = create_pai(
        {
            "front": define_agent(name="Front", tools={"ask": ask_tool(orchestrate)}),
            "echo": define_agent(name="Echo", tools={}),
        }
    )

    def echo(request: Any) -> Any:
        return text(request.messages[0].text.removeprefix("say "))

    models = {
        "front": ScriptedModel([[tool_call("ask", {"question": "q"})], echo_result]),
        "echo": ScriptedModel([echo], repeat_last=True),
    }
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=models) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            [part] = tool_parts(await rt.get_state(thread_id))
    assert part.output == "x,y,z"
    assert {t.rsplit("/", 1)[1] for t in part.sub_threads} == {"x", "y", "z"}


async def test_an_unknown_agent_a_runaway_sub_run_and_a_changed_prompt_are_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    errors: list[BaseException] = []
    prompts = iter(["first", "second"])

    async def research(ctx: ToolContext) -> Any:
        for agent_id, steps in (("nobody", 1), ("researcher", 2)):
            try:
                await ctx.agents.run(agent_id, "loop", max_steps=steps)
            except (AgentNotFound, AgentRunError) as exc:
                errors.append(exc)
        try:
            await ctx.agents.run("researcher", next(prompts, "third"), key="k")
        except AgentRunError as exc:
            errors.append(exc)
        return "handled"

    looping = [tool_call("weather", {"city": "Oslo"})]
    models = {
        "front": ScriptedModel([[tool_call("ask", {"question": "q"})], text("ok")]),
        "researcher": ScriptedModel([looping], repeat_last=True),
    }
    with trio.fail_after(10):
        async with create_test_runtime(research_pai([], research), model=models) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert tool_parts(state)[0].output == "handled"
    unknown = errors[0]
    assert isinstance(unknown, AgentNotFound)
    assert "'front', 'researcher'" in str(unknown)
    runaway = next(e for e in errors if "model steps" in str(e))
    assert isinstance(runaway, AgentRunError)
    assert "did not answer within 2 model steps" in str(runaway)
    changed = [e for e in errors if "same prompts" in str(e)]
    assert changed, errors


def test_max_steps_and_keys_are_checked() -> None:
    with pytest.raises(ValueError, match="positive int"):
        trio.run(_run_with, {"max_steps": 0})
    with pytest.raises(ValueError, match="without '/'"):
        trio.run(_run_with, {"key": "a/b"})


async def _run_with(options: dict[str, Any]) -> None:
    errors: list[Exception] = []

    async def research(ctx: ToolContext) -> Any:
        try:
            await ctx.agents.run("researcher", "x", **options)
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
    """A plain ``def`` tool of a sub-agent run runs in a worker thread
    (``sync_tools="thread"``), as it does when the model calls it at top level."""
    where: list[tuple[str, bool]] = []

    def weather(ctx: ToolContext) -> Any:
        where.append((ctx.thread.thread_id, trio.lowlevel.in_trio_task()))
        return {"city": ctx.input.city, "sky": "clear"}

    async def research(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("researcher", ctx.input.question)).text

    weather_tool = define_tool(
        id="t.weather.v1", description="Weather.", input_schema=City, execute=weather
    )
    pai = create_pai(
        {
            "front": define_agent(
                name="Front", tools={"ask": ask_tool(research), "weather": weather_tool}
            ),
            "researcher": define_agent(name="Researcher", tools={"weather": weather_tool}),
        }
    )
    models = {
        "front": ScriptedModel(
            [
                [tool_call("weather", {"city": "Bergen"})],
                [tool_call("ask", {"question": "Weather in Oslo?"})],
                text("Both are clear."),
            ]
        ),
        "researcher": ScriptedModel([[tool_call("weather", {"city": "Oslo"})], text("Clear.")]),
    }
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=models, sync_tools="thread") as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "How is the weather?")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    _, ask = tool_parts(state)
    assert (ask.state, ask.output) == ("output-available", "Clear.")
    assert where == [(thread_id, False), (ask.sub_threads[0], False)]


async def test_a_sub_agents_thread_is_watched_live_and_from_a_snapshot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A client follows a sub-agent from a snapshot taken while it waits: applying the
    updates to the snapshot gives its thread as it ends; the outer thread's watch sees the
    calling part link it and end."""
    from .test_runtime_watch_snapshot import Follower, drain

    events: list[str] = []
    with trio.fail_after(10):
        async with create_test_runtime(approval_pai(events), model=approval_models(events)) as rt:
            thread_id = await rt.create_thread("s")
            async with rt.watch(thread_id) as outer:
                await rt.send(thread_id, "Pay it.")
                await rt.wait_idle(thread_id)
                [action] = await rt.pending_actions(thread_id)
                sub_thread_id = action.ref.thread_id
                async with rt.watch(sub_thread_id, snapshot=True) as sub:
                    follower = Follower.of(sub.snapshot, rt)
                    await action.submit({"approved": True})
                    await rt.wait_idle(thread_id)
                    follower.take(drain(sub))
                    sub_state = await rt.get_state(sub_thread_id)
                outer_updates = drain(outer)
    assert follower.replica.state_wire() == sub_state.to_wire()
    assert sub_state.runs[-1].status == "completed"
    linked = [
        u.part.sub_threads
        for u in outer_updates
        if getattr(u, "part", None) is not None and u.part.sub_threads
    ]
    assert linked
    assert linked[0] == (sub_thread_id,)
