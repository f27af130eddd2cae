"""The runtimes of a state machine, one after another over one store, as processes that can
be killed: :class:`Processes`.

A crash kills the current runtime as ``SIGKILL`` would: its view of the store
(:class:`ProcessStore`) fails everything it asks from then on, so nothing it does after
reaches the data; its tasks and the requests in flight on it are cancelled (those return
:data:`LOST`); and, once its tasks ended, a fresh runtime opens the same data. A crash
happens now (:meth:`Processes.crash`) or right after a given commit
(:meth:`Processes.arm`), in the middle of whatever writes it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import trio

from .._core.errors import RuntimeClosed, StoreError
from .._runtime.runtime import AgentRuntime
from .._store.base import Store, Transaction, Write
from .._store.memory import MemoryStore
from ._probe import Probe

LOST = object()
"""What :meth:`Processes.request` returns when there was no runtime to answer, or it
crashed (or closed at the end) before it answered."""
CLOSED = object()
"""What :meth:`Processes.request` returns when a runtime closing gracefully (a restart)
raised :class:`~pai_actors.RuntimeClosed`: it refused the request."""


class ProcessStore:
    """A runtime's view of the data, as one process holds it: its commits reach the data
    until the process is killed; from then on everything it asks fails with
    :class:`~pai_actors.StoreError`. ``after_commit`` is told of each commit written (it
    may kill the process then, and raise)."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.data_store = inner  # (a test runtime's ids continue the generations it holds)
        self.killed = False
        self.after_commit: Callable[[], None] = lambda: None

    def transaction(self) -> Transaction:
        return Transaction(cast(Store, self))

    def _check_alive(self) -> None:
        if self.killed:
            raise StoreError("this runtime crashed (simulated): nothing it asks reaches the store")

    async def commit(self, writes: Sequence[Write]) -> None:
        self._check_alive()
        await trio.lowlevel.checkpoint_if_cancelled()
        await self._inner.commit(writes)
        self.after_commit()

    def __getattr__(self, name: str) -> Any:  # the reads (made once, then an attribute)
        attribute = getattr(self._inner, name)
        if not callable(attribute) or name.startswith("_"):
            return attribute

        async def read(*args: Any, **kwargs: Any) -> Any:
            self._check_alive()
            return await attribute(*args, **kwargs)

        setattr(self, name, read)
        return read


@dataclass(eq=False)
class Process:
    """One runtime (a process, as far as crashes go): ``number`` counts from 1."""

    number: int
    store: ProcessStore
    runtime: AgentRuntime | None = None
    crashed: bool = False
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    closing: trio.Event = field(default_factory=trio.Event)
    closed: trio.Event = field(default_factory=trio.Event)
    requests: set[trio.CancelScope] = field(default_factory=set)


class Processes:
    """The current runtime over ``store`` and its successors. ``open_runtime(store)`` makes
    a runtime on a process's view; the processes' tasks run in ``nursery``; ``probe``
    counts its executions per process; ``opened(process)`` is told when a runtime is up
    (the clients reconnect); ``note`` and ``violation`` report (a runtime that fails other
    than by a crash is a violation).

    Concurrency contract: used from the tasks of one trio run. A request either answers or
    returns :data:`LOST` (its runtime crashed or closed under it) or :data:`CLOSED`, never
    hangs on a runtime that is gone; once :meth:`close` began, a crash opens no successor.
    A graceful restart (:meth:`retire`, then :meth:`open` once it closed) is driven by the
    caller.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        open_runtime: Callable[[Store], AgentRuntime],
        nursery: trio.Nursery,
        probe: Probe,
        opened: Callable[[Process], None],
        note: Callable[[str], None],
        violation: Callable[[str, BaseException], None],
    ) -> None:
        self._store = store
        self._open_runtime = open_runtime
        self._nursery = nursery
        self._probe = probe
        self._opened = opened
        self._note = note
        self._violation = violation
        self.current: Process | None = None
        self.count = 0
        self.closing = False
        self._crash_in: int | None = None  # commits until an armed crash

    def open(self) -> None:
        """Open a runtime on the store (the first, or the one after a crash); it is up once
        the tasks settled."""
        self.count += 1
        self._probe.process = self.count
        process = Process(self.count, ProcessStore(self._store))
        process.store.after_commit = functools.partial(self._committed, process)
        self.current = process
        self._nursery.start_soon(self._serve, process)

    def live(self) -> Process | None:
        """The current process, if its runtime is up and did not crash."""
        process = self.current
        if process is None or process.crashed or process.runtime is None:
            return None
        return process

    async def request(self, call: Callable[[AgentRuntime], Awaitable[Any]]) -> Any:
        """``await call(runtime)`` on the current runtime, or :data:`LOST`."""
        process = self.live()
        if process is None or process.runtime is None:
            return LOST
        with trio.CancelScope() as scope:
            process.requests.add(scope)
            try:
                return await call(process.runtime)
            except RuntimeClosed:
                if process.crashed or self.closing:
                    return LOST
                if process.closing.is_set():
                    return CLOSED
                raise
            except StoreError:
                if not (process.crashed or self.closing):
                    raise
            finally:
                process.requests.discard(scope)
        return LOST

    def crash(self) -> None:
        """Kill the current runtime now."""
        process = self.live()
        if process is not None:
            self._crash(process, "now")

    def arm(self, after_commits: int) -> None:
        """Kill the runtime right after the ``after_commits``-th next commit (``>= 1``)."""
        self._crash_in = after_commits

    def retire(self) -> Process | None:
        """Ask the current runtime to close gracefully, as a deploy does (it is closed once
        ``closed`` is set; :meth:`open` its successor then, unless it crashed meanwhile,
        which opens one): the process, or ``None`` if there is no live runtime."""
        process = self.live()
        if process is not None:
            self._note(f"runtime {process.number} closing (a restart)")
            process.closing.set()
        return process

    def close(self) -> None:
        """Ask the current runtime to close (it is closed once ``current.closed`` is set);
        disarm any crash."""
        self.closing = True
        self._crash_in = None
        if self.current is not None:
            self.current.closing.set()

    def cancel_requests(self, process: Process | None = None) -> None:
        """End the requests still in flight on ``process`` (by default the current one), once
        it closed: they return :data:`LOST`."""
        process = self.current if process is None else process
        if process is not None:
            for scope in process.requests:
                scope.cancel()

    async def _serve(self, process: Process) -> None:
        """One runtime's life, in its own cancel scope (a crash cancels it)."""
        try:
            with process.scope:
                async with self._open_runtime(cast(Store, process.store)) as rt:
                    process.runtime = rt
                    self._note(f"runtime {process.number} opened")
                    self._opened(process)
                    await process.closing.wait()
        except Exception as exc:
            if not process.crashed:
                self._violation(f"runtime {process.number} failed: {exc!r}", exc)
        finally:
            process.closed.set()

    def _committed(self, process: Process) -> None:
        if self._crash_in is None:
            return
        self._crash_in -= 1
        if self._crash_in == 0:
            self._crash_in = None
            self._crash(process, "right after a commit")
            raise StoreError("the runtime crashed (simulated) right after this commit")

    def _crash(self, process: Process, when: str) -> None:
        if process.crashed:
            return
        process.crashed = True
        process.store.killed = True
        self._probe.crashed.add(process.number)
        self._note(f"runtime {process.number} crashed {when}")
        process.scope.cancel()
        for scope in process.requests:
            scope.cancel()
        if not self.closing:
            self._nursery.start_soon(self._restart, process)

    async def _restart(self, process: Process) -> None:
        await process.closed.wait()
        self.open()
