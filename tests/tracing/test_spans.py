"""The runtime's OpenTelemetry spans, exported through the SDK's in-memory exporter: runs,
model steps, tool calls, suspensions, their attributes, status and parents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import BaseModel

from pai_actors import (
    Finish,
    MemoryStore,
    ModelEvent,
    ModelRequest,
    ModelSettings,
    TextDelta,
    ToolContext,
    ToolRegistration,
    Usage,
    define_agent,
    define_tool,
)
from pai_actors._core.clock import EPOCH
from pai_actors._core.step import ModelStep
from pai_actors._runtime import tracing
from pai_actors._store.base import PutCall
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

from .conversation import Refund, refund_tool


def tool(execute: Any, id: str = "test.tool.v1", **options: Any) -> Any:
    return define_tool(
        id=id, description="A tool.", input_schema=Refund, execute=execute, **options
    )


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    [span] = named(spans, name)
    return span


def parent(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def under(spans: Sequence[ReadableSpan], span: ReadableSpan, name: str) -> ReadableSpan:
    """The one span named ``name`` whose parent is ``span``."""
    [child] = [s for s in named(spans, name) if parent(s) == span_id(span)]
    return child


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.trace_id


def linked(span: ReadableSpan) -> list[int]:
    return [link.context.span_id for link in span.links]


def ns(at: datetime) -> int:
    return tracing._ns(at)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_suspension_and_its_approval_read_as_two_activations(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    agent = define_agent(name="clerk", tools={"refund": refund_tool})
    model = ScriptedModel(
        [
            [
                tool_call("refund", {"cents": 500}),
                Finish("tool-calls", usage=Usage(input_tokens=12, output_tokens=3)),
            ],
            text("Refunded."),
        ]
    )
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "refund 500")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            autojump_clock.jump(5)  # the approval comes five seconds later
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            call = await store.get_call(thread_id, "call_1")
    assert call is not None
    [episode] = call.record.episodes
    assert episode.resolved_at is not None
    exported = spans.get_finished_spans()
    assert sorted(s.name for s in exported) == sorted(
        [
            "pai_actors.run",
            "chat",
            "execute_tool refund",
            "pai_actors.run",
            "pai_actors.suspension refund.approval",
            "execute_tool refund",
            "chat",
        ]
    )
    ids = {tracing.THREAD_ID: thread_id, tracing.RUN_ID: run_id}
    for span in exported:
        assert ids.items() <= attrs(span).items(), span.name
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == "pai_actors"
        assert span.instrumentation_scope.version == version("pai-actors")
    waited = one(exported, "pai_actors.suspension refund.approval")
    [second] = [s for s in named(exported, "pai_actors.run") if span_id(s) == parent(waited)]
    [first] = [s for s in named(exported, "pai_actors.run") if s is not second]
    step_1 = under(exported, first, "chat")
    under(exported, second, "chat")  # the final answer's step
    entry = under(exported, first, "execute_tool refund")
    resume = under(exported, second, "execute_tool refund")

    # The first activation: the step, then the call that suspends; the run passivates.
    assert parent(first) is None
    assert attrs(first) == {
        **ids,
        tracing.AGENT_ID: "clerk",
        tracing.RUN_STATUS: "waiting",
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "clerk",
        "gen_ai.conversation.id": thread_id,
    }
    assert first.status.status_code is StatusCode.UNSET
    assert step_1.kind is SpanKind.CLIENT
    assert attrs(step_1) == {
        **ids,
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "ScriptedModel",
        "gen_ai.conversation.id": thread_id,
        "gen_ai.response.finish_reasons": ("tool_call",),  # from the step, end to end
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
    }
    assert entry.kind is SpanKind.INTERNAL
    assert linked(entry) == [span_id(step_1)]  # the step that made the call
    assert attrs(entry) == {
        **ids,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "refund",
        "gen_ai.tool.call.id": "call_1",
        tracing.CALL_ENTRY: "initial",
        tracing.CALL_OUTCOME: "suspended",
    }
    [suspended] = entry.events
    assert suspended.name == "pai_actors.suspended"
    assert dict(suspended.attributes or {}) == {
        tracing.ACTION_ID: "call_1.1",
        tracing.SUSPENSION_NAME: "approval",
    }
    assert suspended.timestamp == ns(episode.suspended_at)

    # The second activation, a trace of its own: the wait, the resume, the final step.
    assert parent(second) is None
    assert trace_id(second) != trace_id(first)
    assert attrs(second)[tracing.RUN_STATUS] == "completed"
    assert (waited.start_time, waited.end_time) == (
        ns(episode.suspended_at),
        ns(episode.resolved_at),
    )
    assert waited.end_time - waited.start_time >= 5 * 10**9  # type: ignore[operator]
    assert attrs(waited) == {
        **ids,
        "gen_ai.tool.name": "refund",
        "gen_ai.tool.call.id": "call_1",
        tracing.ACTION_ID: "call_1.1",
        tracing.SUSPENSION_NAME: "approval",
        tracing.ACTION_STATE: "submitted",
    }
    assert linked(resume) == [span_id(waited)]
    assert attrs(resume) == {
        **ids,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "refund",
        "gen_ai.tool.call.id": "call_1",
        tracing.CALL_ENTRY: "resume",
        tracing.ACTION_ID: "call_1.1",
        tracing.CALL_OUTCOME: "output-available",
    }
    for span in exported:
        assert span.status.status_code is StatusCode.UNSET, span.name


async def test_an_approval_is_a_wait_of_its_own_before_the_calls_first_entry(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    async def pay(ctx: ToolContext) -> Any:
        return {"paid": ctx.input.cents}

    agent = define_agent(name="a", tools={"pay": ToolRegistration(tool(pay), needs_approval=True)})
    model = ScriptedModel([[tool_call("pay", {"cents": 5})], text("Paid.")])
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "pay")
            await rt.wait_idle(thread_id)
            [action] = await rt.pending_actions(thread_id)
            assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread_id)
            call = await store.get_call(thread_id, "call_1")
    assert call is not None
    assert call.record.approval is not None
    approval = call.record.approval
    exported = spans.get_finished_spans()
    waited = one(exported, "pai_actors.approval pay")
    entry = one(exported, "execute_tool pay")  # none before the approval: it never ran
    first, second = named(exported, "pai_actors.run")
    assert attrs(first)[tracing.RUN_STATUS] == "waiting"  # passivated on the approval
    assert attrs(second)[tracing.RUN_STATUS] == "completed"
    assert parent(waited) == parent(entry) == span_id(second)
    assert (waited.start_time, waited.end_time) == (
        ns(approval.requested_at),
        ns(approval.resolved_at),  # type: ignore[arg-type]
    )
    assert attrs(waited)["pai_actors.approval.approved"] is True
    assert attrs(waited)[tracing.ACTION_STATE] == "submitted"
    assert linked(entry) == [span_id(waited)]
    assert attrs(entry)[tracing.CALL_ENTRY] == "initial"  # what the tool sees: its first entry
    assert attrs(entry)[tracing.ACTION_ID] == "call_1.approval"
    assert attrs(entry)[tracing.CALL_OUTCOME] == "output-available"


async def _raises(ctx: ToolContext) -> Any:
    raise LookupError("no such order")


async def _fails(ctx: ToolContext) -> Any:
    return ctx.fail("the order is closed")


@pytest.mark.parametrize(
    ("execute", "error_type", "description", "exception"),
    [
        (_raises, "LookupError", "no such order", True),
        (_fails, "output-error", "the order is closed", False),
    ],
)
async def test_a_failed_tool_call_records_its_error(
    spans: InMemorySpanExporter,
    autojump_clock: trio.testing.MockClock,
    execute: Any,
    error_type: str,
    description: str,
    exception: bool,
) -> None:
    agent = define_agent(name="a", tools={"t": tool(execute)})
    model = ScriptedModel([[tool_call("t", {"cents": 1})], text("Sorry.")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
    exported = spans.get_finished_spans()
    span = one(exported, "execute_tool t")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == description
    assert attrs(span)["error.type"] == error_type
    assert attrs(span)[tracing.CALL_OUTCOME] == "output-error"
    if exception:
        [event] = span.events
        assert event.name == "exception"
        assert dict(event.attributes or {})["exception.type"] == "LookupError"
        assert dict(event.attributes or {})["exception.message"] == "no such order"
    else:
        assert not span.events
    run = one(exported, "pai_actors.run")  # the run goes on: the model reads the error
    assert run.status.status_code is StatusCode.UNSET
    assert attrs(run)[tracing.RUN_STATUS] == "completed"


@pytest.mark.parametrize("how", ["cancel_run", "close"])
async def test_a_cancelled_run_records_its_calls_and_waits_cancelled(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock, how: str
) -> None:
    entered = trio.Event()

    async def wait(ctx: ToolContext) -> Any:
        entered.set()
        await trio.sleep_forever()

    agent = define_agent(name="a", tools={"refund": refund_tool, "wait": tool(wait)})
    model = ScriptedModel([[tool_call("refund", {"cents": 1}), tool_call("wait", {"cents": 2})]])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            run_id = await rt.send(thread_id, "go")
            await entered.wait()
            await trio.testing.wait_all_tasks_blocked()  # the refund suspended meanwhile
            if how == "cancel_run":
                await rt.cancel_run(run_id, "user left")
    reason = "user left" if how == "cancel_run" else "the runtime is closing"
    exported = spans.get_finished_spans()
    run = one(exported, "pai_actors.run")
    waiting = one(exported, "execute_tool wait")
    assert parent(waiting) == span_id(run)
    assert attrs(waiting)[tracing.CALL_OUTCOME] == "cancelled"
    for span in (waiting, run):
        assert span.status.status_code is StatusCode.ERROR, span.name
        assert span.status.description == f"cancelled: {reason}"
        assert attrs(span)["error.type"] == "cancelled"
        assert attrs(span)[tracing.CANCEL_REASON] == reason
        assert not span.events  # a cancellation is not an exception
    assert attrs(one(exported, "execute_tool refund"))[tracing.CALL_OUTCOME] == "suspended"
    if how == "cancel_run":  # its pending suspension is cancelled with the run
        assert attrs(run)[tracing.RUN_STATUS] == "cancelled"
        waited = one(exported, "pai_actors.suspension refund.approval")
        assert parent(waited) == span_id(run)
        assert attrs(waited)[tracing.ACTION_STATE] == "cancelled"
        assert attrs(waited)[tracing.CANCEL_REASON] == reason
        assert waited.status.status_code is StatusCode.ERROR
    else:  # kept for the next runtime: the run waits, and so does its suspension
        assert attrs(run)[tracing.RUN_STATUS] == "waiting"
        assert not named(exported, "pai_actors.suspension refund.approval")


class Numbers(BaseModel):
    a: int
    b: int


class Empty(BaseModel):
    pass


async def test_a_child_calls_span_is_a_child_of_its_parent_calls_span(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    async def add(ctx: ToolContext) -> Any:
        if ctx.input.b < 0:
            raise ValueError("negative")
        return {"total": ctx.input.a + ctx.input.b}

    async def execute(ctx: ToolContext) -> Any:
        total = await ctx.tools.add.execute({"a": 1, "b": 2})
        try:
            await ctx.tools.add.execute({"a": 1, "b": -1})
        except Exception:
            pass
        return total

    adder = define_tool(id="test.add.v1", description="Add.", input_schema=Numbers, execute=add)
    sums = define_tool(
        id="test.sums.v1",
        description="Sum.",
        input_schema=Empty,
        tools={"add": adder},
        execute=execute,
    )
    agent = define_agent(name="a", tools={"sums": sums})
    model = ScriptedModel([[tool_call("sums", {})], text("3")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
    exported = spans.get_finished_spans()
    run = one(exported, "pai_actors.run")
    outer = one(exported, "execute_tool sums")
    first, second = named(exported, "execute_tool add")  # in the order they ended
    assert parent(outer) == span_id(run)
    assert parent(first) == parent(second) == span_id(outer)
    assert trace_id(first) == trace_id(run)
    assert not first.links  # caused by its parent alone
    assert attrs(first)["gen_ai.tool.call.id"] == "call_1/add.1"
    assert attrs(first)[tracing.CALL_OUTCOME] == "output-available"
    assert attrs(second)["gen_ai.tool.call.id"] == "call_1/add.2"
    assert second.status.status_code is StatusCode.ERROR
    assert attrs(second)["error.type"] == "ValueError"
    assert outer.status.status_code is StatusCode.UNSET  # it caught its child's error


class Failing:
    """A model whose stream fails after its first event."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield TextDelta("thinking")
        raise ConnectionError("the provider hung up")


