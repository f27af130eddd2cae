"""The stored shapes a :class:`~pai_actors.Store` persists: threads, runs, calls, files.

Each is a frozen pydantic model with ``version`` (the version of the stored *shape*, ``1``;
a reader that meets a version it does not know refuses it). Records that change after they
are written (runs and calls) also carry ``revision``: the store's counter for optimistic
concurrency. A record read from a store holds the revision it was stored with; writing it
back (changed) succeeds only if the store still holds that revision, and stores it with
``revision + 1``. A new record has ``revision == 0`` and is stored as ``1``.

Messages are stored as :class:`~pai_actors.Message` (its wire JSON); the tool call's
:class:`CallRecord` (a plain dataclass of the pure core) is stored inside :class:`StoredCall`
through the private mirror ``_CallShape`` (``_call_json.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import core_schema

from .actions import PendingActionRef
from .call_json import _serialize_call, _validate_call
from .call_record import (
    CallRecord,
)
from .client_tool import ClientTool
from .deadlines import CancelAtDeadline, on_deadline_from_json, on_deadline_to_json
from .json import JsonValue
from .state import RunState, RunStatus
from .wire import Json


class StoreRecord(BaseModel):
    """Base of the stored shapes: frozen, unknown fields refused, a shape ``version``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1


class ThreadParent(StoreRecord):
    """Where a sub-agent's thread comes from: the tool call that started it
    (``ctx.agents.run``), by its thread, run, message, id and tool name. ``depth`` is how
    deep the sub-agent runs: 1 under a top-level run's call, 2 under a call of that
    sub-agent, and so on."""

    thread_id: str
    run_id: str
    message_id: str
    tool_call_id: str
    tool_name: str
    depth: int = Field(ge=1)


class ThreadRecord(StoreRecord):
    """A thread: its id, the ``scope_key`` that isolates it, the creating ``user_key``, and
    the ``agent_id`` of the agent that runs it (``None``: the runtime's default agent).
    ``parent`` is the tool call whose sub-agent run the thread holds (``None``: a thread a
    client created). Records written before sub-agents existed read with none.

    Written once, never changed.
    """

    thread_id: str
    scope_key: str
    user_key: str | None = None
    agent_id: str | None = None
    created_at: AwareDatetime
    parent: ThreadParent | None = None


class ClientToolRecord(StoreRecord):
    """A request-time client tool as its run stores it: ``name``, ``description`` and the
    ``input_schema`` (JSON Schema) it was offered with, and its output action's ``deadline``
    and ``on_deadline`` (``on_deadline_to_json``'s form; ``None``: cancel). Records written
    before deadlines existed read with none."""

    name: str
    description: str
    input_schema: dict[str, Json]
    deadline: timedelta | None = None
    on_deadline: dict[str, Json] | None = None

    @classmethod
    def of(cls, tool: ClientTool) -> ClientToolRecord:
        """The record of a client tool, as a run stores it with its request."""
        return cls(
            name=tool.name,
            description=tool.description,
            input_schema=dict(tool.input_schema),
            deadline=tool.deadline,
            on_deadline=None
            if tool.on_deadline == CancelAtDeadline()
            else on_deadline_to_json(tool.on_deadline),
        )

    def tool(self) -> ClientTool:
        """The client tool this record stores (checked again, as it was when it was made)."""
        return ClientTool(
            self.name,
            self.description,
            self.input_schema,
            deadline=self.deadline,
            on_deadline=CancelAtDeadline()
            if self.on_deadline is None
            else on_deadline_from_json(self.on_deadline),
        )


class RunRecord(StoreRecord):
    """One run of a thread: ``status`` and, for a failed run, its ``error``.

    The request that started it is stored with it, so a run activated by a later runtime
    sees the same request: ``identity`` and ``client_data`` (JSON; ``None`` by default) and
    the request-time ``client_tools`` (``()`` by default), the request's ``model_settings``
    (``ModelSettings.to_json()``; ``None``: none given). ``usage`` sums the tokens its
    model steps reported (``RunState.usage``; ``None`` while none did). Records written
    before these fields existed read with the defaults.

    ``revision`` is the store's optimistic-concurrency counter (see the module docstring).
    """

    thread_id: str
    run_id: str
    status: RunStatus
    error: str | None = None
    created_at: AwareDatetime
    identity: Json = None
    client_data: Json = None
    client_tools: tuple[ClientToolRecord, ...] = ()
    model_settings: dict[str, Json] | None = None
    usage: dict[str, int] | None = None
    max_steps: int | None = Field(default=None, ge=1)
    revision: int = Field(default=0, ge=0)

    @property
    def state(self) -> RunState:
        """The :class:`~pai_actors.RunState` clients see."""
        return RunState(run_id=self.run_id, status=self.status, error=self.error, usage=self.usage)

    @property
    def active(self) -> bool:
        """Whether the run still holds its thread (``running`` or ``waiting``)."""
        return self.status in ("running", "waiting")


class _CallRecordSchema:
    """Annotation marker: (de)serialize a ``CallRecord`` through ``_CallShape``, never by
    introspecting the dataclass (whose ``JsonValue`` fields pydantic cannot build)."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _validate_call,
            serialization=core_schema.plain_serializer_function_ser_schema(_serialize_call),
        )


StoredCallRecord = Annotated[CallRecord, _CallRecordSchema]


class StoredCall(StoreRecord):
    """A tool call as stored: its :class:`CallRecord` and where it lives.

    ``thread_id``, ``run_id`` and ``message_id`` (the assistant message whose part it is)
    never change once written. ``revision`` is the optimistic-concurrency counter (see the
    module docstring); the key is ``record.tool_call_id``.
    """

    thread_id: str
    run_id: str
    message_id: str
    record: StoredCallRecord
    revision: int = Field(default=0, ge=0)

    @property
    def tool_call_id(self) -> str:
        return self.record.tool_call_id

    def action_ref(self, action_id: str, suspend_name: str | None) -> PendingActionRef:
        """The ref of this call's action ``action_id``: a suspension's (``suspend_name``),
        or the approval's or the output action's (``None``)."""
        record = self.record
        return PendingActionRef.trusted(
            kind="tool",
            thread_id=self.thread_id,
            tool_name=record.name,
            suspend_name=suspend_name,
            message_id=self.message_id,
            tool_call_id=record.tool_call_id,
            run_id=self.run_id,
            action_id=action_id,
            name=record.action_name(suspend_name),
        )


class UploadedFile(StoreRecord):
    """A durable file's metadata; its body is stored apart from messages.

    ``scope_key`` isolates it (a read from another scope finds nothing); ``user_key`` and
    ``thread_id`` record who created it and where. ``size`` is the body's length in bytes.
    """

    file_id: str
    filename: str
    media_type: str
    size: int = Field(ge=0)
    scope_key: str
    user_key: str | None = None
    thread_id: str | None = None
    created_at: AwareDatetime
    metadata: dict[str, Json] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoredFileBody:
    """A file read back from a store: its metadata and its body."""

    file: UploadedFile
    body: bytes


@dataclass(frozen=True, slots=True)
class OpenAction:
    """A pending action, derived from the stored call that holds it (never stored itself).

    ``ref`` identifies it (its ``action_id`` is the episode's, or the ``tool_call_id`` for
    the output action of a tool without ``execute``); ``input`` is what it shows; ``call`` is
    the stored call, whose ``revision`` a submission writes against; ``expires_at`` is its
    deadline (``None``: none).
    """

    ref: PendingActionRef
    input: JsonValue
    call: StoredCall
    expires_at: datetime | None = None
