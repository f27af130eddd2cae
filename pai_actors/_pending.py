"""The pending-action view the runtime hands out: an action and the coroutines resolving it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._actions import ActionResult, PendingActionOrigin, PendingActionRef
from ._json import JsonValue

if TYPE_CHECKING:
    from ._runtime import AgentRuntime


class PendingActionView:
    """A pending action of a thread: its ``name``, the ``input`` it shows, its ``origin``
    and ``ref``. ``submit``, ``cancel`` and ``fail`` resolve it through the runtime and
    return an :class:`ActionResult`; an action resolves once (later attempts are rejected).
    """

    def __init__(self, runtime: AgentRuntime, ref: PendingActionRef, input: JsonValue) -> None:
        self._runtime = runtime
        self.ref = ref
        self.name = ref.name
        self.input = input
        self.origin: PendingActionOrigin = ref.origin

    def __repr__(self) -> str:
        return f"PendingActionView(name={self.name!r}, action_id={self.ref.action_id!r})"

    async def submit(self, resume: object) -> ActionResult:
        return await self._runtime.submit_action(self.ref, resume)

    async def cancel(self, reason: str | None = None) -> ActionResult:
        return await self._runtime.cancel_action(self.ref, reason)

    async def fail(self, error: str | BaseException) -> ActionResult:
        return await self._runtime.fail_action(self.ref, error)
