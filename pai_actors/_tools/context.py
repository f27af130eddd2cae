"""What ``execute(ctx)`` receives: :class:`ToolContext` and the values it hands out.

``ctx.entry`` says how this invocation began (:class:`InitialEntry`, or :class:`ResumeEntry`
after a submitted suspension); ``ctx.suspend(...)`` and ``ctx.fail(...)`` build the results
``execute`` returns to suspend or to fail deliberately; ``ctx.signal`` is the call's
:class:`AbortSignal`; ``ctx.data`` writes tool data through the call's actor.

Typing: ``ToolContext[InputT, ContextT]`` is generic in ``ctx.input`` and ``ctx.context``
(both default to ``Any``, so a bare ``ToolContext`` means ``ToolContext[Any, Any]``);
:func:`~pai_actors.define_tool` infers them from ``input_schema`` and ``context_schema``.
``ctx.tools`` is a :class:`~pai_actors.ToolCallMap` (``ctx.tools.<name>`` is a
:class:`~pai_actors.BoundTool`), ``ctx.capabilities`` a :class:`~pai_actors.Capabilities`
(a facade by attribute is ``Any``: a tool's declared ctx names are not part of its type).
``ToolThread``, ``AbortSignal`` and ``AbortController`` live in ``signal`` (``ctx.tools`` and
``ctx.agents`` use them too) and are imported from here as well.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Literal

from typing_extensions import TypeVar

from .._core.actions import PendingActionRef
from .._core.deadlines import check_deadline
from .._core.json import JsonValue
from .._core.parts import ToolDataItem
from .agent_runner import AgentRunner
from .capabilities import Capabilities
from .files import ScopedFiles
from .signal import AbortController as AbortController
from .signal import AbortSignal as AbortSignal
from .signal import ToolThread as ToolThread
from .signal import require_trio as require_trio
from .tool_calls import ToolCallMap

InputT = TypeVar("InputT", covariant=True, default=Any)
"""The type of ``ctx.input``: what the tool's ``input_schema`` parses to."""
ContextT = TypeVar("ContextT", covariant=True, default=Any)
"""The type of ``ctx.context``: the agent's ``runtime_context`` or the registration's
``map_context`` result (not parsed: the type is the tool's declaration, not a check)."""

# ``files`` and ``agents`` of a ToolContext made by hand rather than by a runtime (``None``);
# typed ``Any`` so that the fields can carry their real types for every context a tool sees.
_NOT_FROM_A_RUNTIME: Any = None


@dataclass(frozen=True, slots=True)
class InitialEntry:
    """``execute`` runs for the first time with the model's input."""

    @property
    def type(self) -> Literal["initial"]:
        return "initial"


@dataclass(frozen=True, slots=True)
class ResumeEntry:
    """``execute`` runs again because the suspension ``name`` was submitted.

    ``resume`` is the payload as the suspend point's ``resume_schema`` parsed it; ``action``
    is the ref of the action that was resolved.
    """

    name: str
    resume: Any
    action: PendingActionRef

    @property
    def type(self) -> Literal["resume"]:
        return "resume"


Entry = InitialEntry | ResumeEntry


@dataclass(frozen=True, slots=True)
class ToolSuspendResult:
    """What ``ctx.suspend(name, input, deadline=None)`` returns; ``execute`` returns it to
    suspend. ``deadline`` is this wait's own (``None``: the suspend point's, if it has one)."""

    name: str
    input: Any
    deadline: timedelta | datetime | None = None


@dataclass(frozen=True, slots=True)
class ToolFailResult:
    """What ``ctx.fail(message)`` returns: a deliberate, model-visible failure."""

    message: str


def tool_failure_details(failure: str | ToolFailResult) -> dict[str, str]:
    """Normalise a tool failure (the sentence ``ctx.fail`` takes, or its result) into the
    record a client and the model receive: ``{"code": "tool_failed", "message": sentence}``.

    The runtime uses it for every ``ctx.fail``: the part's ``errorText`` is its ``message``,
    so an application that renders or logs a failure agrees with what the model read.
    """
    message = failure.message if isinstance(failure, ToolFailResult) else failure
    if not isinstance(message, str):
        raise TypeError(
            f"a tool failure is a sentence (a str) or what ctx.fail() returned, got "
            f"{failure!r}; write ctx.fail('What went wrong, and what to do instead.')"
        )
    return {"code": "tool_failed", "message": message}


