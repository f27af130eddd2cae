"""The state machine kit (``pai_actors.testing.AgentStateMachine``): a correct agent keeps
every invariant, a planted cancellation bug is found, and the failure prints as a program
that reproduces it when pasted."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import trio
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from pydantic import BaseModel

from pai_actors import (
    ModelRequest,
    ModelToolMessage,
    ResumeEntry,
    SuspendPoint,
    ToolContext,
    ToolRegistration,
    create_pai,
    define_agent,
    define_tool,
)
from pai_actors.testing import AgentStateMachine, text, tool_call


class Invoice(BaseModel):
    amount: int


class Confirm(BaseModel):
    ok: bool


def billing(*, swallow: bool = False) -> Any:
    """``pay`` needs an approval and works a second; ``ask`` suspends for a confirmation,
    then works half a second; ``report`` works three seconds. ``swallow`` plants a bug:
    ``pay`` catches its cancellation and returns."""

    async def pay(ctx: ToolContext) -> Any:
        try:
            await trio.sleep(1)
        except trio.Cancelled:
            if swallow:
                return {"paid": 0}  # the planted bug: trio.Cancelled swallowed
            raise
        return {"paid": ctx.input.amount}

    async def ask(ctx: ToolContext) -> Any:
        if not isinstance(ctx.entry, ResumeEntry):
            return ctx.suspend("confirm", {"amount": ctx.input.amount})
        await trio.sleep(0.5)
        return {"confirmed": ctx.entry.resume.ok}

    async def report(ctx: ToolContext) -> Any:
        await trio.sleep(3)
        return {"reported": ctx.input.amount}

    confirm = SuspendPoint(suspend_schema=Invoice, resume_schema=Confirm)
    return define_agent(
        name="billing",
        tools={
            "pay": ToolRegistration(
                define_tool(id="sm.pay", description="Pay.", input_schema=Invoice, execute=pay),
                needs_approval=True,
            ),
            "ask": define_tool(
                id="sm.ask",
                description="Ask.",
                input_schema=Invoice,
                suspend={"confirm": confirm},
                execute=ask,
            ),
            "report": define_tool(
                id="sm.report", description="Report.", input_schema=Invoice, execute=report
            ),
        },
    )


def billing_step(request: ModelRequest) -> Any:
    if isinstance(request.messages[-1], ModelToolMessage):
        return text("done")
    return [
        tool_call("pay", {"amount": 5}),
        tool_call("ask", {"amount": 7}),
        tool_call("report", {"amount": 9}),
    ]


class BillingMachine(AgentStateMachine):
    agents = billing()
    model = billing_step
    messages = ("Pay invoice 7", "And invoice 8")


class BuggyBillingMachine(AgentStateMachine):
    agents = billing(swallow=True)
    model = billing_step
    messages = ("Pay invoice 7",)


# About 15 ms a sequence of 8 rules (2 cores): 40 sequences of up to 15 rules take ~2 s.
QUICK = settings(
    max_examples=40,
    stateful_step_count=15,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# The bug needs three rules in order (start, approve the payment, cancel the run before it
# ends): found and shrunk in ~190 sequences (~4 s) here; max_examples leaves room for a
# Hypothesis that draws otherwise. The explain phase, which reruns the failure many times
# over, is left out.
FIND = settings(
    QUICK,
    max_examples=1000,
    stateful_step_count=15,
    phases=[phase for phase in Phase if phase is not Phase.explain],
)


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """A crashed runtime logs what it could not write; that noise is expected here."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


TestBillingMachine = BillingMachine.TestCase  # a correct agent keeps every invariant
TestBillingMachine.settings = QUICK


def test_a_planted_cancellation_bug_is_found_and_printed_as_a_program() -> None:
    with pytest.raises(AssertionError) as failure:
        run_state_machine_as_test(BuggyBillingMachine, settings=FIND)
    message = str(failure.value)
    assert "swallowed trio.Cancelled" in message, message
    program = reproduction(failure.value)
    assert program[0] == "state = BuggyBillingMachine()", program
    assert program[-1] == "state.teardown()", program
    # the printed program is code: run as it is, it breaks the same invariant
    namespace: dict[str, Any] = {"BuggyBillingMachine": BuggyBillingMachine}
    try:
        with pytest.raises(AssertionError) as replayed:
            exec("\n".join(program), namespace)
    finally:
        namespace["state"].teardown()  # (after a failed rule it only stops the trio run)
    assert "swallowed trio.Cancelled" in str(replayed.value)
    assert str(replayed.value) == message  # the same violations and trace


