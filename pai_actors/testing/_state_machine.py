"""Hypothesis state machines over a user's agents: :class:`AgentStateMachine`.

A user names their agents, their model and what a conversation sends; Hypothesis draws
sequences of what clients and the world do to them (start a conversation, send, submit a
valid or an invalid answer to a pending action, cancel or fail one, resolve one again,
cancel a run, race a submission or the next deadline with a cancellation, restart or crash
the runtime, let virtual time pass), runs them on the production code paths with the real
tools, checks the invariants of ``testing._invariants`` (and the subclass's own,
:meth:`AgentStateMachine.check`) after every rule and at the end, and shrinks a failure to a
short program that can be pasted into a test::

    state = BillingMachine()
    threads_0 = state.start()
    state.submit(pick=0, variant=0)
    state.cancel_run(reason=None, thread=threads_0)
    state.teardown()

How trio runs under Hypothesis's synchronous rules: each machine owns one trio run, in a
worker thread of its own (``testing._trio_thread``), under ``trio.testing.MockClock`` with
autojump off, so virtual time passes only when a rule moves it (:meth:`advance_time` jumps
from deadline to deadline, as autojump would, up to its end), and with trio's scheduler
seeded (``scheduler_seed``). A rule hands the run one job and waits for its answer: the job
starts what the rule asks as a task (a client's request), then waits until every task is
blocked (``wait_all_tasks_blocked``), reads the pending actions and checks the invariants.
Between two rules nothing runs, so a sequence of rules replays exactly, outside Hypothesis
too. A request that waits for time to pass (a ``cancel_run`` whose tool ignores the
cancellation and sleeps on) stays in flight and ends in a later rule. Trio's guest mode
would run trio on the rule's thread instead, but it still waits for I/O in a thread of its
own and needs a host loop pumped by every rule: more machinery for the same determinism.

A restart closes the runtime gracefully, as a deploy does (its grace periods pass in virtual
time), checks what it left (nothing running; every unfinished call kept for the next
runtime), and opens a fresh one on the same data; a request may race the close.
A crash throws the runtime away as ``SIGKILL`` would (``crash(after_commits=0)``: now;
``after_commits=k``: right after its k-th next commit, in the middle of whatever writes
it): its tasks are cancelled, every later write and read of it fails, its requests in
flight are lost, and a fresh runtime opens the same :class:`~pai_actors.MemoryStore` data
and the clients reconnect to it. Aborting one child tool call from outside is not a rule:
only the parent tool's ``execute`` can (the ``abort_signal`` it passes to
``ctx.tools.<name>.execute``); a child's abort is exercised by the tools that do it (or by a
rule of the subclass's own that aborts a controller the tools keep: :meth:`act`).

Errors: a broken invariant raises ``AssertionError`` naming the rule and listing the
violations (the sentences of ``testing._invariants``) and the last events; a rule that
does not come to rest within ``rule_timeout`` real seconds (a task that never blocks)
raises ``AssertionError`` too.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, ClassVar, Literal

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, precondition, rule

from .._core.pending import PendingActionView
from .._runtime.runtime import DEFAULT_MAX_ACTIVE_RUNS
from .._tools.agent import AgentDefinition, Pai
from ._invariants import How
from ._machine_world import FAILED, Observation, Report, Timing, World, WorldConfig
from ._simulation import _INVALID, Models, _is_approval, example
from ._trio_thread import TrioThread

PICKS = st.integers(0, 7)
"""Which pending action (or accepted resolution) a rule takes: its index, modulo their count."""
REASONS = st.sampled_from([None, "stopped by the test"])
SECONDS = st.sampled_from([0.5, 1.0, 5.0, 60.0])
RACING = st.sampled_from([None, "submit", "cancel_run"])


class AgentStateMachine(RuleBasedStateMachine):
    """A Hypothesis state machine over ``agents``: subclass it, name them, and collect its
    ``TestCase``::

        class BillingMachine(AgentStateMachine):
            agents = billing_agent            # an AgentDefinition or a Pai
            model = billing_step              # a Model, or a function of the ModelRequest
            messages = ("Pay invoice 7",)     # what a conversation sends, in turn

        TestBilling = BillingMachine.TestCase

    ``model`` is given every request of every run; a :class:`~pai_actors.Model` is shared
    by all the machines Hypothesis runs, so its answers must depend on the request only (a
    function of the request, played for each, is). ``agent``: the agent of a
    :class:`~pai_actors.Pai` the conversations talk to (``None``: its first); ``scope``:
    their threads' scope; ``conversations``: how many threads may be started (``sm-1``,
    ``sm-2``, ...); ``settle_seconds``: the virtual time the end may take to come to rest
    (and the runtime to close); ``rule_timeout``: the real seconds a rule may take;
    ``scheduler_seed``: trio's scheduling order; ``crashes = False`` leaves crashes out;
    ``restarts = True`` adds graceful restarts (:meth:`restart`), ``races = True`` the
    rules that race a request with another or with the next deadline
    (:meth:`submit_and_cancel_run`, :meth:`at_next_deadline`): both are off by default,
    since every rule more makes a bug that needs a given few in order take more sequences
    to find; ``capabilities``: the capabilities' bindings, as
    :func:`~pai_actors.testing.create_test_runtime` takes them.

    The rules (their arguments are plain values, so a failure prints as a program): every
    sequence begins with :meth:`start`; then :meth:`start_another`, :meth:`send`,
    :meth:`submit`, :meth:`submit_invalid`, :meth:`cancel_action`, :meth:`fail_action`,
    :meth:`resolve_again`, :meth:`cancel_run`, :meth:`advance_time` and :meth:`crash` (and,
    when asked for, :meth:`submit_and_cancel_run`, :meth:`at_next_deadline` and
    :meth:`restart`), each only when it can act (a pending action to answer, a run to
    cancel, a deadline ahead).
    Hooks: :meth:`answer` (a valid answer to an action), :meth:`invalid_answer`,
    :meth:`check` (invariants of your own) and :meth:`act` (for rules of your own). After
    every rule the runtime is at rest for the moment (every task blocked) and the parts,
    records, open actions and executions are checked; at the end (:meth:`teardown`) time
    passes until every run is idle, and the machine checks it at rest, closes the runtime
    and checks the resolutions, the executions and that nothing is left running.

    How hard to look: a bug that takes three rules in order (start, approve, cancel the run
    while the tool works) is found within some tens to a few hundred sequences, each ~20 ms
    (2 cores); ``settings(max_examples=200, stateful_step_count=15, deadline=None)`` is a
    sensible start, more in a nightly run.

    Concurrency contract: a machine is driven by one thread (Hypothesis's, or a pasted
    test's); its trio run lives in a worker thread and runs only while a rule waits for it.
    """

    agents: ClassVar[AgentDefinition | Pai]
    model: ClassVar[Models]
    messages: ClassVar[Sequence[str]] = ("Hello",)
    agent: ClassVar[str | None] = None
    scope: ClassVar[str] = "state-machine"
    conversations: ClassVar[int] = 2
    settle_seconds: ClassVar[float] = 3600.0
    rule_timeout: ClassVar[float] = 60.0
    scheduler_seed: ClassVar[int] = 0
    crashes: ClassVar[bool] = True
    restarts: ClassVar[bool] = False
    races: ClassVar[bool] = False
    capabilities: ClassVar[Any] = None
    max_active_runs: ClassVar[int | None] = DEFAULT_MAX_ACTIVE_RUNS

    threads: ClassVar[Bundle[str]] = Bundle("threads")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Make rules of the optional methods a subclass asks for (``races``, ``restarts``):
        a rule that is defined but disabled by its precondition would still change what
        Hypothesis draws for every machine."""
        super().__init_subclass__(**kwargs)
        for name, (switch, as_rule, can_act) in _OPTIONAL_RULES.items():
            if getattr(cls, switch):
                made = as_rule(getattr(AgentStateMachine, name))
                setattr(cls, name, made if can_act is None else precondition(can_act)(made))

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        missing = [name for name in ("agents", "model") if not hasattr(cls, name)]
        if missing:
            raise TypeError(
                f"{cls.__name__} needs class attributes {missing}: e.g. `agents = my_agent` "
                "and `model = my_step` (a Model, or a function of the ModelRequest)"
            )
        if not cls.messages:
            raise ValueError(f"{cls.__name__}.messages is empty; give a conversation a message")
        self._world = World(
            WorldConfig(
                agents=cls.agents,
                model=cls.model,
                scope=cls.scope,
                agent=cls.agent,
                settle_seconds=cls.settle_seconds,
                max_active_runs=cls.max_active_runs,
                capabilities=cls.capabilities,
                check=self.check,
            )
        )
        self._sent: dict[str, int] = {}
        self._pending: tuple[PendingActionView, ...] = ()
        self._accepted = 0
        self._active: frozenset[str] = frozenset()
        self._timers = False
        self._failed = False
        self._trio = TrioThread(
            self._world.main,
            clock=self._world.clock,
            seed=cls.scheduler_seed,
            timeout=cls.rule_timeout,
        )
        self._step(f"{cls.__name__}()", None)

    # -- hooks --------------------------------------------------------------------------------

    def answer(self, action: PendingActionView, variant: int) -> Any:
        """A valid answer to ``action`` (``variant`` varies it): ``{"approved": ...}`` for
        an approval (approved unless ``variant`` is 3), else a small instance of its
        ``resume_schema`` (:func:`~pai_actors.testing._simulation.example`). Override it
        when that is not enough for your tools."""
        if _is_approval(action):
            return {"approved": variant != 3}
        return example(action.resume_schema or {}, random.Random(variant))

    def invalid_answer(self, action: PendingActionView) -> Any:
        """An answer ``action``'s schema refuses (a schema that takes anything accepts it:
        then it counts as a submission)."""
        return dict(_INVALID)

    async def check(self, observed: Observation) -> Iterable[str]:
        """Invariants of your own: the violations found in ``observed`` (none by default),
        after every rule and at the end (``observed.final``, once the runtime closed), as
        sentences naming what was seen. It runs in the machine's trio run: read the store
        (``observed.store``, the committed data), what the tools saw (``observed.probe``)
        and the model's requests (``observed.model``); change nothing."""
        return ()

    def act(self, rule: str, job: Callable[[], Awaitable[None]] | None = None) -> None:
        """For rules of your own (a method decorated with Hypothesis's ``@rule``): run
        ``await job()`` in the machine's trio run (it starts what it does and returns; it
        must not wait for virtual time), let everything that can happen without time
        happen, and check the invariants; ``rule`` names it in a failure, as
        ``"abort(pick=0)"``."""
        self._step(rule, job)

    # -- rules --------------------------------------------------------------------------------

    @initialize(target=threads)
    def start(self) -> str:
        """Start the first conversation: create its thread (``sm-1``) and send its first
        message (every run of the machine begins so)."""
        return self._start("start()")

    @precondition(lambda self: len(self._sent) < self.conversations)
    @rule(target=threads)
    def start_another(self) -> str:
        """Start another conversation (``sm-2``, ...), up to ``conversations``."""
        return self._start("start_another()")

    @precondition(lambda self: len(self._active) < len(self._sent))
    @rule(thread=threads)
    def send(self, thread: str) -> None:
        """Send the conversation's next message (the messages in turn, then again); a
        thread whose run is active refuses it (:class:`~pai_actors.ThreadBusy`)."""
        number = self._sent.get(thread, 0)
        self._sent[thread] = number + 1
        text = self.messages[number % len(self.messages)]
        self._step(f"send(thread={thread!r})", functools.partial(self._world.send, thread, text))

    @precondition(lambda self: bool(self._pending))
    @rule(pick=PICKS, variant=st.integers(0, 3))
    def submit(self, pick: int, variant: int) -> None:
        """Submit a valid answer (:meth:`answer`) to pending action ``pick``: it must be
        accepted (unless another request in flight resolved it first)."""
        action = self._pick(pick)
        job = functools.partial(self._world.submit, action, self.answer(action, variant), True)
        self._step(f"submit(pick={pick!r}, variant={variant!r})", job)

    @precondition(lambda self: bool(self._pending))
    @rule(pick=PICKS)
    def submit_invalid(self, pick: int) -> None:
        """Submit an answer the action's schema refuses (:meth:`invalid_answer`): it must be
        rejected and leave the action pending."""
        action = self._pick(pick)
        job = functools.partial(self._world.submit, action, self.invalid_answer(action), False)
        self._step(f"submit_invalid(pick={pick!r})", job)

    @precondition(lambda self: bool(self._pending))
    @rule(pick=PICKS, reason=REASONS)
    def cancel_action(self, pick: int, reason: str | None) -> None:
        """Cancel pending action ``pick`` with ``reason``."""
        job = functools.partial(self._world.resolve, self._pick(pick), "cancel", reason)
        self._step(f"cancel_action(pick={pick!r}, reason={reason!r})", job)

    @precondition(lambda self: bool(self._pending))
    @rule(pick=PICKS)
    def fail_action(self, pick: int) -> None:
        """Fail pending action ``pick``."""
        job = functools.partial(self._world.resolve, self._pick(pick), "fail", FAILED)
        self._step(f"fail_action(pick={pick!r})", job)

    @precondition(lambda self: self._accepted > 0)
    @rule(pick=PICKS, how=st.sampled_from(("submit", "cancel", "fail")))
    def resolve_again(self, pick: int, how: How) -> None:
        """Resolve an action that was accepted before (``pick``: which, modulo their
        count) again: it must be rejected, whatever happened since (a crash included)."""
        job = functools.partial(self._world.resolve_again, pick % self._accepted, how)
        self._step(f"resolve_again(pick={pick!r}, how={how!r})", job)

    @precondition(lambda self: bool(self._active))
    @rule(thread=threads, reason=REASONS)
    def cancel_run(self, thread: str, reason: str | None) -> None:
        """Cancel the thread's latest run with ``reason``."""
        job = functools.partial(self._world.cancel_run, thread, reason)
        self._step(f"cancel_run(thread={thread!r}, reason={reason!r})", job)

    def submit_and_cancel_run(self, pick: int, variant: int, reason: str | None) -> None:
        """(A rule with ``races = True``.) Submit a valid answer to pending action ``pick``
        and cancel its run in the same tick (a user approves as another presses stop): the
        run ends cancelled, the answer accepted (its call then cancelled, or done first) or
        rejected."""
        action = self._pick(pick)
        submitted = (action, self.answer(action, variant))
        job = functools.partial(
            self._world.cancel_run, action.ref.thread_id, reason, submit=submitted
        )
        self._step(
            f"submit_and_cancel_run(pick={pick!r}, variant={variant!r}, reason={reason!r})", job
        )

    def at_next_deadline(
        self, act: Literal["submit", "cancel_action", "cancel_run"], pick: int, reason: str | None
    ) -> None:
        """(A rule with ``races = True``.) Let time pass to the next deadline and, in that
        same tick, racing what wakes then (a tool's sleep ending, a model step, a timer):
        submit a valid answer to pending action ``pick``, cancel it with ``reason``, or
        cancel the run of active conversation ``pick`` (modulo their count) with
        ``reason``."""
        deadline: Timing = "deadline"
        name = f"at_next_deadline(act={act!r}, pick={pick!r}, reason={reason!r})"
        job: Callable[[], Awaitable[None]] | None = None
        if act == "cancel_run" and self._active:
            thread = sorted(self._active)[pick % len(self._active)]
            job = functools.partial(self._world.cancel_run, thread, reason, timing=deadline)
        elif act == "submit" and self._pending:
            action = self._pick(pick)
            payload = self.answer(action, 0)
            job = functools.partial(self._world.submit, action, payload, True, timing=deadline)
        elif act == "cancel_action" and self._pending:
            action = self._pick(pick)
            job = functools.partial(self._world.resolve, action, "cancel", reason, timing=deadline)
        self._step(name, job)

    @precondition(lambda self: self._timers)
    @rule(seconds=SECONDS)
    def advance_time(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, stopping at each deadline on the way."""
        self._step(
            f"advance_time(seconds={seconds!r})", functools.partial(self._world.advance, seconds)
        )

    def restart(
        self, racing: Literal["submit", "cancel_run"] | None, pick: int, checkpoints: int
    ) -> None:
        """(A rule with ``restarts = True``.) Close the runtime gracefully (a deploy) and open
        a fresh one on the same data; the clients reconnect. ``racing``: a submission to
        pending action ``pick`` (or a ``cancel_run`` of conversation ``pick``'s latest run)
        starts first and runs ``checkpoints`` trio checkpoints before the close begins: it
        is applied, or refused (:class:`~pai_actors.RuntimeClosed`) and then leaves nothing
        of it behind."""
        start: Callable[[], Awaitable[None]] | None = None
        if racing == "submit" and self._pending:
            action = self._pick(pick)
            start = functools.partial(self._world.submit, action, self.answer(action, 0), True)
        elif racing == "cancel_run" and self._sent:
            thread = sorted(self._sent)[pick % len(self._sent)]
            start = functools.partial(self._world.cancel_run, thread, None)
        job = functools.partial(self._world.restart, start, checkpoints)
        self._step(f"restart(racing={racing!r}, pick={pick!r}, checkpoints={checkpoints!r})", job)

    @precondition(lambda self: self.crashes)
    @rule(after_commits=st.integers(0, 3))
    def crash(self, after_commits: int) -> None:
        """Kill the runtime now (``0``) or right after its ``after_commits``-th next commit;
        a fresh one opens the same data and the clients reconnect."""
        job = functools.partial(self._world.crash, after_commits)
        self._step(f"crash(after_commits={after_commits!r})", job)

    def teardown(self) -> None:
        """Let time pass until every run is idle, check the runtime at rest, close it, check
        what was accepted and what the tools saw, and stop the trio run."""
        try:
            if not self._failed:
                report = self._trio.call(self._world.finish)
                self._raise_for(report, "at the end (teardown)")
        finally:
            self._trio.stop()

    # -- driving the trio run -----------------------------------------------------------------

    def _start(self, rule: str) -> str:
        thread_id = f"sm-{len(self._sent) + 1}"
        self._sent[thread_id] = 1
        self._step(rule, functools.partial(self._world.send, thread_id, self.messages[0]))
        return thread_id

    def _pick(self, pick: int) -> PendingActionView:
        return self._pending[pick % len(self._pending)]

    def _step(self, rule: str, job: Callable[[], Awaitable[None]] | None) -> None:
        try:
            report = self._trio.call(functools.partial(self._world.step, job))
        except BaseException:
            self._failed = True  # (the teardown then only stops the trio run)
            raise
        self._pending = report.pending
        self._accepted = report.accepted
        self._active = report.active
        self._timers = report.timers
        self._raise_for(report, f"after {rule}")

    def _raise_for(self, report: Report, when: str) -> None:
        if not report.violations:
            return
        self._failed = True
        lines = [f"  - {v}" for v in report.violations]
        trace = [f"  {line}" for line in report.trace[-25:]]
        raise AssertionError(
            f"{type(self).__name__} broke {len(report.violations)} invariant(s) {when}:\n"
            + "\n".join(lines)
            + "\nthe last events (virtual seconds):\n"
            + "\n".join(trace)
        ) from report.error


_OPTIONAL_RULES: dict[
    str,
    tuple[str, Callable[[Callable[..., None]], Callable[..., None]], Callable[[Any], bool] | None],
] = {
    # method: (the switch that asks for it, the decorator that makes a rule of it, when it
    # can act); the decorators wrap the method, which stays a plain one on AgentStateMachine
    "submit_and_cancel_run": (
        "races",
        rule(pick=PICKS, variant=st.integers(0, 3), reason=REASONS),
        lambda self: bool(self._pending),
    ),
    "at_next_deadline": (
        "races",
        rule(
            act=st.sampled_from(("submit", "cancel_action", "cancel_run")),
            pick=PICKS,
            reason=REASONS,
        ),
        lambda self: self._timers and (bool(self._pending) or bool(self._active)),
    ),
    "restart": (
        "restarts",
        rule(racing=RACING, pick=PICKS, checkpoints=st.integers(0, 3)),
        None,
    ),
}
