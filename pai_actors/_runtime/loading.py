"""Loading a thread in the runtime: the migration check and the sync pending-action lookup.

Registration names are durable (API §7). When a thread is loaded, :func:`check_migration`
looks at its stored calls: an unfinished call (not ``done``) of a registered tool whose name
this runtime no longer registers raises :class:`MigrationRequired`; a terminal one loads
unchanged. Client-tool (``dynamic-tool``) calls never need a registration.

:func:`pending_action_for` answers ``get_pending_action(message, part)`` without I/O, from
the part itself and what the runtime learned when it loaded or wrote the message (its
thread and run, kept in :class:`MessageIndex`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .._core.actions import PendingActionRef
from .._core.calls import APPROVAL_RESPONSE
from .._core.errors import MigrationRequired, PaiError
from .._core.parts import Message, ToolPart
from .._core.pending import ActionResolver, PendingActionView
from .._core.records import StoredCall
from .._core.schema import Schema
from .._tools.registration import ToolRegistration

if TYPE_CHECKING:
    from .._tools.agent import AgentDefinition


class MessageLookup(ActionResolver, Protocol):
    """What the pending-action lookup reads from a runtime: where a message it saw was made
    (its thread and run) and the agent of a thread it loaded, both from bounded indexes."""

    def message_location(self, message_id: str) -> tuple[str, str] | None: ...

    def thread_agent(self, thread_id: str) -> AgentDefinition | None: ...


K = TypeVar("K")
V = TypeVar("V")


class BoundedIndex(Generic[K, V]):
    """A mapping that keeps its ``capacity`` most recently set or read entries: a runtime's
    in-memory indexes stay bounded however many threads it serves (a thread is read again
    from the store when it is needed and not here)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


INDEX_CAPACITY = 1024
"""How many messages (and threads' agents) a runtime remembers; see :class:`BoundedIndex`."""

MessageIndex = BoundedIndex[str, tuple[str, str]]
"""``message_id -> (thread_id, run_id)`` of the assistant messages holding tool calls."""


def check_migration(
    thread_id: str, calls: Iterable[StoredCall], tools: Mapping[str, ToolRegistration]
) -> None:
    """Raise :class:`MigrationRequired` for the first unfinished call of a missing tool."""
    for call in calls:
        record = call.record
        if record.dynamic or record.phase == "done" or record.name in tools:
            continue
        registered = ", ".join(map(repr, tools)) or "none"
        raise MigrationRequired(
            f"thread {thread_id!r} has the unfinished call {record.tool_call_id!r} of the tool "
            f"{record.name!r}, which this runtime no longer registers (registered: "
            f"{registered}); register a tool under the name {record.name!r} again, or migrate "
            "the stored call, before loading this thread",
            thread_id=thread_id,
            tool_name=record.name,
            tool_call_id=record.tool_call_id,
        )


def index_calls(index: MessageIndex, calls: Iterable[StoredCall]) -> None:
    """Remember the thread and run of each call's message."""
    for call in calls:
        index[call.message_id] = (call.thread_id, call.run_id)


def pending_action_for(
    rt: MessageLookup, message: Message | Mapping[str, Any], part: ToolPart | Mapping[str, Any]
) -> PendingActionView | None:
    """The pending action ``part`` of ``message`` shows, or ``None`` when it shows none.

    ``message`` and ``part`` are objects from ``get_state`` or their wire dicts. A message
    this runtime has not loaded (``get_state``, ``pending_actions``) or written raises
    :class:`PaiError`.
    """
    if not isinstance(message, Message):
        message = Message.model_validate(message)
    if not isinstance(part, ToolPart):
        part = ToolPart.model_validate(part)
    return pending_action_of_part(rt, message.id, part)


def pending_action_of_part(
    rt: MessageLookup,
    message_id: str,
    part: ToolPart,
    *,
    where: tuple[str, str] | None = None,
    agent: AgentDefinition | None = None,
) -> PendingActionView | None:
    """:func:`pending_action_for` given the message's id. ``where`` (the message's thread
    and run) and ``agent`` (the thread's) are read from the runtime's bounded indexes
    unless given."""
    if where is None:
        where = rt.message_location(message_id)
    if where is None:
        raise PaiError(
            f"message {message_id!r} is not known to this runtime; pass a message from "
            "get_state() (which loads its thread) to get_pending_action()"
        )
    thread_id, run_id = where
    pending = part.pending_suspension
    if part.state == "approval-requested" and part.approval is not None:
        action_id, suspend_name, name, shown = (
            part.approval.id,
            None,
            part.tool_name,
            part.input,
        )
    elif part.state not in ("input-available", "approval-responded"):
        return None
    elif pending is not None:
        action_id, suspend_name = pending.action_id, pending.name
        name = f"{part.tool_name}.{suspend_name}"
        shown = pending.input
    else:
        dynamic = part.type == "dynamic-tool"
        if agent is None:
            agent = rt.thread_agent(thread_id)
        if agent is None:
            raise PaiError(
                f"thread {thread_id!r} of message {message_id!r} is not loaded in this runtime "
                "any more; call get_state() again and pass its message"
            )
        registration = None if dynamic else agent.tools.get(part.tool_name)
        if not dynamic and (registration is None or registration.tool.has_execute):
            return None  # still executing: nothing to resolve
        action_id, suspend_name, name, shown = part.tool_call_id, None, part.tool_name, part.input
    ref = PendingActionRef(
        thread_id=thread_id,
        tool_name=part.tool_name,
        suspend_name=suspend_name,
        message_id=message_id,
        tool_call_id=part.tool_call_id,
        run_id=run_id,
        action_id=action_id,
        name=name,
    )
    if agent is None:
        agent = rt.thread_agent(thread_id)
    return PendingActionView(rt, ref, shown, resume_schema_of(agent, ref), part.expires_at)


def resume_schema_of(agent: AgentDefinition | None, ref: PendingActionRef) -> Schema | None:
    """The schema a submission to ``ref`` is validated by (``None``: any JSON); a view
    copies its JSON Schema when it is read."""
    if ref.action_id == f"{ref.tool_call_id}.approval":
        return APPROVAL_RESPONSE
    registration = None if agent is None else agent.tools.get(ref.tool_name)
    if registration is None:  # a request-time client tool: any JSON output
        return None
    schemas = registration.tool._schemas
    if ref.suspend_name is not None:
        suspend = schemas.suspend.get(ref.suspend_name)
        return None if suspend is None else suspend[1]
    return schemas.output
