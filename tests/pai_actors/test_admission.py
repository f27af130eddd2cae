"""Tests for the pure run-admission core, ``pai_actors._runtime.admission``.

``AdmissionMachine`` is a Hypothesis state machine that plays the trio shell and the store
around ``Admission``: it keeps the runs the commands started, the tasks in flight, a store
holding at most one active run per thread, and feeds the events the shell would (sends,
activations that read the store, runs that end or passivate, ``cancel_run``, notifications
and continuations that read the store and later act on what they read, the close). Every
command is checked as it comes, and the invariants the race tests of the runtime guarded by
hand (``test_runtime_races.py``, ``test_runtime_cancel_run_races.py``,
``test_runtime_admission.py``: each names the rule or invariant here that covers it) are
checked after every step. A continuation's commit and its end are two steps, so the close or
a ``cancel_run`` of the committed run can come between them. The example tests below pin
one behaviour each.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pai_actors._core.errors import InvalidTransition
from pai_actors._runtime import admission
from pai_actors._runtime.admission import (
    ActivationEnded,
    ActivationRequested,
    Admission,
    AdmissionStatistics,
    CancelBegan,
    CancelEnded,
    Closed,
    Closing,
    Command,
    ContinuationEnded,
    Event,
    Lifecycle,
    Notice,
    NotificationAppended,
    NotificationFound,
    Opened,
    RunCreated,
    RunEnded,
    RunPhase,
    SendBegan,
    SendEnded,
    StartActivation,
    StartContinuation,
    Starter,
    StartRun,
    ThreadView,
    WakeIdle,
)

THREADS = ("t1", "t2")
STEP_COUNT = 120


class AdmissionMachine(RuleBasedStateMachine):
    """The shell and the store around an ``Admission`` (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.limit: int | None = 2
        self.table = Admission(self.limit)
        self.lifecycle = Lifecycle.NEW
        # the store: every run made (-> its thread), and those it holds active
        self.thread_of: dict[str, str] = {}
        self.active: set[str] = set()
        self.made = 0
        # the shell, as the commands left it
        self.live: dict[str, str] = {}  # run -> thread (StartRun)
        self.pointer: dict[str, str] = {}  # thread -> the run StartRun started last on it
        self.activating: dict[str, str] = {}  # run -> thread (StartActivation)
        self.queue: list[str] = []  # accepted activations not started, in order
        self.requests: dict[str, tuple[str, str | None]] = {}  # run -> (thread, message)
        self.sending: dict[str, bool] = {}  # thread -> whether its send committed
        self.continuing: dict[str, bool | None] = {}  # thread -> saw an active run? (None: yet)
        self.committed: dict[str, str] = {}  # thread -> the run its continuation committed
        # thread -> runs a cancel_run ended at (knowing the thread) while a starter held it
        self.cancelled_while_starting: dict[str, set[str]] = {}
        self.cancels: dict[str, int] = {}  # run -> cancel_run calls at it with no actor
        self.cancelled_live: set[str] = set()  # live runs cancel_run is cancelling
        self.recorded: set[str] = set()  # runs a cancel_run in flight recorded cancelled
        self.notice: dict[str, Notice] = {}  # thread -> its notice, by the docstring's rules
        self.steps = 0
        self.close_after = 0
        """Closing ends the interesting part; keep it off for this many events."""

    # -- plumbing ---------------------------------------------------------------------------

    def new_run(self, thread_id: str, *, active: bool) -> str:
        self.made += 1
        run_id = f"r{self.made}"
        self.thread_of[run_id] = thread_id
        if active:
            assert self.stored_active(thread_id) is None, "the store holds one active run"
            self.active.add(run_id)
        return run_id

    def stored_active(self, thread_id: str) -> str | None:
        return next((r for r in self.active if self.thread_of[r] == thread_id), None)

    def runs_of(self, thread_id: str) -> list[str]:
        return [r for r, t in self.thread_of.items() if t == thread_id]

    def accepts(self, run_id: str) -> bool:
        """Whether an activation request for ``run_id`` must be taken."""
        return (
            self.lifecycle is Lifecycle.OPEN
            and run_id not in self.live
            and run_id not in self.activating
            and run_id not in self.queue
            and not self.cancels.get(run_id)
        )

    def slot_free(self) -> bool:
        return self.limit is None or len(self.live) + len(self.activating) < self.limit

    def activations_of(self, thread_id: str) -> int:
        return sum(1 for r in [*self.activating, *self.queue] if self.thread_of[r] == thread_id)

    def refused(self, event: Event) -> None:
        before = repr(self.table)
        with pytest.raises(InvalidTransition):
            self.table.handle(event)
        assert repr(self.table) == before, f"a refused {event!r} changed the table"

    def feed(
        self, event: Event, request: tuple[str, str, str | None] | None = None
    ) -> tuple[Command, ...]:
        """Feed ``event`` and carry its commands out as the shell would, checking each.

        ``request`` is ``(thread, run, message)`` of an activation the event asks for that
        must be taken: it starts at once only with nothing queued, else it is queued last.
        """
        self.steps += 1
        if request is not None:
            self.requests[request[1]] = (request[0], request[2])
        self.expect_notice(event)
        commands = self.table.handle(event)
        # A started run is registered before anything looks at its thread (WakeIdle).
        starts = [i for i, c in enumerate(commands) if isinstance(c, StartRun)]
        assert starts in ([], [0]), commands
        for command in commands:
            if isinstance(command, StartRun):
                self.started(event, command)
            elif isinstance(command, StartActivation):
                assert self.lifecycle is Lifecycle.OPEN, f"{command!r} in {self.lifecycle!r}"
                run_id = command.run_id
                assert run_id not in self.live, command
                assert run_id not in self.activating, command
                if run_id in self.queue:  # (it may be being cancelled, as in runtime.py)
                    assert self.queue[0] == run_id, f"{command!r} before {self.queue[0]!r}"
                    self.queue.pop(0)
                else:
                    assert request is not None, command
                    assert run_id == request[1], command
                    assert not self.queue, f"{command!r} jumped the queue {self.queue!r}"
                    if not isinstance(event, RunCreated):  # (a new run a cancel_run is at
                        # goes through an activation, which declines it while cancelling)
                        assert not self.cancels.get(run_id), f"{command!r} of a cancelled run"
                thread_id, message_id = self.requests.pop(run_id)
                assert command == StartActivation(thread_id, run_id, message_id)
                self.activating[run_id] = thread_id
            elif isinstance(command, StartContinuation):
                thread_id = command.thread_id
                assert self.lifecycle is Lifecycle.OPEN, f"{command!r} in {self.lifecycle!r}"
                assert thread_id not in self.continuing, f"a second {command!r}"
                assert thread_id not in self.sending, f"{command!r} during a send"
                assert thread_id not in self.pointer, f"{command!r} with a live run"
                assert not self.activations_of(thread_id), f"{command!r} with an activation"
                self.continuing[thread_id] = None
                self.notice[thread_id] = Notice.NONE  # taken
            else:
                assert isinstance(command, WakeIdle)
        if request is not None:
            run_id = request[1]
            if run_id not in self.activating and run_id not in self.live:
                self.queue.append(run_id)
        for thread_id in THREADS:
            expected = self.notice.get(thread_id, Notice.NONE)
            assert self.table.thread_view(thread_id).notice is expected, (event, thread_id)
        return commands

    def expect_notice(self, event: Event) -> None:
        """The notices after ``event`` (before its commands), from the module docstring."""
        notice = self.notice

        def run_may_have_ended(thread_id: str) -> None:
            if notice.get(thread_id) is Notice.AFTER_RUN:
                notice[thread_id] = Notice.PENDING
            elif notice.get(thread_id, Notice.NONE) is Notice.NONE and (
                thread_id in self.continuing
            ):
                notice[thread_id] = Notice.STALE

        if isinstance(event, NotificationAppended) or (
            isinstance(event, NotificationFound) and event.thread_id not in self.continuing
        ):
            notice[event.thread_id] = Notice.PENDING
        elif isinstance(event, RunEnded) or (
            isinstance(event, ActivationEnded) and not event.stored_active
        ):
            run_may_have_ended(self.thread_of[event.run_id])
        elif isinstance(event, CancelEnded) and event.thread_id is not None:
            run_may_have_ended(event.thread_id)
        elif isinstance(event, ContinuationEnded):
            before = notice.get(event.thread_id, Notice.NONE)
            if before is Notice.STALE:
                notice[event.thread_id] = Notice.PENDING if event.deferred else Notice.NONE
            elif before is Notice.NONE and event.deferred:
                notice[event.thread_id] = Notice.AFTER_RUN

    def started(self, event: Event, command: StartRun) -> None:
        run_id = command.run_id
        thread_id = self.thread_of[run_id]
        assert self.lifecycle is Lifecycle.OPEN, f"{command!r} in {self.lifecycle!r}"
        assert run_id not in self.live, command
        assert run_id not in self.activating, command
        assert run_id in self.active, f"{command!r} of a run the store holds over"
        assert not self.cancels.get(run_id), f"{command!r} of a run being cancelled"
        if isinstance(event, RunCreated):
            assert not self.queue, f"{command!r} jumped the queue {self.queue!r}"
        else:
            assert isinstance(event, ActivationEnded), f"{command!r} from {event!r}"
            assert thread_id not in self.pointer, f"{command!r} over a live run"
        self.live[run_id] = thread_id
        self.pointer[thread_id] = run_id

    # -- rules: the runtime -----------------------------------------------------------------

    @initialize(
        limit=st.none() | st.integers(1, 3),
        open_now=st.sampled_from([True] * 3 + [False]),
        close_after=st.integers(0, STEP_COUNT),
    )
    def configure(self, limit: int | None, open_now: bool, close_after: int) -> None:
        self.limit = limit
        self.table = Admission(limit)
        self.close_after = close_after
        if open_now:
            self.open()

    @precondition(lambda self: self.lifecycle is Lifecycle.NEW)
    @rule()
    def open(self) -> None:
        self.lifecycle = Lifecycle.OPEN
        self.feed(Opened())

    @precondition(
        lambda self: (
            self.lifecycle in (Lifecycle.NEW, Lifecycle.OPEN)
            # (or while a continuation's commit is in flight: the close may come right then)
            and (self.steps >= self.close_after or bool(self.committed))
        )
    )
    @rule()
    def closing(self) -> None:
        self.lifecycle = Lifecycle.CLOSING
        assert self.feed(Closing()) == ()
        assert self.table.closing

    @precondition(
        lambda self: (
            self.lifecycle is Lifecycle.CLOSING
            and not self.live
            and not self.activating
            and not self.continuing
        )
    )
    @rule()
    def closed(self) -> None:  # the nursery and the root supervisor have exited
        woken = dict.fromkeys(self.thread_of[r] for r in self.queue)
        unstarted = self.table.unstarted()
        assert set(unstarted) == set(self.queue)
        self.lifecycle = Lifecycle.CLOSED
        assert self.feed(Closed()) == tuple(WakeIdle(t) for t in woken)
        self.queue.clear()
        self.requests.clear()

    # -- rules: send ------------------------------------------------------------------------

    @precondition(lambda self: self.lifecycle in (Lifecycle.NEW, Lifecycle.OPEN))
    @rule(thread_id=st.sampled_from(THREADS))
    def send_begins(self, thread_id: str) -> None:
        free = not (
            thread_id in self.sending or thread_id in self.continuing or thread_id in self.pointer
        )
        assert self.table.can_send(thread_id) == free
        if not free:  # ThreadBusy
            self.refused(SendBegan(thread_id))
            return
        assert self.feed(SendBegan(thread_id)) == ()
        self.sending[thread_id] = False

    @precondition(lambda self: any(not done for done in self.sending.values()))
    @rule(data=st.data())
    def send_commits(self, data: st.DataObject) -> None:
        thread_id = data.draw(st.sampled_from(sorted(t for t, d in self.sending.items() if not d)))
        self.sending[thread_id] = True
        if self.stored_active(thread_id) is not None:
            return  # the store refuses the run: ThreadBusy
        run_id = self.new_run(thread_id, active=True)
        if self.table.closing:  # closed while it was written: recorded cancelled, not started
            self.active.discard(run_id)
            return
        if self.lifecycle is Lifecycle.NEW:  # send() outside `async with`
            self.refused(RunCreated(thread_id, run_id))
            return
        free = self.slot_free()
        commands = self.feed(
            RunCreated(thread_id, run_id), None if free else (thread_id, run_id, None)
        )
        assert commands == ((StartRun(run_id),) if free else ()), commands

    @precondition(lambda self: self.sending)
    @rule(data=st.data())
    def send_ends(self, data: st.DataObject) -> None:
        """The send returns, or raises (``ThreadBusy``, or a failure before its commit)."""
        thread_id = data.draw(st.sampled_from(sorted(self.sending)))
        del self.sending[thread_id]
        self.cancelled_while_starting.pop(thread_id, None)
        pending = self.notice.get(thread_id) is Notice.PENDING
        commands = self.feed(SendEnded(thread_id))
        free = thread_id not in self.pointer and not self.activations_of(thread_id)
        if pending and free and self.lifecycle is Lifecycle.OPEN:
            # A notification that waited on the send is answered now, whether or not the
            # send committed a run (no run's end would come to answer it otherwise).
            assert StartContinuation(thread_id) in commands, commands

    # -- rules: activations and runs --------------------------------------------------------

    @rule(
        thread_id=st.sampled_from(THREADS),
        data=st.data(),
        message_id=st.sampled_from([None, "m1", "m2"]),
    )
    def request_activation(
        self, thread_id: str, data: st.DataObject, message_id: str | None
    ) -> None:
        # Mostly the thread's active run (a submission to it was accepted); else an older
        # one (its stored run is over), or one a closed runtime left.
        stored = self.stored_active(thread_id)
        # (not the run a continuation committed: it is not orphaned, nothing activates it)
        committed = self.committed.get(thread_id)
        active = None if stored == committed else stored
        known = [r for r in self.runs_of(thread_id) if r not in (stored, committed)]
        choices = [active, *known, "new"] if active is not None else [*known, "new"]
        run_id = data.draw(st.sampled_from(choices), label="run")
        if run_id == "new":  # a run a closed runtime (or a stopped process) left
            run_id = self.new_run(thread_id, active=stored is None)
        accepted = self.accepts(run_id)
        queue = list(self.queue)
        commands = self.feed(
            ActivationRequested(thread_id, run_id, message_id),
            (thread_id, run_id, message_id) if accepted else None,
        )
        if not accepted:
            assert commands == ()
            assert self.queue == queue

    @precondition(lambda self: self.activating)
    @rule(data=st.data(), failed=st.sampled_from([False, False, False, True]))
    def activation_ends(self, data: st.DataObject, failed: bool) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.activating)), label="run")
        thread_id = self.activating.pop(run_id)
        stored_active = run_id in self.active and not failed
        starts = (
            stored_active
            and self.lifecycle is Lifecycle.OPEN
            and not self.cancels.get(run_id)
            and thread_id not in self.pointer
        )
        commands = self.feed(ActivationEnded(run_id, stored_active))
        assert (StartRun(run_id) in commands) == starts, commands
        assert commands[-1] == WakeIdle(thread_id)

    @precondition(lambda self: any(r in self.active for r in self.live))
    @rule(data=st.data())
    def run_recorded_over(self, data: st.DataObject) -> None:  # completed, cancelled, failed
        run_id = data.draw(st.sampled_from(sorted(r for r in self.live if r in self.active)))
        self.active.discard(run_id)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), changed=st.booleans())
    def run_ends(self, data: st.DataObject, changed: bool) -> None:
        """Its actor ends: completed, cancelled, failed, or passivated (``changed``: a
        submission arrived while it passivated)."""
        run_id = data.draw(st.sampled_from(sorted(self.live)), label="run")
        thread_id = self.live.pop(run_id)
        if self.pointer.get(thread_id) == run_id:
            del self.pointer[thread_id]
        self.cancelled_live.discard(run_id)
        reactivate = "m-wait" if changed else None
        request = (thread_id, run_id, reactivate) if changed and self.accepts(run_id) else None
        commands = self.feed(RunEnded(run_id, reactivate), request)
        assert commands[-1] == WakeIdle(thread_id)

    # -- rules: cancel_run ------------------------------------------------------------------

    @precondition(lambda self: self.thread_of and not self.table.closing)
    @rule(data=st.data())
    def cancel_begins(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.thread_of)), label="run")
        self.cancel(run_id)

    @precondition(lambda self: self.committed and not self.table.closing)
    @rule(data=st.data())
    def cancel_a_committed_run(self, data: st.DataObject) -> None:
        """``cancel_run`` of the run a continuation committed, read from the store before
        the continuation's task went on (its id is in ``get_state`` already)."""
        self.cancel(data.draw(st.sampled_from(sorted(self.committed.values())), label="run"))

    def cancel(self, run_id: str) -> None:
        if run_id in self.live:
            self.cancelled_live.add(run_id)
        else:
            self.cancels[run_id] = self.cancels.get(run_id, 0) + 1
        assert self.feed(CancelBegan(run_id)) == ()
        assert self.table.is_cancelling(run_id)

    @precondition(lambda self: any(r in self.active for r in self.cancels))
    @rule(data=st.data())
    def cancel_records(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(r for r in self.cancels if r in self.active)))
        assert run_id not in self.live
        self.active.discard(run_id)
        self.recorded.add(run_id)

    @precondition(lambda self: self.cancels)
    @rule(data=st.data(), read=st.booleans())
    def cancel_ends(self, data: st.DataObject, read: bool) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.cancels)), label="run")
        self.cancels[run_id] -= 1
        if not self.cancels[run_id]:
            del self.cancels[run_id]
        queued = run_id in self.queue
        if queued:
            self.queue.remove(run_id)
            self.requests.pop(run_id)
        recorded = run_id in self.recorded  # (then it read the run: it knows the thread)
        if not self.cancels.get(run_id):
            self.recorded.discard(run_id)
        thread_id = self.thread_of[run_id] if read or recorded else None
        unknown = not queued and run_id not in self.live and run_id not in self.activating
        if thread_id is not None and unknown:
            if thread_id in self.sending or thread_id in self.continuing:
                self.cancelled_while_starting.setdefault(thread_id, set()).add(run_id)
        commands = self.feed(CancelEnded(run_id, thread_id))
        if queued:
            assert WakeIdle(self.thread_of[run_id]) in commands
        assert self.table.run_phase(run_id) is not RunPhase.QUEUED
        if self.cancels.get(run_id):  # another cancel_run is at it still: one's end is not all
            assert self.table.is_cancelling(run_id)
            assert not self.table.passivated(run_id)

    # -- rules: notifications ---------------------------------------------------------------

    @precondition(lambda self: self.lifecycle in (Lifecycle.NEW, Lifecycle.OPEN))
    @rule(thread_id=st.sampled_from(THREADS))
    def trigger(self, thread_id: str) -> None:
        commands = self.feed(NotificationAppended(thread_id))
        if StartContinuation(thread_id) not in commands:
            assert self.table.thread_view(thread_id).notice is Notice.PENDING

    @rule(thread_id=st.sampled_from(THREADS))
    def load_finds_a_notification(self, thread_id: str) -> None:
        if self.stored_active(thread_id) is None:  # else a load does not look
            continuing = thread_id in self.continuing
            commands = self.feed(NotificationFound(thread_id))
            if not continuing and StartContinuation(thread_id) not in commands:
                assert self.table.thread_view(thread_id).notice is Notice.PENDING

    @precondition(lambda self: any(saw is None for saw in self.continuing.values()))
    @rule(data=st.data())
    def continuation_reads(self, data: st.DataObject) -> None:
        thread_id = data.draw(
            st.sampled_from(sorted(t for t, saw in self.continuing.items() if saw is None))
        )
        self.continuing[thread_id] = self.stored_active(thread_id) is not None

    def can_commit(self, thread_id: str) -> bool:
        saw = self.continuing.get(thread_id, True)
        return saw is False and thread_id not in self.committed and not self.table.closing

    @precondition(
        lambda self: any(
            self.can_commit(t) and self.stored_active(t) is None for t in self.continuing
        )
    )
    @rule(data=st.data())
    def continuation_commits(self, data: st.DataObject) -> None:
        """It found no active run and the runtime open, and committed a run (its task goes
        on later: the close, or a cancel_run of that run, may come first)."""
        thread_id = data.draw(
            st.sampled_from(
                sorted(
                    t
                    for t in self.continuing
                    if self.can_commit(t) and self.stored_active(t) is None
                )
            )
        )
        self.committed[thread_id] = self.new_run(thread_id, active=True)

    @precondition(lambda self: any(saw is not None for saw in self.continuing.values()))
    @rule(data=st.data(), failed=st.sampled_from([False, False, True]))
    def continuation_ends(self, data: st.DataObject, failed: bool) -> None:
        thread_id = data.draw(
            st.sampled_from(sorted(t for t, saw in self.continuing.items() if saw is not None))
        )
        run_id = self.committed.pop(thread_id, None)
        deferred = False
        if run_id is not None:
            closing = self.table.closing
            # A cancel_run at the committed run (it read it from the store before this task
            # went on), in flight or ended: an activation reads it first, never a StartRun.
            cancelled = bool(self.cancels.get(run_id)) or run_id in (
                self.cancelled_while_starting.get(thread_id, ())
            )
            start = not closing and self.slot_free() and not cancelled
            commands = self.feed(
                RunCreated(thread_id, run_id), None if start else (thread_id, run_id, None)
            )
            assert (StartRun(run_id) in commands) == start, commands
            if closing:  # committed as the close began: never started, parked at the close
                assert commands == ()
                assert run_id in self.table.unstarted()
        elif not failed:  # (it found an active run, or the runtime closing)
            deferred = bool(self.continuing[thread_id]) or self.table.closing
        del self.continuing[thread_id]
        self.cancelled_while_starting.pop(thread_id, None)
        commands = self.feed(ContinuationEnded(thread_id, deferred))
        assert commands[-1] == WakeIdle(thread_id)

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def slots_are_bounded(self) -> None:
        held = len(self.live) + len(self.activating)
        if self.limit is not None:
            assert held <= self.limit
            if self.queue and self.lifecycle is Lifecycle.OPEN:  # nothing waits on a free slot
                assert held == self.limit
        assert self.table.slot_free() == self.slot_free()

    @invariant()
    def table_agrees_with_the_shell(self) -> None:
        assert self.table.statistics() == AdmissionStatistics(
            self.lifecycle,
            self.limit,
            len(self.live),
            len(self.activating),
            len(self.queue),
            len(self.cancels),
        )
        assert self.table.queued() == tuple(self.queue)
        # what the shell parks at the close: every activation taken and not started
        assert set(self.table.unstarted()) == {*self.activating, *self.queue}
        for thread_id in THREADS:
            assert self.table.continuing(thread_id) == (thread_id in self.continuing)
            view = self.table.thread_view(thread_id)
            assert view.live == self.pointer.get(thread_id)
            assert view.activations == self.activations_of(thread_id)
            starter = (
                Starter.SEND
                if thread_id in self.sending
                else Starter.CONTINUATION
                if thread_id in self.continuing
                else Starter.NONE
            )
            assert view.starter is starter

    @invariant()
    def one_live_run_per_thread(self) -> None:
        """A thread's live runs are its pointer and runs the store holds over (ending)."""
        for thread_id in THREADS:
            pointer = self.pointer.get(thread_id)
            assert pointer is None or self.live.get(pointer) == thread_id
            ongoing = [r for r, t in self.live.items() if t == thread_id and r in self.active]
            assert len(ongoing) <= 1
            assert all(r == pointer for r in ongoing)

    @invariant()
    def run_queries_agree(self) -> None:
        for run_id, thread_id in self.thread_of.items():
            known = run_id in self.live or run_id in self.activating or run_id in self.queue
            cancelling = bool(self.cancels.get(run_id))
            assert self.table.passivated(run_id) == (not known and not cancelling)
            assert self.table.is_cancelling(run_id) == (cancelling or run_id in self.cancelled_live)
            starting = thread_id in self.sending or thread_id in self.continuing
            orphaned = not (known or cancelling or thread_id in self.pointer or starting)
            assert self.table.orphaned(run_id, thread_id) == orphaned
            # asked by the thread's starter itself, before its commit (its own load)
            orphaned = not (known or cancelling or thread_id in self.pointer)
            assert self.table.orphaned(run_id, thread_id, by_starter=True) == orphaned

    @invariant()
    def idle_means_nothing_in_flight(self) -> None:
        for thread_id in THREADS:
            quiet = not self.activations_of(thread_id) and thread_id not in self.continuing
            assert self.table.idle(thread_id, live_run_quiet=True) == quiet
            assert self.table.idle(thread_id, live_run_quiet=False) == (
                quiet and thread_id not in self.pointer
            )

    @invariant()
    def no_notification_is_lost(self) -> None:
        for thread_id in THREADS:
            notice = self.table.thread_view(thread_id).notice
            busy = (
                thread_id in self.pointer
                or thread_id in self.sending
                or thread_id in self.continuing
                or bool(self.activations_of(thread_id))
            )
            if notice is Notice.PENDING and self.lifecycle is Lifecycle.OPEN:
                assert busy, f"{thread_id!r} has a notice to answer and nothing to wait for"
            if notice is Notice.AFTER_RUN and self.lifecycle is Lifecycle.OPEN:
                waits_on = (
                    self.stored_active(thread_id) is not None
                    or thread_id in self.live.values()
                    or bool(self.activations_of(thread_id))
                    or any(self.thread_of[r] == thread_id for r in self.cancels)
                )
                assert waits_on, f"{thread_id!r} waits for the end of a run it does not have"
            if notice is Notice.STALE:
                assert thread_id in self.continuing
            assert self.table.notified(thread_id) == (notice in (Notice.PENDING, Notice.AFTER_RUN))


