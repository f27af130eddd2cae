"""A trio run in a worker thread of its own, driven job by job from the thread that made it:
how the synchronous rules of :class:`~pai_actors.testing.AgentStateMachine` run trio code
(``testing._state_machine`` says why a thread).
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import outcome
import trio
import trio.testing

from ._simulation import seeded_scheduler

Job = tuple[Callable[[], Awaitable[Any]], "queue.SimpleQueue[outcome.Outcome[Any]]"]
"""A job and where its outcome goes."""


class TrioThread:
    """A trio run in a worker thread of its own, under ``clock`` and with trio's scheduler
    seeded: :meth:`call` runs ``await job()`` in it and returns its result (or raises its
    exception); :meth:`stop` ends the run. ``host(serve)`` is the run's main function; it
    awaits ``serve()``, which serves the jobs until :meth:`stop`.

    Concurrency contract: driven by one thread, one job at a time; between two jobs the
    run does nothing unless a task of it is ready (a job ends once every task is blocked).
    """

    def __init__(
        self,
        host: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]],
        *,
        clock: trio.abc.Clock,
        seed: int,
        timeout: float,
    ) -> None:
        self._timeout = timeout
        self._started = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._jobs: trio.MemorySendChannel[Job] | None = None
        self._reply: queue.SimpleQueue[outcome.Outcome[Any]] | None = None
        self._failure: BaseException | None = None
        self._stuck = False
        self._thread = threading.Thread(
            target=self._run, args=(host, clock, seed), name="pai-actors-trio-thread", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._token is None:
            raise RuntimeError("the trio run did not start") from self._failure

    def _run(self, host: Any, clock: trio.abc.Clock, seed: int) -> None:
        try:
            with seeded_scheduler(seed):
                trio.run(host, self._serve, clock=clock)
        except BaseException as exc:  # reported to the driving thread by call()
            self._failure = exc
        finally:
            self._started.set()
            reply = self._reply
            if reply is not None:
                reply.put(outcome.Error(RuntimeError("the trio run ended")))

    async def _serve(self) -> None:
        send, receive = trio.open_memory_channel[Job](math.inf)
        self._jobs = send
        self._token = trio.lowlevel.current_trio_token()
        # What the host started (a runtime opening) comes to rest before the first job can
        # arrive: else that job's arrival, in real time, would change which tasks share a
        # batch, and so the scheduler's draws, and the replay would differ.
        await trio.testing.wait_all_tasks_blocked()
        self._started.set()
        async with receive:
            async for job, reply in receive:
                try:
                    result: outcome.Outcome[Any] = outcome.Value(await job())
                except Exception as exc:
                    result = outcome.Error(exc)
                reply.put(result)

    def call(self, job: Callable[[], Awaitable[Any]]) -> Any:
        """``await job()`` in the run: its result, or its exception raised here;
        ``AssertionError`` if it takes ``timeout`` real seconds (the run is stuck then:
        :meth:`stop` leaves its thread behind)."""
        if self._stuck or self._token is None or self._jobs is None:
            raise RuntimeError("the trio run has ended") from self._failure
        reply: queue.SimpleQueue[outcome.Outcome[Any]] = queue.SimpleQueue()
        self._reply = reply
        try:
            self._token.run_sync_soon(self._jobs.send_nowait, (job, reply))
        except trio.RunFinishedError:
            raise RuntimeError("the trio run has ended") from self._failure
        try:
            result = reply.get(timeout=self._timeout)
        except queue.Empty:
            self._stuck = True
            raise AssertionError(
                f"a job did not end within {self._timeout:g} s of real time: a task never "
                "blocks (a loop without a blocking await?) or blocks the trio thread (a "
                "blocking call in an async function)"
            ) from None
        finally:
            self._reply = None
        return result.unwrap()

    def stop(self) -> None:
        """End the trio run (what it still runs is cancelled) and wait for its thread."""
        if self._token is not None and self._jobs is not None and self._thread.is_alive():
            try:
                self._token.run_sync_soon(self._jobs.close)
            except trio.RunFinishedError:
                pass
            self._thread.join(0.0 if self._stuck else self._timeout)
