"""The values of the tool-call core: the immutable :class:`CallRecord`, its spec and effects.

``_core.calls`` holds the pure transitions between records; this module holds only the values
they pass around, so that the runtime's actors can import them without the transitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypeVar

from .json import JsonValue
from .schema import Schema, ToolSchemas, frozen_mapping

_Value = TypeVar("_Value")

if TYPE_CHECKING:  # mypy checks the changes as dataclasses.replace's (its plugin does)
    from dataclasses import replace as replace
else:

    def replace(value: _Value, /, **changes: Any) -> _Value:
        """``dataclasses.replace`` for this module's values (frozen, slotted dataclasses
        with no ``__post_init__``), at a third of its cost: each slot copied (read all at
        once, written through its descriptor) or changed, no ``__init__`` run again. The
        core makes a record per transition, several per call."""
        cls = value.__class__
        copier = _COPIERS.get(cls)
        if copier is None:
            copier = _COPIERS[cls] = _Copier(cls)
        new = _new(cls)
        for write, slot_value in zip(copier.writes, copier.read(value), strict=True):
            write(new, slot_value)
        for name, changed in changes.items():
            if name not in copier.slots:
                raise TypeError(f"{cls.__name__} has no field {name!r}")
            _set(new, name, changed)
        return new

    class _Copier:
        """How :func:`replace` copies one class's slots: a reader of all of them (a tuple)
        and each slot's setter."""

        __slots__ = ("read", "slots", "writes")

        def __init__(self, cls: type) -> None:
            slots: tuple[str, ...] = cls.__slots__
            self.slots = frozenset(slots)
            read_all = attrgetter(*slots)
            self.read = read_all if len(slots) > 1 else (lambda value: (read_all(value),))
            self.writes = [getattr(cls, name).__set__ for name in slots]

    _COPIERS: dict[type, _Copier] = {}
    _new, _set = object.__new__, object.__setattr__


class DefinedTool(Protocol):
    """What a spec is made from: a ``ToolDefinition`` (the core names it by this protocol,
    so that it needs nothing of the tools' layer above it)."""

    @property
    def _schemas(self) -> ToolSchemas: ...

    @property
    def has_execute(self) -> bool: ...


Phase: TypeAlias = Literal[
    "streaming",
    "awaiting_approval",
    "executing",
    "suspended",
    "awaiting_output",
    "awaiting_agents",
    "done",
]
"""Where a call is: its input streams in; it waits for the user's approval (a registration
with ``needs_approval``); ``execute`` runs; it waits at a suspend point; it waits for a
client's output (no ``execute``); it waits for the sub-agent runs it started, some of which
wait on pending actions of their own (``ctx.agents.run``); it is finished."""

EpisodeState: TypeAlias = Literal["pending", "submitted", "cancelled", "failed"]
Finish: TypeAlias = Literal["output-available", "output-error", "output-denied"]


@dataclass(frozen=True, slots=True)
class CallSpec:
    """What the core needs of a tool to judge a call: its schemas and execution mode.

    ``input`` ``None`` accepts any JSON input; ``output`` ``None`` accepts any JSON output;
    ``suspend`` maps each suspend name to ``(suspend_schema, resume_schema)``.
    """

    input: Schema | None
    output: Schema | None
    suspend: Mapping[str, tuple[Schema, Schema]]
    has_execute: bool

    @classmethod
    def for_tool(cls, tool: DefinedTool) -> CallSpec:
        """The spec of a registered tool definition."""
        schemas = tool._schemas
        return cls(schemas.input, schemas.output, schemas.suspend, tool.has_execute)

    @classmethod
    def external(cls, input: Schema | None = None) -> CallSpec:
        """The spec of a request-time client tool: any JSON output is submitted by a client."""
        return cls(input, None, frozen_mapping(None), has_execute=False)


@dataclass(frozen=True, slots=True)
class Episode:
    """One suspension of a call: pending until it resolves, once, and never changes again.

    ``expires_at`` is its deadline (``None``: it waits as long as it takes)."""

    action_id: str
    name: str
    input: JsonValue
    suspended_at: datetime
    state: EpisodeState = "pending"
    resolved_at: datetime | None = None
    resume: JsonValue = None
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Approval:
    """The approval a call asked for (the AI SDK's approval flow): pending until the user
    responds, once. ``state`` is ``"submitted"`` once responded (``approved`` and an
    optional ``reason``), or ``"cancelled"`` / ``"failed"`` when the action was.
    ``expires_at`` is its deadline (``None``: none)."""

    id: str
    requested_at: datetime
    state: EpisodeState = "pending"
    approved: bool | None = None
    reason: str | None = None
    resolved_at: datetime | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DataItem:
    """One durable tool-data item (transient items never reach the record)."""

    id: str
    value: JsonValue
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Cancellation:
    """Why and when a call was cancelled (the ``cancelled`` sidecar)."""

    reason: str | None
    at: datetime


