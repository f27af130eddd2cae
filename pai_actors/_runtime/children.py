"""Nested tool calls: ``ctx.tools`` (:class:`ToolCallMap` of :class:`BoundTool`).

A tool that declares ``tools={...}`` calls them from its ``execute`` with
``await ctx.tools.<name>.execute(raw_input)``. Before the parent's ``execute`` starts, every
child registration is resolved once (its ``enabled``, called with the parent's context as
``runtime_context``); that value stays fixed for the whole invocation. A resolution that
fails means the parent never starts (its call ends in ``output-error``); it is never read as
``enabled: False``.

Each child call runs as a child actor of the parent call's actor, under the supervisor the
parent opens around its ``execute``: cancelling the parent cancels every child, and a
child's ``abort_signal`` cancels that child alone. A child call:

1. refuses at once, with :class:`ToolInvocationError`, when the child is disabled for this
   invocation or the parent has returned;
2. parses the raw input by the child's input schema (invalid: :class:`ToolInvocationError`
   with the validation errors);
3. maps the child's context (``map_context(runtime_context=<the parent's context>, ...)``);
4. runs the child's ``execute`` in its actor (``ctx.agents`` is the parent's: a sub-run a
   child starts is the parent call's, and when it waits, the parent's ``execute`` stops with
   the child's) and takes its outcome: an output is parsed by
   the child's output schema and returned as it parses it, after the child registration's
   ``on_output`` observed it; ``ctx.fail(sentence)`` raises :class:`ToolInvocationError`
   with the sentence; an exception raises it with a generic message, unless the runtime's
   ``map_error`` gives one; an abort raises it naming the reason.

A failing lifecycle hook of a child (its ``map_context`` or ``on_output``) is fatal to the
parent call: the child call raises, and the parent's call ends in ``output-error`` with that
failure even if its ``execute`` caught the exception and returned. Children are not
conversation parts and have no durable record; their ``to_model_output`` never runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from supervisors import Mailbox, Supervisor

from .._core.errors import ToolInvocationError, ValidationFailed
from .._core.json import JsonValue, to_json_value
from .._core.parts import ToolDataItem
from .._tools.agent_runner import AgentRunner, SubRunWaiting
from .._tools.context import (
    AbortSignal,
    ToolDataWriter,
    ToolFailResult,
    ToolSuspendResult,
    ToolThread,
)
from .._tools.registration import ToolRegistration, as_registration, call_callback
from .._tools.tool import ChildToolInfo
from .._tools.tool_calls import BoundTool, ToolCallMap
from .address import Abort, CallAddress, Entry, Start
from .invoke import call_context, invoke
from .live import LiveRun
from .services import Services
from .tracing import SpanParent, call_span


class ChildCalls:
    """The children of one parent invocation: their registrations, their state fixed for the
    invocation, the supervisor their actors run under, the parent call's span their spans
    start under (``trace``; ``None``: tracing is off), and the first fatal hook failure.

    Concurrency contract: used from the parent's ``execute`` (any of its tasks) while the
    parent's supervisor block is open; :meth:`close` (when ``execute`` returns) makes every
    later call refuse.
    """

    def __init__(
        self,
        services: Services,
        live: LiveRun,
        parent: ToolThread,
        *,
        parent_context: Any,
        registrations: Mapping[str, ToolRegistration],
        enabled: Mapping[str, bool],
        infos: Mapping[str, ChildToolInfo],
        supervisor: Supervisor,
        parent_address: CallAddress,
        trace: SpanParent | None,
        agents: AgentRunner,
    ) -> None:
        self.services = services
        self.agents = agents  # the parent's: a child's sub-runs are the parent call's
        self.trace = trace
        self.parent_address = parent_address
        self.live = live
        self.parent = parent
        self.parent_context = parent_context
        self.registrations = registrations
        self.supervisor = supervisor
        self.fatal: Exception | None = None
        self.closed = False
        self._running: set[CallAddress] = set()  # the addresses of the children running
        self._numbers = itertools.count(1)
        self.map = ToolCallMap(
            {
                name: _bound(self, name, registration, enabled[name], infos.get(name))
                for name, registration in registrations.items()
            }
        )

    def close(self, reason: str) -> None:
        """The parent's ``execute`` returned: refuse every later call, and send the children
        still running an :class:`Abort` with ``reason`` (each child's signal and scope at
        once)."""
        self.closed = True
        abort = Abort(reason)
        for address in list(self._running):
            address.tell(abort)

    def refuse(
        self, child: str, problem: str, *, aborted: bool = False, reason: str | None = None
    ) -> ToolInvocationError:
        return ToolInvocationError(
            f"child tool {child!r} of tool {self.parent.tool_name!r}: {problem}",
            tool=self.parent.tool_name,
            child=child,
            aborted=aborted,
            reason=reason,
        )

    async def run(
        self,
        child: str,
        registration: ToolRegistration,
        raw_input: object,
        abort_signal: AbortSignal | None,
    ) -> Any:
        definition = registration.tool
        schemas = definition._schemas
        try:
            parsed = schemas.input.parse(raw_input, what="input")
        except ValidationFailed as exc:
            raise self.refuse(child, str(exc)) from None
        thread = ToolThread(
            self.parent.thread_id,
            self.parent.run_id,
            f"{self.parent.tool_call_id}/{child}.{next(self._numbers)}",
            child,
        )
        context = await self._hook(
            child,
            "map_context",
            lambda: self._map_context(registration),
        )
        outcome = await self._in_actor(child, registration, thread, parsed, context, abort_signal)
        if isinstance(outcome, ToolSuspendResult):
            raise self.refuse(child, "a child tool cannot suspend; return its output instead")
        if isinstance(outcome, ToolFailResult):
            raise self.refuse(child, outcome.message)
        try:
            output = outcome if schemas.output is None else schemas.output.parse(outcome)
            dumped = _dump(schemas.output, output)
        except Exception as exc:  # an output its schema refuses, or not lossless JSON
            raise self.refuse(child, f"its output was refused: {exc}") from None
        if registration.on_output is not None:
            on_output = registration.on_output
            await self._hook(
                child,
                "on_output",
                lambda: call_callback(
                    on_output,
                    output=dumped,
                    input=_dump(schemas.input, parsed),
                    tool_call_id=thread.tool_call_id,
                    tool_name=child,
                    context=context,
                    identity=self.live.identity,
                    client_data=self.live.client_data,
                ),
            )
        return output

    async def _map_context(self, registration: ToolRegistration) -> Any:
        if registration.map_context is None:
            return self.parent_context
        return await call_callback(
            registration.map_context,
            runtime_context=self.parent_context,
            identity=self.live.identity,
            client_data=self.live.client_data,
        )

    async def _hook(self, child: str, hook: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run a lifecycle hook; a failure is fatal to the parent (and raised here)."""
        try:
            return await call()
        except Exception as exc:
            if self.fatal is None:
                self.fatal = exc
            raise self.refuse(child, f"its {hook} raised {type(exc).__name__}: {exc}") from exc

    async def _in_actor(
        self,
        child: str,
        registration: ToolRegistration,
        thread: ToolThread,
        parsed: Any,
        context: Any,
        abort_signal: AbortSignal | None,
    ) -> Any:
        """Run the child's ``execute`` as a child actor; return what it returned.

        The child's address joins its parent's children (the parent's :class:`Abort` reaches
        it in the same step, or at once if the parent was aborted already); its own
        ``abort_signal``, the parent returning and the caller's cancellation each send it an
        :class:`Abort`."""
        address = CallAddress(thread.tool_call_id)
        parent = self.parent_address
        done = trio.Event()
        result: list[Any] = []
        failure: list[Exception] = []
        waiting: list[SubRunWaiting] = []

        async def child_actor(mailbox: Mailbox[Entry]) -> None:
            try:
                entry = await mailbox.receive()
                assert isinstance(entry, Start), "a child is only ever started"
                ctx = call_context(
                    self.services,
                    self.live,
                    agent_id=self.live.agent_id,
                    thread=thread,
                    signal=address.controller.signal,
                    input=entry.input,
                    context=context,
                    data=ToolDataWriter(_no_data(child), _no_list(child)),
                    agents=self.agents,
                )
                # (children have execute: checked at definition)
                with call_span(self.trace, thread, address.controller.signal) as span:
                    try:
                        outcome = await invoke(self.services, self.live, registration.tool, ctx)
                    except Exception as exc:
                        span.failed(exc)
                        raise
                    if isinstance(outcome, ToolFailResult):
                        span.ended("output-error", outcome.message)
                    elif isinstance(outcome, ToolSuspendResult):
                        span.ended("output-error", "a child tool cannot suspend")
                    else:
                        span.ended("output-available")
                result.append(outcome)
            except Exception as exc:
                failure.append(exc)
            except SubRunWaiting as exc:  # the parent's execute stops with it (its sub-runs)
                waiting.append(exc)
            finally:
                done.set()

        number = thread.tool_call_id.rsplit(".", 1)[-1]
        address.ref = self.supervisor.spawn(
            child_actor, name=f"{child}-{number}", restart="temporary", capacity=1
        )
        address.tell(Start(parsed))
        self._running.add(address)
        parent.children.add(address)
        if parent.aborted is not None:  # the parent is being cancelled already
            address.tell(parent.aborted)
        aborted: list[str | None] = []

        async def watch(signal: AbortSignal) -> None:
            await signal.wait()
            aborted.append(signal.reason)
            address.tell(Abort(signal.reason))

        try:
            async with trio.open_nursery() as nursery:
                if abort_signal is not None:
                    nursery.start_soon(watch, abort_signal)
                await done.wait()
                nursery.cancel_scope.cancel()
        except BaseException:
            # The caller was cancelled (its parent call is ending, or the parent's execute
            # gave up on it): stop the child too, with the parent's reason when it has one.
            reason = parent.controller.signal.reason
            address.tell(Abort(reason or "the parent call was cancelled"))
            raise
        finally:
            self._running.discard(address)
            parent.children.discard(address)
        if waiting:  # a sub-run it started has not ended: the parent call waits for it
            raise waiting[0]
        signal = address.controller.signal
        if aborted or (self.closed and signal.aborted) or not (result or failure):
            # Aborted by its abort_signal or by the parent returning (a child's own error or
            # output otherwise stays its outcome): the signal holds the reason.
            reason = signal.reason
            shown = "it was aborted" + (f": {reason}" if reason else "")
            raise self.refuse(child, shown, aborted=True, reason=reason)
        if failure:
            raise self.refuse(child, await self._error_text(failure[0], thread))
        return result[0]

    async def _error_text(self, exc: Exception, thread: ToolThread) -> str:
        """``map_error``'s text for a child's exception, else a generic one (API §3)."""
        text = await self.services.mapped_error_text(exc, thread)
        return text if text is not None else "it failed with an unexpected error"


