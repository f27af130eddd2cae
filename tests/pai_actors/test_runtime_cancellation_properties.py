"""Property-based cancellation tests of the runtime, on the simulation kit: an
:class:`~pai_actors.testing.AgentStateMachine` with its races and restarts (``Machine``),
and with crashes too (``CrashingMachine``).

A conversation's message names a plan: the tool calls its run's first model step asks for
(the model waits ``delay`` seconds in each step), of four kinds:

- ``sleepy``: sleeps, then returns ``{"slept": key}``;
- ``ask``: sleeps, suspends at ``approval``; each resume sleeps again and suspends again (a
  new episode) until it was resumed ``rounds`` times, then returns the last answer and the
  rounds;
- ``external``: no ``execute`` (a client supplies its output, through its implicit action);
- ``boom``: sleeps, then raises ``ValueError("boom <key>")``.

Hypothesis draws the kit's rules: sends (a thread's next message: several runs each),
valid and invalid answers, ``cancel_action``, ``fail_action``, a second resolution of a
resolved action, ``cancel_run`` at a settled moment or in the tick of the next deadline
(the old scenarios' unsettled operations), a submission and a ``cancel_run`` in the same
tick, graceful restarts (a submission or a ``cancel_run`` racing the close), crashes, and
virtual time passing (the old ``wait_idle``: the end waits for every run to be idle). A
failure prints as a program to paste into a test, as
:func:`test_cancel_run_during_execution_suspension_and_resumption` is.

What the old scenario test checked (``check_parts``, ``check_quiescent``,
``check_closed_store``, ``check_final`` and each operation's asserts), and where it is
checked now ("kit": ``pai_actors.testing._invariants`` and the rules, after every rule
and at the end; "here": :meth:`Machine.check` and ``cancellation_support``):

- one terminal state per call, or still pending; ``cancelled`` set exactly for the
  "The tool call was cancelled..." errors, with its reason; at most one ``pending``
  suspension, the last; the part is its record's; a run over holds no unfinished call
  (kit: ``check_thread``);
- ``pending_actions`` lists exactly the parts' pending suspensions and external outputs,
  each with its call's run, name and input (kit: ``check_thread``, ``check_views``);
- at rest: no run ``running``, a pending call's run ``waiting``, a ``waiting`` run waits on
  something, no ``execute`` live (kit: ``check_at_rest``, ``check_closed``); an execute
  that runs belongs to an executing call of a running run (kit: ``check_live``);
- after a runtime closed: nothing runs, the task count is back, no run ``running``, an
  unfinished call pending or kept as an accepted answer whose resume never began (kit:
  ``check_stopped`` after each ``restart``, ``check_closed`` at the end);
- ``cancel_run`` returns with its run over; if the run was active, it is ``cancelled`` and
  every call then in flight recorded cancelled with its reason, but the call a racing
  submission finished (kit: ``check_cancelled_run``; in the tick of a deadline only the
  run over and nothing of it executing, as the old unsettled ``cancel_run``);
- a cancelled ``execute`` saw ``ctx.signal`` aborted with the recorded reason (kit:
  ``check_executions``, which also checks it let ``trio.Cancelled`` through and ended
  before its cancellation was recorded);
- an action resolves once: a valid answer to a listed action is accepted, an invalid one
  rejected and the action left pending (kit: the submit rules) and nothing of it recorded
  (here); a second submit, cancel or fail is rejected and changes nothing; an accepted
  answer is recorded with its payload, a cancel with its reason, a fail with its error
  and no ``cancelled`` (kit: ``resolve_again``, ``check_resolutions``); a submission
  racing a close is applied, or refused and the action still pending (kit: ``restart``).
  (The wording of a schema's refusal is tested in ``test_calls.py``.)
- each entry (a call's initial one, the resume of an action) entered ``execute`` at most
  once, and two executes of a call never overlap (kit: ``check_executions``; with crashes,
  a call may run again);
- each kind's outcome: ``sleepy`` its output, ``ask`` its rounds and last answer, ``boom``
  its error, a failed action's error only for ``ask`` and ``external``, an interrupted
  call only after a crash (here: ``outcome``);
- a step asked for every call of its plan (or none, in a run stopped first), and a
  completed run's last step is the text "done" (here: ``step_problems``);
- the model sees results only once every call of its step has one, each what its part
  shows (here: ``results_problems``, on the model's requests; after a crash, only that
  every call has one).

New with the kit: several runs per conversation, crashes at any commit (and answers
accepted before one checked after it), an ``execute`` of a cancelled call ending before its
cancellation is recorded, the views of pending actions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import trio
from hypothesis import settings
from pydantic import BaseModel

from pai_actors import (
    ModelRequest,
    ModelToolMessage,
    ModelUserMessage,
    ResumeEntry,
    SuspendPoint,
    ToolContext,
    define_agent,
    define_tool,
)
from pai_actors.testing import AgentStateMachine, Observation, text, tool_call

from .cancellation_support import finished_results, results_problems, step_problems

INTERRUPTED = "The tool call was interrupted"
FAILED = "failed by the state machine"  # (the error the kit's fail_action gives)


class Job(BaseModel):
    plan: str
    index: int
    delay: float = 0.0
    rounds: int = 1

    @property
    def key(self) -> str:
        return f"{self.plan}/{self.index}"


class Decision(BaseModel):
    approved: bool


class Round(BaseModel):
    round: int


async def sleepy(ctx: ToolContext) -> Any:
    await trio.sleep(ctx.input.delay)
    return {"slept": ctx.input.key}


async def ask(ctx: ToolContext) -> Any:
    await trio.sleep(ctx.input.delay)
    if not isinstance(ctx.entry, ResumeEntry):
        return ctx.suspend("approval", {"round": 1})
    done = len(ctx.suspend_history)  # the episodes so far, the resumed one included
    if done < ctx.input.rounds:
        return ctx.suspend("approval", {"round": done + 1})
    return {"approved": ctx.entry.resume.approved, "rounds": done}


async def boom(ctx: ToolContext) -> Any:
    await trio.sleep(ctx.input.delay)
    raise ValueError(f"boom {ctx.input.key}")


approval = SuspendPoint(suspend_schema=Round, resume_schema=Decision)
AGENT = define_agent(
    name="prop",
    tools={
        "sleepy": define_tool(
            id="prop.sleepy.v1", description="Sleep.", input_schema=Job, execute=sleepy
        ),
        "ask": define_tool(
            id="prop.ask.v1",
            description="Ask.",
            input_schema=Job,
            suspend={"approval": approval},
            execute=ask,
        ),
        "external": define_tool(
            id="prop.external.v1",
            description="External.",
            input_schema=Job,
            output_schema=Decision,
        ),
        "boom": define_tool(id="prop.boom.v1", description="Boom.", input_schema=Job, execute=boom),
    },
)


@dataclass(frozen=True)
class Call:
    kind: str
    delay: float = 0.0
    rounds: int = 1


@dataclass(frozen=True)
class Plan:
    calls: tuple[Call, ...]
    delay: float = 0.0  # the model's, in each step


PLANS = {  # by the message that asks for it
    "all": Plan(
        (Call("sleepy", 3.0), Call("ask", 0.5, 2), Call("external"), Call("boom", 1.0)), 0.5
    ),
    "asks": Plan((Call("ask", 1.5, 3), Call("ask"), Call("sleepy", 0.5), Call("boom", 3.0))),
    "quick": Plan((Call("external"), Call("boom"), Call("sleepy"), Call("ask", 1.0))),
}


async def step(request: ModelRequest) -> Any:
    """The first step calls the plan's tools, a step that sees results answers "done"."""
    said = [m.text for m in request.messages if isinstance(m, ModelUserMessage)][-1]
    plan = PLANS[said]
    await trio.sleep(plan.delay)
    if isinstance(request.messages[-1], ModelToolMessage):
        return text("done")
    return [
        tool_call(c.kind, {"plan": said, "index": i, "delay": c.delay, "rounds": c.rounds})
        for i, c in enumerate(plan.calls)
    ]


