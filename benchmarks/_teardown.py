"""Figure ``teardown``: cancelling a whole supervision tree from its root.

The tree has depth ``depth`` and fan-out ``fanout``: one root actor, ``fanout`` children of
it, and so on, ``sum(fanout**k for k in 0..depth)`` actors in all (11,111 for depth 4 and
fan-out 10). Interior actors open a nested supervisor for their children; every actor then
waits on its mailbox. Only the teardown is timed: the tree is built, the harness waits until
every task is blocked and collects the build's garbage, then times ``sup.cancel(...)`` until
the top supervisor's block has exited, and checks that an exit record arrived for every
actor. The baseline is a bare tree of nested nurseries of the same shape, cancelled from the
root the same way. The figure is a ratio of times (lower is better).
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from typing import Any

import trio
import trio.testing

from supervisors import Cancelled, ExitRecord, Mailbox, open_supervisor

from ._harness import Record, Target, fresh, interleave, method, time_record

TARGET = Target("<=", 2.0)
REASON = "benchmark teardown"


def tree_size(depth: int, fanout: int) -> int:
    """How many actors (or tasks) a tree of this shape has."""
    return sum(fanout**level for level in range(depth + 1))


def _candidate(depth: int, fanout: int) -> float:
    def actor(level: int) -> Any:
        async def run(mailbox: Mailbox[object]) -> None:
            if level == depth:
                async for _ in mailbox:
                    pass
                return
            async with open_supervisor(name="children") as sup:
                for i in range(fanout):
                    sup.spawn(actor(level + 1), name=f"a{i}")
                async for _ in mailbox:
                    pass

        return run

    exits: Counter[str] = Counter()
    wrong: list[ExitRecord] = []

    def count(record: ExitRecord) -> None:
        exits[record.actor.kind] += 1
        if record.actor.kind == "actor" and record.reason != Cancelled(REASON):
            wrong.append(record)

    async def main() -> float:
        async with open_supervisor(name="bench") as sup:
            sup.add_exit_listener(count)
            sup.spawn(actor(0), name="root")
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()  # the build's garbage is the build's cost, not the teardown's
            start = time.perf_counter()
            sup.cancel(REASON)
        return time.perf_counter() - start

    elapsed = trio.run(main)
    expected = tree_size(depth, fanout)
    if exits["actor"] != expected or wrong:
        raise AssertionError(
            f"expected {expected} actor exits cancelled with {REASON!r}; got {dict(exits)} "
            f"with {len(wrong)} other reasons: {wrong[:3]!r}"
        )
    return elapsed


def _baseline(depth: int, fanout: int) -> float:
    async def node(level: int) -> None:
        if level == depth:
            await trio.sleep_forever()
        async with trio.open_nursery() as nursery:
            for _ in range(fanout):
                nursery.start_soon(node, level + 1)
            await trio.sleep_forever()

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(node, 0)
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            start = time.perf_counter()
            nursery.cancel_scope.cancel(REASON)
        return time.perf_counter() - start

    return trio.run(main)


def tree_teardown(depth: int = 4, fanout: int = 10, *, repeats: int = 3) -> Record:
    """Seconds to cancel a supervision tree from its root vs a bare nested-nursery tree."""
    seconds, baseline_seconds = interleave(
        repeats,
        lambda: float(fresh(_candidate, depth=depth, fanout=fanout)),
        lambda: float(fresh(_baseline, depth=depth, fanout=fanout)),
    )
    return time_record(
        "teardown",
        baseline="trio nested nurseries cancelled from the root",
        target=TARGET,
        n=tree_size(depth, fanout),
        seconds=seconds,
        baseline_seconds=baseline_seconds,
        method=method(
            repeats,
            "only the teardown timed, after every task is blocked and gc.collect(); "
            "every actor's exit record checked",
        ),
    )
