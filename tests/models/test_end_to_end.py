"""An agent on a real adapter, end to end: the OpenAI-compatible adapter against the local
server drives a tool call that suspends for an approval; the runtime closes; a new runtime
on the same SQLite file takes the approval, and the run completes through the adapter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from pydantic import BaseModel

from pai_actors import (
    MessageDelta,
    ResumeEntry,
    SqliteStore,
    SuspendPoint,
    TextPart,
    ToolContext,
    ToolPart,
    create_agent_runtime,
    define_agent,
    define_tool,
)
from pai_actors.models import OpenAIChatModel

from .providers import API_KEY
from .sse_server import Reply, fixture, open_provider_server


class Refund(BaseModel):
    order: int
    cents: int


class Approval(BaseModel):
    cents: int


class Decision(BaseModel):
    approved: bool


async def _refund(ctx: ToolContext) -> Any:
    if isinstance(ctx.entry, ResumeEntry):
        decision: Decision = ctx.entry.resume
        return {"refunded": ctx.input.cents if decision.approved else 0}
    return ctx.suspend("approval", {"cents": ctx.input.cents})


refund = define_tool(
    id="shop.refund",
    description="Refund an order after a person approves it.",
    input_schema=Refund,
    suspend={"approval": SuspendPoint(suspend_schema=Approval, resume_schema=Decision)},
    execute=_refund,
)


async def test_a_suspended_call_survives_a_restart_and_the_run_ends_through_the_adapter(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "threads.db")
    with trio.fail_after(30):
        async with open_provider_server() as server:
            model = OpenAIChatModel(
                "gpt-4o-mini", base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0
            )
            agent = define_agent(
                name="shop", instructions="Refund orders.", model=model, tools={"refund": refund}
            )
            server.reply(Reply(fixture("openai_chat_refund.sse")))
            with SqliteStore(path) as store:
                async with create_agent_runtime(agent, store=store) as rt:
                    thread_id = await rt.create_thread(scope_key="tenant-a")
                    await rt.send(thread_id, "Refund order 7, please.")
                    await rt.wait_idle(thread_id)
                    [action] = await rt.pending_actions(thread_id)
                    assert (action.name, action.input) == ("refund.approval", {"cents": 1200})
            # a new process, as far as the thread knows: a new store and runtime on the file
            server.reply(Reply(fixture("openai_chat_text.sse")))
            with SqliteStore(path) as store:
                async with create_agent_runtime(agent, store=store) as rt:
                    [action] = await rt.pending_actions(thread_id)
                    result = await action.submit({"approved": True})
                    assert result.status == "accepted"
                    await rt.wait_idle(thread_id)
                    state = await rt.get_state(thread_id)
    assert [run.status for run in state.runs] == ["completed"]
    [call] = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    assert (call.tool_call_id, call.input, call.output) == (
        "call_cclGbjTQkZDEnnHrRiU0n7NO",
        {"order": 7, "cents": 1200},
        {"refunded": 1200},
    )
    assert state.messages[-1].parts[-1] == TextPart(text="Hello there!")
    # what the adapter sent: the conversation, then the tool's result for the second step
    first, second = (r.body for r in server.requests)
    assert first["messages"] == [
        {"role": "system", "content": "Refund orders."},
        {"role": "user", "content": "Refund order 7, please."},
    ]
    assert first["tools"][0]["function"]["name"] == "refund"
    assert second["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_cclGbjTQkZDEnnHrRiU0n7NO",
                    "type": "function",
                    "function": {"name": "refund", "arguments": '{"order": 7, "cents": 1200}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_cclGbjTQkZDEnnHrRiU0n7NO",
            "content": '{"refunded":1200}',
        },
    ]


async def test_a_provider_error_fails_the_run_and_the_thread_stays_usable() -> None:
    with trio.fail_after(30):
        async with open_provider_server() as server:
            model = OpenAIChatModel(
                "gpt-4o-mini", base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0
            )
            agent = define_agent(name="shop", model=model, tools={"refund": refund})
            body = {"error": {"message": f"Incorrect API key provided: {API_KEY}", "code": "x"}}
            server.reply(Reply.error(401, body), Reply(fixture("openai_chat_text.sse")))
            async with create_agent_runtime(agent) as rt:
                thread_id = await rt.create_thread(scope_key="tenant-a")
                await rt.send(thread_id, "Hello?")
                await rt.wait_idle(thread_id)
                failed = (await rt.get_state(thread_id)).runs[-1]
                await rt.send(thread_id, "Hello again?")
                await rt.wait_idle(thread_id)
                state = await rt.get_state(thread_id)
    assert failed.status == "failed"
    assert failed.error is not None
    assert failed.error.startswith("openai answered HTTP 401 (x): Incorrect API key provided: ")
    assert API_KEY not in failed.error
    assert "OPENAI_API_KEY" in failed.error
    assert [run.status for run in state.runs] == ["failed", "completed"]
    assert state.messages[-1].parts[-1] == TextPart(text="Hello there!")


async def test_cancel_run_mid_stream_closes_the_connection_and_records_the_run() -> None:
    with trio.fail_after(20):
        async with open_provider_server() as server:
            server.reply(Reply(fixture("openai_chat_text.sse"), hang_at="Hello"))
            model = OpenAIChatModel("gpt-test", base_url=server.url, api_key=API_KEY)
            agent = define_agent(name="shop", tools={}, model=model)
            async with create_agent_runtime(agent) as rt:
                thread_id = await rt.create_thread(scope_key="s")
                async with rt.watch(thread_id, deltas=True) as updates:
                    run_id = await rt.send(thread_id, "hi")
                    async for update in updates:  # the first token streamed
                        if isinstance(update, MessageDelta):
                            break
                    await rt.cancel_run(run_id, "the user stopped it")
                    await server.closed.wait()  # the HTTP response was closed
                    await rt.wait_idle(thread_id)
                state = await rt.get_state(thread_id)
    assert update.delta == "Hello"
    [run] = state.runs
    assert run.status == "cancelled"
    assert [m.role for m in state.messages] == ["user"]  # no half answer is stored
