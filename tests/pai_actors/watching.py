"""What the tests of watchers on several nodes share (``test_postgres_watch``,
``test_cluster``, ``test_store_updates``): their agents and a watcher that records."""

from __future__ import annotations

from typing import Any

from pai_actors import (
    AgentRuntime,
    ToolContext,
    ToolRegistration,
    define_agent,
    define_tool,
    json_schema,
)
from pai_actors.testing import ScriptedModel, text, tool_call


def payer(calls: int = 1) -> tuple[Any, ScriptedModel]:
    """An agent whose model calls ``pay`` (``calls`` times in its first step), which needs
    an approval, then answers; and its model."""
    tool = define_tool(
        id="test.pay.v1",
        description="Pay.",
        input_schema=json_schema({"type": "object"}),
        execute=lambda ctx: "paid",
    )

    def step(request: Any) -> Any:
        answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
        return text("done") if answered else [tool_call("pay", {}) for _ in range(calls)]

    agent = define_agent(name="payer", tools={"pay": ToolRegistration(tool, needs_approval=True)})
    return agent, ScriptedModel([step], repeat_last=True)


def streamer() -> tuple[Any, ScriptedModel]:
    """An agent whose model streams its text in fragments around a call of ``work``, which
    sends transient progress; and its model."""

    async def work(ctx: ToolContext) -> str:
        await ctx.data.write("progress", {"pct": 50}, id="p", transient=True)
        return "worked"

    tool = define_tool(
        id="test.work.v1",
        description="Work.",
        input_schema=json_schema({"type": "object"}),
        data_schemas={"progress": dict[str, int]},
        execute=work,
    )

    def step(request: Any) -> Any:
        if type(request.messages[-1]).__name__ == "ModelToolMessage":
            return [text("all "), text("done")]
        return [text("let me "), text("work"), tool_call("work", {})]

    agent = define_agent(name="streamer", tools={"work": tool})
    return agent, ScriptedModel([step], repeat_last=True)


async def collect(
    rt: AgentRuntime,
    thread_id: str,
    seen: list[Any],
    *,
    deltas: bool = False,
    task_status: Any,
) -> None:
    """Watch from a snapshot (started once it is taken) until the first run completed,
    recording each update's wire form in ``seen``."""
    async with rt.watch(thread_id, snapshot=True, deltas=deltas) as updates:
        task_status.started()
        async for update in updates:
            seen.append(update.to_wire())
            if update.type == "run-status" and update.run.status == "completed":
                return


def statuses(seen: list[Any]) -> list[str]:
    """The run statuses in recorded updates, in order."""
    return [u["run"]["status"] for u in seen if u["type"] == "run-status"]


def applied(seen: list[Any]) -> list[Any]:
    """The messages recorded updates give, applied in order from an empty thread."""
    messages: dict[str, Any] = {}
    for update in seen:
        if update["type"] in ("message-appended", "message-replaced"):
            messages[update["message"]["id"]] = update["message"]
        elif update["type"] == "tool-part-updated":
            message = messages[update["messageId"]]
            message["parts"] = [
                update["part"] if p.get("toolCallId") == update["part"]["toolCallId"] else p
                for p in message["parts"]
            ]
    return list(messages.values())
