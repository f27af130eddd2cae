"""OpenTelemetry spans of runs, model steps, tool calls and suspensions (optional: off
unless a tracer provider is set up).

One activation of a run (from its actor's start to its end: completed, failed, cancelled, or
passivated waiting on pending actions) is one trace, and reads as its supervision tree::

    pai_actors.run                              the activation (thread, run and agent ids)
    ├── chat {model}                            a model step (GenAI inference span)
    ├── execute_tool {tool}                     a call's entry, linked to the step that made it
    │   └── execute_tool {child}                a child call through ctx.tools
    ├── pai_actors.suspension {tool}.{name}     a suspension, from suspend to its submission
    └── execute_tool {tool}                     the resume it led to, linked to the suspension

A passivated run that a submission activates again is a new trace with the same
``pai_actors.run.id``: the suspension is recorded when its run acts on its end, so its span
(``start_time`` and ``end_time`` from the stored call) opens the activation that resumes it.
Every span's times are read from the runtime's clock, the clock of every stored timestamp,
so a span made after the fact lines up with the live ones. The parents are passed
explicitly (:class:`SpanParent`): the actors are tasks a supervisor spawns, and the context
they inherit is that of whichever task spawned them. Each span is also the current span
while its work runs, so the spans a tool's or a model's own instrumentation (an HTTP client)
makes are its children.

Off unless OpenTelemetry is set up. The runtime never imports ``opentelemetry`` itself: a
run, when it starts, looks for a tracer provider set through the API
(``trace.set_tracer_provider``, or the ``OTEL_PYTHON_TRACER_PROVIDER`` variable). When
``opentelemetry.trace`` was never imported (no provider can have been set), or the global
provider is still the API's default, the run gets no :class:`RunTrace` (``None``), and every
function here returns at once: ``None``, or a shared span that records nothing.

The model step is read by ``run_io.read_step``; :func:`model_step` opens its span around
it (``run._step``) and :func:`step_finished`, called with the step's :class:`ModelStep`
from the task reading it, records its finish reason and usage on it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

import trio

from .._core.call_record import CallRecord
from .._core.clock import Clock
from .._core.model import FinishReason, Model, ModelRequest, ModelSettings
from .._core.step import ModelStep
from .._tools.signal import AbortSignal, ToolThread
from .live import LiveRun

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, SpanContext, Tracer, TracerProvider

SCOPE = "pai_actors"
"""The instrumentation scope of the runtime's spans (``get_tracer(SCOPE, <version>)``)."""

THREAD_ID = "pai_actors.thread.id"
RUN_ID = "pai_actors.run.id"
AGENT_ID = "pai_actors.agent.id"
RUN_STATUS = "pai_actors.run.status"
CALL_ENTRY = "pai_actors.call.entry"
CALL_OUTCOME = "pai_actors.call.outcome"
CALL_RESTARTS = "pai_actors.call.restarts"
ACTION_ID = "pai_actors.action.id"
ACTION_STATE = "pai_actors.action.state"
SUSPENSION_NAME = "pai_actors.suspension.name"
CANCEL_REASON = "pai_actors.cancel.reason"

CANCELLED = "cancelled"
"""The ``error.type`` of a span whose work was cancelled (its reason in the description)."""
OUTPUT_ERROR = "output-error"
"""The ``error.type`` of a call that failed without raising (``ctx.fail``, an output its
schema refused): the AI SDK state the model sees."""

_PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"
_UNIX = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# The GenAI conventions' finish reasons (gen-ai-output-messages.json) for the AI SDK's.
_FINISH_REASONS: Mapping[FinishReason, str] = {
    "stop": "stop",
    "length": "length",
    "content-filter": "content_filter",
    "tool-calls": "tool_call",
    "error": "error",
    "other": "other",
}

_tracers: tuple[TracerProvider, Tracer] | None = None  # the last provider's tracer


