"""Test helpers for code built on :mod:`supervisors` (part of the product, documented)."""

from __future__ import annotations

from ._exit import ExitReason
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


__all__ = ["ExitLog"]
