"""The first half of ``pai-actors demo``: a tool call that waits for a person's approval.

A scripted model stands in for an LLM (the demo needs no network or API key): it asks for
the ``sendInvoice`` tool. The tool reports its progress as tool data and suspends at its
``approval`` point; the demo plays the client that watches the thread live and submits the
pending action (first with an invalid payload, which is rejected while the action stays
pending); the process stops and a new runtime opens the same SQLite file, where the call
waited; the call resumes, reports progress again (transient items only reach the
watcher) and returns; the model answers. Last, the transcript shows every part in the AI
SDK's native states with the runtime's sidecars.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from pydantic import BaseModel

from ._agent import define_agent
from ._context import ResumeEntry, ToolContext
from ._create import counter_ids, create_agent_runtime
from ._define_tool import define_tool
from ._parts import ToolPart
from ._scripted_model import ScriptedModel, text, tool_call
from ._sqlite_store import SqliteStore
from ._tool import SuspendPoint
from ._watch import (
    MessageAppended,
    MessageReplaced,
    RunStatusChanged,
    ThreadUpdate,
    ThreadWatch,
    ToolDataUpdated,
    ToolPartUpdated,
)


class Invoice(BaseModel):
    customer: str
    amount: float


class Decision(BaseModel):
    approved: bool
    note: str = ""


class Progress(BaseModel):
    step: str


async def send_invoice(ctx: ToolContext) -> Any:
    if isinstance(ctx.entry, ResumeEntry):
        decision = ctx.entry.resume
        if not decision.approved:
            return ctx.fail(f"A person declined: {decision.note or 'no reason given'}.")
        for percent in (50, 100):  # live only: a watcher sees these, the store never does
            await ctx.data.write(
                "progress", {"step": f"uploading {percent}%"}, id="upload", transient=True
            )
        await ctx.data.write("progress", {"step": "sent"}, id="status")  # replaces "drafted"
        return {"sent": True, "customer": ctx.input.customer}
    await ctx.data.write("progress", {"step": "drafted INV-1"}, id="status")
    return ctx.suspend("approval", {"customer": ctx.input.customer, "amount": ctx.input.amount})


send_invoice_tool = define_tool(
    id="demo.send-invoice.v1",
    description="Send an invoice, once a person has approved it.",
    input_schema=Invoice,
    suspend={"approval": SuspendPoint(suspend_schema=Invoice, resume_schema=Decision)},
    data_schemas={"progress": Progress},
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
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "demo.db"
        with SqliteStore(path) as store:
            async with create_agent_runtime(
                agent, model=model, store=store, new_id=counter_ids()
            ) as rt:
                thread_id = await rt.create_thread(scope_key="tenant-a")
                async with rt.watch(thread_id) as watch:
                    say("1. The user asks; the model calls sendInvoice, which reports progress")
                    say("   and suspends for approval. What a client watching the thread gets:")
                    await rt.send(thread_id, "Please invoice ACME for 120.")
                    await rt.wait_idle(thread_id)
                    _show_updates(watch, say)
                [action] = await rt.pending_actions(thread_id)
                say(f"   The pending action: {action.name!r}, input {action.input}")

                rejected = await action.submit({"approved": "yes please"})
                say(f"\n2. An invalid submission is {rejected.status}; the action stays pending:")
                say(f"   {rejected.error}".replace("\n", "\n   "))
        say(f"\n3. The process stops. Nothing runs now; the call waits in {path.name}:")
        with SqliteStore(path) as store:
            async with create_agent_runtime(
                agent, model=model, store=store, new_id=counter_ids("g2_")
            ) as rt:
                still = [(a.name, a.ref.action_id) for a in await rt.pending_actions(thread_id)]
                say(f"   a new runtime on the same file lists the pending actions: {still}")
                [action] = await rt.pending_actions(thread_id)
                async with rt.watch(thread_id) as watch:
                    accepted = await action.submit({"approved": True})
                    say(
                        f"\n4. A valid submission is {accepted.status}; the call resumes in the "
                        "new runtime:"
                    )
                    await rt.wait_idle(thread_id)
                    _show_updates(watch, say)
                state = await rt.get_state(thread_id)
    say("\n5. The transcript, as get_state() returns it (AI SDK part states + sidecars):")
    for message in state.messages:
        for part in message.parts:
            if isinstance(part, ToolPart):
                say(f"   {message.role}: {_describe(part)}")
            else:
                say(f"   {message.role}: {part.text!r}")
    statuses: list[str] = [run.status for run in state.runs]
    say(f"   run: {statuses[-1]}")
    [part] = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    say("\n   The tool part on the wire (camelCase, readable by an AI SDK client):")
    wire = json.dumps(part.to_wire(), indent=2, ensure_ascii=False)
    say("   " + wire.replace("\n", "\n   "))
    return statuses


def _show_updates(watch: ThreadWatch, say: Callable[[str], None]) -> None:
    """Say every update the watch holds (all of them are buffered once wait_idle returned)."""
    while True:
        try:
            update = watch.receive_nowait()
        except (trio.WouldBlock, StopAsyncIteration):
            return
        line = _update_line(update)
        if line is not None:
            say(f"   [live] {line}")


def _update_line(update: ThreadUpdate) -> str | None:
    if isinstance(update, RunStatusChanged):
        return f"run {update.run.status}"
    if isinstance(update, ToolDataUpdated):
        return f"transient data {update.channel}[{update.item.id!r}] = {update.item.value}"
    if isinstance(update, ToolPartUpdated):
        return f"part {_describe(update.part)}"
    if isinstance(update, MessageAppended | MessageReplaced):
        parts = [p.type for p in update.message.parts]
        verb = "appended" if isinstance(update, MessageAppended) else "completed"
        return f"{update.message.role} message {verb}: {parts}"
    return None


def _describe(part: ToolPart) -> str:
    described = f"{part.type} {part.state}"
    if part.state == "output-available":
        described += f" output={part.output}"
    elif part.error_text is not None:
        described += f" errorText={part.error_text!r}"
    for channel, items in part.data.items():
        shown = ", ".join(f"{i.id}={i.value}" for i in items)
        described += f" data.{channel}: {shown}"
    if part.pending_suspension is not None:
        described += f" pendingSuspension={part.pending_suspension.name!r}"
    episodes = ", ".join(f"{e.name} {e.state}" for e in part.suspensions)
    if episodes:
        described += f" suspensions: [{episodes}]"
    return described