def _tracer() -> Tracer | None:
    """The runtime's tracer from the global provider, or ``None`` when none is set up."""
    global _tracers
    if "opentelemetry.trace" not in sys.modules and _PROVIDER_VARIABLE not in os.environ:
        return None  # never imported: nobody can have set a provider
    try:
        import opentelemetry.trace as trace
    except ImportError:  # not installed
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # the API's default: no provider was set
    cached = _tracers
    if cached is not None and cached[0] is provider:
        return cached[1]
    tracer = provider.get_tracer(SCOPE, _version())
    _tracers = (provider, tracer)
    return tracer


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pai-actors")
    except PackageNotFoundError:  # run from a source tree that was not installed
        return None


def _ns(at: datetime) -> int:
    """``at`` in nanoseconds since the Unix epoch (exact to the microsecond)."""
    return (at - _UNIX) // _MICROSECOND * 1000


def _error_type(exc: BaseException) -> str:
    """The ``error.type`` of an exception: its class, qualified by its module."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is a cancellation: ``trio.Cancelled``, or a group of nothing else."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return False


def _fail(span: Span, error_type: str, description: str | None) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description))


def _cancelled(span: Span, reason: str | None) -> None:
    if reason is not None:
        span.set_attribute(CANCEL_REASON, reason)
    _fail(span, CANCELLED, "cancelled" + (f": {reason}" if reason else ""))


def _raised(span: Span, exc: BaseException, at: datetime) -> None:
    """Record that ``exc`` ended the span's work: an exception event, and the error status."""
    span.record_exception(exc, timestamp=_ns(at), escaped=True)
    _fail(span, _error_type(exc), str(exc) or None)


@dataclass(frozen=True, slots=True)
class SpanParent:
    """Where a span starts: under ``context`` (its parent span), with the ``tracer``, the
    runtime's clock (``now``), the ids every span of the run carries (``ids``) and
    ``links`` (what caused it: a call's model step, a resume's suspension)."""

    tracer: Tracer
    context: Context
    now: Clock
    ids: Mapping[str, str]
    links: tuple[Link, ...] = ()

    def start(
        self,
        name: str,
        attributes: dict[str, Any],
        *,
        kind: Literal["internal", "client"] = "internal",
        start: datetime | None = None,
    ) -> Span:
        from opentelemetry.trace import SpanKind

        return self.tracer.start_span(
            name,
            context=self.context,
            kind=SpanKind.CLIENT if kind == "client" else SpanKind.INTERNAL,
            attributes={**self.ids, **attributes},
            links=self.links,
            start_time=_ns(self.now() if start is None else start),
        )

    def linked(self, *contexts: SpanContext | None) -> SpanParent:
        """This parent, for a span caused by the spans of ``contexts`` (``None``: none)."""
        from opentelemetry.trace import Link

        links = tuple(Link(c) for c in contexts if c is not None)
        if not links:
            return self
        return SpanParent(self.tracer, self.context, self.now, self.ids, self.links + links)


def _under(parent: SpanParent, span: Span) -> SpanParent:
    """A parent for the children of ``span``."""
    from opentelemetry.trace import set_span_in_context

    context = set_span_in_context(span, parent.context)
    return SpanParent(parent.tracer, context, parent.now, parent.ids)


class _Current:
    """Makes a span the current one in this task, between :meth:`enter` and :meth:`exit`
    (which must be called from the same task, in that order)."""

    __slots__ = ("_token",)

    def __init__(self) -> None:
        self._token: Token[Context] | None = None

    def enter(self, span: Span, context: Context) -> None:
        from opentelemetry.context import attach
        from opentelemetry.trace import set_span_in_context

        self._token = attach(set_span_in_context(span, context))

    def exit(self) -> None:
        from opentelemetry.context import detach

        assert self._token is not None, "exit() without enter()"
        detach(self._token)


# -- runs ----------------------------------------------------------------------------------


class _Quiet:
    """A span that records nothing (tracing is off): entered and left as a context manager,
    doing nothing. The recording spans override both."""

    __slots__ = ()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class RunTrace:
    """The span of one activation of a run (``pai_actors.run``), current in the run actor's
    task from :func:`start_run` to :func:`end_run`."""

    __slots__ = ("_current", "parent", "span")

    def __init__(self, parent: SpanParent, span: Span) -> None:
        self.parent = parent  # for the activation's steps, calls and suspensions
        self.span = span
        self._current = _Current()


