"""A runtime hosting a Pai's agents (each thread run by one of them), and its clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
from pydantic import BaseModel

from pai_actors import (
    AgentNotFound,
    MemoryStore,
    ResumeEntry,
    SuspendPoint,
    ToolContext,
    create_agent_runtime,
    create_pai,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call, trio_clock

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class Empty(BaseModel):
    pass


class Amount(BaseModel):
    cents: int


def who_tool(seen: list[str]) -> Any:
    def execute(ctx: ToolContext) -> str:
        seen.append(ctx.agent_id)
        return ctx.agent_id

    return define_tool(
        id="test.who.v1", description="Who runs me?", input_schema=Empty, execute=execute
    )


def refund_tool() -> Any:
    async def execute(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            return {"refunded": ctx.entry.resume.cents}
        return ctx.suspend("confirm", {"cents": ctx.input.cents})

    return define_tool(
        id="test.refund.v1",
        description="Refund after a human confirms the amount.",
        input_schema=Amount,
        suspend={"confirm": SuspendPoint(suspend_schema=Amount, resume_schema=Amount)},
        execute=execute,
    )


def two_agents(seen: list[str]) -> Any:
    who = who_tool(seen)
    support = define_agent(name="Support", instructions="Help.", tools={"who": who})
    billing = define_agent(
        name="Billing", instructions="Bill.", tools={"who": who, "refund": refund_tool()}
    )
    return create_pai({"support": support, "billing": billing})


async def test_each_thread_is_run_by_its_agent_and_tools_see_the_registry_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    model = ScriptedModel(
        [[tool_call("who", {})], text("support done"), [tool_call("who", {})], text("billing done")]
    )
    with trio.fail_after(10):
        async with create_test_runtime(two_agents(seen), model=model) as rt:
            default = await rt.create_thread(scope_key="s")
            billing = await rt.create_thread(scope_key="s", agent_id="billing")
            await rt.send(default, "hi")
            await rt.wait_idle(default)
            await rt.send(billing, "hi")
            await rt.wait_idle(billing)

    assert seen == ["support", "billing"]
    instructions = [request.instructions for request in model.requests]
    assert instructions == ["Help.", "Help.", "Bill.", "Bill."]
    assert sorted(model.requests[0].tools) == ["who"]
    assert sorted(model.requests[2].tools) == ["refund", "who"]


async def test_a_runtime_made_from_one_agent_names_it_by_its_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []
    agent = define_agent(name="Solo", tools={"who": who_tool(seen)})
    model = ScriptedModel([[tool_call("who", {})], text("done")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread(scope_key="s", agent_id="Solo")
            await rt.send(thread_id, "hi")
            await rt.wait_idle(thread_id)
    assert seen == ["Solo"]


async def test_an_unknown_agent_id_is_refused_with_the_hosted_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([])
    async with create_test_runtime(two_agents([]), model=model) as rt:
        with pytest.raises(AgentNotFound, match=r"'sales'.*'support', 'billing'") as info:
            await rt.create_thread(scope_key="s", agent_id="sales")
    assert info.value.agent_id == "sales"


async def test_a_suspended_call_resumes_with_its_agents_tool_after_a_reopen(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    pai = two_agents([])
    model = ScriptedModel([[tool_call("refund", {"cents": 500})], text("refunded")])
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=model, store=store) as rt:
            thread_id = await rt.create_thread(scope_key="s", agent_id="billing")
            await rt.send(thread_id, "refund me")
            await rt.wait_idle(thread_id)
        async with create_test_runtime(pai, model=model, store=store) as rt:
            [action] = await rt.pending_actions(thread_id)
            assert action.name == "refund.confirm"
            rejected = await action.submit({"cents": "lots"})
            assert rejected.status == "rejected"
            assert (await action.submit({"cents": 400})).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    [part] = [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]
    assert (part.state, part.output) == ("output-available", {"refunded": 400})
    assert [run.status for run in state.runs] == ["completed"]
    assert model.requests[-1].instructions == "Bill."


async def test_a_thread_whose_agent_is_gone_does_not_load_and_others_do(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    model = ScriptedModel([text("a"), text("b")])
    async with create_test_runtime(two_agents([]), model=model, store=store) as rt:
        billing = await rt.create_thread(scope_key="s", agent_id="billing")
        support = await rt.create_thread(scope_key="s", agent_id="support")
    only_support = create_pai({"support": define_agent(name="Support", tools={})})
    async with create_test_runtime(only_support, model=model, store=store) as rt:
        with pytest.raises(AgentNotFound, match=r"'billing'.*create_pai") as info:
            await rt.get_state(billing)
        assert info.value.agent_id == "billing"
        await rt.send(support, "hi")
        await rt.wait_idle(support)
        assert [r.status for r in (await rt.get_state(support)).runs] == ["completed"]


async def test_each_agent_uses_its_own_model_unless_the_runtime_gives_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    support_model = ScriptedModel([text("from support")])
    billing_model = ScriptedModel([text("from billing")])
    pai = create_pai(
        {
            "support": define_agent(name="Support", model=support_model, tools={}),
            "billing": define_agent(name="Billing", model=billing_model, tools={}),
        }
    )
    async with create_agent_runtime(pai) as rt:
        thread_id = await rt.create_thread(scope_key="s", agent_id="billing")
        await rt.send(thread_id, "hi")
        await rt.wait_idle(thread_id)
        state = await rt.get_state(thread_id)
    assert state.messages[-1].parts[-1].to_wire() == {"type": "text", "text": "from billing"}
    assert (len(support_model.requests), len(billing_model.requests)) == (0, 1)


def test_an_agent_without_a_model_is_named_at_creation() -> None:
    pai = create_pai(
        {
            "support": define_agent(name="Support", model=ScriptedModel([]), tools={}),
            "billing": define_agent(name="Billing", tools={}),
        }
    )
    with pytest.raises(Exception, match=r"agent 'billing' has no model"):
        create_agent_runtime(pai)


async def test_test_runtime_timestamps_follow_the_mock_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def execute(ctx: ToolContext) -> Any:
        await trio.sleep(5)
        return ctx.suspend("confirm", {"cents": ctx.input.cents})

    slow = define_tool(
        id="test.slow-refund.v1",
        description="Wait, then ask.",
        input_schema=Amount,
        suspend={"confirm": SuspendPoint(suspend_schema=Amount, resume_schema=Amount)},
        execute=execute,
    )
    agent = define_agent(name="a", tools={"refund": slow})
    model = ScriptedModel([[tool_call("refund", {"cents": 1})]])
    async with create_test_runtime(agent, model=model) as rt:
        start = trio.current_time()
        thread_id = await rt.create_thread(scope_key="s")
        await rt.send(thread_id, "go")
        await rt.wait_idle(thread_id)
        [action] = await rt.pending_actions(thread_id)
        await trio.sleep(2)
        await action.cancel("too late")
        await rt.wait_idle(thread_id)
        state = await rt.get_state(thread_id)
    [part] = [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]
    [episode] = part.suspensions
    at = EPOCH + timedelta(seconds=start)
    assert episode.suspended_at == at + timedelta(seconds=5)
    assert episode.resolved_at == at + timedelta(seconds=7)
    assert part.cancelled is not None
    assert part.cancelled.at == at + timedelta(seconds=7)


async def test_a_runtime_records_the_time_its_clock_gives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fixed = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
    model = ScriptedModel([[tool_call("refund", {"cents": 1})]])
    agent = define_agent(name="a", tools={"refund": refund_tool()})
    async with create_agent_runtime(agent, model=model, clock=lambda: fixed) as rt:
        thread_id = await rt.create_thread(scope_key="s")
        await rt.send(thread_id, "go")
        await rt.wait_idle(thread_id)
        state = await rt.get_state(thread_id)
    [part] = [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]
    assert part.pending_suspension is not None
    assert part.pending_suspension.suspended_at == fixed


def test_trio_clock_needs_an_aware_epoch() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        trio_clock(datetime(2026, 1, 1))
