"""Run admission as a pure state machine: which runs, activations and continuations start,
when, and in what order (``max_active_runs``, one run per thread, notifications).

``AgentRuntime`` (the trio shell) feeds :meth:`Admission.handle` an event whenever something
happens to a run or a thread, and carries out the commands it returns, in order and in the
same step: :class:`StartRun` (spawn the run's actor now, from the records the shell holds),
:class:`StartActivation` (start an activation task), :class:`StartContinuation` (start a
continuation task), :class:`WakeIdle` (wake the thread's ``wait_idle`` if it is idle now).
Everything admission decides lives here (h11's rule); nothing here awaits, reads a clock or
the store: the shell reads the store and says what it found (``ActivationEnded(
stored_active=...)``, ``ContinuationEnded(deferred=...)``). This module uses only the
standard library and ``pai_actors._core``. An event the shell should never send in the
table's state raises :class:`InvalidTransition` and leaves the table as it was.

States. A run the table knows is in one :class:`RunPhase`: ``QUEUED`` (an activation waits
for a slot, FIFO), ``ACTIVATING`` (an activation task is in flight: it holds a slot),
``LIVE`` (its actor runs: it holds a slot). ``cancel_run`` at a run with no actor is an
orthogonal region, not a phase: a queued or activating run may be cancelled at once, and
stays queued until the cancellation is recorded (``wait_idle`` waits for it), so the table
counts cancellations in flight per run id. A thread has ``live`` (the run its actor runs),
a :class:`Starter` (who is starting a run on it: a send or a continuation), a
:class:`Notice` (its notification, ``trigger``) and the number of its activations. A
thread's live run and its starter coexist (an activation may start a run while a send is
at the store), which is why they are fields and not one enum.

Invariants (``tests/pai_actors/test_admission.py`` checks them on random event sequences):
live + activating runs never exceed ``max_active_runs`` (a send's run is no exception: it
starts only in a free slot, else it is queued); queued runs start in the order they came,
and nothing is queued while a slot is free; no activation is taken for a run that is live,
activating, queued or being cancelled, and no run being cancelled is started; nothing
starts before ``Opened`` or after ``Closing`` (a run created while closing is left
unstarted, to park); a thread with a pending notice gets one continuation (never two at
once) as soon as it has no live run, starter or activation; an idle thread has no
activation and no continuation in flight (a send in flight does not count: ``wait_idle``
never did).

How ``runtime.py`` feeds it: ``__aenter__`` / ``__aexit__``: :class:`Opened`,
:class:`Closing` (then it parks :meth:`~Admission.unstarted`), :class:`Closed`; ``send``:
:class:`SendBegan` (only if :meth:`~Admission.can_send`), :class:`RunCreated` after its
commit, :class:`SendEnded`; a continuation task (``_continue``): :class:`RunCreated`,
:class:`ContinuationEnded`; an activation task (``_activate``): :class:`ActivationEnded`;
an accepted submission or a load (``_activate_run_soon``): :class:`ActivationRequested`;
the run actor's end (``Services.run_ended``): :class:`RunEnded`; ``cancel_run``:
:class:`CancelBegan`, and :class:`CancelEnded` for a run with no actor; ``trigger`` and a
load: :class:`NotificationAppended` / :class:`NotificationFound`. The services the actors
get (``closing``, ``notified``, ``passivated``, ``is_cancelling``) and ``wait_idle``
(:meth:`~Admission.idle`) are its queries; the shell's only state of its own is the
``LiveRun`` handle of each live run.

What it fixed over the hand-kept collections ``runtime.py`` had (``_sending``,
``_activating``, ``_queued``, ``_cancelling``, ``_continuations``, ...): a continuation
holds its thread from the moment it is scheduled (``send`` is refused then, as it is once
the task runs, and the thread's reservation has one owner); a pending notification is
answered whenever the thread becomes free (after a failed send, a declined or dropped
activation, a continuation that was told of a newer notification or raced a run's end),
not only at a run's end; two ``cancel_run`` at one run with no actor are counted, not one
flag that the first to end cleared; the starter's own load recovers an orphaned run
(``orphaned(by_starter=True)``); a run a continuation committed as the close began is
left unstarted, to park, not stored ``running``; a new run a ``cancel_run`` read before
its start goes through an activation; and the queue is FIFO in O(1) (popping the front of
a plain dict made draining it quadratic).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass
from typing import TypeAlias, assert_never

from .._core.errors import InvalidTransition


class _Enum(enum.Enum):
    def __repr__(self) -> str:  # constructor-like, so a failing example pastes into a test
        return f"{type(self).__name__}.{self.name}"


class Lifecycle(_Enum):
    """The runtime's: nothing starts before ``OPEN`` nor after it."""

    NEW = "new"  # not entered: activations are dropped, notifications wait
    OPEN = "open"
    CLOSING = "closing"  # began to close: nothing starts any more
    CLOSED = "closed"  # closed: the queue was dropped


