"""The run's I/O helpers: reading a model step into the store, writing a call with its part,
and the registration callbacks around a call (its context and ``on_output``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import trio

from .._core.call_record import CallRecord, CallSpec, Execute, replace
from .._core.calls import (
    abandon_call,
    cancel_call,
    finish_exception,
    input_available,
    input_delta,
    new_call,
    not_offered,
    request_approval,
    to_part,
)
from .._core.client_tool import ClientTool
from .._core.deadlines import deadline_at
from .._core.errors import ModelProtocolError, StoreConflict
from .._core.model import (
    ModelAssistantMessage,
    ModelRequest,
    ModelSettings,
    ModelToolCallPart,
    ReasoningDelta,
    TextDelta,
    ToolCallEvent,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from .._core.parts import Message, ReasoningPart, StepStartPart, TextPart, message_steps
from .._core.records import StoredCall
from .._core.step import ModelStep, StepAccumulator
from .._core.updates import MessageDelta
from .._core.wire import updated
from .._store.base import Transaction
from .._tools.agent import RuntimeScope
from .._tools.registration import ToolRegistration, call_callback
from .live import LiveRun
from .prepare import resolve_runtime_context
from .services import Services
from .tracing import step_finished

_log = logging.getLogger("pai_actors")

_STEP_START = StepStartPart()  # (frozen: one for every step)

RUNTIME_CLOSING = "the runtime is closing"
"""The reason a closing runtime gives the calls it cancels (their signals and records)."""

RUN_FAILED = "the run failed"
"""The reason a failing run gives the calls it cancels (their signals and records)."""

TAKEN_OVER = "another node took this run over"
"""The reason a node gives the calls of a run another node took from it (never recorded:
its writes are refused; the new owner records what it finds)."""


async def write_call(
    services: Services, call: StoredCall, record: CallRecord, *, part: bool = True
) -> StoredCall:
    """Write ``record`` and its tool part in one transaction; return the stored call.
    ``part=False``: the record alone, for a change its part does not show (``to_part``
    reads neither ``entry_started`` nor ``observed``)."""
    async with services.transaction() as tx:
        if part:
            stored = stage_call(tx, call, record)
        else:
            stored = tx.put_call(call, record=record)
    return stored


def stage_call(tx: Transaction, call: StoredCall, record: CallRecord) -> StoredCall:
    """Stage ``record`` and its tool part on ``tx``; return the call as it will be stored."""
    stored = tx.put_call(call, record=record)
    tx.put_tool_part(call.thread_id, call.message_id, to_part(record))
    return stored


async def tool_context(services: Services, live: LiveRun, registration: ToolRegistration) -> Any:
    """The context a registered tool receives in ``live``: ``map_context`` of the run's."""
    if not live.context_resolved:  # a run activated by a submission, before its loop began
        thread = live.thread
        scope = RuntimeScope(thread.scope_key, thread.user_key, thread.thread_id, live.identity)
        live.runtime_context = await resolve_runtime_context(live.agent, scope)
        live.context_resolved = True
    if registration.map_context is None:
        return live.runtime_context
    return await call_callback(
        registration.map_context,
        runtime_context=live.runtime_context,
        identity=live.identity,
        client_data=live.client_data,
    )


def needs_observing(live: LiveRun, record: CallRecord) -> bool:
    """Whether ``record`` settled with an output its registration's ``on_output`` has not
    observed yet."""
    if record.observed or record.dynamic or record.finish != "output-available":
        return False
    registration = live.agent.tools.get(record.name)
    return registration is not None and registration.on_output is not None


async def observe_output(services: Services, live: LiveRun, call: StoredCall) -> StoredCall:
    """Call the registration's ``on_output`` for a call that settled with an output, then
    record that it was observed; return the call as stored.

    ``on_output(*, output, input, tool_call_id, tool_name, context, identity, client_data)``
    (sync or async) runs after the output is stored, in the run's actor, before the model
    sees the output; it observes and cannot change it: an exception it raises is logged and
    otherwise ignored. The ``observed`` mark is stored after it returns, so ``on_output``
    runs at least once per output: again, if the process stops in between, when a later
    runtime goes on with the run; never for a run cancelled before it ran.
    """
    record = call.record
    if not needs_observing(live, record):
        return call
    registration = live.agent.tools[record.name]
    assert registration.on_output is not None
    try:
        await call_callback(
            registration.on_output,
            output=record.output,
            input=record.input,
            tool_call_id=record.tool_call_id,
            tool_name=record.name,
            context=await tool_context(services, live, registration),
            identity=live.identity,
            client_data=live.client_data,
        )
    except Exception:
        _log.exception("on_output of tool %r (call %r) raised", record.name, record.tool_call_id)
    return await write_call(services, call, replace(record, observed=True))


