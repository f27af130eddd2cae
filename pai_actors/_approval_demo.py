"""The first half of ``pai-actors demo``: a tool call that waits for a person's approval.

A scripted model stands in for an LLM (the demo needs no network or API key): it asks for
the ``sendInvoice`` tool, the tool suspends at its ``approval`` point, the demo plays the
client that submits the pending action (first with an invalid payload, which is rejected
while the action stays pending), the call resumes and the model answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ._agent import define_agent
from ._context import ResumeEntry, ToolContext
from ._define_tool import define_tool
from ._runtime import counter_ids, create_agent_runtime
from ._scripted_model import ScriptedModel, text, tool_call
from ._tool import SuspendPoint


class Invoice(BaseModel):
    customer: str
    amount: float


class Decision(BaseModel):
    approved: bool
    note: str = ""


def send_invoice(ctx: ToolContext) -> Any:
    if isinstance(ctx.entry, ResumeEntry):
        decision = ctx.entry.resume
        if not decision.approved:
            return ctx.fail(f"A person declined: {decision.note or 'no reason given'}.")
        return {"sent": True, "customer": ctx.input.customer}
    return ctx.suspend("approval", {"customer": ctx.input.customer, "amount": ctx.input.amount})


send_invoice_tool = define_tool(
    id="demo.send-invoice.v1",
    description="Send an invoice, once a person has approved it.",
    input_schema=Invoice,
    output_schema=None,
    suspend={"approval": SuspendPoint(suspend_schema=Invoice, resume_schema=Decision)},
    execute=send_invoice,
)


async def run_approval_demo(say: Callable[[str], None] = print) -> list[str]:
    """Run the approval flow, narrating through ``say``; return the run statuses."""
    agent = define_agent(
        name="billing",
        instructions="Send invoices when asked.",
        tools={"sendInvoice": send_invoice_tool},
    )
    model = ScriptedModel(
        [
            [tool_call("sendInvoice", {"customer": "ACME", "amount": 120.0})],
            text("The invoice to ACME is sent."),
        ]
    )
    async with create_agent_runtime(agent, model=model, new_id=counter_ids()) as rt:
        thread_id = await rt.create_thread(scope_key="tenant-a")
        await rt.send(thread_id, "Please invoice ACME for 120.")
        await rt.wait_idle(thread_id)
        [action] = await rt.pending_actions(thread_id)
        state = await rt.get_state(thread_id)
        say("1. the model called sendInvoice; the call suspended and waits for a person:")
        say(f"  run: {state.runs[-1].status}; pending action {action.name!r} {action.input}")
        rejected = await action.submit({"approved": "yes please"})
        say(f"\n2. an invalid submission is {rejected.status}; the action stays pending:")
        say(f"  {rejected.error}".replace("\n", "\n  "))
        accepted = await action.submit({"approved": True})
        say(f"\n3. a valid submission is {accepted.status}; the call resumes and the run goes on:")
        await rt.wait_idle(thread_id)
        state = await rt.get_state(thread_id)
        for message in state.messages:
            for part in message.parts:
                say(f"  {message.role}: {_describe(part.to_wire())}")
        statuses: list[str] = [run.status for run in state.runs]
        say(f"  run: {statuses[-1]}")
    return statuses


def _describe(part: dict[str, Any]) -> str:
    if part["type"] == "text":
        return repr(part["text"])
    episodes = ", ".join(f"{e['name']} {e['state']}" for e in part.get("suspensions", []))
    return f"{part['type']} {part['state']} output={part.get('output')!r} ({episodes})"
