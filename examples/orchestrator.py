"""An orchestrator that fans out to three specialist agents, one of which asks a person.

A buyer agent is asked to buy something. Its one tool, ``consult``, hands the request to
three specialists at once (``ctx.agents.run_all``): ``pricing`` quotes it, ``compliance``
screens the vendor, and ``purchasing`` reserves the budget, with a tool that needs a
person's approval within four hours (``needs_approval`` with ``approval_deadline``). Each
specialist runs on a thread of its own, linked to the ``consult`` call.

The program prints the tree (the buyer's thread, the ``consult`` part, the three sub-agent
threads and their runs), then the pending approval with its origin chain (which call of
which agent started the sub-agent that asks). An hour later the process stops: the
runtime closes while purchasing waits, and a new runtime opens the same SQLite file. The
approval is still listed; a person approves it, and the answer goes back up the chain: the
purchasing tool runs, the purchasing agent answers, ``consult`` is entered again and gets
all three answers, and the buyer answers.

Scripted models stand in for the LLMs, so it runs offline: ``python
examples/orchestrator.py``. It runs under trio's ``MockClock``, so the hour passes at once
and the ids and times it prints are the same every run. ``mypy --strict`` checks it (see
``docs/guides/typing.md``); ``docs/guides/sub-agents.md`` explains each step.
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    AgentRuntime,
    ModelRequest,
    ModelToolMessage,
    ModelUserMessage,
    Pai,
    SqliteStore,
    TextPart,
    ToolContext,
    ToolRegistration,
    create_pai,
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


class Purchase(BaseModel):
    item: str
    quantity: int
    vendor: str


class Vendor(BaseModel):
    vendor: str


class Budget(BaseModel):
    amount: int


PRICES = {"laptop": 1150}


async def consult(ctx: ToolContext[Purchase]) -> str:
    """Ask the three specialists at once; each answer is one line of the report.

    ``execute`` is entered twice: the first ``run_all`` starts the three sub-runs and stops
    it; once they all ended, it is entered again and the same ``run_all`` returns their
    answers. So the code before it runs on each entry: keep it free of side effects, and
    ask for the same sub-runs with the same prompts every time.
    """
    print(f"consult: execute entered ({ctx.entry.type} entry)")
    p = ctx.input
    answers = await ctx.agents.run_all(
        [
            ("pricing", f"Quote {p.quantity} {p.item}s from {p.vendor}."),
            ("compliance", f"Screen the vendor {p.vendor}."),
            ("purchasing", f"Reserve the budget for {p.quantity} {p.item}s from {p.vendor}."),
        ],
        keys=["pricing", "compliance", "purchasing"],  # the sub-threads' last id segment
    )
    return "\n".join(answer.text for answer in answers)


def quote(ctx: ToolContext[Purchase]) -> str:
    unit = PRICES[ctx.input.item]
    return f"${unit} each, ${unit * ctx.input.quantity} in all"


def screen(ctx: ToolContext[Vendor]) -> str:
    return f"{ctx.input.vendor} is on no sanctions list"


def reserve(ctx: ToolContext[Budget]) -> str:
    return f"${ctx.input.amount} reserved"


consult_tool = define_tool(
    id="examples.consult.v1",
    description="Ask pricing, compliance and purchasing about a purchase.",
    input_schema=Purchase,
    execute=consult,
)
quote_tool = define_tool(
    id="examples.quote.v1",
    description="Quote a purchase.",
    input_schema=Purchase,
    execute=quote,
)
screen_tool = define_tool(
    id="examples.screen.v1",
    description="Screen a vendor against the sanctions lists.",
    input_schema=Vendor,
    execute=screen,
)
reserve_tool = define_tool(
    id="examples.reserve-budget.v1",
    description="Reserve budget for a purchase.",
    input_schema=Budget,
    execute=reserve,
)

pai: Pai = create_pai(
    {
        "buyer": define_agent(name="Buyer", tools={"consult": consult_tool}),
        "pricing": define_agent(name="Pricing", tools={"quote": quote_tool}),
        "compliance": define_agent(name="Compliance", tools={"screen": screen_tool}),
        "purchasing": define_agent(
            name="Purchasing",
            tools={
                "reserve": ToolRegistration(  # a person approves it, within four hours
                    reserve_tool, needs_approval=True, approval_deadline=timedelta(hours=4)
                )
            },
        ),
    }
)


def scripted(agent_id: str, call: ScriptedToolCall) -> ScriptedModel:
    """An agent's scripted model: ``call`` for the user's message, then an answer made from
    the tool's result. Each step reads the request, not a position in a script, so the
    model of a new runtime picks a conversation up where its stored messages left it."""

    def step(request: ModelRequest) -> list[ScriptedToolCall] | ScriptedText:
        last = request.messages[-1]
        if isinstance(last, ModelUserMessage):
            return [call]
        assert isinstance(last, ModelToolMessage)
        result = last.parts[-1].output["value"]  # the AI SDK's tool result: {"type", "value"}
        if agent_id == "buyer":
            return text(f"Ready to buy:\n{result}")
        return text(f"{agent_id}: {result}")

    return ScriptedModel([step], repeat_last=True)


PURCHASE = {"item": "laptop", "quantity": 40, "vendor": "Globex"}
CALLS = {
    "buyer": tool_call("consult", PURCHASE),
    "pricing": tool_call("quote", PURCHASE),
    "compliance": tool_call("screen", {"vendor": "Globex"}),
    "purchasing": tool_call("reserve", {"amount": 46000}),
}


def open_runtime(store: SqliteStore) -> AgentRuntime:
    """A runtime (not yet opened) on ``store``, with deterministic ids and scripted models."""
    models = {agent_id: scripted(agent_id, call) for agent_id, call in CALLS.items()}
    return create_test_runtime(pai, model=models, store=store)


async def print_tree(rt: AgentRuntime, thread_id: str, indent: str = "") -> None:
    """The thread, its runs, its tool parts and, under each, the sub-agent threads it
    started (their own trees)."""
    record = await rt.get_thread(thread_id)
    state = await rt.get_state(thread_id)
    runs = ", ".join(f"{run.run_id} {run.status}" for run in state.runs)
    print(f"{indent}{thread_id} [{record.agent_id}] {runs}")
    for message in state.messages:
        for part in message.tool_parts:
            print(f"{indent}  {part.tool_name} {part.tool_call_id} {part.state}")
            for sub_thread_id in part.sub_threads:
                await print_tree(rt, sub_thread_id, indent + "    ")


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "orchestrator.db"
        with SqliteStore(path) as store:
            async with open_runtime(store) as rt:
                thread_id = await rt.create_thread(scope_key="acme", agent_id="buyer")
                await rt.send(thread_id, "Buy 40 laptops from Globex.")
                await rt.wait_idle(thread_id)  # the whole tree: it waits on a person
                await print_tree(rt, thread_id)
                [action] = await rt.pending_actions(thread_id)
                print(action.name, action.input, "expires", action.expires_at)
                for origin in action.origin_chain:  # outermost first
                    print(
                        f"asked by: {origin.tool_name} {origin.tool_call_id} of"
                        f" {origin.thread_id} ({origin.run_id}) -> {origin.agent_id}"
                        f" on {origin.sub_thread_id}"
                    )
                await trio.sleep(3600)  # an hour passes; then the process stops
        print("--- restart ---")
        with SqliteStore(path) as store:
            async with open_runtime(store) as rt:
                [action] = await rt.pending_actions(thread_id)
                print(action.name, action.ref.thread_id, "expires", action.expires_at)
                print(await action.submit({"approved": True}))
                await rt.wait_idle(thread_id)
                await print_tree(rt, thread_id)
                state = await rt.get_state(thread_id)
                answer = state.messages[-1].parts[-1]
                print(answer.text if isinstance(answer, TextPart) else answer)


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