async def test_a_failed_model_step_fails_its_span_and_the_runs(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    agent = define_agent(name="a", tools={})
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=Failing()) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
    exported = spans.get_finished_spans()
    step = one(exported, "chat")
    run = one(exported, "pai_actors.run")
    assert attrs(step)["gen_ai.provider.name"] == "Failing"
    for span in (step, run):
        assert span.status.status_code is StatusCode.ERROR, span.name
        assert span.status.description == "the provider hung up"
        assert attrs(span)["error.type"] == "ConnectionError"
        [event] = span.events
        assert dict(event.attributes or {})["exception.type"] == "ConnectionError"
    assert attrs(run)[tracing.RUN_STATUS] == "failed"


class Instrumented:
    """A model whose client makes a span of its own (as an instrumented HTTP client does)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        with trace.get_tracer("http-client").start_as_current_span("POST /chat"):
            yield TextDelta("hello")
        yield Finish("stop")


async def test_the_spans_a_model_or_a_tool_makes_are_children_of_the_runtimes(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    async def lookup(ctx: ToolContext) -> Any:
        with trace.get_tracer("app").start_as_current_span("SELECT order"):
            await trio.lowlevel.checkpoint()
        return {"found": True}

    agent = define_agent(name="a", tools={"lookup": tool(lookup)})
    model = ScriptedModel([[tool_call("lookup", {"cents": 1})], text("Found.")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
        async with create_test_runtime(
            define_agent(name="b", tools={}), model=Instrumented()
        ) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "hi")
            await rt.wait_idle(thread_id)
    exported = spans.get_finished_spans()
    assert parent(one(exported, "SELECT order")) == span_id(one(exported, "execute_tool lookup"))
    steps = [
        s for s in named(exported, "chat") if attrs(s)["gen_ai.provider.name"] == "Instrumented"
    ]
    [step] = steps
    assert parent(one(exported, "POST /chat")) == span_id(step)


async def test_a_restarted_call_actor_records_each_incarnation(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    class Flaky(MemoryStore):
        """Refuses the first commit that records the call finished."""

        refused = False

        async def commit(self, writes: Any) -> None:
            ends = [
                w
                for w in writes
                if isinstance(w, PutCall)
                and w.stored.record.phase == "done"
                and w.call.revision > 0
            ]
            if ends and not self.refused:
                self.refused = True
                await trio.lowlevel.checkpoint()
                raise OSError("disk full")
            await super().commit(writes)

    async def pay(ctx: ToolContext) -> Any:
        return {"paid": ctx.input.cents}

    registration = ToolRegistration(tool(pay), rerun_interrupted=True)
    agent = define_agent(name="a", tools={"pay": registration})
    model = ScriptedModel([[tool_call("pay", {"cents": 5})], text("Paid.")])
    with trio.fail_after(60):
        async with create_test_runtime(agent, model=model, store=Flaky()) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
    exported = spans.get_finished_spans()
    run = one(exported, "pai_actors.run")
    crashed, again = named(exported, "execute_tool pay")  # in the order they ended
    assert parent(crashed) == parent(again) == span_id(run)
    assert crashed.status.status_code is StatusCode.ERROR  # the runtime's write, not the tool
    assert attrs(crashed)["error.type"] == "OSError"
    assert tracing.CALL_RESTARTS not in attrs(crashed)
    assert attrs(again)[tracing.CALL_RESTARTS] == 1
    assert attrs(again)[tracing.ACTION_ID] == "call_1"  # run again from its initial entry
    assert attrs(again)[tracing.CALL_OUTCOME] == "output-available"
    assert again.status.status_code is StatusCode.UNSET
    assert not named(exported, "pai_actors.approval pay")  # no wait before a re-run


def test_step_finished_records_the_steps_finish_reason_usage_and_response(
    spans: InMemorySpanExporter,
) -> None:
    """The contract of ``read_step``: inside :func:`tracing.model_step`, in the task reading
    the step, :func:`tracing.step_finished` records what the step produced."""
    live: Any = SimpleNamespace(
        thread_id="thread_1",
        run_id="run_1_1",
        agent_id="a",
        agent=SimpleNamespace(name="a"),
        run=SimpleNamespace(status="completed"),
        trace_link=None,
        cancel_reason=None,
    )
    model = SimpleNamespace(model="gpt-4.1-mini", provider="openai")
    step = ModelStep(
        "",
        (),
        "tool-calls",
        usage=Usage(input_tokens=120, output_tokens=30, reasoning_tokens=8, cached_input_tokens=64),
        provider_metadata={"openai": {"id": "chatcmpl-1", "model": "gpt-4.1-mini-2025-04-14"}},
    )
    tracing.step_finished(step)  # outside a model step: nothing to record on
    run = tracing.start_run(live, lambda: EPOCH)
    assert run is not None
    request = ModelRequest(settings=ModelSettings(temperature=0.2, max_tokens=256, stop=("END",)))
    with tracing.model_step(run, model, request):  # type: ignore[arg-type]
        tracing.step_finished(step)
    tracing.end_run(run, live)
    span = one(spans.get_finished_spans(), "chat gpt-4.1-mini")
    assert span.kind is SpanKind.CLIENT
    assert attrs(span) == {
        tracing.THREAD_ID: "thread_1",
        tracing.RUN_ID: "run_1_1",
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4.1-mini",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.stop_sequences": ("END",),
        "gen_ai.conversation.id": "thread_1",
        "gen_ai.response.finish_reasons": ("tool_call",),
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.usage.reasoning.output_tokens": 8,
        "gen_ai.usage.cache_read.input_tokens": 64,
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.model": "gpt-4.1-mini-2025-04-14",
    }
    assert span.start_time == span.end_time == ns(EPOCH)  # the runtime's clock


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content-filter", "content_filter"),
        ("tool-calls", "tool_call"),
        ("error", "error"),
        ("other", "other"),
    ],
)
def test_finish_reasons_are_the_genai_conventions(
    spans: InMemorySpanExporter, reason: Any, expected: str
) -> None:
    live: Any = SimpleNamespace(
        thread_id="t",
        run_id="r",
        agent_id="a",
        agent=SimpleNamespace(name="a"),
        run=SimpleNamespace(status="completed"),
        trace_link=None,
        cancel_reason=None,
    )
    run = tracing.start_run(live, lambda: EPOCH)
    with tracing.model_step(run, SimpleNamespace(), ModelRequest()):  # type: ignore[arg-type]
        tracing.step_finished(ModelStep("", (), reason))
    tracing.end_run(run, live)
    step = one(spans.get_finished_spans(), "chat")
    assert attrs(step)["gen_ai.response.finish_reasons"] == (expected,)
    assert "gen_ai.usage.input_tokens" not in attrs(step)  # the model reported no usage


async def test_a_sub_runs_activation_is_linked_to_the_calling_calls_entry(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    """A sub-run's activation is a trace of its own (as every activation is), linked to the
    entry of the call that started it; its steps and calls are under it."""
    from pai_actors import create_pai

    async def delegate(ctx: ToolContext) -> Any:
        return (await ctx.agents.run("helper", f"refund {ctx.input.cents}")).text

    pai = create_pai(
        {
            "front": define_agent(name="front", tools={"delegate": tool(delegate)}),
            "helper": define_agent(name="helper", tools={}),
        }
    )
    models = {
        "front": ScriptedModel([[tool_call("delegate", {"cents": 5})], text("done")]),
        "helper": ScriptedModel([text("answer")]),
    }
    with trio.fail_after(10):
        async with create_test_runtime(pai, model=models) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await rt.wait_idle(thread_id)
    exported = spans.get_finished_spans()
    runs = named(exported, "pai_actors.run")
    [sub_run] = [s for s in runs if attrs(s)[tracing.THREAD_ID] != thread_id]
    first_entry = min(named(exported, "execute_tool delegate"), key=lambda s: s.start_time or 0)
    assert linked(sub_run) == [span_id(first_entry)]
    assert trace_id(sub_run) != trace_id(first_entry)
    assert attrs(under(exported, sub_run, "chat"))[tracing.THREAD_ID].startswith(thread_id)