TestAdmission = AdmissionMachine.TestCase
TestAdmission.settings = settings(TestAdmission.settings, stateful_step_count=STEP_COUNT)


# -- example-based tests --------------------------------------------------------------------


def opened(limit: int | None = 1) -> Admission:
    table = Admission(limit)
    assert table.handle(Opened()) == ()
    return table


def sent(table: Admission, thread_id: str, run_id: str) -> tuple[Command, ...]:
    """A send on ``thread_id`` that commits ``run_id``: its commands (start or queue)."""
    table.handle(SendBegan(thread_id))
    commands = table.handle(RunCreated(thread_id, run_id))
    return commands + table.handle(SendEnded(thread_id))


def test_a_send_starts_its_run_in_a_free_slot_and_queues_it_past_the_limit() -> None:
    table = opened(limit=1)
    assert sent(table, "t1", "r1") == (StartRun("r1"),)
    assert sent(table, "t2", "r2") == ()  # stored, waiting for the slot
    assert table.queued() == ("r2",)
    assert table.run_phase("r2") is RunPhase.QUEUED
    assert not table.idle("t2", live_run_quiet=True)  # wait_idle waits for a queued run


def test_queued_runs_start_first_come_first_as_slots_free() -> None:
    table = opened(limit=2)
    for n in range(5):
        sent(table, f"t{n}", f"r{n}")
    assert table.queued() == ("r2", "r3", "r4")
    assert table.handle(RunEnded("r1")) == (
        StartActivation("t2", "r2", None),
        WakeIdle("t1"),
    )
    assert table.handle(RunEnded("r0")) == (
        StartActivation("t3", "r3", None),
        WakeIdle("t0"),
    )
    # an activation that finds its run over frees its slot for the next one
    assert table.handle(ActivationEnded("r2", stored_active=False)) == (
        StartActivation("t4", "r4", None),
        WakeIdle("t2"),
    )
    assert table.handle(ActivationEnded("r3", stored_active=True)) == (
        StartRun("r3"),
        WakeIdle("t3"),
    )
    assert table.statistics() == AdmissionStatistics(Lifecycle.OPEN, 2, 1, 1, 0, 0)


