"""The exceptions of :mod:`supervisors`.

Every exception this package raises on purpose derives from one root::

    SupervisorError
    ├── MailboxClosed            tell/ask to an actor that has exited or is stopping
    ├── MailboxFull              tell_nowait when the mailbox is at capacity
    ├── ActorExited              an ask whose actor exited before it replied
    ├── ReplyAlreadySent         a Reply resolved twice
    ├── DuplicateChild           spawn with a name that is already live
    ├── SupervisorClosed         spawn on a supervisor that is stopping or has exited
    ├── RestartIntensityExceeded a supervisor gave up; raised from its ``async with``
    └── InjectedFault            a fault of a ``supervisors.testing.Faults`` plan (tests only)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._exit import ExitReason


class SupervisorError(Exception):
    """Root of every error raised by :mod:`supervisors`."""


class MailboxClosed(SupervisorError):
    """The actor no longer accepts messages: it has exited or a stop was requested."""


class MailboxFull(SupervisorError):
    """``tell_nowait`` found the mailbox at capacity; use ``await tell(...)`` to wait."""


class ActorExited(SupervisorError):
    """An ``ask`` could not be answered because the actor exited first.

    ``reason`` is the actor's exit reason; for a crash the exception is also the
    ``__cause__``.
    """

    def __init__(self, message: str, reason: ExitReason) -> None:
        super().__init__(message)
        self.reason = reason


class ReplyAlreadySent(SupervisorError):
    """``Reply.send`` or ``Reply.fail`` was called on a reply that was already resolved."""


class DuplicateChild(SupervisorError):
    """A supervisor already has a live child with that name."""


class SupervisorClosed(SupervisorError):
    """The supervisor is shutting down, was cancelled, or gave up; it takes no new children."""


class RestartIntensityExceeded(SupervisorError):
    """A supervisor saw more restarts than its intensity allows within its period and gave up.

    It cancelled its remaining children and raised this from its ``async with``; the crash
    that tipped it over is the ``__cause__``.
    """

    def __init__(self, message: str, *, supervisor: str, child: str) -> None:
        super().__init__(message)
        self.supervisor = supervisor
        self.child = child