async def read_step(
    services: Services,
    live: LiveRun,
    request: ModelRequest,
    turn: Message | None,
    message_id: str,
    client_tools: Mapping[str, ClientTool],
) -> list[StartedCall]:
    """Stream one model step into its turn's assistant message; return its calls.

    The step continues ``turn`` (the thread's last message, an earlier step's of the run),
    or begins the new assistant message ``message_id``: its parts are a step-start part,
    then its reasoning, text and tool parts, after the turn's earlier steps.

    A streamed call's part is stored in ``input-streaming`` state at its
    :class:`ToolInputStart` and updated with each delta; the message gets its final text and
    parts when the step ends, each complete call judged in the same write: not offered in
    this step (``output-error``), invalid input (``output-error``), waiting for a client's
    output, or ``input-available`` and executing. If the stream fails, the calls still
    streaming end in ``output-error`` before the error propagates.

    A step without tool calls is the run's final answer: unless a notification waits to be
    answered, the run is stored ``completed`` in the same commit (and ``live.run`` updated).
    """
    accumulator = StepAccumulator()
    streamed: dict[str, StoredCall] = {}
    appended = False  # the step's step-start part is stored (its first call's input streams)
    earlier = () if turn is None else turn.parts  # the turn's earlier steps
    opened = Message.trusted(  # (its parts are parts already, its metadata the turn's)
        id=message_id,
        role="assistant",
        parts=(*earlier, _STEP_START),
        metadata=None if turn is None else turn.metadata,
    )
    # Every earlier call of the thread is finished by now, so the request's history has them.
    taken = {
        part.tool_call_id
        for message in request.messages
        if isinstance(message, ModelAssistantMessage)
        for part in message.parts
        if isinstance(part, ModelToolCallPart)
    }
    live.step_message_id = message_id
    live.step_index = len(message_steps(earlier))
    live.step_text.clear()
    live.step_reasoning.clear()
    try:
        events = live.model.stream(request)
        try:
            async for event in events:
                accumulator.feed(event)
                # (tuples: ``A | B`` here would make a union object for every event)
                if isinstance(event, (TextDelta, ReasoningDelta)):
                    _stream_delta(services, live, message_id, event)
                    continue
                if isinstance(event, (ToolInputStart, ToolCallEvent)):
                    _check_new_id(event.tool_call_id, taken)
                if isinstance(event, ToolInputStart):
                    record = new_call(
                        event.tool_name,
                        event.tool_call_id,
                        dynamic=event.tool_name in client_tools,
                    )
                    call = StoredCall(
                        thread_id=live.thread_id,
                        run_id=live.run_id,
                        message_id=message_id,
                        record=record,
                    )
                    async with services.transaction() as tx:
                        if not appended and turn is None:
                            tx.append_message(live.thread_id, opened)
                        elif not appended:
                            tx.replace_message(live.thread_id, opened)
                        staged = tx.put_call(call)
                        tx.put_tool_part(live.thread_id, message_id, to_part(record))
                    streamed[event.tool_call_id] = staged  # only once committed
                    appended = True
                    services.notify(live.thread_id)
                elif isinstance(event, ToolInputDelta):
                    call = streamed[event.tool_call_id]
                    streamed[event.tool_call_id] = await write_call(
                        services, call, input_delta(call.record, event.delta)
                    )
                    if event.delta and services.watched_for_deltas(live.thread_id):
                        services.publish(  # the raw text, after the part that holds it
                            MessageDelta(
                                thread_id=live.thread_id,
                                run_id=live.run_id,
                                message_id=message_id,
                                step=live.step_index,
                                part="tool-input",
                                delta=event.delta,
                                tool_call_id=event.tool_call_id,
                            )
                        )
                    services.notify(live.thread_id)
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        step = accumulator.result()
        step_finished(step)  # the step's span: finish reason, usage (when tracing)
        # (garbage now, not kept while the step's commits are written: a thousand steps
        # at once keep a thousand of each, for the garbage collector to scan)
        del accumulator, taken, events
    except BaseException:
        _end_streaming(live)
        # A cancellation of the run (cancel_run, or the runtime closing) cancels the calls
        # still streaming, with its reason; any other end of the stream breaks them.
        cancelling = services.is_cancelling(live.run_id)
        cancelled = cancelling or services.closing()
        reason = live.cancel_reason if cancelling else RUNTIME_CLOSING
        with trio.CancelScope(shield=True):
            for call in streamed.values():
                if call.record.phase == "streaming":
                    record = (
                        cancel_call(call.record, reason, at=services.now()).record
                        if cancelled
                        else _broken_stream(call.record)
                    )
                    try:
                        await write_call(services, call, record)
                    except StoreConflict:  # already recorded (e.g. cancelled) meanwhile
                        pass
        raise
    records: list[CallRecord] = []
    inputs: list[object] = []
    for event in step.tool_calls:
        before = streamed.get(event.tool_call_id)
        if before is None:
            record = new_call(
                event.tool_name, event.tool_call_id, dynamic=event.tool_name in client_tools
            )
        else:
            record = before.record
        records.append(replace(record, input=event.input))
        inputs.append(event.input)
    started: list[tuple[CallRecord, Any]] = []
    for record, raw_input in zip(records, inputs, strict=True):
        started.append(await _complete(services, live, request, client_tools, record, raw_input))
    # The caller handed the request over (see ``run._step``): from here it is garbage, not
    # kept, with its history and the tools' schemas, while the step is written.
    del request
    _end_streaming(live)
    reasoning = [
        ReasoningPart(text=part.text, provider_metadata=part.provider_metadata)
        for part in step.reasoning
    ]
    text = [TextPart(text=step.text)] if step.text else []
    message = updated(
        opened,
        parts=(*opened.parts, *reasoning, *text, *(to_part(r) for r, _ in started)),
        metadata=_turn_metadata(opened.metadata, step),
    )
    del records, inputs, reasoning, text  # (garbage while the step's commit is written)
    run = live.run
    if step.usage is not None:
        run = updated(run, usage=add_usage(run.usage, step.usage))
    staged_run = None
    async with services.transaction() as tx:
        if appended or turn is not None:
            tx.replace_message(live.thread_id, message)
        else:
            tx.append_message(live.thread_id, message)
        if not started and not services.notified(live.thread_id):
            # A final answer, and no notification arrived to answer next: the run is
            # completed in the same commit (recovery would settle it so anyway; see
            # ``AgentRuntime._load``), one commit fewer per run.
            staged_run = tx.put_run(updated(run, status="completed"))
        elif run is not live.run:  # the run's usage grew
            staged_run = tx.put_run(run)
        # (a loop, not a comprehension: one would keep four of this function's variables in
        # cells, objects alive for the whole step, for the garbage collector to scan)
        stored: list[StoredCall] = []
        for r, _ in started:
            before = streamed.get(r.tool_call_id)
            stored.append(
                tx.put_call(
                    updated(before, record=r)
                    if before is not None
                    else StoredCall(
                        thread_id=live.thread_id,
                        run_id=live.run_id,
                        message_id=message_id,
                        record=r,
                    )
                )
            )
    if staged_run is not None:
        live.run = staged_run  # only once committed
    return [
        StartedCall(call, tool_input) for call, (_, tool_input) in zip(stored, started, strict=True)
    ]


