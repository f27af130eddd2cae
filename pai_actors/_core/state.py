"""Thread and run state: what ``get_state`` returns and a client's snapshot holds."""

from __future__ import annotations

from typing import Literal, TypeAlias

from .json import JsonValue
from .parts import Message
from .wire import WireModel

RunStatus: TypeAlias = Literal["running", "waiting", "completed", "failed", "cancelled"]


class RunState(WireModel):
    """One run of a thread: ``status`` and, for a failed run, the ``error`` that ended it.

    ``"waiting"``: the run waits only on pending actions; ``error`` is ``None`` unless
    ``status`` is ``"failed"``. ``usage`` is the tokens the run's model steps used so far,
    summed (the AI SDK's usage keys: ``inputTokens``, ``outputTokens``, ``totalTokens``,
    ``reasoningTokens``, ``cachedInputTokens``, each present when some step reported it),
    or ``None`` when no step reported usage; it is on the wire only when set.
    """

    run_id: str
    status: RunStatus
    error: str | None = None
    usage: dict[str, int] | None = None

    def to_wire(self) -> dict[str, JsonValue]:
        wire: dict[str, JsonValue] = {
            "runId": self.run_id,
            "status": self.status,
            "error": self.error,
        }
        if self.usage is not None:
            wire["usage"] = dict(self.usage)
        return wire


class ThreadState(WireModel):
    """A snapshot of a thread: its messages and its runs, oldest first.

    ``version`` is the version of this stored/wire shape (``1``); a reader that meets a
    version it does not know refuses it rather than misreading it.
    """

    version: Literal[1] = 1
    thread_id: str
    messages: tuple[Message, ...] = ()
    runs: tuple[RunState, ...] = ()

    def to_wire(self) -> dict[str, JsonValue]:
        return {
            "version": self.version,
            "threadId": self.thread_id,
            "messages": [message.to_wire() for message in self.messages],
            "runs": [run.to_wire() for run in self.runs],
        }