class RunPhase(_Enum):
    """Where a run the table knows is (a run it does not know has no actor here)."""

    QUEUED = "queued"  # an activation waits for a slot of max_active_runs
    ACTIVATING = "activating"  # an activation task reads the run (holds a slot)
    LIVE = "live"  # its actor runs (holds a slot)


class Starter(_Enum):
    """Who is starting a run on a thread (one at a time)."""

    NONE = "none"
    SEND = "send"  # send() reserved the thread
    CONTINUATION = "continuation"  # a continuation task answers the thread's notification


class Notice(_Enum):
    """The thread's notification (``trigger``) and when it is answered."""

    NONE = "none"  # nothing to answer (beyond what a continuation in flight answers)
    PENDING = "pending"  # answer it once the thread is free
    AFTER_RUN = "after_run"  # a continuation found an active run: answer after a run ends
    STALE = "stale"  # a run ended while a continuation looked: if it defers, look again


# -- events -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Opened:
    """The runtime entered its ``async with`` (its nursery exists)."""


@dataclass(frozen=True, slots=True)
class SendBegan:
    """``send`` reserves the thread (only when :meth:`Admission.can_send`)."""

    thread_id: str


@dataclass(frozen=True, slots=True)
class SendEnded:
    """``send`` returned or raised (its ``finally``)."""

    thread_id: str


@dataclass(frozen=True, slots=True)
class RunCreated:
    """The send or continuation holding the thread committed a new run: start it, or queue
    it for a slot (or, when a ``cancel_run`` is at it already, take an activation, which
    reads it from the store first). In a closing runtime (the commit was in flight as the
    close began) it never starts: it is unstarted, for the shell to park (a send records its
    run cancelled instead, and tells its caller), until :class:`Closed`."""

    thread_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class RunEnded:
    """A run's actor ended. ``reactivate_from``: it passivated while a submission changed it,
    activate it again from the calls of this message (``None``: do not)."""

    run_id: str
    reactivate_from: str | None = None


@dataclass(frozen=True, slots=True)
class ActivationRequested:
    """Activate a run with no actor, from the calls of ``message_id`` (``None``: from its next
    model step). Ignored unless open, and for a run known here or being cancelled."""

    thread_id: str
    run_id: str
    message_id: str | None = None


@dataclass(frozen=True, slots=True)
class ActivationEnded:
    """An activation task read the run (``stored_active``: stored and active; ``False`` when
    it was not, the read failed, or the task was cancelled). It starts if it may."""

    run_id: str
    stored_active: bool


@dataclass(frozen=True, slots=True)
class CancelBegan:
    """``cancel_run`` began at the run: at its actor if it is live (no :class:`CancelEnded`
    follows: the actor's end does), else from the store (until :class:`CancelEnded`)."""

    run_id: str


@dataclass(frozen=True, slots=True)
class CancelEnded:
    """``cancel_run`` of a run with no actor ended (its ``finally``); ``thread_id`` is the
    stored run's, ``None`` if it was not read. A queued activation of the run is dropped."""

    run_id: str
    thread_id: str | None = None


