"""Fault injection for tests: a plan of faults attached to a supervisor (``supervisors.testing``).

A :class:`Faults` plan holds rules (:class:`CrashOnMessage`, :class:`DelayMessage`,
:class:`DropMessage`, :class:`FailStart`) and records every fault it injects as a
:class:`FaultRecord`. Attached to a supervisor, it is read by each supervisor of that subtree
when it is opened; each time one of them starts a child incarnation, the plan picks the rules
that match it. An incarnation that a message rule matches gets a :class:`FaultyMailbox`, a
``Mailbox`` whose sending and receiving carry the faults out; every other one gets a plain
``Mailbox``. Without a plan, a supervisor only checks that it has none.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeAlias, TypeVar

import trio
from outcome import Error, Outcome, Value

from ._exceptions import SupervisorError
from ._mailbox import Mailbox
from ._node import ActorInfo, Node
from ._supervisor import Supervisor

M = TypeVar("M")

ActorSelector: TypeAlias = str | Callable[[ActorInfo], bool]
"""Which actors a rule applies to: a path, the end of one, or a predicate on ``ActorInfo``."""

FaultKind: TypeAlias = Literal["crash", "delay", "drop", "fail_start"]


class InjectedFault(SupervisorError):
    """The error an injected fault raises: an actor's crash, or a failed start.

    ``record`` is the :class:`FaultRecord` of the fault, also in :attr:`Faults.records`.
    """

    def __init__(self, record: FaultRecord) -> None:
        super().__init__(f"injected fault: {record.describe()}")
        self.record = record


def _check_selector(actor: object) -> None:
    if isinstance(actor, str):
        if not actor or actor != actor.strip() or actor.strip("/") != actor or "//" in actor:
            raise ValueError(
                f"actor {actor!r} must be a path such as 'app/pool/worker' or its end, such as "
                "'worker', without surrounding spaces or slashes"
            )
    elif not callable(actor):
        raise TypeError(
            f"actor must be a path (str) or a predicate taking an ActorInfo, not {actor!r}"
        )


def _check_n(n: object) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n counts messages from 1; it must be an int >= 1, not {n!r}")


def _check_incarnation(incarnation: object) -> None:
    if incarnation is not None and (
        not isinstance(incarnation, int) or isinstance(incarnation, bool) or incarnation < 0
    ):
        raise ValueError(
            f"incarnation must be an int >= 0 (0 is the spawn, 1 the first restart) or None "
            f"for every incarnation, not {incarnation!r}"
        )


@dataclass(frozen=True, slots=True)
class CrashOnMessage:
    """Crash the actor when it receives its ``n``-th message.

    The ``n``-th ``receive`` (or ``async for`` step) of the incarnation takes the message and
    raises :class:`InjectedFault` instead of returning it, so the actor exits with
    ``Crashed(InjectedFault(...))`` unless it catches the error, and its supervisor applies
    the restart policy as for any crash. Messages are counted as
    ``mailbox.statistics().received`` counts them, exit notices included.

    ``actor`` is a path (``"app/pool/worker"``), the end of one (``"pool/worker"``,
    ``"worker"``: every actor whose path ends so), or a predicate on its ``ActorInfo``.
    ``incarnation`` is 0 for the incarnation that ``spawn`` started, 1 for the first restart,
    and so on; ``None`` applies the rule to every incarnation.
    """

    actor: ActorSelector
    n: int
    incarnation: int | None = 0
    kind: ClassVar[FaultKind] = "crash"

    def __post_init__(self) -> None:
        _check_selector(self.actor)
        _check_n(self.n)
        _check_incarnation(self.incarnation)


@dataclass(frozen=True, slots=True)
class DelayMessage:
    """Deliver the ``n``-th message sent to the actor ``seconds`` later.

    The sender's ``tell``, ``tell_nowait`` or ``ask`` returns (or waits for the reply) as if
    the message had gone in; the message is in flight until ``seconds`` have passed on trio's
    clock (virtual time under ``MockClock``) and then arrives in the mailbox, before anything
    sent at or after that time, even if the mailbox is full then. Messages sent meanwhile are
    not held back: they may overtake it. A delayed message that would arrive after the actor
    stopped taking messages is lost. Messages are counted in the order the mailbox accepts
    them (``tell`` and ``ask`` calls that were not refused); exit notices are never delayed.

    ``actor`` and ``incarnation`` select as in :class:`CrashOnMessage`.
    """

    actor: ActorSelector
    n: int
    seconds: float
    incarnation: int | None = 0
    kind: ClassVar[FaultKind] = "delay"

    def __post_init__(self) -> None:
        _check_selector(self.actor)
        _check_n(self.n)
        if (
            isinstance(self.seconds, bool)
            or not isinstance(self.seconds, int | float)
            or not (0 < self.seconds < math.inf)
        ):
            raise ValueError(
                f"seconds must be a finite number > 0, not {self.seconds!r}; use DropMessage "
                "for a message that never arrives"
            )
        _check_incarnation(self.incarnation)


@dataclass(frozen=True, slots=True)
class DropMessage:
    """Lose the ``n``-th message sent to the actor: the send succeeds, the message never arrives.

    For an ``ask`` that is a lost request: the asker waits as for a reply that never comes,
    until the actor exits (then it gets :class:`ActorExited`, as for any ask the actor did not
    answer) or the asker's own deadline (``trio.fail_after``) runs out. Counted as in
    :class:`DelayMessage`; ``actor`` and ``incarnation`` select as in :class:`CrashOnMessage`.
    """

    actor: ActorSelector
    n: int
    incarnation: int | None = 0
    kind: ClassVar[FaultKind] = "drop"

    def __post_init__(self) -> None:
        _check_selector(self.actor)
        _check_n(self.n)
        _check_incarnation(self.incarnation)


@dataclass(frozen=True, slots=True)
class FailStart:
    """Make the start of the actor's incarnation ``incarnation`` raise :class:`InjectedFault`.

    It fails where calling the actor's function would: for incarnation 0, ``spawn`` raises and
    no child is added; for a restart, the new incarnation exits at once with
    ``Crashed(InjectedFault(...))`` and the supervisor handles it like a crash (it restarts
    the child again, which counts towards its intensity, or gives up). ``None`` fails every
    start. ``actor`` selects as in :class:`CrashOnMessage`.
    """

    actor: ActorSelector
    incarnation: int | None = 0
    kind: ClassVar[FaultKind] = "fail_start"

    def __post_init__(self) -> None:
        _check_selector(self.actor)
        _check_incarnation(self.incarnation)


Fault: TypeAlias = CrashOnMessage | DelayMessage | DropMessage | FailStart
_FAULT_TYPES = (CrashOnMessage, DelayMessage, DropMessage, FailStart)


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """One injected fault: which rule fired, on which actor incarnation, when, on what message."""

    fault: Fault
    actor: ActorInfo
    incarnation: int
    at: float
    """``trio.current_time()`` when it was injected (when the message was sent, for a delay)."""
    message: Any = None
    """The message crashed on, delayed or dropped; ``None`` for a failed start."""

    def describe(self) -> str:
        """What was injected, as a sentence (the ``InjectedFault`` message reads the same)."""
        who = f"{self.actor.path!r} (incarnation {self.incarnation})"
        fault = self.fault
        if isinstance(fault, CrashOnMessage):
            return f"{who} crashed on its message {fault.n}, {self.message!r}"
        if isinstance(fault, DelayMessage):
            return f"message {fault.n} to {who} delayed by {fault.seconds:g}s, {self.message!r}"
        if isinstance(fault, DropMessage):
            return f"message {fault.n} to {who} dropped, {self.message!r}"
        return f"start of {who} failed"

    def __str__(self) -> str:
        return f"t={self.at:g} {self.describe()}"


def _matches(selector: ActorSelector, incarnation: int | None, node: Node) -> bool:
    if incarnation is not None and incarnation != node.restarts:
        return False
    info = node.actor_info()
    if isinstance(selector, str):
        path = info.path
        return path == selector or path.endswith("/" + selector)
    return bool(selector(info))


class Faults:
    """A plan of faults to inject under a supervisor, and the record of what it injected.

    ``faults = Faults.attach(sup, CrashOnMessage("worker", 3), FailStart("db", 1))`` right
    after opening ``sup`` (before spawning): the rules apply to every actor incarnation that
    ``sup``, or a supervisor opened under it later, starts from then on. A rule fires at most
    once per incarnation it matches; when several rules fire on the same message or start, the
    first one in the plan wins. ``faults.records`` lists what was injected, in order.

    Under ``trio.testing.MockClock`` the injections (and their records) are deterministic. A
    tree holds one plan at a time: another can be attached once the supervisor of the first
    has exited. Concurrency: used on the trio thread only, like the tree.
    """

    def __init__(self, rules: tuple[Fault, ...], root: Node) -> None:
        # Made by ``attach``, which checks the rules and binds the plan to its supervisor.
        self._rules = rules
        self._root = root
        self.records: list[FaultRecord] = []
        """What was injected, in order."""

    @classmethod
    def attach(cls, supervisor: Supervisor, *rules: Fault) -> Faults:
        """Inject ``rules`` under ``supervisor``; returns the plan, whose ``records`` fill up."""
        for rule in rules:
            if not isinstance(rule, _FAULT_TYPES):
                raise TypeError(
                    f"{rule!r} is not a fault; use CrashOnMessage, DelayMessage, DropMessage "
                    "or FailStart"
                )
        node = supervisor._node
        if node.exit_reason is not None:
            raise ValueError(f"supervisor {supervisor.path!r} has exited; attach while it runs")
        tree = node.tree
        if tree.faults is not None and tree.faults._root.exit_reason is None:
            raise ValueError(
                f"a Faults plan is already attached at {tree.faults._root.actor_info().path!r} "
                "in this tree; put all the rules in that one plan"
            )
        faults = cls(rules, node)
        tree.faults = faults
        supervisor._faults = faults  # opened before the plan existed
        return faults

    @property
    def rules(self) -> tuple[Fault, ...]:
        """The plan, as given to ``attach``."""
        return self._rules

    def __repr__(self) -> str:
        path = self._root.actor_info().path
        return f"<Faults at {path!r} rules={self.rules!r} injected={len(self.records)}>"

    def render(self) -> str:
        """The records, one line each (``t=... what``), in the order they were injected."""
        return "\n".join(map(str, self.records))

    # -- hooks called by Supervisor (see FaultHooks) ----------------------------------------

    def _covers(self, node: Node) -> bool:
        """Whether the supervisor of ``node`` is the one attached to, or opened under it."""
        current: Node | None = node
        while current is not None:
            if current is self._root:
                return True
            current = current.parent
        return False

    def _mailbox(self, node: Node, capacity: int) -> Mailbox[Any]:
        crashes: dict[int, CrashOnMessage] = {}
        sends: dict[int, DelayMessage | DropMessage] = {}
        for rule in self._rules:
            if isinstance(rule, CrashOnMessage):
                if rule.n not in crashes and _matches(rule.actor, rule.incarnation, node):
                    crashes[rule.n] = rule
            elif isinstance(rule, DelayMessage | DropMessage):
                if rule.n not in sends and _matches(rule.actor, rule.incarnation, node):
                    sends[rule.n] = rule
        if not crashes and not sends:
            return Mailbox(capacity)
        return FaultyMailbox(capacity, self, node.actor_info(), node.restarts, crashes, sends)

    def _starting(self, node: Node) -> None:
        for rule in self._rules:
            if isinstance(rule, FailStart) and _matches(rule.actor, rule.incarnation, node):
                raise InjectedFault(self._record(rule, node.actor_info(), node.restarts))

    def _record(
        self, fault: Fault, actor: ActorInfo, incarnation: int, message: Any = None
    ) -> FaultRecord:
        record = FaultRecord(fault, actor, incarnation, trio.current_time(), message)
        self.records.append(record)
        return record


class FaultyMailbox(Mailbox[M]):
    """The mailbox of an incarnation that a message rule of a :class:`Faults` plan matches.

    It behaves as a ``Mailbox`` except for the planned messages: the ``n``-th message
    received raises :class:`InjectedFault` (:class:`CrashOnMessage`), the ``n``-th message
    sent is held in flight (:class:`DelayMessage`) or lost (:class:`DropMessage`). In-flight
    messages arrive at their due time: each operation on the mailbox first lets those that are
    due arrive, and a receiver waiting on an empty mailbox wakes when the next one is due.
    """

    __slots__ = (
        "_crashes",
        "_faults",
        "_in_flight",
        "_incarnation",
        "_info",
        "_sends",
        "_sent_count",
    )

    def __init__(
        self,
        capacity: int,
        faults: Faults,
        info: ActorInfo,
        incarnation: int,
        crashes: dict[int, CrashOnMessage],
        sends: dict[int, DelayMessage | DropMessage],
    ) -> None:
        super().__init__(capacity)
        self._faults = faults
        # Its owner's identity, not its node: no reference loop outlives the actor.
        self._info = info
        self._incarnation = incarnation
        self._crashes = crashes
        self._sends = sends
        self._sent_count = 0  # messages accepted (or faulted) so far, for ``sends``
        # (due, sequence, message): a heap, so equal due times arrive in the order sent.
        self._in_flight: list[tuple[float, int, M]] = []

    def _arrive_due(self) -> None:
        """Let every in-flight message whose time has come arrive, earliest first."""
        in_flight = self._in_flight
        if not in_flight:
            return
        if self._closed:  # the actor stopped taking messages: they are lost
            in_flight.clear()
            return
        now = trio.current_time()
        while in_flight and in_flight[0][0] <= now:
            message = heapq.heappop(in_flight)[2]
            if not self._hand_to_receiver(message):  # into the queue, even a full one
                if self._data is None:
                    self._data = deque()
                self._data.append(message)
                self._sent += 1

    # -- sending ----------------------------------------------------------------------------

    def _put_nowait(self, message: M, describe: str) -> None:
        self._arrive_due()
        # Senders waiting for room are ahead of this message in the count.
        n = self._sent_count + len(self._senders) + 1
        rule = None if self._closed else self._sends.get(n)
        if rule is None:
            super()._put_nowait(message, describe)  # MailboxFull: counted once taken
            self._sent_count += 1
            return
        self._sent_count += 1
        self._record(rule, message)
        if isinstance(rule, DelayMessage):
            due = trio.current_time() + rule.seconds
            heapq.heappush(self._in_flight, (due, n, message))

    def _record(self, rule: Fault, message: Any) -> FaultRecord:
        return self._faults._record(rule, self._info, self._incarnation, message)

    async def _wait_for_room(self, message: M) -> None:
        await super()._wait_for_room(message)
        self._sent_count += 1

    def _close(self, describe: str) -> None:
        self._arrive_due()  # what was due before the stop request has arrived
        super()._close(describe)
        self._in_flight.clear()

    # -- receiving --------------------------------------------------------------------------

    def receive_nowait(self) -> M:
        self._arrive_due()
        message = super().receive_nowait()
        rule = self._crashes.get(self._received)
        if rule is not None:
            raise InjectedFault(self._record(rule, message))
        return message

    def _hand_outcome_to_receiver(self, outcome: Outcome[M]) -> bool:
        if self._receiver is not None or self._receivers:  # it will be received now
            rule = self._crashes.get(self._received + 1)
            if rule is not None:
                message = outcome.value if isinstance(outcome, Value) else None
                outcome = Error(InjectedFault(self._record(rule, message)))
        return super()._hand_outcome_to_receiver(outcome)

    async def _receive(self, iterating: bool) -> M:
        while True:
            self._arrive_due()
            if not self._in_flight:
                return await super()._receive(iterating)
            with trio.move_on_at(self._in_flight[0][0]):
                return await super()._receive(iterating)
            # The next in-flight message is due: let it arrive and receive again.

    # -- statistics see what has arrived by now ------------------------------------------------

    def __len__(self) -> int:
        self._arrive_due()
        return super().__len__()