def child_registrations(
    tools: Mapping[str, Any],
) -> dict[str, ToolRegistration]:
    return {name: as_registration(value) for name, value in tools.items()}


def _dump(schema: Any, value: Any) -> JsonValue:
    return to_json_value(value, what="output") if schema is None else schema.dump(value)


def _no_data(child: str) -> Callable[[str, object, str | None, bool], Awaitable[None]]:
    async def write(name: str, value: object, item_id: str | None, transient: bool) -> None:
        raise ValueError(
            f"child tool {child!r} has no tool data: children are not conversation parts; "
            "report progress from the parent tool"
        )

    return write


def _no_list(child: str) -> Callable[[str], Awaitable[list[ToolDataItem]]]:
    async def list_items(name: str) -> list[ToolDataItem]:
        return []

    return list_items


def _bound(
    calls: ChildCalls,
    name: str,
    registration: ToolRegistration,
    enabled: bool,
    info: ChildToolInfo | None,
) -> BoundTool:
    """``ctx.tools.<name>``: the child's resolved description (``""`` for a disabled child
    whose description is a callback) and JSON schemas, running through ``calls``."""
    spec = registration.tool.wire_spec()
    static = registration.tool.config.description
    return BoundTool(
        calls,
        name,
        registration,
        enabled=enabled,
        description=(
            info.description if info is not None else (static if isinstance(static, str) else "")
        ),
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
    )