def test_a_reproduction_pasted_into_a_test_replays_exactly() -> None:
    def replay() -> str:
        state = BuggyBillingMachine()
        try:
            threads_0 = state.start()
            state.submit(pick=0, variant=0)  # approve the payment: pay works for a second
            with pytest.raises(AssertionError) as failure:
                state.cancel_run(reason=None, thread=threads_0)
        finally:
            state.teardown()
        return str(failure.value)

    first = replay()
    assert "'pay'" in first
    assert "swallowed trio.Cancelled" in first
    assert "after cancel_run(thread='sm-1', reason=None)" in first
    assert replay() == first  # the same trace, to the virtual microsecond


def test_the_correct_tool_passes_the_same_program() -> None:
    state = BillingMachine()
    try:
        threads_0 = state.start()
        state.submit(pick=0, variant=0)
        state.cancel_run(reason=None, thread=threads_0)
        state.crash(after_commits=1)
        threads_1 = state.start()
        state.advance_time(seconds=1.0)
        state.send(thread=threads_1)
        state.advance_time(seconds=5.0)
    finally:
        state.teardown()


def reproduction(error: BaseException) -> list[str]:
    """The program Hypothesis printed for a failing state machine (its notes)."""
    notes = getattr(error, "__notes__", [])
    start = next(i for i, line in enumerate(notes) if line.startswith("state = "))
    end = next(i for i, line in enumerate(notes) if line == "state.teardown()")
    return notes[start : end + 1]


def test_a_machine_needs_its_agents_and_model() -> None:
    class Unnamed(AgentStateMachine):
        pass

    with pytest.raises(TypeError, match=r"needs class attributes \['agents', 'model'\]"):
        Unnamed()


class Question(BaseModel):
    question: str


def payer_pai() -> Any:
    """``front``'s ``ask`` runs the ``payer`` agent, whose ``pay`` needs an approval."""

    async def ask(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("payer", "Pay the invoice.")).text

    async def pay(ctx: ToolContext) -> Any:
        await trio.sleep(1)
        return {"paid": ctx.input.amount}

    return create_pai(
        {
            "front": define_agent(
                name="Front",
                tools={
                    "ask": define_tool(
                        id="sm.ask_payer", description="Ask.", input_schema=Question, execute=ask
                    )
                },
            ),
            "payer": define_agent(
                name="Payer",
                tools={
                    "pay": ToolRegistration(
                        define_tool(
                            id="sm.pay", description="Pay.", input_schema=Invoice, execute=pay
                        ),
                        needs_approval=True,
                    )
                },
            ),
        }
    )


def front_step(request: ModelRequest) -> Any:
    if isinstance(request.messages[-1], ModelToolMessage):
        return text("done")
    return [tool_call("ask", {"question": "Pay?"})]


def payer_step(request: ModelRequest) -> Any:
    if isinstance(request.messages[-1], ModelToolMessage):
        return text("paid")
    return [tool_call("pay", {"amount": 5})]


class PayerMachine(AgentStateMachine):
    agents = payer_pai()
    model: ClassVar[dict[str, Any]] = {"front": front_step, "payer": payer_step}


def test_a_sub_agent_run_goes_on_after_a_crash_right_after_its_action_was_cancelled() -> None:
    """Found by the state machine (the program it printed): a crash right after a
    sub-agent's action was cancelled (or failed) left its run waiting on nothing, and its
    caller waiting for it forever; a load of the caller now goes on with it."""
    for resolve in ("cancel_action", "fail_action"):
        state = PayerMachine()
        try:
            state.start()
            state.crash(after_commits=1)
            if resolve == "cancel_action":
                state.cancel_action(pick=0, reason=None)
            else:
                state.fail_action(pick=0)
        finally:
            state.teardown()  # settles every run: the invariants at rest hold