def current_span_context() -> SpanContext | None:
    """The span context current in this task (a call's entry, where ``ctx.agents.run``
    starts a sub-run), or ``None`` when tracing is off or no span is current."""
    if _tracer() is None:
        return None
    from opentelemetry.trace import get_current_span

    context = get_current_span().get_span_context()
    return context if context.is_valid else None


def start_run(live: LiveRun, now: Clock) -> RunTrace | None:
    """Start the span of ``live``'s activation and make it current in this task; ``None``
    when tracing is off (then every other function here records nothing). The activation
    is a trace of its own, linked to the span that caused it when there is one
    (``live.trace_link``: the calling call's entry, for a sub-run's first activation)."""
    tracer = _tracer()
    if tracer is None:
        return None
    from opentelemetry.context import Context

    ids = {THREAD_ID: live.thread_id, RUN_ID: live.run_id}
    root = SpanParent(tracer, Context(), now, ids).linked(live.trace_link)
    span = root.start(
        "pai_actors.run",
        {
            AGENT_ID: live.agent_id,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": live.agent.name,
            "gen_ai.conversation.id": live.thread_id,
        },
    )
    trace = RunTrace(_under(root, span), span)
    trace._current.enter(span, root.context)
    return trace


def end_run(
    trace: RunTrace | None,
    live: LiveRun,
    *,
    failure: str | None = None,
    error: BaseException | None = None,
    reason: str | None = None,
) -> None:
    """End the activation's span with the run's stored status: ``failure`` is the error the
    run failed with (``error`` its exception), or ``error`` what ended the actor otherwise
    (a cancellation when the runtime closes); ``reason`` is a cancellation's reason when
    ``cancel_run`` gave none (the runtime closing)."""
    if trace is None:
        return
    span = trace.span
    now = trace.parent.now()
    try:
        status = live.run.status
        span.set_attribute(RUN_STATUS, status)
        if failure is not None:
            if error is not None:
                span.record_exception(error, timestamp=_ns(now), escaped=True)
            _fail(span, _error_type(error) if error is not None else "_OTHER", failure)
        elif status == "cancelled" or (error is not None and _cancellation(error)):
            _cancelled(span, live.cancel_reason or reason)
        elif error is not None:
            _raised(span, error, now)
    finally:
        trace._current.exit()
        span.end(end_time=_ns(now))


# -- model steps ---------------------------------------------------------------------------


class StepSpan(_Quiet):
    """The span of one model step (``chat {model}``, a GenAI inference span): a context
    manager around reading the step, during which it is the current span (and
    :func:`step_finished` records on it). This base records nothing: tracing is off."""

    __slots__ = ()

    @property
    def context(self) -> SpanContext | None:
        """The span's context (to link the step's calls to it), ``None`` when off."""
        return None

    def finished(self, step: ModelStep) -> None:
        """Record what the step produced: its finish reason and token usage."""


_NO_STEP = StepSpan()
_STEP: ContextVar[StepSpan | None] = ContextVar("pai_actors_model_step", default=None)


def model_step(trace: RunTrace | None, model: Model, request: ModelRequest) -> StepSpan:
    """The span of a step of ``model`` for ``request`` in the run of ``trace``, to enter
    around reading it."""
    if trace is None:
        return _NO_STEP
    return _RecordingStep(trace.parent, model, request.settings)


def step_finished(step: ModelStep) -> None:
    """Record ``step``'s finish reason and usage on the model step span being read in this
    task (see :func:`model_step`); nothing when there is none."""
    span = _STEP.get()
    if span is not None:
        span.finished(step)