def test_a_passivated_run_changed_meanwhile_is_activated_again_behind_the_queue() -> None:
    table = opened(limit=1)
    sent(table, "t1", "r1")
    sent(table, "t2", "r2")
    assert table.handle(RunEnded("r1", reactivate_from="m1")) == (
        StartActivation("t2", "r2", None),  # the slot goes to the run that waited
        WakeIdle("t1"),
    )
    assert table.queued() == ("r1",)
    assert table.handle(ActivationEnded("r2", stored_active=False)) == (
        StartActivation("t1", "r1", "m1"),
        WakeIdle("t2"),
    )


def test_no_limit_never_queues() -> None:
    table = opened(limit=None)
    for n in range(50):
        assert sent(table, f"t{n}", f"r{n}") == (StartRun(f"r{n}"),)
    assert table.slot_free()


@pytest.mark.parametrize("phase", ["live", "activating", "queued", "cancelling"])
def test_an_activation_of_a_run_live_starting_queued_or_cancelled_is_ignored(phase: str) -> None:
    table = opened(limit=1)
    sent(table, "t0", "r0")  # holds the slot
    if phase == "live":
        table.handle(RunEnded("r0"))
        sent(table, "t1", "r1")
    elif phase == "activating":
        table.handle(RunEnded("r0"))
        assert table.handle(ActivationRequested("t1", "r1", "m")) == (
            StartActivation("t1", "r1", "m"),
        )
    elif phase == "queued":
        table.handle(ActivationRequested("t1", "r1", "m"))
    else:
        table.handle(CancelBegan("r1"))
    before = repr(table)
    assert table.handle(ActivationRequested("t1", "r1", "m2")) == ()
    assert repr(table) == before


