"""The conversation the tracing tests run, in a module that imports nothing of OpenTelemetry
(the test without it runs it in an interpreter where importing ``opentelemetry`` fails): a
``refund`` call suspends for a human's approval, is approved, resumes and completes."""

from __future__ import annotations

from typing import Any

import trio
from pydantic import BaseModel

from pai_actors import ResumeEntry, SuspendPoint, ToolContext, define_agent, define_tool
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Refund(BaseModel):
    cents: int


class Decision(BaseModel):
    approved: bool


async def _refund(ctx: ToolContext) -> Any:
    if isinstance(ctx.entry, ResumeEntry):
        return {"refunded": ctx.input.cents if ctx.entry.resume.approved else 0}
    return ctx.suspend("approval", {"cents": ctx.input.cents})


refund_tool = define_tool(
    id="test.refund.v1",
    description="Refund an order after a human approves it.",
    input_schema=Refund,
    suspend={"approval": SuspendPoint(suspend_schema=Refund, resume_schema=Decision)},
    execute=_refund,
)


async def approve_a_refund() -> list[str]:
    """Run the conversation; return the thread's run statuses and its tool parts' states."""
    agent = define_agent(name="clerk", tools={"refund": refund_tool})
    model = ScriptedModel([[tool_call("refund", {"cents": 500})], text("Refunded.")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "refund 500")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    parts = [p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")]
    return [r.status for r in state.runs] + [p.state for p in parts]
