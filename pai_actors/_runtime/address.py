"""The call actor's protocol: its three messages (:class:`Start`, :class:`Resume`,
:class:`Abort`) and its address (:class:`CallAddress`).

A tool call's mailbox receives exactly three typed messages:

- :class:`Start`: run ``execute`` from the initial entry, with the parsed input;
- :class:`Resume`: re-enter ``execute`` after an accepted submission, carrying the accepted
  payload and the ref of its action; it is built from the stored call, so it is sent only
  once the submission is durable;
- :class:`Abort`: stop, with a reason.

``Start`` and ``Resume`` are queued. ``Abort`` is not queued behind them: like an Erlang exit
signal, it takes effect when it is sent. :meth:`CallAddress.tell` aborts the call's
``ctx.signal`` and cancels the actor's scope in the same synchronous step, aborts the call's
children the same way, and drops whatever the mailbox still holds (an actor cancelled before
it received its entry never runs ``execute``). Every way a call is cancelled (``cancel_run``,
the run failing, the runtime closing, the parent returning or being cancelled, a child's
``abort_signal``) sends an ``Abort`` to its address; nothing else aborts a call.

An address is stable across the actor's restarts (each incarnation registers its ref) and
outlives passivation through the run: a submission to a call that has no actor starts one
(its run, woken or activated, spawns it with the ``Resume``; see ``_runtime.run``), and an
``Abort`` to a call that has no actor records it cancelled without executing
(``_runtime.run.record_cancelled``).

A module of its own so that the live run, the call actor and the child calls can all name
the protocol without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from supervisors import ActorRef, MailboxClosed, MailboxFull

from .._core.actions import PendingActionRef
from .._tools.signal import AbortController


@dataclass(frozen=True, slots=True)
class Start:
    """Run ``execute`` from ``InitialEntry()`` with ``input``, the parsed tool input (it was
    validated when the model step was stored)."""

    input: Any


@dataclass(frozen=True, slots=True)
class Resume:
    """Re-enter ``execute`` from the accepted action ``action``.

    ``payload`` is the accepted payload as stored (JSON the action's schema validated): a
    suspension's resume value, which the actor parses by the resume schema into
    ``ResumeEntry(name, resume, action)``; an approval's ``{"approved", "reason"}``, after
    which the call's first execution enters with ``InitialEntry()``; ``None`` for an
    interrupted call whose registration runs it again (``action.action_id`` is then the
    ``tool_call_id``).
    """

    action: PendingActionRef
    payload: Any


@dataclass(frozen=True, slots=True)
class Abort:
    """Stop the call: abort ``ctx.signal`` with ``reason`` and cancel its scope, at once."""

    reason: str | None


Entry: TypeAlias = Start | Resume
CallMessage: TypeAlias = Start | Resume | Abort


class CallAddress:
    """The address of one tool call (a model's call, or a child through ``ctx.tools``).

    ``key`` is the call's id; ``controller`` aborts its ``ctx.signal``; ``ref`` is the live
    incarnation of its actor (``None`` before the first starts); ``children`` are the
    addresses of the child calls running under it; ``aborted`` is the :class:`Abort` it
    received, if any; ``restarts`` counts the actor's restarts after a failure that was not
    the tool's, and ``failure`` is the last such failure.

    Concurrency contract: used from tasks of one trio run; :meth:`tell` is synchronous, and
    an ``Abort`` takes full effect (signal, scope, children) before it returns. The first
    ``Abort`` wins; later messages are dropped.
    """

    __slots__ = ("aborted", "children", "controller", "failure", "key", "ref", "restarts")

    def __init__(self, key: str) -> None:
        self.key = key
        self.controller = AbortController()
        self.ref: ActorRef[Entry] | None = None
        self.children: set[CallAddress] = set()
        self.aborted: Abort | None = None
        self.restarts = 0
        self.failure: Exception | None = None

    def __repr__(self) -> str:
        return f"<CallAddress {self.key!r} aborted={self.aborted!r} restarts={self.restarts}>"

    def tell(self, message: CallMessage) -> None:
        """Deliver ``message``: queue an entry, or carry out an abort (see the module
        docstring). An entry sent after an abort, or to an actor that is over, is dropped."""
        if isinstance(message, Abort):
            self._abort(message)
            return
        if self.aborted is not None or self.ref is None:
            return
        try:
            self.ref.tell_nowait(message)
        except (MailboxClosed, MailboxFull):  # over, or it holds its entry already
            pass

    def abort_enclosed(self, message: Abort) -> None:
        """Carry out ``message`` for a call whose scope the caller cancels from outside in
        this same step (a whole run at once: ``LiveRun.abort_calls``): its signal and its
        children's are aborted here, and their scopes fall with the enclosing one, so that
        the run pays one cancellation, not one per call."""
        self._abort(message, own_scope=False)

    def _abort(self, message: Abort, *, own_scope: bool = True) -> None:
        if self.aborted is not None:
            return
        self.aborted = message
        self.controller.abort(message.reason)  # the signal and the scope, in one step
        if own_scope and self.ref is not None:
            self.ref.cancel(message.reason)
        for child in list(self.children):
            child._abort(message, own_scope=own_scope)