def test_nothing_is_activated_before_the_runtime_opens_or_once_it_closes() -> None:
    table = Admission(1)
    assert table.handle(ActivationRequested("t1", "r1")) == ()
    assert table.passivated("r1")
    table.handle(Opened())
    table.handle(Closing())
    assert table.handle(ActivationRequested("t1", "r1")) == ()
    assert table.passivated("r1")


def test_cancelling_a_queued_run_keeps_it_queued_until_recorded_then_drops_it() -> None:
    table = opened(limit=1)
    sent(table, "t1", "r1")
    sent(table, "t2", "r2")
    assert table.handle(CancelBegan("r2")) == ()
    assert table.is_cancelling("r2")
    assert not table.passivated("r2")
    assert not table.idle("t2", live_run_quiet=True)  # wait_idle waits for the cancel
    assert table.handle(CancelEnded("r2", "t2")) == (WakeIdle("t2"),)
    assert table.queued() == ()
    assert table.idle("t2", live_run_quiet=True)
    assert table.passivated("r2")
    assert table.handle(RunEnded("r1")) == (WakeIdle("t1"),)  # r2 never starts


def test_a_queued_run_admitted_while_its_cancel_is_recorded_does_not_start() -> None:
    # As runtime.py: the queue is FIFO even for a run being cancelled; its activation then
    # declines it (and the store would show it cancelled anyway).
    table = opened(limit=1)
    sent(table, "t1", "r1")
    sent(table, "t2", "r2")
    table.handle(CancelBegan("r2"))
    assert table.handle(RunEnded("r1")) == (StartActivation("t2", "r2", None), WakeIdle("t1"))
    assert table.handle(ActivationEnded("r2", stored_active=True)) == (WakeIdle("t2"),)
    assert table.handle(CancelEnded("r2", "t2")) == (WakeIdle("t2"),)