@dataclass(frozen=True, slots=True, eq=False)
class ToolDataWriter:
    """``ctx.data``: writes tool-data items through the call's actor, and lists them.

    ``write`` parses ``value`` by the channel's data schema; a durable item (``transient``
    false) is stored with the call before ``write`` returns, replacing the item of the same
    ``id`` (a new id is made when none is given).
    """

    _write: Callable[[str, object, str | None, bool], Awaitable[None]]
    _list: Callable[[str], Awaitable[list[ToolDataItem]]]

    def write(
        self, name: str, value: object, *, id: str | None = None, transient: bool = False
    ) -> Awaitable[None]:
        """``await ctx.data.write(name, value, *, id=None, transient=False)``."""
        require_trio("ctx.data.write()")
        return self._write(name, value, id, transient)

    def list(self, name: str) -> Awaitable[list[ToolDataItem]]:
        """``await ctx.data.list(name)``: the channel's stored items."""
        require_trio("ctx.data.list()")
        return self._list(name)


def _no_children() -> ToolCallMap:
    return ToolCallMap({})


@dataclass(frozen=True, slots=True, eq=False)
class ToolContext(Generic[InputT, ContextT]):
    """What ``execute(ctx)`` receives (API §3): input, context, where it runs, how it began.

    ``ToolContext[InputT, ContextT]``: ``input`` is what the tool's ``input_schema`` parsed
    (a model instance for a pydantic model class), ``context`` the tool's context;
    ``define_tool`` infers both parameters (see ``docs/guides/typing.md``). ``tools`` is the
    :class:`ToolCallMap` of the tool's declared children (empty when it declares none);
    ``capabilities`` the acquired facades (empty when it declares none); ``files`` its
    :class:`ScopedFiles`; ``agents`` its :class:`AgentRunner` (both ``None`` only in a
    context made by hand, not by a runtime).
    """

    input: InputT
    context: ContextT
    agent_id: str
    thread: ToolThread
    signal: AbortSignal
    entry: InitialEntry | ResumeEntry
    data: ToolDataWriter
    suspend_history: list[dict[str, JsonValue]] = field(default_factory=list)
    tools: ToolCallMap = field(default_factory=_no_children)
    capabilities: Capabilities = field(default_factory=Capabilities)
    files: ScopedFiles = _NOT_FROM_A_RUNTIME
    agents: AgentRunner = _NOT_FROM_A_RUNTIME
    _trigger: Callable[..., Awaitable[None]] | None = None

    def suspend(
        self, name: str, input: Any, *, deadline: timedelta | datetime | None = None
    ) -> ToolSuspendResult:
        """Return this from ``execute`` to wait at suspend point ``name`` showing ``input``.

        ``deadline`` bounds this wait: a ``timedelta`` from now, or a timezone-aware
        ``datetime`` (one already past expires at once); ``None`` keeps the suspend point's
        ``deadline``, if it declares one. At the deadline the action resolves as the point's
        ``on_deadline`` declares (cancelled by default). A deadline of another type raises
        ``TypeError`` (a naive ``datetime``: ``ValueError``)."""
        return ToolSuspendResult(name, input, check_deadline(deadline))

    def trigger(
        self, notification: str, *, data: Any = None, hidden: bool = False
    ) -> Awaitable[None]:
        """Append a server notification (a ``system`` message, ``metadata["notification"]
        == {"hidden": hidden, "data": data}``) to this call's thread and continue generation,
        with or without a client connected; returns once it is stored. During a run, the
        run that answers it starts after this one. It keeps working after this call ended
        (a background task may hold it), for as long as the runtime is open."""
        if self._trigger is None:
            raise RuntimeError("this ToolContext was not made by a runtime: it cannot trigger")
        require_trio("ctx.trigger()")
        return self._trigger(notification, data=data, hidden=hidden)

    def fail(self, message: str) -> ToolFailResult:
        """Return this from ``execute`` to fail deliberately; ``message`` is the errorText."""
        if not isinstance(message, str):
            raise TypeError(f"ctx.fail() takes a str sentence, got {message!r}")
        return ToolFailResult(message)