@dataclass(frozen=True, slots=True)
class NotificationAppended:
    """``trigger`` stored a notification in the thread."""

    thread_id: str


@dataclass(frozen=True, slots=True)
class NotificationFound:
    """A load found the thread's last message an unanswered notification and no active run
    (ignored while a continuation answers: it is its own load, or it will look)."""

    thread_id: str


@dataclass(frozen=True, slots=True)
class ContinuationEnded:
    """A continuation task ended. ``deferred``: it found an active run (or the runtime
    closing) and left the notification to answer after that run."""

    thread_id: str
    deferred: bool


@dataclass(frozen=True, slots=True)
class Closing:
    """The runtime began to close: nothing starts any more."""


@dataclass(frozen=True, slots=True)
class Closed:
    """The runtime's tasks and actors are over: drop the queue (its ``wait_idle`` return)."""


Event: TypeAlias = (
    Opened
    | SendBegan
    | SendEnded
    | RunCreated
    | RunEnded
    | ActivationRequested
    | ActivationEnded
    | CancelBegan
    | CancelEnded
    | NotificationAppended
    | NotificationFound
    | ContinuationEnded
    | Closing
    | Closed
)

# -- commands -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartRun:
    """Spawn the run's actor now, in this step (it is ``LIVE`` from here)."""

    run_id: str


@dataclass(frozen=True, slots=True)
class StartActivation:
    """Start an activation task: read the run, then feed :class:`ActivationEnded`."""

    thread_id: str
    run_id: str
    message_id: str | None


@dataclass(frozen=True, slots=True)
class StartContinuation:
    """Start a continuation task (it ends with :class:`ContinuationEnded`)."""

    thread_id: str


@dataclass(frozen=True, slots=True)
class WakeIdle:
    """The thread may be idle now: wake its ``wait_idle`` if :meth:`Admission.idle`."""

    thread_id: str


Command: TypeAlias = StartRun | StartActivation | StartContinuation | WakeIdle

# -- views --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThreadView:
    """What the table holds of a thread (:meth:`Admission.thread_view`)."""

    live: str | None = None
    starter: Starter = Starter.NONE
    notice: Notice = Notice.NONE
    activations: int = 0


@dataclass(frozen=True, slots=True)
class AdmissionStatistics:
    """:meth:`Admission.statistics`: runs by phase, and the runs being cancelled."""

    lifecycle: Lifecycle
    max_active_runs: int | None
    live: int
    activating: int
    queued: int
    cancelling: int


@dataclass(slots=True)
class _Run:
    thread_id: str
    phase: RunPhase
    message_id: str | None = None  # where its activation resumes
    cancelling: bool = False  # (LIVE) cancel_run is at its actor


@dataclass(slots=True)
class _Thread:
    live: str | None = None
    starter: Starter = Starter.NONE
    notice: Notice = Notice.NONE
    activations: int = 0  # its QUEUED and ACTIVATING runs
    # runs unknown here that a cancel_run recorded while the starter held the thread: the
    # starter's own run among them, if the cancellation read it before the starter went on
    cancelled: set[str] | None = None

    def free(self) -> bool:
        """No live run, no starter, no activation: a continuation may start."""
        return self.live is None and self.starter is Starter.NONE and not self.activations