def test_cancel_run_at_a_live_run_marks_it_until_its_actor_ends() -> None:
    table = opened()
    sent(table, "t1", "r1")
    assert table.handle(CancelBegan("r1")) == ()
    assert table.is_cancelling("r1")
    table.handle(RunEnded("r1"))
    assert not table.is_cancelling("r1")
    with pytest.raises(InvalidTransition):  # no CancelEnded for the live path
        table.handle(CancelEnded("r1", "t1"))


def test_two_cancels_of_a_run_with_no_actor_hold_it_until_both_end() -> None:
    table = opened()
    table.handle(CancelBegan("r1"))
    table.handle(CancelBegan("r1"))
    table.handle(CancelEnded("r1", "t1"))
    assert table.is_cancelling("r1")
    assert table.handle(ActivationRequested("t1", "r1")) == ()
    table.handle(CancelEnded("r1", "t1"))
    assert not table.is_cancelling("r1")


def test_an_activation_does_not_start_over_a_live_run_of_its_thread() -> None:
    table = opened(limit=None)
    sent(table, "t1", "r1")
    table.handle(ActivationRequested("t1", "r0", "m"))
    assert table.handle(ActivationEnded("r0", stored_active=True)) == (WakeIdle("t1"),)
    assert table.live_run_of("t1") == "r1"