def step_settings(live: LiveRun) -> ModelSettings:
    """The settings of the run's model steps: the request's (stored with the run) over the
    agent's."""
    agent_settings = live.agent.model_settings
    stored = live.run.model_settings
    if stored is None:
        return agent_settings or ModelSettings()
    return ModelSettings.from_json(stored).over(agent_settings)


def _stream_delta(
    services: Services, live: LiveRun, message_id: str, event: TextDelta | ReasoningDelta
) -> None:
    """Keep a fragment of the step's text or reasoning, and send it to the thread's
    watchers (made only when there is one)."""
    part: Literal["text", "reasoning"]
    if isinstance(event, TextDelta):
        live.step_text.append(event.text)
        part = "text"
    else:
        live.step_reasoning.append(event.text)
        part = "reasoning"
    if event.text and services.watched_for_deltas(live.thread_id):
        services.publish(
            MessageDelta(
                thread_id=live.thread_id,
                run_id=live.run_id,
                message_id=message_id,
                step=live.step_index,
                part=part,
                delta=event.text,
            )
        )


def _end_streaming(live: LiveRun) -> None:
    live.step_message_id = None
    live.step_text.clear()
    live.step_reasoning.clear()


_USAGE_KEYS = (
    ("input_tokens", "inputTokens"),
    ("output_tokens", "outputTokens"),
    ("total_tokens", "totalTokens"),
    ("reasoning_tokens", "reasoningTokens"),
    ("cached_input_tokens", "cachedInputTokens"),
)


