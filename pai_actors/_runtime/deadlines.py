"""Firing the deadlines of pending actions: one timer per runtime (:class:`DeadlineTimer`),
and what resolving one at its deadline means (:func:`fire_deadline`).

A waiting call has no task (passivation), so nothing of the call can wait for its deadline;
a task per pending action would also cost what passivation saves. The runtime has one timer
task instead. It asks the store for the earliest deadline (``Store.list_expiring_actions``,
an indexed query over every thread), sleeps on trio's clock until then, resolves what is due,
and asks again. A deadline this runtime stores later is given to the timer as its commit
lands (:meth:`DeadlineTimer.note`, from the runtime's publishing transaction), and wakes it
early when it is the nearest. So the timer holds one instant, not a heap of every deadline,
and a deadline that passed while no runtime ran is resolved when the next one opens, whether
or not anything loads its thread.

Resolving at the deadline is a transition of the call's record like a client's submission
(:func:`_core.deadlines.expire` through :func:`~_runtime.resolution.resolve`), written against
the record's revision: of a deadline and a submission that race, the first to commit resolves
the action, and the other finds it resolved (the submission is rejected as for any resolved
action; the deadline does nothing). The run then goes on as after a submission.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import trio

from .._core.actions import ActionResult
from .._core.clock import Clock
from .._core.deadlines import CancelAtDeadline, OnDeadline, expire
from .._core.records import OpenAction, StoredCall
from .._store.base import Store
from .._tools.agent import AgentDefinition
from .resolution import resolve
from .services import Services

_log = logging.getLogger("pai_actors")

BATCH = 64
"""How many due actions the timer reads at a time."""

RETRY = timedelta(seconds=1)
"""How long the timer waits after its store failed before it reads again (doubling, up to
:data:`RETRY_CAP`)."""
RETRY_CAP = timedelta(seconds=60)

_CANCEL = CancelAtDeadline()


class DeadlineTimer:
    """The runtime's one timer for every pending action's deadline (see the module
    docstring). ``fire(action)`` resolves a due action and says whether it did. An action it
    did not resolve (its thread cannot be loaded here, its tool is no longer registered, its
    run is being cancelled) is not tried again by this runtime; one whose resolution raised
    (the store failed) is tried again after :data:`RETRY_CAP`. Either way the others go on.

    Concurrency contract: :meth:`run` is the timer's own task (the runtime's nursery owns
    it); :meth:`note` is synchronous, never blocks, and may be called from any task of the
    runtime's trio run. Firing is one action at a time, each a commit of its own.
    """

    def __init__(
        self, *, store: Store, now: Clock, fire: Callable[[OpenAction], Awaitable[bool]]
    ) -> None:
        self._store = store
        self._now = now
        self._fire = fire
        self._noted: datetime | None = None  # deadlines stored since the timer last read
        self._wake: datetime | None = None  # when the sleeping timer wakes (None: never)
        self._sleep: trio.CancelScope | None = None  # its sleep, while it sleeps
        # (thread id, action id) -> not before this instant (None: not in this runtime)
        self._held: dict[tuple[str, str], datetime | None] = {}
        # set once the first look is over: the deadlines that passed while no runtime ran
        # are resolved (or failed to be, to be tried again later)
        self.swept = trio.Event()

    def note(self, at: datetime) -> None:
        """A pending action with the deadline ``at`` was stored: wake the timer early if
        that is sooner than it would wake."""
        if self._noted is None or at < self._noted:
            self._noted = at
        sleep = self._sleep
        if sleep is not None and (self._wake is None or at < self._wake):
            sleep.cancel()

    async def run(self) -> None:
        """Resolve every deadline as it passes, until cancelled (the runtime closing)."""
        failures = 0
        while True:
            self._noted = None  # what is stored from here on is read below, or noted
            try:
                wake = await self._fire_due()
            except Exception:  # the store failed: the deadlines are kept, read them later
                failures += 1
                _log.exception("reading the deadlines of pending actions failed")
                wake = self._now() + min(RETRY_CAP, RETRY * 2 ** (failures - 1))
            else:
                failures = 0
            self.swept.set()
            noted = self._noted
            if noted is not None and (wake is None or noted < wake):
                wake = noted
            await self._sleep_until(wake)

    def _holds(self, action: OpenAction, now: datetime) -> bool:
        key = _key(action)
        if key not in self._held:
            return False
        until = self._held[key]
        return until is None or until > now

    async def _fire_due(self) -> datetime | None:
        """Resolve what is due now; return when to look next (``None``: no deadline)."""
        held = self._held
        while True:
            now = self._now()
            due = await self._store.list_expiring_actions(until=now, limit=BATCH + len(held))
            fresh = [action for action in due if not self._holds(action, now)]
            if not fresh:  # ``due`` holds every due action: forget those resolved since
                for key in held.keys() - {_key(action) for action in due}:
                    del held[key]
                break
            for action in fresh:
                try:
                    fired = await self._fire(action)
                except Exception:
                    _log.exception("resolving action %r at its deadline failed", action.ref)
                    held[_key(action)] = self._now() + RETRY_CAP
                    continue
                if not fired:
                    held[_key(action)] = None
        # At most len(held) of these are held: the first other is the next deadline.
        upcoming = await self._store.list_expiring_actions(limit=len(held) + 1)
        wake = next((a.expires_at for a in upcoming if not self._holds(a, now)), None)
        retry = min((at for at in held.values() if at is not None), default=None)
        if retry is not None and (wake is None or retry < wake):
            wake = retry
        return wake

    async def _sleep_until(self, wake: datetime | None) -> None:
        """Sleep on trio's clock until ``wake`` by the runtime's clock (forever for
        ``None``), or until :meth:`note` wakes the timer for a sooner deadline."""
        self._wake = wake
        with trio.CancelScope() as self._sleep:
            if wake is None:
                await trio.sleep_forever()
            else:
                await trio.sleep(max(0.0, (wake - self._now()).total_seconds()))
        self._sleep = None


def _key(action: OpenAction) -> tuple[str, str]:
    return action.ref.thread_id, action.ref.action_id


async def fire_deadline(
    services: Services, action: OpenAction, agent: AgentDefinition
) -> ActionResult:
    """Resolve ``action`` (of a thread run by ``agent``), whose deadline passed, as its
    definition declares (see :func:`on_deadline_of`)."""
    ref = action.ref
    outcome = await on_deadline_of(services, action.call, agent, ref.action_id)
    return await resolve(
        services,
        ref,
        lambda record, spec: expire(record, spec, ref.action_id, outcome, at=services.now()),
    )


async def on_deadline_of(
    services: Services, call: StoredCall, agent: AgentDefinition, action_id: str
) -> OnDeadline:
    """What the definition of ``call``'s action ``action_id`` declares for its deadline: the
    suspend point's ``on_deadline``, the registration's ``on_approval_deadline`` or
    ``on_output_deadline``, or the client tool's ``on_deadline`` (from the run's stored
    request after a restart). A definition no longer found cancels (the resolution then
    judges the call as it does a submission)."""
    record = call.record
    if record.dynamic:
        key = (call.thread_id, record.tool_call_id)
        client_tool = services.client_tools.get(key)
        if client_tool is not None:
            return client_tool.on_deadline
        run = await services.store.get_run(call.run_id)
        stored = next((t for t in run.client_tools if t.name == record.name), None) if run else None
        return _CANCEL if stored is None else stored.tool().on_deadline
    registration = agent.tools.get(record.name)
    if registration is None:
        return _CANCEL
    if record.approval is not None and record.approval.id == action_id:
        return registration.on_approval_deadline
    if action_id == record.tool_call_id and record.output_action is not None:
        return registration.on_output_deadline
    episode = next((e for e in record.episodes if e.action_id == action_id), None)
    point = None if episode is None else registration.tool.config.suspend.get(episode.name)
    return _CANCEL if point is None else point.on_deadline