class Admission:
    """The admission table of one runtime (see the module docstring).

    Concurrency contract: not for concurrent use in the trio sense either: the shell calls
    it from the runtime's tasks between checkpoints, and carries out the commands of an
    event before its next checkpoint. Each event is O(1) plus the commands it returns.
    """

    __slots__ = (
        "_activating",
        "_cancelling",
        "_lifecycle",
        "_limit",
        "_live",
        "_queue",
        "_runs",
        "_threads",
    )

    def __init__(self, max_active_runs: int | None) -> None:
        if max_active_runs is not None and (
            isinstance(max_active_runs, bool)
            or not isinstance(max_active_runs, int)
            or max_active_runs < 1
        ):
            raise ValueError(
                f"max_active_runs must be an int >= 1 or None, not {max_active_runs!r}"
            )
        self._limit = max_active_runs
        self._lifecycle = Lifecycle.NEW
        self._runs: dict[str, _Run] = {}  # in the order their activations were requested
        self._threads: dict[str, _Thread] = {}  # only threads with something to hold
        self._queue: OrderedDict[str, None] = OrderedDict()  # QUEUED runs, FIFO
        self._cancelling: dict[str, int] = {}  # run -> cancel_run calls at it with no actor
        self._live = 0
        self._activating = 0

    def __repr__(self) -> str:
        return (
            f"<Admission max_active_runs={self._limit!r} {self._lifecycle!r} runs={self._runs!r} "
            f"threads={self._threads!r} queue={list(self._queue)!r} "
            f"cancelling={self._cancelling!r}>"
        )

    # -- queries ----------------------------------------------------------------------------

    @property
    def lifecycle(self) -> Lifecycle:
        return self._lifecycle

    @property
    def closing(self) -> bool:
        """Whether the runtime began to close."""
        return self._lifecycle in (Lifecycle.CLOSING, Lifecycle.CLOSED)

    def slot_free(self) -> bool:
        """Whether one more run may hold a slot of ``max_active_runs``."""
        return self._limit is None or self._live + self._activating < self._limit

    def run_phase(self, run_id: str) -> RunPhase | None:
        run = self._runs.get(run_id)
        return None if run is None else run.phase

    def live_run_of(self, thread_id: str) -> str | None:
        """The run whose actor runs the thread (the last one started), if any."""
        thread = self._threads.get(thread_id)
        return None if thread is None else thread.live

    def thread_view(self, thread_id: str) -> ThreadView:
        thread = self._threads.get(thread_id)
        if thread is None:
            return ThreadView()
        return ThreadView(thread.live, thread.starter, thread.notice, thread.activations)

    def can_send(self, thread_id: str) -> bool:
        """Whether ``send`` may reserve the thread: no live run, nobody starting one."""
        thread = self._threads.get(thread_id)
        return thread is None or (thread.live is None and thread.starter is Starter.NONE)

    def passivated(self, run_id: str) -> bool:
        """No actor runs it, none is starting or queued, no cancellation is at it."""
        return run_id not in self._runs and run_id not in self._cancelling

    def is_cancelling(self, run_id: str) -> bool:
        """Whether ``cancel_run`` is cancelling the run (alive or not)."""
        if run_id in self._cancelling:
            return True
        run = self._runs.get(run_id)
        return run is not None and run.cancelling

    def orphaned(self, run_id: str, thread_id: str, *, by_starter: bool = False) -> bool:
        """Whether no actor here runs the thread's active run ``run_id`` or is about to.

        A send or continuation holding the thread may be about to start the run it
        committed, so it counts, except with ``by_starter``: asked by that starter itself,
        before its commit, when the stored run cannot be its own."""
        if run_id in self._runs or run_id in self._cancelling:
            return False
        thread = self._threads.get(thread_id)
        return thread is None or (
            thread.live is None and (by_starter or thread.starter is Starter.NONE)
        )

    def continuing(self, thread_id: str) -> bool:
        """Whether a continuation holds the thread (it looks at the notification itself)."""
        thread = self._threads.get(thread_id)
        return thread is not None and thread.starter is Starter.CONTINUATION

    def idle(self, thread_id: str, *, live_run_quiet: bool) -> bool:
        """No activation or continuation of the thread is in flight, and it has no live run
        or ``live_run_quiet`` (its live run waits only on pending actions)."""
        thread = self._threads.get(thread_id)
        if thread is None:
            return True
        if thread.activations or thread.starter is Starter.CONTINUATION:
            return False
        return thread.live is None or live_run_quiet

    def notified(self, thread_id: str) -> bool:
        """Whether a notification of the thread waits to be answered."""
        thread = self._threads.get(thread_id)
        return thread is not None and thread.notice in (Notice.PENDING, Notice.AFTER_RUN)

    def queued(self) -> tuple[str, ...]:
        """The queued runs, first to start first."""
        return tuple(self._queue)

    def unstarted(self) -> tuple[str, ...]:
        """The runs an activation was taken for, or created while closing, that have not
        started (the shell parks them at close)."""
        return tuple(r for r, run in self._runs.items() if run.phase is not RunPhase.LIVE)

    def statistics(self) -> AdmissionStatistics:
        return AdmissionStatistics(
            self._lifecycle,
            self._limit,
            self._live,
            self._activating,
            len(self._queue),
            len(self._cancelling),
        )

    # -- events -----------------------------------------------------------------------------

    def handle(self, event: Event) -> tuple[Command, ...]:
        """Apply ``event``; return the commands to carry out, in order, in this step."""
        out: list[Command] = []
        match event:
            case Opened():
                self._opened(event, out)
            case SendBegan():
                self._send_began(event)
            case SendEnded():
                self._send_ended(event, out)
            case RunCreated():
                self._run_created(event, out)
            case RunEnded():
                self._run_ended(event, out)
            case ActivationRequested():
                self._request(event.thread_id, event.run_id, event.message_id, out)
            case ActivationEnded():
                self._activation_ended(event, out)
            case CancelBegan():
                self._cancel_began(event)
            case CancelEnded():
                self._cancel_ended(event, out)
            case NotificationAppended():
                self._notice(event.thread_id, out)
            case NotificationFound():
                thread = self._threads.get(event.thread_id)
                if thread is None or thread.starter is not Starter.CONTINUATION:
                    self._notice(event.thread_id, out)
            case ContinuationEnded():
                self._continuation_ended(event, out)
            case Closing():
                if not self.closing:
                    self._lifecycle = Lifecycle.CLOSING
            case Closed():
                self._closed(event, out)
            case _:
                assert_never(event)
        return tuple(out)

    def _opened(self, event: Opened, out: list[Command]) -> None:
        if self._lifecycle is not Lifecycle.NEW:
            raise InvalidTransition(
                f"{event!r} in a {self._lifecycle.value} runtime: it opens once"
            )
        self._lifecycle = Lifecycle.OPEN
        for thread_id in list(self._threads):  # notifications appended before it opened
            self._continue(thread_id, out)

    def _send_began(self, event: SendBegan) -> None:
        if not self.can_send(event.thread_id):
            raise InvalidTransition(
                f"{event!r}: the thread has a live run or a run starting; ask can_send() first"
            )
        self._thread(event.thread_id).starter = Starter.SEND

    def _send_ended(self, event: SendEnded, out: list[Command]) -> None:
        thread = self._threads.get(event.thread_id)
        if thread is None or thread.starter is not Starter.SEND:
            raise InvalidTransition(f"{event!r} without SendBegan")
        thread.starter = Starter.NONE
        thread.cancelled = None
        self._continue(event.thread_id, out)

    def _run_created(self, event: RunCreated, out: list[Command]) -> None:
        if self._lifecycle not in (Lifecycle.OPEN, Lifecycle.CLOSING):
            raise InvalidTransition(
                f"{event!r} in a {self._lifecycle.value} runtime: runs are created only in an "
                "open one (or one closing)"
            )
        thread = self._threads.get(event.thread_id)
        if thread is None or thread.starter is Starter.NONE:
            raise InvalidTransition(f"{event!r}: no send or continuation holds the thread")
        if event.run_id in self._runs:
            raise InvalidTransition(f"{event!r}: the run is {self._runs[event.run_id].phase!r}")
        if self._lifecycle is Lifecycle.CLOSING:
            # Committed as the close began: it never starts here, and stays unstarted (the
            # shell parks it) until Closed drops it, as a queued run does.
            thread.activations += 1
            self._runs[event.run_id] = _Run(event.thread_id, RunPhase.QUEUED)
            self._queue[event.run_id] = None
        elif (
            self.slot_free()
            and event.run_id not in self._cancelling
            and (thread.cancelled is None or event.run_id not in thread.cancelled)
        ):
            # A run the store says is over may still be live here (ending): this one
            # supersedes it as the thread's live run (runtime.py does the same).
            self._runs[event.run_id] = _Run(event.thread_id, RunPhase.LIVE)
            self._live += 1
            thread.live = event.run_id
            out.append(StartRun(event.run_id))
        else:
            # Past the limit, or a cancel_run is (or was) at it already (it read the new run
            # from the store before the committing task went on): an activation reads it
            # first, in the order it came, and starts it only if it is active and not being
            # cancelled.
            self._take(event.thread_id, event.run_id, None, out)

    def _run_ended(self, event: RunEnded, out: list[Command]) -> None:
        run = self._runs.get(event.run_id)
        if run is None or run.phase is not RunPhase.LIVE:
            raise InvalidTransition(f"{event!r}: the run is not live")
        del self._runs[event.run_id]
        self._live -= 1
        thread = self._thread(run.thread_id)
        if thread.live == event.run_id:
            thread.live = None
        self._admit(out)
        if event.reactivate_from is not None:
            self._request(run.thread_id, event.run_id, event.reactivate_from, out)
        _run_may_have_ended(thread)
        self._continue(run.thread_id, out)
        out.append(WakeIdle(run.thread_id))

    def _request(
        self, thread_id: str, run_id: str, message_id: str | None, out: list[Command]
    ) -> None:
        if (
            self._lifecycle is not Lifecycle.OPEN
            or run_id in self._runs
            or run_id in self._cancelling
        ):
            return
        self._take(thread_id, run_id, message_id, out)

    def _take(
        self, thread_id: str, run_id: str, message_id: str | None, out: list[Command]
    ) -> None:
        """Take an activation of ``run_id`` (open runtime, run not known here)."""
        self._thread(thread_id).activations += 1
        if self.slot_free():  # then nothing is queued (only a freed slot admits)
            self._runs[run_id] = _Run(thread_id, RunPhase.ACTIVATING, message_id)
            self._activating += 1
            out.append(StartActivation(thread_id, run_id, message_id))
        else:
            self._runs[run_id] = _Run(thread_id, RunPhase.QUEUED, message_id)
            self._queue[run_id] = None

    def _admit(self, out: list[Command]) -> None:
        """Start queued activations, first come first, while slots are free."""
        if self._lifecycle is not Lifecycle.OPEN:
            return
        while self._queue and self.slot_free():
            run_id, _ = self._queue.popitem(last=False)
            run = self._runs[run_id]
            run.phase = RunPhase.ACTIVATING
            self._activating += 1
            out.append(StartActivation(run.thread_id, run_id, run.message_id))

    def _activation_ended(self, event: ActivationEnded, out: list[Command]) -> None:
        run = self._runs.get(event.run_id)
        if run is None or run.phase is not RunPhase.ACTIVATING:
            raise InvalidTransition(f"{event!r}: no activation of the run is in flight")
        thread = self._thread(run.thread_id)
        thread.activations -= 1
        self._activating -= 1
        if (
            event.stored_active
            and self._lifecycle is Lifecycle.OPEN
            and event.run_id not in self._cancelling
            and thread.live is None
        ):
            run.phase = RunPhase.LIVE  # its slot passes from the activation to the actor
            self._live += 1
            thread.live = event.run_id
            out.append(StartRun(event.run_id))
        else:
            del self._runs[event.run_id]
            if not event.stored_active:
                _run_may_have_ended(thread)
        self._admit(out)
        self._continue(run.thread_id, out)
        out.append(WakeIdle(run.thread_id))

    def _cancel_began(self, event: CancelBegan) -> None:
        run = self._runs.get(event.run_id)
        if run is not None and run.phase is RunPhase.LIVE:
            run.cancelling = True  # until its actor ends
        else:
            self._cancelling[event.run_id] = self._cancelling.get(event.run_id, 0) + 1

    def _cancel_ended(self, event: CancelEnded, out: list[Command]) -> None:
        count = self._cancelling.get(event.run_id, 0)
        if not count:
            raise InvalidTransition(f"{event!r} without a CancelBegan at a run with no actor")
        if count == 1:
            del self._cancelling[event.run_id]
        else:
            self._cancelling[event.run_id] = count - 1
        threads: list[str] = []
        if event.thread_id is not None:
            thread = self._thread(event.thread_id)
            _run_may_have_ended(thread)
            if thread.starter is not Starter.NONE and event.run_id not in self._runs:
                if thread.cancelled is None:
                    thread.cancelled = set()
                thread.cancelled.add(event.run_id)  # (see RunCreated)
            threads.append(event.thread_id)
        if event.run_id in self._queue:  # recorded cancelled: it would not start anyway
            del self._queue[event.run_id]
            run = self._runs.pop(event.run_id)
            self._thread(run.thread_id).activations -= 1
            threads.append(run.thread_id)
        for thread_id in dict.fromkeys(threads):
            self._continue(thread_id, out)
        out.extend(WakeIdle(thread_id) for thread_id in dict.fromkeys(threads))

    def _notice(self, thread_id: str, out: list[Command]) -> None:
        self._thread(thread_id).notice = Notice.PENDING
        self._continue(thread_id, out)

    def _continuation_ended(self, event: ContinuationEnded, out: list[Command]) -> None:
        thread = self._threads.get(event.thread_id)
        if thread is None or thread.starter is not Starter.CONTINUATION:
            raise InvalidTransition(f"{event!r} without StartContinuation")
        thread.starter = Starter.NONE
        thread.cancelled = None
        if thread.notice is Notice.STALE:  # the run it found may be over: look again
            thread.notice = Notice.PENDING if event.deferred else Notice.NONE
        elif thread.notice is Notice.NONE and event.deferred:
            thread.notice = Notice.AFTER_RUN
        self._continue(event.thread_id, out)
        out.append(WakeIdle(event.thread_id))

    def _closed(self, event: Closed, out: list[Command]) -> None:
        if self._lifecycle is not Lifecycle.CLOSING:
            raise InvalidTransition(f"{event!r} in a {self._lifecycle.value} runtime")
        self._lifecycle = Lifecycle.CLOSED
        woken: dict[str, None] = {}
        while self._queue:  # never to start here: their wait_idle return
            run_id, _ = self._queue.popitem(last=False)
            thread_id = self._runs.pop(run_id).thread_id
            self._thread(thread_id).activations -= 1
            woken[thread_id] = None
        for thread_id in woken:
            self._tidy(thread_id)
        out.extend(WakeIdle(thread_id) for thread_id in woken)

    # -- threads ----------------------------------------------------------------------------

    def _thread(self, thread_id: str) -> _Thread:
        thread = self._threads.get(thread_id)
        if thread is None:
            thread = self._threads[thread_id] = _Thread()
        return thread

    def _continue(self, thread_id: str, out: list[Command]) -> None:
        """Start a continuation if the thread's notice is pending and it is free; then drop
        the thread's entry if it holds nothing (every event ends with this on its threads)."""
        thread = self._threads.get(thread_id)
        if thread is None:
            return
        if self._lifecycle is Lifecycle.OPEN and thread.notice is Notice.PENDING and thread.free():
            thread.starter = Starter.CONTINUATION
            thread.notice = Notice.NONE  # taken: a newer one makes it PENDING again
            out.append(StartContinuation(thread_id))
        self._tidy(thread_id)

    def _tidy(self, thread_id: str) -> None:
        thread = self._threads.get(thread_id)
        if thread is not None and thread.notice is Notice.NONE and thread.free():
            del self._threads[thread_id]


def _run_may_have_ended(thread: _Thread) -> None:
    """A run of the thread ended, or was found or recorded not active: a notice waiting for
    the end of a run goes on, and a continuation in flight may have looked too early."""
    if thread.notice is Notice.AFTER_RUN:
        thread.notice = Notice.PENDING
    elif thread.notice is Notice.NONE and thread.starter is Starter.CONTINUATION:
        thread.notice = Notice.STALE
