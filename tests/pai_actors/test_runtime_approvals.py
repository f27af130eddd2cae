"""ToolRegistration(needs_approval=...): the AI SDK's approval flow as a pending action."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    MemoryStore,
    ModelToolMessage,
    ToolContext,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Payment(BaseModel):
    cents: int


def pay_tool(ran: list[Any]) -> Any:
    def execute(ctx: ToolContext) -> Any:
        ran.append(ctx.input.cents)
        return {"paid": ctx.input.cents}

    return define_tool(id="test.pay.v1", description="Pay.", input_schema=Payment, execute=execute)


def tool_parts(state: Any) -> list[Any]:
    return [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]


def results(model: ScriptedModel) -> list[dict[str, Any]]:
    return [
        part.to_wire()["output"]
        for message in model.requests[-1].messages
        if isinstance(message, ModelToolMessage)
        for part in message.parts
    ]


async def test_an_approved_call_runs_after_the_approval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[Any] = []
    agent = define_agent(
        name="a", tools={"pay": ToolRegistration(pay_tool(ran), needs_approval=True)}
    )
    model = ScriptedModel([[tool_call("pay", {"cents": 500})], text("Paid.")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "pay")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
            [part] = tool_parts(state)
            assert part.state == "approval-requested"
            assert part.to_wire()["approval"] == {"id": f"{part.tool_call_id}.approval"}
            assert [r.status for r in state.runs] == ["waiting"]
            assert ran == []
            [action] = await rt.pending_actions(thread_id)
            assert (action.name, action.input) == ("pay", {"cents": 500})
            assert action.ref.action_id == part.approval.id  # type: ignore[union-attr]
            message = next(m for m in state.messages if part in m.parts)
            assert rt.get_pending_action(message, part).ref == action.ref  # type: ignore[union-attr]
            rejected = await action.submit({"approved": "yes"})
            assert rejected.status == "rejected"
            assert "approved" in (rejected.error or "")
            assert len(await rt.pending_actions(thread_id)) == 1
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            again = await action.submit({"approved": False})
            state = await rt.get_state(thread_id)
    assert again.status == "rejected"
    assert "already resolved" in (again.error or "")
    assert ran == [500]
    [part] = tool_parts(state)
    assert (part.state, part.output) == ("output-available", {"paid": 500})
    assert part.to_wire()["approval"] == {"id": f"{part.tool_call_id}.approval", "approved": True}
    assert [r.status for r in state.runs] == ["completed"]
    assert results(model) == [{"type": "json", "value": {"paid": 500}}]


async def test_a_denied_call_never_runs_and_the_model_reads_the_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[Any] = []
    agent = define_agent(
        name="a", tools={"pay": ToolRegistration(pay_tool(ran), needs_approval=True)}
    )
    model = ScriptedModel([[tool_call("pay", {"cents": 500})], text("Not paid.")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "pay")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            result = await action.submit({"approved": False, "reason": "over budget"})
            assert result.status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert ran == []
    [part] = tool_parts(state)
    assert part.state == "output-denied"
    assert part.to_wire()["approval"] == {
        "id": f"{part.tool_call_id}.approval",
        "approved": False,
        "reason": "over budget",
    }
    assert [r.status for r in state.runs] == ["completed"]
    assert results(model) == [
        {"type": "error-text", "value": "The user denied this tool call: over budget"}
    ]


async def test_a_policy_callback_decides_per_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[Any] = []
    asked: list[dict[str, Any]] = []

    async def large(**kwargs: Any) -> bool:
        asked.append(kwargs)
        return bool(kwargs["input"]["cents"] > 1000)

    agent = define_agent(
        name="a",
        runtime_context={"limit": 1000},
        tools={"pay": ToolRegistration(pay_tool(ran), needs_approval=large)},
    )
    model = ScriptedModel(
        [[tool_call("pay", {"cents": 10}), tool_call("pay", {"cents": 5000})], text("ok")]
    )
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "pay", identity="ann")
            await rt.wait_idle(thread_id)
            states = [p.state for p in tool_parts(await rt.get_state(thread_id))]
            assert states == ["output-available", "approval-requested"]
            [action] = await rt.pending_actions(thread_id)
            await action.submit({"approved": True})
            await rt.wait_idle(thread_id)
    assert sorted(ran) == [10, 5000]
    assert [a["input"] for a in asked] == [{"cents": 10}, {"cents": 5000}]
    assert asked[0]["context"] == {"limit": 1000}
    assert asked[0]["identity"] == "ann"
    assert asked[0]["tool_call_id"] == "call_1"


async def test_cancelling_or_failing_an_approval_ends_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[Any] = []
    tool = ToolRegistration(pay_tool(ran), needs_approval=True)
    agent = define_agent(name="a", tools={"one": tool, "two": tool})
    model = ScriptedModel(
        [[tool_call("one", {"cents": 1}), tool_call("two", {"cents": 2})], text("ok")]
    )
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "pay")
            await rt.wait_idle(thread_id)
            one, two = await rt.pending_actions(thread_id)
            assert (await one.cancel("changed my mind")).status == "accepted"
            assert (await two.fail("card expired")).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert ran == []
    shown = [(p.state, p.error_text) for p in tool_parts(state)]
    assert shown == [
        ("output-error", "The tool call was cancelled: changed my mind"),
        ("output-error", "card expired"),
    ]
    assert [r.status for r in state.runs] == ["completed"]


async def test_a_pending_approval_survives_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[Any] = []
    agent = define_agent(
        name="a", tools={"pay": ToolRegistration(pay_tool(ran), needs_approval=True)}
    )
    model = ScriptedModel([[tool_call("pay", {"cents": 7})], text("Paid.")])
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "pay")
            await rt.wait_idle(thread_id)
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert ran == [7]
    assert [r.status for r in state.runs] == ["completed"]
    assert tool_parts(state)[0].state == "output-available"
