"""Every message and part the runtime emits passes the AI SDK's own validator (issue 14).

The validator is ``safeValidateUIMessages`` of the ``ai`` package, 6.x and 7.x side by side
(``tests/js``: ``bash scripts/test`` installs them with ``npm ci``), called with no metadata,
data or tool schemas: a stock client's view. ``tests/js/validate.mjs`` runs it on a corpus
of real wire output, which the scenarios below make by driving test runtimes through the
public API, as a client sees them:

- ``get_state(thread_id).to_wire()["messages"]`` at each point a client would read it;
- every message a watch yields (``message-appended``, ``message-replaced``), and every
  ``tool-part-updated`` part, validated as the only part of an assistant message (the
  message the client holds it in).

The server sends the same projections (a snapshot frame carries ``ThreadState.to_wire()``,
an update frame an update's ``to_wire()``), so the runtime's corpus is the server's too.

Case ids name the scenario and the point it was taken at, never a generated id. Node and
``tests/js/node_modules`` are required: without them the test fails (CI must run it).
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, get_args

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    AgentRuntime,
    ClientTool,
    FailAtDeadline,
    FilePart,
    Finish,
    MemoryBacking,
    MemoryStore,
    MessageAppended,
    MessageReplaced,
    ReasoningDelta,
    ReasoningEnd,
    ResolveAtDeadline,
    ResumeEntry,
    SuspendPoint,
    TextDelta,
    ThreadWatch,
    ToolContext,
    ToolInputDelta,
    ToolInputStart,
    ToolPartUpdated,
    ToolRegistration,
    Usage,
    define_agent,
    define_tool,
)
from pai_actors._core.parts import SuspensionState, ToolState
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

JS = Path(__file__).parents[1] / "js"
VALIDATE = JS / "validate.mjs"
SDKS = ("ai6", "ai7")

# -- the corpus ------------------------------------------------------------------------------


@dataclass
class Corpus:
    """Message lists by case id, as ``validate.mjs`` reads them."""

    cases: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, case_id: str, messages: list[Any]) -> None:
        assert case_id not in self.cases, f"two cases are named {case_id!r}"
        # What a client receives is JSON text: the corpus is what that text parses back to.
        self.cases[case_id] = json.loads(json.dumps(messages))


@dataclass
class Shown:
    """One scenario's thread: takes snapshots and, at the end, the watch's updates."""

    corpus: Corpus
    label: str
    rt: AgentRuntime
    thread_id: str

    async def snapshot(self, point: str, *, idle: bool = True) -> None:
        """The thread's messages as ``get_state`` shows them once it is idle (``idle=False``:
        now). Not an empty thread: the SDK validates a conversation, and refuses an empty
        list."""
        if idle:
            await self.rt.wait_idle(self.thread_id)
        messages = (await self.rt.get_state(self.thread_id)).to_wire()["messages"]
        assert isinstance(messages, list)
        if messages:
            self.corpus.add(f"{self.label}: get_state {point}", messages)

    async def actions(self) -> list[Any]:
        await self.rt.wait_idle(self.thread_id)
        return await self.rt.pending_actions(self.thread_id)


def take_updates(corpus: Corpus, label: str, watch: ThreadWatch) -> None:
    """Every update the watch buffered: messages as they are, tool parts in a message.
    (A transient ``tool-data`` update is no part: a client adds its item to the part's
    ``data`` sidecar, a key the SDK's part schemas do not read.)"""
    for number in itertools.count(1):
        try:
            update = watch.receive_nowait()
        except (trio.WouldBlock, StopAsyncIteration):
            return
        wire = update.to_wire()
        if isinstance(update, MessageAppended | MessageReplaced):
            corpus.add(f"{label}: update {number} {update.type}", [wire["message"]])
        elif isinstance(update, ToolPartUpdated):
            message = {"id": wire["messageId"], "role": "assistant", "parts": [wire["part"]]}
            corpus.add(f"{label}: update {number} tool-part {update.part.state}", [message])


@asynccontextmanager
async def thread(corpus: Corpus, label: str, agent: Any, model: Any) -> AsyncIterator[Shown]:
    """A runtime and a watched thread; on leaving, the final snapshot and every update."""
    async with create_test_runtime(agent, model=model) as rt:
        thread_id = await rt.create_thread("s")
        async with rt.watch(thread_id, capacity=100_000) as watch:
            shown = Shown(corpus, label, rt, thread_id)
            yield shown
            await shown.snapshot("at the end")
            take_updates(corpus, label, watch)


# -- tools -----------------------------------------------------------------------------------


class Payment(BaseModel):
    cents: int


class Job(BaseModel):
    job: str


class Decision(BaseModel):
    approved: bool


def pay_tool() -> Any:
    def execute(ctx: ToolContext) -> Any:
        return {"paid": ctx.input.cents}

    return define_tool(id="t.pay.v1", description="Pay.", input_schema=Payment, execute=execute)


def tool(name: str, execute: Callable[[ToolContext], Any], **options: Any) -> Any:
    return define_tool(
        id=f"t.{name}.v1", description=name, input_schema=Job, execute=execute, **options
    )


def returning(value: Any) -> Any:
    return tool(f"returns-{type(value).__name__}", lambda ctx: value)


def raising() -> Any:
    def execute(ctx: ToolContext) -> Any:
        raise RuntimeError("the backend is down")

    return tool("raises", execute)


def failing() -> Any:
    return tool("fails", lambda ctx: ctx.fail("no such job"))


def blocking() -> Any:
    async def execute(ctx: ToolContext) -> Any:
        await trio.sleep_forever()

    return tool("blocks", execute)


def asking(times: int = 1) -> Any:
    """Suspends ``times`` times at "confirm" (once more after each resume), then answers."""

    def execute(ctx: ToolContext) -> Any:
        resumed = ctx.entry.resume if isinstance(ctx.entry, ResumeEntry) else None
        if len(ctx.suspend_history) < times:
            return ctx.suspend("confirm", {"job": ctx.input.job, "seen": len(ctx.suspend_history)})
        return {"approved": resumed.approved if resumed else None}

    return tool(
        f"asks-{times}",
        execute,
        suspend={"confirm": SuspendPoint(suspend_schema=dict[str, Any], resume_schema=Decision)},
    )


def manual() -> Any:
    """A tool without ``execute``: a client submits its output."""
    return define_tool(id="t.manual.v1", description="Manual.", input_schema=Job)


def reporting() -> Any:
    async def execute(ctx: ToolContext) -> Any:
        await ctx.data.write("progress", {"pct": 10}, id="p")
        await ctx.data.write("progress", {"pct": 50}, id="live", transient=True)
        await ctx.data.write("progress", {"pct": 100}, id="p")
        await ctx.data.write("log", "started", id="l1")
        return "reported"

    return tool("reports", execute, data_schemas={"progress": dict[str, int], "log": str})


def notifying() -> Any:
    async def execute(ctx: ToolContext) -> Any:
        await ctx.trigger("The export finished.", data={"job": ctx.input.job}, hidden=True)
        await ctx.trigger("A webhook arrived.")
        return "started"

    return tool("notifies", execute)


PICK = ClientTool(
    name="pickColor",
    description="Let the user pick a color.",
    input_schema={
        "type": "object",
        "properties": {"hint": {"type": "string"}},
        "required": ["hint"],
    },
)


def approved(definition: Any) -> ToolRegistration:
    return ToolRegistration(definition, needs_approval=True)


# -- scenarios -------------------------------------------------------------------------------


async def approvals(corpus: Corpus) -> None:
    """Requested, granted (and run), denied with and without a reason."""
    agent = define_agent(name="a", tools={"pay": approved(pay_tool())})
    steps: list[Any] = [[tool_call("pay", {"cents": 1}), tool_call("pay", {"cents": 2})]]
    steps += [[tool_call("pay", {"cents": 3})], text("Done.")]
    async with thread(corpus, "approvals", agent, ScriptedModel(steps)) as t:
        await t.rt.send(t.thread_id, "pay")
        one, two = await t.actions()
        await t.snapshot("with two approvals requested")
        assert (await one.submit({"approved": True})).status == "accepted"
        assert (await two.submit({"approved": False, "reason": "over budget"})).status == (
            "accepted"
        )
        [three] = await t.actions()
        await t.snapshot("after a grant and a denial")
        assert (await three.submit({"approved": False})).status == "accepted"


async def approval_then_suspension(corpus: Corpus) -> None:
    """Granted, then suspended (``approval-responded`` meanwhile), then resumed; granted,
    then raising; granted, then cut off by cancel_run while suspended."""
    agent = define_agent(name="a", tools={"ask": approved(asking()), "boom": approved(raising())})
    steps: list[Any] = [
        [tool_call("ask", {"job": "j1"}), tool_call("boom", {"job": "j2"})],
        text("ok"),
    ]
    steps += [[tool_call("ask", {"job": "j3"})]]
    async with thread(corpus, "approval then suspension", agent, ScriptedModel(steps)) as t:
        await t.rt.send(t.thread_id, "go")
        for action in await t.actions():
            assert (await action.submit({"approved": True})).status == "accepted"
        [confirm] = await t.actions()
        await t.snapshot("approved and suspended")
        assert (await confirm.submit({"approved": True})).status == "accepted"
        await t.snapshot("after the first run")
        run_id = await t.rt.send(t.thread_id, "again")
        [approval] = await t.actions()
        assert (await approval.submit({"approved": True})).status == "accepted"
        await t.actions()
        await t.rt.cancel_run(run_id, "stop")


async def approval_without_an_answer(corpus: Corpus) -> None:
    """The approval ends without one: cancel_action, fail_action, cancel_run (issue 14)."""
    agent = define_agent(name="a", tools={"pay": approved(pay_tool())})
    steps: list[Any] = [
        [tool_call("pay", {"cents": 1}), tool_call("pay", {"cents": 2})],
        text("ok"),
    ]
    steps += [[tool_call("pay", {"cents": 3}), tool_call("pay", {"cents": 4})]]
    async with thread(corpus, "approval without an answer", agent, ScriptedModel(steps)) as t:
        await t.rt.send(t.thread_id, "pay")
        one, two = await t.actions()
        assert (await t.rt.cancel_action(one.ref, "changed my mind")).status == "accepted"
        await t.snapshot("after cancel_action")
        assert (await t.rt.fail_action(two.ref, "card expired")).status == "accepted"
        await t.snapshot("after fail_action")
        run_id = await t.rt.send(t.thread_id, "pay again")
        await t.actions()
        await t.rt.cancel_run(run_id, "the user left")
        await t.snapshot("after cancel_run")
        run_id = await t.rt.send(t.thread_id, "and once more")  # cancel_run without a reason
        await t.actions()
        await t.rt.cancel_run(run_id)


async def outcomes(corpus: Corpus) -> None:
    """Outputs (JSON, null, a string), errors (raised, ctx.fail, invalid model input), and
    several messages in one thread."""
    tools = {
        "obj": returning({"a": [1, None]}),
        "none": returning(None),
        "str": returning("plain"),
        "boom": raising(),
        "fail": failing(),
    }
    agent = define_agent(name="a", tools=tools)
    steps: list[Any] = [
        [text("Let me look."), tool_call("obj", {"job": "j"}), tool_call("none", {"job": "j"})],
        [tool_call("str", {"job": "j"}), tool_call("boom", {"job": "j"})],
        [tool_call("fail", {"job": "j"}), tool_call("obj", {"nope": 1})],
        [tool_call("none", "not an object"), tool_call("str", {"job": 7})],
        text("All done."),
        text(""),
    ]
    async with thread(corpus, "outcomes", agent, ScriptedModel(steps)) as t:
        await t.rt.send(t.thread_id, "go")
        await t.snapshot("after the first run")
        await t.rt.send(t.thread_id, "")


class StreamingForever:
    """A model whose step streams a call's input halfway, then never goes on."""

    async def stream(self, request: Any) -> Any:
        yield ToolInputStart("c1", "block")
        yield ToolInputDelta("c1", '{"job": "j')
        await trio.sleep_forever()
        yield Finish("tool-calls")  # pragma: no cover


async def cancellations(corpus: Corpus) -> None:
    """cancel_run while a call executes and while its input streams in."""

    agent = define_agent(name="a", tools={"block": blocking()})
    model = ScriptedModel([[tool_call("block", {"job": "j"})]])
    async with thread(corpus, "cancel_run while executing", agent, model) as t:
        run_id = await t.rt.send(t.thread_id, "go")
        await trio.testing.wait_all_tasks_blocked()
        await t.snapshot("while executing", idle=False)
        await t.rt.cancel_run(run_id, "too slow")
    async with thread(corpus, "cancel_run while streaming", agent, StreamingForever()) as t:
        run_id = await t.rt.send(t.thread_id, "go")
        await trio.testing.wait_all_tasks_blocked()
        await t.rt.cancel_run(run_id, "too slow")


async def streaming(corpus: Corpus) -> None:
    """A streamed call: ``input-streaming`` parts in the live updates."""
    agent = define_agent(name="a", tools={"obj": returning({"ok": True})})
    model = ScriptedModel(
        [[tool_call("obj", {"job": "a longer job name"}, stream=True)], text("Streamed.")]
    )
    async with thread(corpus, "streaming", agent, model) as t:
        await t.rt.send(t.thread_id, "go")


async def reasoning(corpus: Corpus) -> None:
    """Reasoning parts (with provider metadata) before the text and a tool call; usage and
    provider metadata in the assistant messages' metadata; a user's file."""
    agent = define_agent(name="a", tools={"obj": returning({"ok": True})})
    model = ScriptedModel(
        [
            [
                ReasoningDelta("Look it up first."),
                ReasoningEnd({"anthropic": {"signature": "sig"}}),
                tool_call("obj", {"job": "j"}),
                Finish("tool-calls", usage=Usage(input_tokens=3, output_tokens=2)),
            ],
            [
                ReasoningDelta("Done."),
                TextDelta("Reasoned."),
                Finish(
                    "stop",
                    usage=Usage(input_tokens=5, output_tokens=1, reasoning_tokens=1),
                    provider_metadata={"openai": {"responseId": "r"}},
                ),
            ],
        ]
    )
    photo = FilePart(media_type="image/png", url="data:image/png;base64,iVBORw0KGgo=")
    async with thread(corpus, "reasoning", agent, model) as t:
        await t.rt.send(t.thread_id, "go", files=[photo])


async def suspensions(corpus: Corpus) -> None:
    """Pending, submitted (twice on one call), cancelled, failed; cancel_run while pending."""
    agent = define_agent(name="a", tools={"ask": asking(), "ask2": asking(2)})
    steps: list[Any] = [
        [
            tool_call("ask2", {"job": "twice"}),
            tool_call("ask", {"job": "cancel"}),
            tool_call("ask", {"job": "fail"}),
        ],
        text("ok"),
        [tool_call("ask", {"job": "cut"})],
    ]
    async with thread(corpus, "suspensions", agent, ScriptedModel(steps)) as t:
        await t.rt.send(t.thread_id, "go")
        twice, cancel, fail = await t.actions()
        await t.snapshot("with three pending")
        assert (await twice.submit({"approved": True})).status == "accepted"
        [again] = [a for a in await t.actions() if a.ref.tool_call_id == twice.ref.tool_call_id]
        await t.snapshot("suspended again after a resume")
        assert (await again.submit({"approved": False})).status == "accepted"
        assert (await t.rt.cancel_action(cancel.ref, "not needed")).status == "accepted"
        assert (await t.rt.fail_action(fail.ref, "the job is gone")).status == "accepted"
        await t.snapshot("after the first run")
        run_id = await t.rt.send(t.thread_id, "again")
        await t.actions()
        await t.rt.cancel_run(run_id, "stop")


async def client_tools(corpus: Corpus) -> None:
    """Request-time client tools (``dynamic-tool`` parts) and a tool without execute:
    waiting, submitted, cancelled, failed, and invalid model input."""
    agent = define_agent(name="a", tools={"manual": manual()})
    steps: list[Any] = [
        [
            tool_call("pickColor", {"hint": "warm"}),
            tool_call("pickColor", {"hint": "cold"}),
            tool_call("pickColor", {"hint": "any"}),
            tool_call("pickColor", {"hint": 3}),
            tool_call("manual", {"job": "by hand"}),
            tool_call("manual", {"job": "dropped"}),
        ],
        text("ok"),
    ]
    async with thread(corpus, "client tools", agent, ScriptedModel(steps)) as t:
        await t.rt.send(t.thread_id, "go", client_tools=[PICK])
        warm, cold, any_, by_hand, dropped = await t.actions()
        await t.snapshot("waiting for the client")
        assert (await warm.submit({"color": "red"})).status == "accepted"
        assert (await t.rt.cancel_action(cold.ref, "closed the dialog")).status == "accepted"
        assert (await t.rt.fail_action(any_.ref, "no display")).status == "accepted"
        assert (await by_hand.submit(None)).status == "accepted"
        assert (await t.rt.cancel_action(dropped.ref)).status == "accepted"


async def tool_data(corpus: Corpus) -> None:
    """Durable tool data (replaced in place, two channels) and transient data."""
    agent = define_agent(name="a", tools={"reports": reporting()})
    model = ScriptedModel([[tool_call("reports", {"job": "j"})], text("ok")])
    async with thread(corpus, "tool data", agent, model) as t:
        await t.rt.send(t.thread_id, "go")


async def notifications(corpus: Corpus) -> None:
    """Server notifications: system messages with metadata, hidden or not, with and without
    data, from a tool (during a run) and from the runtime (on an idle thread)."""
    agent = define_agent(name="a", tools={"notify": notifying()})
    steps: list[Any] = [
        [tool_call("notify", {"job": "j"})],
        text("Started."),
        text("Seen."),
        text("Also."),
    ]
    async with thread(corpus, "notifications", agent, ScriptedModel(steps)) as t:
        await t.rt.send(t.thread_id, "export")
        await t.snapshot("after the notifying run")
        await t.rt.trigger(t.thread_id, "Nightly report ready.", data={"rows": 3})
        await t.rt.wait_idle(t.thread_id)
        await t.rt.trigger(t.thread_id, "A quiet one.", data=[1, "two"], hidden=True)


async def interruptions(corpus: Corpus) -> None:
    """Calls a stopped process left executing, or streaming, recorded as interrupted."""

    def crashed(store: MemoryStore) -> MemoryStore:
        backing = MemoryBacking()
        backing.tables = store.backing.tables
        backing.sequence = itertools.count(1_000_000)
        return MemoryStore(backing)

    agent = define_agent(name="a", tools={"block": blocking()})
    models: list[tuple[str, Any]] = [
        ("interrupted while executing", ScriptedModel([[tool_call("block", {"job": "j"})]])),
        ("interrupted while streaming", StreamingForever()),
    ]
    for label, model in models:
        store = MemoryStore()
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await trio.testing.wait_all_tasks_blocked()
            after_crash = crashed(store)
        async with create_test_runtime(
            agent, model=ScriptedModel([text("recovered")]), store=after_crash
        ) as rt:
            await Shown(corpus, label, rt, thread_id).snapshot("after the restart")


async def deadlines(corpus: Corpus) -> None:
    """Pending actions with deadlines (``expiresAt`` on the part and the suspension) of each
    kind, then resolved at them: cancelled, failed, denied."""
    soon = timedelta(seconds=10)  # (the corpus is built within a minute of trio's clock)
    late = tool(
        "asks-late",
        lambda ctx: ctx.suspend("confirm", {"job": ctx.input.job}),
        suspend={
            "confirm": SuspendPoint(
                suspend_schema=dict[str, Any], resume_schema=Decision, deadline=soon
            )
        },
    )
    tools = {
        "late": late,
        "pay": ToolRegistration(
            pay_tool(),
            needs_approval=True,
            approval_deadline=soon,
            on_approval_deadline=ResolveAtDeadline({"approved": False, "reason": "too late"}),
        ),
        "manual": ToolRegistration(
            manual(), output_deadline=soon, on_output_deadline=FailAtDeadline("nobody came")
        ),
    }
    pick = ClientTool(PICK.name, PICK.description, PICK.input_schema, deadline=soon)
    steps: list[Any] = [
        [
            tool_call("late", {"job": "j"}),
            tool_call("pay", {"cents": 1}),
            tool_call("manual", {"job": "by hand"}),
            tool_call("pickColor", {"hint": "warm"}),
        ],
        text("ok"),
    ]
    agent = define_agent(name="a", tools=tools)
    async with thread(corpus, "deadlines", agent, ScriptedModel(steps)) as t:
        await t.rt.send(t.thread_id, "go", client_tools=[pick])
        assert len(await t.actions()) == 4
        await t.snapshot("waiting, with deadlines")
        await trio.sleep(20)  # every deadline passes


SCENARIOS: list[Callable[[Corpus], Awaitable[None]]] = [
    approvals,
    approval_then_suspension,
    approval_without_an_answer,
    outcomes,
    cancellations,
    streaming,
    reasoning,
    suspensions,
    client_tools,
    tool_data,
    notifications,
    interruptions,
    deadlines,
]


async def build_corpus() -> Corpus:
    corpus = Corpus()
    with trio.fail_after(60):
        for scenario in SCENARIOS:
            await scenario(corpus)
    return corpus


# -- validation ------------------------------------------------------------------------------


def validate(cases: dict[str, list[Any]]) -> dict[str, Any]:
    """``validate.mjs``'s report on ``cases``; fails (not skips) when Node or the SDK is
    missing."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node is not installed: this test validates the wire output with the AI SDK "
            "(tests/js). Install Node.js >= 20 with npm, then run bash scripts/test."
        )
    if not all((JS / "node_modules" / sdk / "package.json").is_file() for sdk in SDKS):
        pytest.fail(
            "tests/js/node_modules is missing the AI SDK: run bash scripts/test, which "
            "installs it (or: npm ci --prefix tests/js)"
        )
    result = subprocess.run(
        [node, str(VALIDATE)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"validate.mjs failed: {result.stderr}"
    report: dict[str, Any] = json.loads(result.stdout)
    assert set(report["results"]) == set(cases)
    return report


def facets(cases: dict[str, list[Any]]) -> set[str]:
    """What the corpus shows: each tool part's kind and state, each suspension state, tool
    data, notifications."""
    shown: set[str] = set()
    for messages in cases.values():
        for message in messages:
            if isinstance(message.get("metadata"), dict) and "notification" in message["metadata"]:
                shown.add(f"{message['role']} notification")
            for part in message["parts"]:
                if part["type"] in ("reasoning", "file", "step-start"):
                    shown.add(part["type"])
                if part["type"] in ("text", "reasoning", "file", "step-start"):
                    continue
                kind = "dynamic-tool" if part["type"] == "dynamic-tool" else "tool"
                shown.add(f"{kind} {part['state']}")
                if "approval" in part:
                    shown.add(f"{part['state']} with approval")
                if "expiresAt" in part:
                    shown.add(f"{kind} {part['state']} with expiresAt")
                shown.update(f"suspension {s['state']}" for s in part["suspensions"])
                if any(part["data"].values()):
                    shown.add("tool data")
    return shown


def test_every_message_and_part_the_runtime_emits_passes_the_ai_sdk_validators() -> None:
    corpus = trio.run(build_corpus, clock=trio.testing.MockClock(autojump_threshold=0))
    shown = facets(corpus.cases)
    expected = {f"tool {state}" for state in get_args(ToolState)}
    expected |= {f"suspension {state}" for state in get_args(SuspensionState)}
    expected |= {"dynamic-tool input-available", "dynamic-tool output-available"}
    expected |= {"dynamic-tool output-error", "tool data", "system notification"}
    expected |= {"output-available with approval", "output-error with approval"}
    expected |= {"reasoning", "file", "step-start"}
    expected |= {
        f"{kind} {state} with expiresAt"
        for kind, state in [
            ("tool", "input-available"),
            ("tool", "approval-requested"),
            ("dynamic-tool", "input-available"),
        ]
    }
    assert expected <= shown, f"the corpus no longer shows {sorted(expected - shown)}"

    report = validate(corpus.cases)
    failures = [
        f"{case_id} [{sdk} {report['versions'][sdk]}]: {outcome['error']}\n"
        f"  messages: {json.dumps(corpus.cases[case_id])}"
        for case_id, outcomes in report["results"].items()
        for sdk, outcome in outcomes.items()
        if not outcome["success"]
    ]
    assert not failures, (
        f"{len(failures)} of {len(corpus.cases) * len(SDKS)} validations failed:\n"
        + "\n".join(failures)
    )


def test_the_validators_refuse_an_approval_an_ended_part_may_not_carry() -> None:
    # The check of the check: the SDK refuses what issue 14 found, so a pass above means
    # something (and validate.mjs reports the SDK's words).
    part = {"type": "tool-pay", "toolCallId": "c", "state": "output-error", "errorText": "x"}
    cases = {
        "unanswered": [
            {
                "id": "m",
                "role": "assistant",
                "parts": [{**part, "input": {}, "approval": {"id": "c.approval"}}],
            }
        ],
        "granted": [
            {
                "id": "m",
                "role": "assistant",
                "parts": [{**part, "input": {}, "approval": {"id": "a", "approved": True}}],
            }
        ],
    }
    report = validate(cases)
    for sdk in SDKS:
        unanswered = report["results"]["unanswered"][sdk]
        assert not unanswered["success"]
        assert '"approval","approved"]: Invalid input: expected true' in unanswered["error"]
        assert report["results"]["granted"][sdk]["success"], report["results"]["granted"]