def usage_wire(usage: Usage) -> dict[str, int]:
    """A step's :class:`Usage` as the AI SDK's usage keys (those the provider reported)."""
    wire: dict[str, int] = {}
    for name, key in _USAGE_KEYS:
        value = getattr(usage, name)
        if value is not None:
            wire[key] = value
    return wire


def add_usage(total: Mapping[str, int] | None, usage: Usage) -> dict[str, int]:
    """The run's usage so far plus a step's: each key summed over the steps reporting it."""
    summed = dict(total or {})
    for key, value in usage_wire(usage).items():
        summed[key] = summed.get(key, 0) + value
    return summed


def _turn_metadata(metadata: Mapping[str, Any] | None, step: ModelStep) -> dict[str, Any] | None:
    """The turn's assistant message metadata once ``step`` is in it: ``usage`` summed over
    its steps (each key over the steps that reported it), ``providerMetadata`` the latest
    step's (``None`` while no step reported either)."""
    turn = dict(metadata or {})
    if step.usage is not None:
        turn["usage"] = add_usage(turn.get("usage"), step.usage)
    if step.provider_metadata is not None:
        turn["providerMetadata"] = step.provider_metadata
    return turn or None


class StartedCall(NamedTuple):
    """A call of the step as stored, and its parsed input when its ``execute`` is to run
    (``call.record.phase == "executing"``)."""

    call: StoredCall
    input: Any


async def _complete(
    services: Services,
    live: LiveRun,
    request: ModelRequest,
    client_tools: Mapping[str, ClientTool],
    record: CallRecord,
    raw_input: object,
) -> tuple[CallRecord, Any]:
    """A call whose input is complete: not offered, invalid, waiting for its output, waiting
    for the user's approval (``needs_approval``), or executing (with its parsed input)."""
    registration = None
    if record.dynamic:
        client_tool = client_tools[record.name]
        services.client_tools[live.thread_id, record.tool_call_id] = client_tool
        spec = CallSpec.external(client_tool.schema)
        output_deadline = client_tool.deadline
    else:
        registration = live.agent.tools.get(record.name)
        if registration is None or record.name not in request.tools:
            return not_offered(record, list(request.tools)).record, None
        spec = CallSpec.for_tool(registration.tool)
        output_deadline = registration.output_deadline
    try:
        step = input_available(
            record,
            spec,
            raw_input,
            output_expires_at=deadline_at(services.now(), output_deadline),
        )
    except Exception as exc:  # a validator raising something pydantic does not wrap
        text = f"validating the tool's input failed: {exc!r}"
        return abandon_call(record, text, at=services.now()).record, None
    execute = next((e for e in step.effects if isinstance(e, Execute)), None)
    if execute is None:
        return step.record, None
    if registration is not None:
        try:
            needed = await needs_approval(services, live, registration, step.record)
        except Exception as exc:  # the policy callback failed: the call cannot start
            return finish_exception(step.record, f"needs_approval failed: {exc}").record, None
        if needed:
            now = services.now()
            return request_approval(
                step.record,
                approval_id=f"{record.tool_call_id}.approval",
                at=now,
                expires_at=deadline_at(now, registration.approval_deadline),
            ).record, None
    return step.record, execute.input


async def needs_approval(
    services: Services, live: LiveRun, registration: ToolRegistration, record: CallRecord
) -> bool:
    """The registration's approval policy for this call: ``needs_approval`` as a bool, or
    its callback's answer, called with keyword arguments ``input`` (the call's JSON input),
    ``tool_call_id``, ``context`` (the tool's context), ``identity`` and ``client_data``."""
    policy = registration.needs_approval
    if isinstance(policy, bool):
        return policy
    answer = await call_callback(
        policy,
        input=record.input,
        tool_call_id=record.tool_call_id,
        context=await tool_context(services, live, registration),
        identity=live.identity,
        client_data=live.client_data,
    )
    if not isinstance(answer, bool):
        raise TypeError(f"needs_approval must return True or False, got {answer!r}")
    return answer


def _check_new_id(tool_call_id: str, taken: set[str]) -> None:
    if tool_call_id in taken:
        raise ModelProtocolError(
            f"the model gave a tool call the id {tool_call_id!r}, which an earlier call of "
            "this thread already has; a model must give every tool call of a conversation a "
            "new id"
        )


def _broken_stream(record: CallRecord) -> CallRecord:
    text = "the model's stream ended before this call's input was complete"
    return replace(record, phase="done", finish="output-error", error_text=text, input_text="")
