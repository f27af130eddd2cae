"""A typed application: a trading desk agent whose order tool asks for approval.

``place_order`` takes a pydantic ``Order``: ``define_tool`` infers ``ctx.input: Order`` from
``input_schema`` and ``ctx.context: Desk`` from ``context_schema``. It prices the order
through its child tool ``price`` (``ctx.tools.price``), which reads a market lent to it as a
capability (``ctx.capabilities.market``), and suspends for a person's approval when the
total is above the desk's limit. A scripted model stands in for the LLM, so it runs without
a network: ``python examples/trading_desk.py``. ``mypy --strict`` checks it (see
``docs/guides/typing.md``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio
from pydantic import BaseModel, Field

from pai_actors import (
    AgentDefinition,
    AgentRuntime,
    CapabilityRequest,
    ModelRequest,
    ModelToolMessage,
    ModelUserMessage,
    RuntimeScope,
    SuspendPoint,
    TextPart,
    ToolContext,
    ToolFailResult,
    ToolSuspendResult,
    capability,
    define_agent,
    define_tool,
)
from pai_actors.testing import (
    ScriptedModel,
    ScriptedText,
    ScriptedToolCall,
    create_test_runtime,
    text,
    tool_call,
)


@dataclass(frozen=True)
class Desk:
    """The runtime context every tool of the agent receives (``ctx.context``)."""

    name: str
    approval_limit: float


class Order(BaseModel):
    symbol: str = Field(pattern=r"^[A-Z]{1,5}$", description="the ticker")
    quantity: int = Field(gt=0)


class PriceRequest(BaseModel):
    symbol: str


class Approval(BaseModel):
    """What the approval suspension shows a person."""

    symbol: str
    quantity: int
    total: float
    limit: float


class Decision(BaseModel):
    """What a person submits to resume the order."""

    approved: bool
    note: str = ""


class Fill(BaseModel):
    symbol: str
    quantity: int
    total: float
    approved_by_person: bool


class Market:
    """The service a capability binding lends to ``price`` (a real one calls a feed)."""

    def __init__(self, prices: dict[str, float]) -> None:
        self._prices = prices

    def price(self, symbol: str) -> float:
        return self._prices[symbol]


market = capability("examples.market")


async def price(ctx: ToolContext[PriceRequest]) -> float:
    # A capability's facade is Any (its ctx name is not part of the tool's type): annotate it.
    feed: Market = ctx.capabilities.market
    return feed.price(ctx.input.symbol)


price_tool = define_tool(
    id="examples.price.v1",
    description="The last price of a ticker.",
    input_schema=PriceRequest,
    output_schema=float,
    capabilities={"market": market},
    execute=price,
)


async def place_order(ctx: ToolContext[Order, Desk]) -> Fill | ToolSuspendResult | ToolFailResult:
    order = ctx.input  # an Order: define_tool checks this annotation against input_schema
    if ctx.entry.type == "resume":  # narrows ctx.entry to ResumeEntry
        decision: Decision = ctx.entry.resume  # parsed by the suspend point's resume_schema
        if not decision.approved:
            return ctx.fail(f"A person declined the order: {decision.note or 'no reason'}.")
    unit = float(await ctx.tools.price.execute({"symbol": order.symbol}))
    total = round(unit * order.quantity, 2)
    if ctx.entry.type == "initial" and total > ctx.context.approval_limit:
        return ctx.suspend(
            "approval",
            Approval(
                symbol=order.symbol,
                quantity=order.quantity,
                total=total,
                limit=ctx.context.approval_limit,
            ),
        )
    return Fill(
        symbol=order.symbol,
        quantity=order.quantity,
        total=total,
        approved_by_person=ctx.entry.type == "resume",
    )


place_order_tool = define_tool(
    id="examples.place-order.v1",
    description=lambda dc: f"Place a buy order on the {dc.context.name} desk.",
    input_schema=Order,
    output_schema=Fill,
    context_schema=Desk,
    suspend={"approval": SuspendPoint(suspend_schema=Approval, resume_schema=Decision)},
    tools={"price": price_tool},
    execute=place_order,
)


def desk_for(scope: RuntimeScope) -> Desk:
    return Desk(name=f"{scope.scope_key} equities", approval_limit=1000.0)


agent: AgentDefinition = define_agent(
    name="trader",
    instructions="Place the orders you are asked for.",
    runtime_context=desk_for,
    tools={"placeOrder": place_order_tool},
)


@asynccontextmanager
async def market_binding(request: CapabilityRequest) -> AsyncIterator[Market]:
    yield Market({"ACME": 120.0, "INIT": 9.5})


def scripted_step(request: ModelRequest) -> list[ScriptedToolCall] | ScriptedText:
    """The scripted model: order what the user's message says, then report the result."""
    last = request.messages[-1]
    if isinstance(last, ModelUserMessage):
        found = re.search(r"(\d+) ([A-Z]+)", last.text)
        quantity, symbol = (int(found.group(1)), found.group(2)) if found else (1, "ACME")
        return [tool_call("placeOrder", {"symbol": symbol, "quantity": quantity})]
    if isinstance(last, ModelToolMessage) and last.parts:
        result = last.parts[-1].output  # the AI SDK's tool result: {"type": ..., "value": ...}
        return text(f"{result['type']}: {result['value']}")
    return text("Nothing to do.")


def open_runtime() -> AgentRuntime:
    """The runtime (not yet opened), on an in-memory store with deterministic ids."""
    model = ScriptedModel([scripted_step], repeat_last=True)
    return create_test_runtime(agent, model=model, capabilities={market: market_binding})


async def main() -> None:
    async with open_runtime() as rt:
        thread_id = await rt.create_thread(scope_key="acme")
        for message in ("buy 5 INIT", "buy 10 ACME"):
            await rt.send(thread_id, message)
            await rt.wait_idle(thread_id)
        [action] = await rt.pending_actions(thread_id)
        print(action.name, action.input)
        print((await action.submit({"approved": "maybe"})).status)
        print((await action.submit({"approved": True})).status)
        await rt.wait_idle(thread_id)
        state = await rt.get_state(thread_id)
        for run in state.runs:
            print("run", run.status)
        answer = state.messages[-1].parts[-1]
        print(answer.text if isinstance(answer, TextPart) else answer)


if __name__ == "__main__":
    trio.run(main)
