"""Exit reasons: every actor gets exactly one when it exits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

ExitKind: TypeAlias = Literal["normal", "cancelled", "crashed", "shutdown"]


@dataclass(frozen=True, slots=True)
class Normal:
    """The actor's function returned on its own."""

    kind: ExitKind = "normal"

    def __str__(self) -> str:
        return "normal"


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The actor was cancelled, by ``ActorRef.cancel`` or by a cancel scope above it.

    ``reason`` is the text given to ``cancel(reason)`` (or trio's description of the
    cancellation's source when none was given).
    """

    reason: str | None = None
    kind: ExitKind = "cancelled"

    def __str__(self) -> str:
        return f"cancelled: {self.reason}" if self.reason else "cancelled"


@dataclass(frozen=True, slots=True, eq=False)
class Crashed:
    """The actor's function raised ``exception``."""

    exception: BaseException
    kind: ExitKind = "crashed"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Crashed) and other.exception is self.exception

    def __hash__(self) -> int:
        return id(self.exception)

    def __str__(self) -> str:
        return f"crashed: {self.exception!r}"


@dataclass(frozen=True, slots=True)
class Shutdown:
    """The actor was asked to stop and exited.

    ``forced`` is true when it did not finish within its grace period and was cancelled.
    """

    forced: bool = False
    kind: ExitKind = "shutdown"

    def __str__(self) -> str:
        return "shutdown (forced after grace period)" if self.forced else "shutdown"


ExitReason: TypeAlias = Normal | Cancelled | Crashed | Shutdown
