"""A live run: the in-memory handle of a run whose actor is alive (:class:`LiveRun`), and the
message its actor's mailbox receives (:class:`CallChanged`).

A module of its own so that the run actor, its collaborators (the model step's I/O, child
calls, sub-agents) and the services record can all name it without importing each other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from supervisors import MailboxClosed, MailboxFull, Supervisor

from .._core.call_record import CallRecord
from .._core.client_tool import ClientTool
from .._core.model import Model
from .._core.records import RunRecord, StoredCall, ThreadRecord
from .._tools.agent import AgentDefinition
from .address import Abort, CallAddress


@dataclass(frozen=True, slots=True)
class CallChanged:
    """A call of the run finished, suspended, or had an action resolved."""


RunMessage = CallChanged


class RunActorPhase(enum.Enum):
    """Where a live run's actor is in its loop (``LiveRun.phase``)."""

    STARTING = "starting"  # spawned, resolving its context, not yet stepping or looking
    STEPPING = "stepping"  # in a model step: from preparing the tools to storing its calls
    LOOKING = "looking"  # reading its calls, spawning resumes, writing its status
    LISTENING = "listening"  # waiting for its next message (the only phase not busy)
    PASSIVATED = "passivated"  # it ended waiting only on pending actions (no actor soon)

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


@dataclass(eq=False, slots=True)
class LiveRun:
    """A run whose actor is alive: the runtime's in-memory handle on it.

    ``status``, ``active_calls``, ``changed`` and ``busy`` are what ``wait_idle`` looks at;
    they change only synchronously, so a reader never sees a half-made change. ``changed`` is
    set by a submission and cleared when the run actor re-reads its calls. ``phase`` is where
    the run's actor is (:class:`RunActorPhase`; only the run actor sets it): ``busy`` unless
    it waits for a message, ``stepping`` in a model step, ``passivated`` once it ended
    waiting only on pending actions. ``cancel_reason`` is the reason ``cancel_run`` gave
    (whether it is cancelling the run is admission's to say: ``Services.is_cancelling``).
    ``agent_id``, ``agent`` and
    ``model`` are the thread's agent (its registry id and definition) and its model.
    ``addresses`` holds the address of every call that has a live call actor, by tool call
    id (``active_calls`` counts them). ``resumes_started``
    holds the action ids whose accepted submission's resume began the tool's ``execute`` in
    this activation: when the runtime closes, only those submissions are recorded cancelled;
    the others stay stored intent, resumed when a later runtime loads the thread.
    ``step_message_id``, ``step_index``, ``step_text`` and ``step_reasoning`` describe the
    model step in progress (``None`` and empty between steps).
    """

    thread: ThreadRecord
    run: RunRecord
    agent_id: str
    agent: AgentDefinition
    model: Model
    identity: Any = None
    client_data: Any = None
    client_tools: tuple[ClientTool, ...] = ()
    resume_message_id: str | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    status: Literal["running", "waiting"] = "running"
    changed: bool = False
    phase: RunActorPhase = RunActorPhase.STARTING
    waiting_message_id: str | None = None
    addresses: dict[str, CallAddress] = field(default_factory=dict)
    resumes_started: set[str] = field(default_factory=set)
    handoff: tuple[StoredCall, CallRecord] | None = None
    cancel_reason: str | None = None
    runtime_context: Any = None
    context_resolved: bool = False
    ref: Any = None  # ActorRef[RunMessage], set right after spawn
    calls: Supervisor | None = None
    ended: bool = False  # its actor's last word was said (``end()``)
    done: trio.Event | None = None  # made by the first ``wait_ended()``
    # The model step in progress: the id of its turn's assistant message, its index in that
    # message, and the text and reasoning streamed so far (what a watch that starts mid-step
    # receives first).
    step_message_id: str | None = None
    step_index: int = 0
    step_text: list[str] = field(default_factory=list)
    step_reasoning: list[str] = field(default_factory=list)
    # What caused this activation, for its trace (a span context, or None): the calling
    # call's entry, for a sub-run's first activation.
    trace_link: Any = None

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def thread_id(self) -> str:
        return self.thread.thread_id

    @property
    def busy(self) -> bool:
        """Whether the run's actor is doing anything but waiting for its next message."""
        return self.phase is not RunActorPhase.LISTENING

    @property
    def stepping(self) -> bool:
        """Whether the run is in a model step."""
        return self.phase is RunActorPhase.STEPPING

    @property
    def passivated(self) -> bool:
        """Whether the run's actor ended waiting only on pending actions."""
        return self.phase is RunActorPhase.PASSIVATED

    @property
    def active_calls(self) -> int:
        """How many calls of the run have a live actor."""
        return len(self.addresses)

    def abort_calls(self, reason: str | None) -> None:
        """Send every live call of the run (and their children) an :class:`Abort` with
        ``reason``, as part of cancelling a scope that holds them all: the caller cancels it
        in this same step (the run's scope, the runtime's root, or the ``calls`` supervisor
        that gave up), so each call's signal and scope fall at the same moment."""
        abort = Abort(reason)
        for address in list(self.addresses.values()):
            address.abort_enclosed(abort)

    def end(self) -> None:
        """The run's actor said its last word: wake every ``wait_ended()``."""
        self.ended = True
        if self.done is not None:
            self.done.set()

    async def wait_ended(self) -> None:
        """Return once the run's actor ended (:meth:`end`)."""
        if self.ended:
            await trio.lowlevel.checkpoint()
            return
        if self.done is None:  # (made here: most runs end with nobody waiting)
            self.done = trio.Event()
        await self.done.wait()

    def wake(self) -> None:
        try:
            self.ref.tell_nowait(CallChanged())
        except (MailboxClosed, MailboxFull):  # closed: the run is ending; full: it will look
            pass