@dataclass(frozen=True, slots=True)
class CallRecord:
    """The durable state of one tool call; every transition returns a new record.

    ``name`` is the registration name (the ``toolName`` of the part). ``input`` is the
    model's input as JSON once it is available (while streaming, the last complete parse of
    ``input_text``); ``raw_input`` holds a registered tool's input that failed its schema.
    ``output`` / ``error_text`` hold the outcome once ``phase == "done"``. ``output_action``
    is the state of the implicit output action of a tool without ``execute`` (``None`` when
    there is none), ``output_expires_at`` its deadline (``None``: none). ``approval`` is the
    approval it asked for (``None``: none was needed). ``entry_started`` records, durably,
    that ``execute`` began for the call's current entry (set when the step is stored for an
    initial entry, and by the actor right before it re-enters ``execute`` after an accepted
    submission): an ``executing`` call whose entry started, found by a runtime with no live
    actor for it, was interrupted.
    ``observed`` records that the registration's ``on_output`` ran for the
    output (the runtime sets it; a call whose registration has no ``on_output`` keeps
    ``False``). ``sub_threads`` holds the thread ids of the sub-agent runs the call started
    (``ctx.agents.run``), in the order of their ids. ``version`` is the version of this
    stored shape.
    """

    name: str
    tool_call_id: str
    dynamic: bool = False
    phase: Phase = "streaming"
    input_text: str = ""
    input: JsonValue = None
    raw_input: JsonValue = None
    finish: Finish | None = None
    output: JsonValue = None
    error_text: str | None = None
    episodes: tuple[Episode, ...] = ()
    output_action: EpisodeState | None = None
    output_expires_at: datetime | None = None
    approval: Approval | None = None
    entry_started: bool = False
    cancelled: Cancellation | None = None
    data: Mapping[str, tuple[DataItem, ...]] = field(default_factory=lambda: frozen_mapping(None))
    observed: bool = False
    sub_threads: tuple[str, ...] = ()
    version: int = 1

    @property
    def state(
        self,
    ) -> Literal[
        "input-streaming", "input-available", "approval-requested", "approval-responded", Finish
    ]:
        """The native AI SDK state this record projects to."""
        if self.phase == "streaming":
            return "input-streaming"
        if self.phase == "done":
            assert self.finish is not None
            return self.finish
        if self.phase == "awaiting_approval":
            return "approval-requested"
        if self.approval is not None:  # approved: executing (or suspended) after it
            return "approval-responded"
        return "input-available"

    @property
    def resume_action_id(self) -> str | None:
        """While ``executing`` with its entry not yet started (see ``entry_started``), what
        the call goes on from: its latest submitted episode, its approval when it has no
        episode, or its ``tool_call_id`` for an initial entry to run again (an interrupted
        call whose registration re-runs it). ``None`` otherwise."""
        if self.phase != "executing" or self.entry_started:
            return None
        if self.episodes:
            return self.reentry_action_id
        return self.reentry_action_id or self.tool_call_id

    @property
    def reentry_action_id(self) -> str | None:
        """The accepted action an ``executing`` call re-enters ``execute`` from (its latest
        submitted episode, or its approval when it has no episode), started or not; ``None``
        for an initial entry."""
        if self.phase != "executing":
            return None
        if self.episodes:
            last = self.episodes[-1]
            return last.action_id if last.state == "submitted" else None
        approval = self.approval
        if approval is not None and approval.state == "submitted" and approval.approved:
            return approval.id
        return None

    @property
    def expires_at(self) -> datetime | None:
        """The deadline of the call's pending action (its pending suspension, approval or
        output action), or ``None`` when it waits on none or on one without a deadline."""
        phase = self.phase
        if phase == "suspended":
            pending = self.pending_episode
            return None if pending is None else pending.expires_at
        if phase == "awaiting_approval":
            approval = self.approval
            return (
                approval.expires_at
                if approval is not None and approval.state == "pending"
                else None
            )
        if phase == "awaiting_output" and self.output_action == "pending":
            return self.output_expires_at
        return None

    @property
    def pending_episode(self) -> Episode | None:
        """The pending suspension, if the call waits at one."""
        last = self.episodes[-1] if self.episodes else None
        return last if last is not None and last.state == "pending" else None

    def action_name(self, suspend_name: str | None) -> str:
        """``"<toolName>.<suspendName>"``, or ``"<toolName>"`` for the output action."""
        return self.name if suspend_name is None else f"{self.name}.{suspend_name}"


# Effects: what the runtime's actor does next. Plain values; the actor executes them.


@dataclass(frozen=True, slots=True)
class Execute:
    """Run ``execute`` with ``InitialEntry()``; ``input`` is the parsed input."""

    input: Any


@dataclass(frozen=True, slots=True)
class Resume:
    """Re-enter ``execute`` with ``ResumeEntry(name, resume, action)``.

    ``resume`` is the payload as the resume schema parsed it; ``action_id`` and
    ``action_name`` identify the action (the actor builds the ``PendingActionRef``).
    """

    name: str
    resume: Any
    action_id: str
    action_name: str


@dataclass(frozen=True, slots=True)
class ActionOpened:
    """A pending action appeared: ``name`` is fully qualified, ``input`` is what it shows."""

    action_id: str
    name: str
    suspend_name: str | None
    input: JsonValue


@dataclass(frozen=True, slots=True)
class ActionResolved:
    """A pending action resolved (once) as ``state``."""

    action_id: str
    state: EpisodeState


@dataclass(frozen=True, slots=True)
class Finished:
    """The call is over: tell its run; ``output``/``error_text`` as on the part."""

    state: Finish
    output: JsonValue
    error_text: str | None


@dataclass(frozen=True, slots=True)
class DataWritten:
    """A tool-data item to send to the live watchers (``transient``: not in the record)."""

    channel: str
    item: DataItem
    transient: bool


Effect: TypeAlias = Execute | Resume | ActionOpened | ActionResolved | Finished | DataWritten