def test_a_run_created_while_the_ending_run_is_still_live_supersedes_it() -> None:
    # The store held r1 over (its actor unwinding) when the send's commit landed.
    table = opened(limit=None)
    table.handle(SendBegan("t1"))
    table.handle(ActivationRequested("t1", "r1"))
    table.handle(ActivationEnded("r1", stored_active=True))  # started during the send
    assert table.handle(RunCreated("t1", "r2")) == (StartRun("r2"),)
    assert table.live_run_of("t1") == "r2"
    table.handle(RunEnded("r1"))
    assert table.live_run_of("t1") == "r2"  # the older run's end leaves the newer one


def test_send_is_refused_while_the_thread_has_a_live_run_or_a_starter() -> None:
    table = opened()
    table.handle(SendBegan("t1"))
    assert not table.can_send("t1")
    with pytest.raises(InvalidTransition, match="can_send"):
        table.handle(SendBegan("t1"))
    table.handle(RunCreated("t1", "r1"))
    table.handle(SendEnded("t1"))
    assert not table.can_send("t1")
    table.handle(RunEnded("r1"))
    assert table.can_send("t1")
    table.handle(NotificationAppended("t1"))  # a continuation holds the thread
    assert not table.can_send("t1")


def test_a_send_in_flight_does_not_make_the_thread_busy_for_wait_idle() -> None:
    table = opened()
    table.handle(SendBegan("t1"))
    assert table.idle("t1", live_run_quiet=False)
    table.handle(RunCreated("t1", "r1"))
    assert not table.idle("t1", live_run_quiet=False)
    assert table.idle("t1", live_run_quiet=True)  # its run waits only on pending actions