class Machine(AgentStateMachine):
    agents = AGENT
    model = step
    messages = ("all", "asks", "quick")
    crashes = False  # (the old scenarios' ground: every check applies; see CrashingMachine)
    races = True
    restarts = True

    async def check(self, observed: Observation) -> Iterable[str]:
        if not observed.final:
            return []
        crashed, store = bool(observed.probe.crashed), observed.store
        plans = {name: [c.kind for c in plan.calls] for name, plan in PLANS.items()}
        problems = await step_problems(store, observed.threads, plans)
        for thread_id in observed.threads:
            for call in await store.list_calls(thread_id):
                where = f"{thread_id} {call.record.tool_call_id} ({call.record.name})"
                problems.extend(f"{where}: {p}" for p in outcome(call.record, crashed))
        results = await finished_results(store, observed.threads)
        # (a result a crashed runtime gave its model may have been recorded interrupted)
        problems.extend(results_problems(observed.model.requests, results, match=not crashed))
        return problems


def outcome(record: Any, crashed: bool) -> list[str]:
    """Every answer recorded is one its schema takes (an invalid one was refused), and the
    call ended as its kind allows (a pending call: anything)."""
    answers = [e.resume for e in record.episodes if e.state == "submitted"]
    if record.name == "external" and record.phase == "done" and record.error_text is None:
        answers.append(record.output)
    if any(not isinstance(a, dict) or set(a) != {"approved"} for a in answers):
        return [f"recorded an answer its schema refuses: {answers}"]
    if record.phase != "done" or record.cancelled is not None:
        return []
    error, output, job = record.error_text, record.output, Job(**record.input)
    if error is not None and error.startswith(INTERRUPTED):
        return [] if crashed and record.name != "external" else [f"interrupted: {error!r}"]
    if error == FAILED:
        return [] if record.name in ("ask", "external") else [f"failed: {error!r}"]
    last = answers[-1]["approved"] if answers else None
    expected = {
        "sleepy": (None, {"slept": job.key}),
        "boom": (f"boom {job.key}", None),
        "external": (None, output),  # (the accepted payload: the kit checks it)
        "ask": (None, {"approved": last, "rounds": job.rounds}),
    }[record.name]
    return [] if (error, output) == expected else [f"ended {(error, output)}, not {expected}"]


