"""Generic actors and supervision trees on trio.

An actor is an async function that receives a typed, bounded :class:`Mailbox`; it is
addressed through an :class:`ActorRef`. A :class:`Supervisor` (from :func:`open_supervisor`)
owns a nursery of actors, restarts them by strategy and restart policy, and gives up by
raising :class:`RestartIntensityExceeded` when they fail too often. Every actor ends with
exactly one exit reason: :class:`Normal`, :class:`Cancelled`, :class:`Crashed` or
:class:`Shutdown`.

This package depends only on trio (and ``immutables`` for the decision core's state). It
never imports ``pai_actors``.
"""

from ._decide import ChildState as ChildState
from ._decide import Restart as Restart
from ._decide import Strategy as Strategy
from ._decide import SupervisorConfig as SupervisorConfig
from ._decide import SupervisorState as SupervisorState
from ._decide import decide as decide
from ._exceptions import ActorExited as ActorExited
from ._exceptions import DuplicateChild as DuplicateChild
from ._exceptions import MailboxClosed as MailboxClosed
from ._exceptions import MailboxFull as MailboxFull
from ._exceptions import ReplyAlreadySent as ReplyAlreadySent
from ._exceptions import RestartIntensityExceeded as RestartIntensityExceeded
from ._exceptions import SupervisorClosed as SupervisorClosed
from ._exceptions import SupervisorError as SupervisorError
from ._exit import Cancelled as Cancelled
from ._exit import Crashed as Crashed
from ._exit import ExitKind as ExitKind
from ._exit import ExitReason as ExitReason
from ._exit import Normal as Normal
from ._exit import Shutdown as Shutdown
from ._mailbox import ExitNotice as ExitNotice
from ._mailbox import Mailbox as Mailbox
from ._mailbox import Monitor as Monitor
from ._mailbox_statistics import MailboxStatistics as MailboxStatistics
from ._node import ActorInfo as ActorInfo
from ._node import ActorSnapshot as ActorSnapshot
from ._node import ExitRecord as ExitRecord
from ._node import TreeSnapshot as TreeSnapshot
from ._node import format_tree as format_tree
from ._ref import ActorRef as ActorRef
from ._ref import Reply as Reply
from ._supervisor import Supervisor as Supervisor
from ._supervisor import open_supervisor as open_supervisor

__all__ = [
    "ActorExited",
    "ActorInfo",
    "ActorRef",
    "ActorSnapshot",
    "Cancelled",
    "ChildState",
    "Crashed",
    "DuplicateChild",
    "ExitKind",
    "ExitNotice",
    "ExitReason",
    "ExitRecord",
    "Mailbox",
    "MailboxClosed",
    "MailboxFull",
    "MailboxStatistics",
    "Monitor",
    "Normal",
    "Reply",
    "ReplyAlreadySent",
    "Restart",
    "RestartIntensityExceeded",
    "Shutdown",
    "Strategy",
    "Supervisor",
    "SupervisorClosed",
    "SupervisorConfig",
    "SupervisorError",
    "SupervisorState",
    "TreeSnapshot",
    "decide",
    "format_tree",
    "open_supervisor",
]


def _fix_module_names() -> None:
    # Tracebacks and reprs read ``supervisors.ActorRef``, not ``supervisors._ref.ActorRef``.
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith(f"{__name__}._"):
            try:
                obj.__module__ = __name__
            except (AttributeError, TypeError):  # type aliases and builtins refuse it
                pass


_fix_module_names()
del _fix_module_names