def test_orphaned_and_passivated() -> None:
    table = opened()
    assert table.orphaned("r1", "t1")
    assert table.passivated("r1")
    table.handle(SendBegan("t1"))
    assert not table.orphaned("r1", "t1")  # the send may be about to start it
    assert table.passivated("r1")
    table.handle(SendEnded("t1"))
    table.handle(CancelBegan("r1"))
    assert not table.orphaned("r1", "t1")
    assert not table.passivated("r1")


def test_the_starters_own_load_recovers_an_orphaned_run() -> None:
    table = opened()
    table.handle(SendBegan("t1"))
    assert not table.orphaned("r0", "t1")  # to any other load: the send may be starting it
    assert table.orphaned("r0", "t1", by_starter=True)  # the send's own load, before its commit
    table.handle(ActivationRequested("t1", "r0"))
    assert not table.orphaned("r0", "t1", by_starter=True)


def test_a_new_run_a_cancel_run_read_before_its_start_is_activated_not_started() -> None:
    # The continuation committed r1; a cancel_run read it from the store (get_state shows
    # it) and recorded it cancelled before the continuation's task went on.
    table = opened()
    assert table.handle(NotificationAppended("t1")) == (StartContinuation("t1"),)
    assert table.continuing("t1")
    table.handle(CancelBegan("r1"))
    table.handle(CancelEnded("r1", "t1"))
    assert table.handle(RunCreated("t1", "r1")) == (StartActivation("t1", "r1", None),)
    assert table.handle(ActivationEnded("r1", stored_active=False)) == (WakeIdle("t1"),)
    assert table.handle(ContinuationEnded("t1", deferred=False)) == (WakeIdle("t1"),)
    assert not table.continuing("t1")
    assert table.thread_view("t1") == ThreadView()


# -- notifications --


def test_a_notification_on_a_free_thread_starts_one_continuation() -> None:
    table = opened()
    assert table.handle(NotificationAppended("t1")) == (StartContinuation("t1"),)
    assert not table.notified("t1")  # taken by the continuation
    assert not table.idle("t1", live_run_quiet=True)
    assert table.handle(NotificationAppended("t1")) == ()  # no second one meanwhile
    assert table.notified("t1")
    table.handle(RunCreated("t1", "r1"))
    assert table.handle(ContinuationEnded("t1", deferred=False)) == (WakeIdle("t1"),)
    # the newer notification is answered after the continuation's run
    assert table.handle(RunEnded("r1")) == (StartContinuation("t1"), WakeIdle("t1"))


def test_a_notification_during_a_run_is_answered_after_it() -> None:
    table = opened()
    sent(table, "t1", "r1")
    assert table.handle(NotificationAppended("t1")) == ()
    assert table.notified("t1")
    assert table.handle(RunEnded("r1")) == (StartContinuation("t1"), WakeIdle("t1"))


def test_a_continuation_that_finds_an_active_run_waits_for_a_run_to_end() -> None:
    table = opened()
    table.handle(NotificationAppended("t1"))
    assert table.handle(ContinuationEnded("t1", deferred=True)) == (WakeIdle("t1"),)
    assert table.thread_view("t1") == ThreadView(notice=Notice.AFTER_RUN)
    assert table.notified("t1")
    table.handle(ActivationRequested("t1", "r0", "m"))  # a submission to the waiting run
    table.handle(ActivationEnded("r0", stored_active=True))
    assert table.handle(RunEnded("r0")) == (StartContinuation("t1"), WakeIdle("t1"))


def test_a_continuation_that_read_before_a_run_ended_looks_again() -> None:
    table = opened()
    table.handle(ActivationRequested("t1", "r0", "m"))
    table.handle(ActivationEnded("r0", stored_active=True))
    table.handle(RunEnded("r0"))
    table.handle(NotificationAppended("t1"))  # -> StartContinuation; it reads r0 active...
    table.handle(ActivationRequested("t1", "r0", "m"))
    table.handle(ActivationEnded("r0", stored_active=True))
    table.handle(RunEnded("r0"))  # ...r0 ends before the continuation acts on what it read
    assert table.thread_view("t1").notice is Notice.STALE
    assert table.handle(ContinuationEnded("t1", deferred=True)) == (
        StartContinuation("t1"),
        WakeIdle("t1"),
    )


