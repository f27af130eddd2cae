"""Pending-action values: where an action comes from, how to name it, how a submission ended.

These are wire values (a client sends a ref back to submit); the pending-action view with
its ``submit``/``cancel``/``fail`` coroutines belongs to the runtime.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from .json import JsonValue
from .wire import WireModel


class ActionResult(WireModel):
    """How a ``submit``, ``cancel`` or ``fail`` of a pending action ended.

    ``"accepted"``: the action resolved (``error`` is ``None``). ``"rejected"``: nothing
    changed and the action is as it was; ``error`` says why (the validation errors, "already
    resolved", "no such action", ...). A rejection is an expected outcome, not an exception.
    """

    status: Literal["accepted", "rejected"]
    error: str | None = None

    @model_validator(mode="after")
    def _check_error(self) -> ActionResult:
        if (self.status == "rejected") != (self.error is not None):
            raise ValueError(
                "a rejected ActionResult needs an error saying why"
                if self.status == "rejected"
                else "an accepted ActionResult has no error"
            )
        return self

    @classmethod
    def accepted(cls) -> ActionResult:
        return cls(status="accepted")

    @classmethod
    def rejected(cls, error: str) -> ActionResult:
        return cls(status="rejected", error=error)

    def to_wire(self) -> dict[str, JsonValue]:
        return {"status": self.status, "error": self.error}


class PendingActionOrigin(WireModel):
    """The tool call a pending action belongs to, in the message that holds it.

    ``suspend_name`` is the suspend point's name, or ``None`` for the implicit output action
    of a tool without ``execute`` (omitted on the wire then).
    """

    kind: Literal["tool"] = "tool"
    thread_id: str
    tool_name: str
    suspend_name: str | None = None
    message_id: str
    tool_call_id: str
    run_id: str

    def to_wire(self) -> dict[str, JsonValue]:
        wire: dict[str, JsonValue] = {
            "kind": self.kind,
            "threadId": self.thread_id,
            "toolName": self.tool_name,
        }
        if self.suspend_name is not None:
            wire["suspendName"] = self.suspend_name
        wire.update(messageId=self.message_id, toolCallId=self.tool_call_id, runId=self.run_id)
        return wire


class SubAgentOrigin(WireModel):
    """One link of a pending action's origin chain: the tool call (``thread_id``,
    ``run_id``, ``message_id``, ``tool_call_id``, ``tool_name``) that started the sub-agent
    run of ``agent_id`` on the thread ``sub_thread_id`` (``ctx.agents.run``)."""

    thread_id: str
    run_id: str
    message_id: str
    tool_call_id: str
    tool_name: str
    agent_id: str
    sub_thread_id: str

    def to_wire(self) -> dict[str, JsonValue]:
        return {
            "threadId": self.thread_id,
            "runId": self.run_id,
            "messageId": self.message_id,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "agentId": self.agent_id,
            "subThreadId": self.sub_thread_id,
        }


class PendingActionRef(PendingActionOrigin):
    """A pending action's origin plus its identity: ``action_id`` and its ``name``.

    ``name`` is ``"<toolName>.<suspendName>"`` for a suspension and ``"<toolName>"`` for an
    output action; ``action_id`` is the suspension's id, or the ``tool_call_id`` for an output
    action. Submissions are keyed by ``action_id``.
    """

    action_id: str
    name: str

    @property
    def origin(self) -> PendingActionOrigin:
        """The :class:`PendingActionOrigin` part of this ref."""
        return PendingActionOrigin.model_validate(self.model_dump(exclude={"action_id", "name"}))

    def to_wire(self) -> dict[str, JsonValue]:
        wire = super().to_wire()
        wire.update(actionId=self.action_id, name=self.name)
        return wire
