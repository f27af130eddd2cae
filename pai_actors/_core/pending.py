"""The pending-action view the runtime hands out: an action and the coroutines resolving it."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from .actions import ActionResult, PendingActionOrigin, PendingActionRef, SubAgentOrigin
from .json import JsonValue
from .schema import Schema


class ActionResolver(Protocol):
    """What resolves actions: the runtime, or a protocol client (``pai_actors.client``)."""

    async def submit_action(self, ref: PendingActionRef, payload: object) -> ActionResult: ...

    async def cancel_action(
        self, ref: PendingActionRef, reason: str | None = None
    ) -> ActionResult: ...

    async def fail_action(
        self, ref: PendingActionRef, error: str | BaseException
    ) -> ActionResult: ...


class PendingActionView:
    """A pending action of a thread: its ``name``, the ``input`` it shows, its ``origin``
    and ``ref``. ``submit``, ``cancel`` and ``fail`` resolve it through the runtime and
    return an :class:`ActionResult`; an action resolves once (later attempts are rejected).

    ``resume_schema`` is the JSON Schema a submission is validated by (a suspension's
    ``resume_schema``, the output schema of a tool without ``execute``, the approval
    response), or ``None`` when any JSON value is accepted. ``expires_at`` is the action's
    deadline (a timezone-aware ``datetime``), or ``None`` when it waits as long as it takes;
    at the deadline the runtime resolves it as its definition declares, and a later
    ``submit`` is rejected as for any resolved action.

    ``origin_chain`` says which sub-agent asks, and why: for an action of a sub-agent run
    (``ctx.agents.run``), the tool calls that started it, outermost first, each naming the
    agent it ran (:class:`SubAgentOrigin`); ``()`` for an action of a thread a client
    created. ``origin`` is the call the action belongs to, in its own (sub-agent) thread.
    """

    def __init__(
        self,
        runtime: ActionResolver,
        ref: PendingActionRef,
        input: JsonValue,
        resume_schema: dict[str, JsonValue] | Schema | None = None,
        expires_at: datetime | None = None,
        origin_chain: tuple[SubAgentOrigin, ...] = (),
    ) -> None:
        self._runtime = runtime
        self.ref = ref
        self.name = ref.name
        self.input = input
        self.origin: PendingActionOrigin = ref.origin
        # (a ``Schema``: its JSON Schema copied when first read, not for every view made)
        self._resume_schema = resume_schema
        self.expires_at = expires_at
        self.origin_chain = origin_chain

    @property
    def resume_schema(self) -> dict[str, JsonValue] | None:
        schema = self._resume_schema
        if isinstance(schema, Schema):
            schema = self._resume_schema = schema.json_schema
        return schema

    @resume_schema.setter
    def resume_schema(self, schema: dict[str, JsonValue] | None) -> None:
        self._resume_schema = schema

    def __repr__(self) -> str:
        return f"PendingActionView(name={self.name!r}, action_id={self.ref.action_id!r})"

    async def submit(self, resume: object) -> ActionResult:
        return await self._runtime.submit_action(self.ref, resume)

    async def cancel(self, reason: str | None = None) -> ActionResult:
        return await self._runtime.cancel_action(self.ref, reason)

    async def fail(self, error: str | BaseException) -> ActionResult:
        return await self._runtime.fail_action(self.ref, error)