class CrashingMachine(Machine):
    """Crashes too: what a crashed runtime's tools saw is left out of some checks (a call
    may run again, a result its model saw may be recorded interrupted since)."""

    crashes = True


# A sequence of up to 20 rules takes ~50 ms (2 cores): these 60 take ~3 s, as the 100
# scenarios they replace did (the ci profile derandomizes them).
Machine.TestCase.settings = settings(max_examples=40, stateful_step_count=20)
CrashingMachine.TestCase.settings = settings(max_examples=20, stateful_step_count=20)
TestCancellation = Machine.TestCase
TestCancellationWithCrashes = CrashingMachine.TestCase


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """A crashed runtime logs what it could not write; that noise is expected here."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def test_cancel_run_during_execution_suspension_and_resumption() -> None:
    state = CrashingMachine()
    try:
        first = state.start()  # "all": the model thinks half a second, then calls every kind
        state.advance_time(seconds=1.0)  # sleepy and boom sleep, ask suspended, external waits
        state.cancel_run(thread=first, reason="stop")
        second = state.start_another()
        state.advance_time(seconds=1.0)
        state.submit_and_cancel_run(pick=0, variant=0, reason="user left")
        state.send(thread=first)  # "asks"
        state.advance_time(seconds=0.5)
        state.submit(pick=0, variant=1)  # a resume sleeps, then suspends again
        state.restart(racing="submit", pick=1, checkpoints=1)
        state.at_next_deadline(act="cancel_run", pick=0, reason=None)
        state.send(thread=second)  # "asks"
        state.crash(after_commits=2)
        state.advance_time(seconds=60.0)
    finally:
        state.teardown()
