"""An application to serve: ``pai-actors serve pai_actors.demo_app:factory``.

A billing agent with one tool, ``sendInvoice``: it drafts the invoice (reporting progress
as transient tool data, which takes a moment), suspends until a person approves it, then
sends it (more progress) and returns. A scripted model stands in for an LLM, so it needs no
network or API key: it calls ``sendInvoice`` with the customer and amount it reads in the
user's message, then answers with the tool's result. :func:`build` takes a real model
instead (``pai-actors demo --model openai:gpt-4.1-mini``), which is offered the same tool.

Tokens: ``alice-token`` and ``carol-token`` are users of the scope ``acme``;
``bob-token`` is a user of the scope ``globex``. Any other token is refused.

This module is also the template of an application: ``factory(store)`` returns an
:class:`~pai_actors.server.Application`, a runtime (not yet opened) and the hook that turns
a bearer token into a trusted :class:`~pai_actors.server.Identity`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import trio
from pydantic import BaseModel, Field

from ._core.model import Model, ModelRequest, ModelToolMessage, ModelUserMessage
from ._runtime.create import create_agent_runtime
from ._server.application import Application
from ._server.server import Identity
from ._store.base import Store
from ._tools.agent import define_agent
from ._tools.context import ResumeEntry, ToolContext
from ._tools.define_tool import define_tool
from ._tools.tool import SuspendPoint
from .testing._scripted_model import ScriptedModel, StepSpec, text, tool_call

TOKENS = {
    "alice-token": Identity(scope_key="acme", user_key="alice"),
    "carol-token": Identity(scope_key="acme", user_key="carol"),
    "bob-token": Identity(scope_key="globex", user_key="bob"),
}

WORK_STEP_SECONDS = 0.1
"""How long each of the tool's progress steps takes (the demo's "work")."""


class Invoice(BaseModel):
    customer: str = Field(description="who the invoice is for")
    amount: float = Field(gt=0, description="the amount, in euros")


class Decision(BaseModel):
    approved: bool = Field(description="whether to send the invoice")
    note: str = Field("", description="a note for the record, e.g. why it was declined")


class Progress(BaseModel):
    step: str
    percent: int = Field(ge=0, le=100)


async def _work(ctx: ToolContext, step: str) -> None:
    for percent in (0, 25, 50, 75, 100):
        await ctx.data.write(
            "progress", {"step": step, "percent": percent}, id="progress", transient=True
        )
        if percent < 100:
            await trio.sleep(WORK_STEP_SECONDS)


async def send_invoice(ctx: ToolContext) -> Any:
    invoice: Invoice = ctx.input
    if isinstance(ctx.entry, ResumeEntry):
        decision: Decision = ctx.entry.resume
        if not decision.approved:
            return ctx.fail(f"A person declined the invoice: {decision.note or 'no reason given'}.")
        await _work(ctx, "sending")
        await ctx.data.write("status", {"step": "sent", "percent": 100}, id="status")
        return {"sent": True, "customer": invoice.customer, "amount": invoice.amount}
    await _work(ctx, "drafting")
    await ctx.data.write("status", {"step": "drafted", "percent": 100}, id="status")
    return ctx.suspend("approval", {"customer": invoice.customer, "amount": invoice.amount})


send_invoice_tool = define_tool(
    id="demo.send-invoice.v2",
    description="Draft an invoice and send it once a person has approved it.",
    input_schema=Invoice,
    suspend={"approval": SuspendPoint(suspend_schema=Invoice, resume_schema=Decision)},
    data_schemas={"progress": Progress, "status": Progress},
    execute=send_invoice,
)


def scripted_step(request: ModelRequest) -> StepSpec:
    """The scripted model: call ``sendInvoice`` for the user's last message, then report."""
    last = request.messages[-1]
    if isinstance(last, ModelUserMessage):
        customer = re.search(r"invoice (\w+)", last.text)
        amount = re.search(r"(\d+(?:\.\d+)?)", last.text)
        return [
            tool_call(
                "sendInvoice",
                {
                    "customer": customer.group(1) if customer else "ACME",
                    "amount": float(amount.group(1)) if amount else 100.0,
                },
            )
        ]
    if isinstance(last, ModelToolMessage) and last.parts:
        output = last.parts[-1].output
        value = output.get("value") if isinstance(output, dict) else None
        if isinstance(value, dict) and value.get("sent"):
            return text(f"Done: the invoice to {value['customer']} is sent.")
        return text(f"The invoice was not sent: {value}")
    return text("The invoice was not sent.")


def authenticate(token: str) -> Identity | None:
    """The demo's token check: a fixed table (a real application asks its identity provider)."""
    return TOKENS.get(token)


def factory(store: Store) -> Application:
    """The application ``pai-actors serve`` hosts, on ``store``."""
    return build(store)


def build(
    store: Store,
    *,
    new_id: Callable[[str], str] | None = None,
    model: Model | str | None = None,
) -> Application:
    """:func:`factory` with a choice of id generator (``pai-actors demo`` counts ids) and of
    model: the scripted one by default, or a real one (an adapter or a spec string such as
    ``"openai:gpt-4.1-mini"``, ``pai-actors demo --model``)."""
    agent = define_agent(
        name="billing",
        instructions="Send invoices when asked; a person approves each one.",
        tools={"sendInvoice": send_invoice_tool},
    )
    if model is None:
        model = ScriptedModel([scripted_step], repeat_last=True, record=False)
    runtime = (
        create_agent_runtime(agent, model=model, store=store)
        if new_id is None
        else create_agent_runtime(agent, model=model, store=store, new_id=new_id)
    )
    return Application(runtime=runtime, authenticate=authenticate)
