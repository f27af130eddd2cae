"""Test helpers for code built on :mod:`supervisors` (part of the product, documented).

- :class:`ExitLog` keeps every exit under a supervisor, to assert on.
- :class:`Faults` injects faults under a supervisor and records them: crash an actor at its
  ``n``-th message (:class:`CrashOnMessage`), delay or drop a message sent to it
  (:class:`DelayMessage`, :class:`DropMessage`), fail a child's start (:class:`FailStart`).
  Injected crashes and start failures raise :class:`InjectedFault`.

``docs/guides/testing-supervisors.md`` shows them at work, with a Hypothesis property test.
"""

from __future__ import annotations

from ._exit import ExitReason
from ._faults import CrashOnMessage as CrashOnMessage
from ._faults import DelayMessage as DelayMessage
from ._faults import DropMessage as DropMessage
from ._faults import FailStart as FailStart
from ._faults import Fault as Fault
from ._faults import FaultRecord as FaultRecord
from ._faults import Faults as Faults
from ._faults import InjectedFault as InjectedFault
from ._node import ExitRecord, format_tree
from ._supervisor import Supervisor


class ExitLog:
    """Collects every exit under a supervisor, in order.

    Attach it inside ``async with open_supervisor() as sup:`` with
    ``log = ExitLog.attach(sup)``; afterwards read ``log.records``, ``log.reasons()`` or
    ``print(log.render())``.
    """

    def __init__(self) -> None:
        self.records: list[ExitRecord] = []

    @classmethod
    def attach(cls, supervisor: Supervisor) -> ExitLog:
        log = cls()
        supervisor.add_exit_listener(log.records.append)
        return log

    def reasons(self) -> dict[str, ExitReason]:
        """Exit reason by path (the last incarnation's for restarted children)."""
        return {record.actor.path: record.reason for record in self.records}

    def render(self) -> str:
        """The exited tree, each node labelled with its exit reason (last incarnation)."""
        latest: dict[str, ExitRecord] = {}
        for record in self.records:
            latest[record.actor.path] = record
        restarts: dict[str, int] = {}
        for record in self.records:
            restarts[record.actor.path] = restarts.get(record.actor.path, -1) + 1
        rows = []
        for path, record in latest.items():
            label = f"{record.actor.kind} {record.actor.name}: {record.reason}"
            if restarts[path]:
                label += f" (after {restarts[path]} restart{'s' if restarts[path] > 1 else ''})"
            rows.append((record.actor, label))
        return format_tree(rows)


__all__ = [
    "CrashOnMessage",
    "DelayMessage",
    "DropMessage",
    "ExitLog",
    "FailStart",
    "Fault",
    "FaultRecord",
    "Faults",
    "InjectedFault",
]


def _fix_module_names() -> None:
    # Tracebacks and reprs read ``supervisors.testing.Faults``, not ``supervisors._faults...``.
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith("supervisors._"):
            try:
                obj.__module__ = __name__
            except (AttributeError, TypeError):  # type aliases refuse it
                pass


_fix_module_names()
del _fix_module_names