class _RecordingStep(StepSpan):
    __slots__ = ("_current", "_model", "_parent", "_reset", "_settings", "_span")

    def __init__(self, parent: SpanParent, model: Model, settings: ModelSettings) -> None:
        self._parent = parent
        self._model = model
        self._settings = settings
        self._span: Span | None = None
        self._current = _Current()
        self._reset: Any = None

    @property
    def context(self) -> SpanContext | None:
        return None if self._span is None else self._span.get_span_context()

    def __enter__(self) -> Self:
        model = self._model
        name = getattr(model, "model", None)
        provider = getattr(model, "provider", None)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider
            if isinstance(provider, str)
            else type(model).__qualname__,
            "gen_ai.conversation.id": self._parent.ids[THREAD_ID],
        }
        if isinstance(name, str):
            attributes["gen_ai.request.model"] = name
        settings = self._settings  # the request's and the agent's (not an adapter's own)
        for value, key in (
            (settings.temperature, "gen_ai.request.temperature"),
            (settings.top_p, "gen_ai.request.top_p"),
            (settings.max_tokens, "gen_ai.request.max_tokens"),
            (settings.seed, "gen_ai.request.seed"),
            (settings.stop, "gen_ai.request.stop_sequences"),
        ):
            if value is not None:
                attributes[key] = value
        span = self._span = self._parent.start(
            f"chat {name}" if isinstance(name, str) else "chat", attributes, kind="client"
        )
        self._current.enter(span, self._parent.context)
        self._reset = _STEP.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        assert span is not None, "exited before it was entered"
        now = self._parent.now()
        try:
            if exc is not None:
                if _cancellation(exc):
                    _cancelled(span, None)
                else:
                    _raised(span, exc, now)
        finally:
            _STEP.reset(self._reset)
            self._current.exit()
            span.end(end_time=_ns(now))

    def finished(self, step: ModelStep) -> None:
        span = self._span
        assert span is not None, "finished outside its block"
        reason = _FINISH_REASONS.get(step.finish_reason, step.finish_reason)
        span.set_attribute("gen_ai.response.finish_reasons", (reason,))
        usage = step.usage
        if usage is not None:
            for value, key in (
                (usage.input_tokens, "gen_ai.usage.input_tokens"),
                (usage.output_tokens, "gen_ai.usage.output_tokens"),
                (usage.reasoning_tokens, "gen_ai.usage.reasoning.output_tokens"),
                (usage.cached_input_tokens, "gen_ai.usage.cache_read.input_tokens"),
            ):
                if value is not None:
                    span.set_attribute(key, value)
        provider = getattr(self._model, "provider", None)
        metadata = step.provider_metadata
        said = metadata.get(provider) if metadata is not None and provider else None
        if isinstance(said, Mapping):  # what the adapters report: the response's id and model
            for key, attribute in (
                ("id", "gen_ai.response.id"),
                ("responseId", "gen_ai.response.id"),
                ("model", "gen_ai.response.model"),
            ):
                text = said.get(key)
                if isinstance(text, str):
                    span.set_attribute(attribute, text)


# -- tool calls ----------------------------------------------------------------------------


def call_parent(trace: RunTrace | None, step: StepSpan | None = None) -> SpanParent | None:
    """The parent of the calls of ``trace``'s run: the run's span, with a link to the model
    ``step`` that made the call (for a call's initial entry)."""
    if trace is None:
        return None
    return trace.parent.linked(None if step is None else step.context)


class CallSpan(_Quiet):
    """The span of one entry of a tool call (``execute_tool {tool}``), current in the call
    actor's task while it runs. This base records nothing: tracing is off."""

    __slots__ = ()

    def children(self) -> SpanParent | None:
        """The parent of the call's child calls (``None`` when off)."""
        return None

    def failed(self, exc: BaseException) -> None:
        """``execute`` (or a hook around it) raised ``exc``: the call's outcome is an error."""

    def ended(self, outcome: str, error_text: str | None = None) -> None:
        """The entry's outcome: ``output-available``, ``output-error`` (with the text the model
        reads), ``suspended``, ..."""

    def settled(self, record: CallRecord) -> None:
        """The entry's outcome, as ``record`` (the call's next record) says."""


_NO_CALL = CallSpan()


def call_span(
    parent: SpanParent | None,
    thread: ToolThread,
    signal: AbortSignal,
    *,
    entry: Literal["initial", "resume"] = "initial",
    action_id: str | None = None,
    restarts: int = 0,
    links: tuple[SpanContext | None, ...] = (),
) -> CallSpan:
    """The span of the call at ``thread`` entering ``execute`` from ``entry`` (after the
    accepted action ``action_id``, for an actor a submission started); ``signal`` is the
    call's, whose reason a cancellation records; ``links``: what caused it."""
    if parent is None:
        return _NO_CALL
    return _RecordingCall(parent.linked(*links), thread, signal, entry, action_id, restarts)