def test_a_notification_waiting_on_a_send_is_answered_when_the_send_fails() -> None:
    table = opened()
    table.handle(SendBegan("t1"))
    assert table.handle(NotificationAppended("t1")) == ()
    assert table.handle(SendEnded("t1")) == (StartContinuation("t1"),)  # ThreadBusy, say


def test_a_notification_waiting_on_a_declined_activation_is_answered() -> None:
    table = opened()
    table.handle(ActivationRequested("t1", "r0", "m"))
    assert table.handle(NotificationAppended("t1")) == ()
    assert table.handle(ActivationEnded("r0", stored_active=False)) == (
        StartContinuation("t1"),
        WakeIdle("t1"),
    )


def test_a_cancelled_run_a_notification_waited_for_lets_it_be_answered() -> None:
    table = opened()
    table.handle(NotificationAppended("t1"))
    table.handle(ContinuationEnded("t1", deferred=True))  # found r0 waiting
    table.handle(CancelBegan("r0"))
    assert table.handle(CancelEnded("r0", "t1")) == (StartContinuation("t1"), WakeIdle("t1"))


def test_a_notification_found_by_a_continuations_own_load_is_ignored() -> None:
    table = opened()
    table.handle(NotificationAppended("t1"))
    assert table.handle(NotificationFound("t1")) == ()
    assert table.thread_view("t1") == ThreadView(starter=Starter.CONTINUATION)
    table.handle(ContinuationEnded("t1", deferred=False))
    assert table.handle(NotificationFound("t1")) == (StartContinuation("t1"),)


def test_a_notification_before_the_runtime_opens_is_answered_once_it_opens() -> None:
    table = Admission(1)
    assert table.handle(NotificationAppended("t1")) == ()
    assert table.handle(Opened()) == (StartContinuation("t1"),)


# -- closing --


def test_nothing_starts_once_the_runtime_closes_and_the_queue_is_dropped_at_the_end() -> None:
    table = opened(limit=1)
    sent(table, "t1", "r1")
    sent(table, "t2", "r2")
    sent(table, "t3", "r3")
    table.handle(NotificationAppended("t4"))
    table.handle(Closing())
    assert table.closing
    assert table.unstarted() == ("r2", "r3")  # to park
    assert table.handle(ContinuationEnded("t4", deferred=True)) == (WakeIdle("t4"),)
    assert table.handle(NotificationAppended("t4")) == ()
    assert table.handle(RunEnded("r1")) == (WakeIdle("t1"),)  # no slot handed on
    assert not table.idle("t2", live_run_quiet=True)
    assert table.handle(Closed()) == (WakeIdle("t2"), WakeIdle("t3"))
    assert table.idle("t2", live_run_quiet=True)
    assert table.lifecycle is Lifecycle.CLOSED
    with pytest.raises(InvalidTransition, match="open one"):
        table.handle(RunCreated("t5", "r5"))


def test_an_activation_in_flight_at_close_does_not_start() -> None:
    table = opened()
    table.handle(ActivationRequested("t1", "r1"))
    table.handle(Closing())
    assert table.handle(ActivationEnded("r1", stored_active=True)) == (WakeIdle("t1"),)


def test_a_run_a_continuation_committed_as_the_close_began_is_left_to_park() -> None:
    table = opened()
    table.handle(NotificationAppended("t1"))  # -> StartContinuation; it commits r1 ...
    table.handle(Closing())  # ... and the close begins before its task goes on
    assert table.handle(RunCreated("t1", "r1")) == ()
    assert table.unstarted() == ("r1",)  # the shell parks it (stored waiting, not running)
    assert table.handle(ContinuationEnded("t1", deferred=False)) == (WakeIdle("t1"),)
    assert not table.idle("t1", live_run_quiet=True)
    assert table.handle(Closed()) == (WakeIdle("t1"),)
    assert table.idle("t1", live_run_quiet=True)
    assert table.unstarted() == ()


# -- misuse --


@pytest.mark.parametrize(
    "event",
    [
        SendEnded("t1"),
        RunCreated("t1", "r9"),
        RunEnded("r9"),
        ActivationEnded("r9", stored_active=True),
        CancelEnded("r9", None),
        ContinuationEnded("t1", deferred=False),
        Opened(),
        Closed(),
    ],
)
def test_an_event_the_shell_never_sends_raises_and_changes_nothing(event: Event) -> None:
    table = opened()
    sent(table, "t2", "r2")
    before = repr(table)
    with pytest.raises(InvalidTransition):
        table.handle(event)
    assert repr(table) == before


@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_a_bad_limit_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="max_active_runs"):
        Admission(value)  # type: ignore[arg-type]  # what is wrong is the point


def test_messages_and_commands_have_constructor_like_reprs() -> None:
    assert repr(RunEnded("r1", "m1")) == "RunEnded(run_id='r1', reactivate_from='m1')"
    assert repr(StartActivation("t1", "r1", None)) == (
        "StartActivation(thread_id='t1', run_id='r1', message_id=None)"
    )
    assert repr(Closing()) == "Closing()"
    assert repr(ThreadView(notice=Notice.PENDING)) == (
        "ThreadView(live=None, starter=Starter.NONE, notice=Notice.PENDING, activations=0)"
    )
    assert eval(repr(ThreadView(notice=Notice.PENDING)), vars(admission)) == ThreadView(
        notice=Notice.PENDING
    )


def test_the_module_uses_only_the_standard_library_and_the_core() -> None:
    tree = ast.parse(Path(admission.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] in sys.stdlib_module_names, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                assert node.module is not None
                assert node.module.startswith("_core"), node.module
                assert node.level == 2, "only pai_actors._core, from pai_actors._runtime"
            else:
                module = (node.module or "").split(".")[0]
                assert module == "__future__" or module in sys.stdlib_module_names, module