class _RecordingCall(CallSpan):
    __slots__ = ("_current", "_failed", "_parent", "_signal", "_span")

    def __init__(
        self,
        parent: SpanParent,
        thread: ToolThread,
        signal: AbortSignal,
        entry: str,
        action_id: str | None,
        restarts: int,
    ) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": thread.tool_name,
            "gen_ai.tool.call.id": thread.tool_call_id,
            CALL_ENTRY: entry,
        }
        if action_id is not None:
            attributes[ACTION_ID] = action_id
        if restarts:
            attributes[CALL_RESTARTS] = restarts
        self._parent = parent
        self._signal = signal
        self._span = parent.start(f"execute_tool {thread.tool_name}", attributes)
        self._failed = False
        self._current = _Current()

    def children(self) -> SpanParent | None:
        return _under(self._parent, self._span)

    def failed(self, exc: BaseException) -> None:
        self._failed = True
        _raised(self._span, exc, self._parent.now())

    def ended(self, outcome: str, error_text: str | None = None) -> None:
        span = self._span
        span.set_attribute(CALL_OUTCOME, outcome)
        if outcome == "output-error" and not self._failed:
            _fail(span, OUTPUT_ERROR, error_text)

    def settled(self, record: CallRecord) -> None:
        if record.phase == "suspended":
            episode = record.pending_episode
            if episode is not None:
                self._span.add_event(
                    "pai_actors.suspended",
                    {ACTION_ID: episode.action_id, SUSPENSION_NAME: episode.name},
                    timestamp=_ns(episode.suspended_at),
                )
            self.ended("suspended")
        elif record.phase == "done":
            assert record.finish is not None
            self.ended(record.finish, record.error_text)
        else:
            self.ended(record.phase)

    def __enter__(self) -> Self:
        self._current.enter(self._span, self._parent.context)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        now = self._parent.now()
        try:
            if exc is not None:
                if _cancellation(exc):
                    span.set_attribute(CALL_OUTCOME, CANCELLED)
                    signal = self._signal
                    _cancelled(span, signal.reason if signal.aborted else None)
                else:  # not the tool's: the runtime's own work failed (its actor restarts)
                    _raised(span, exc, now)
        finally:
            self._current.exit()
            span.end(end_time=_ns(now))


# -- suspensions ---------------------------------------------------------------------------


def suspension(parent: SpanParent | None, record: CallRecord, action_id: str) -> SpanContext | None:
    """Record the span of the wait for the action ``action_id`` of the call ``record`` (its
    suspension, or its approval), now that it ended: from the stored time it began to the
    stored time it was resolved. Returns the span's context (to link the resume to it), or
    ``None`` when nothing was recorded (tracing is off, or the call has no such action)."""
    if parent is None:
        return None
    attributes: dict[str, Any] = {
        "gen_ai.tool.name": record.name,
        "gen_ai.tool.call.id": record.tool_call_id,
        ACTION_ID: action_id,
    }
    episode = next((e for e in record.episodes if e.action_id == action_id), None)
    if episode is not None:
        name = f"pai_actors.suspension {record.action_name(episode.name)}"
        attributes[SUSPENSION_NAME] = episode.name
        state, began, resolved = episode.state, episode.suspended_at, episode.resolved_at
    elif record.approval is not None and record.approval.id == action_id:
        approval = record.approval
        name = f"pai_actors.approval {record.name}"
        if approval.approved is not None:
            attributes["pai_actors.approval.approved"] = approval.approved
        state, began, resolved = approval.state, approval.requested_at, approval.resolved_at
    else:
        return None
    attributes[ACTION_STATE] = state
    span = parent.start(name, attributes, start=began)
    if state == "cancelled":
        cancelled = record.cancelled
        _cancelled(span, None if cancelled is None else cancelled.reason)
    elif state == "failed":
        _fail(span, "failed", record.error_text)
    span.end(end_time=_ns(parent.now() if resolved is None else resolved))
    return span.get_span_context()
