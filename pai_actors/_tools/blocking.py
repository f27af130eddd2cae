"""Blocking tools: where a plain ``def`` ``execute`` runs, per runtime.

``create_agent_runtime(..., sync_tools="thread", thread_limit=40)`` runs a tool whose
``execute`` is a plain ``def`` in a worker thread (``trio.to_thread.run_sync``) under one
``trio.CapacityLimiter`` of ``thread_limit`` tokens per runtime, so a blocking call (an HTTP
client, a database driver, ``time.sleep``) does not stall the trio loop. ``"inline"`` runs it
on the trio thread instead, as an ``async def`` would: deterministic, and what a simulation
under ``trio.testing.MockClock(autojump_threshold=0)`` needs (while a worker thread works,
every trio task is blocked, so the autojump clock jumps and deadlines fire that real time
never reached).

Only ``execute`` moves: the other callbacks (``map_context``, ``enabled``, descriptions,
``to_model_output``, ``on_output``, ``map_error``, ``runtime_context``) run inline even when
they are plain ``def``; they are meant to be cheap.

Cancellation (``cancel_run``, an abort, the runtime closing) does not wait for the thread:
the call is recorded cancelled at once and ``ctx.signal.aborted`` is true, but Python cannot
interrupt a running thread, so ``execute`` runs on until it returns, unless it looks at
``ctx.signal.aborted`` (or calls ``trio.from_thread.check_cancelled()``) and stops. What it
returns (or raises) then is discarded, and the discard is recorded: a ``WARNING`` record on
the ``pai_actors`` logger (``extra``: ``tool_call_id``, ``tool_name``, ``discarded``) and the
``discarded`` count of :meth:`BlockingTools.statistics`. A call cancelled while waiting for
a token of the limiter never starts its ``execute``.

In a worker thread, ``ctx``'s plain values and constructors work (``ctx.input``,
``ctx.context``, ``ctx.entry``, ``ctx.thread``, ``ctx.signal.aborted``, ``ctx.suspend(...)``,
``ctx.fail(...)``); its async methods (``ctx.data``, ``ctx.files``, ``ctx.tools``,
``ctx.agents``, ``ctx.trigger``, ``ctx.signal.wait``) raise a ``RuntimeError`` saying so when
called there, and work through ``trio.from_thread.run(ctx.data.write, ...)``.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import trio

from .._core.errors import RuntimeConfigError
from .registration import call_callback
from .signal import require_trio

SyncTools = Literal["thread", "inline"]
"""Where a plain ``def`` ``execute`` runs: ``"thread"`` (a worker thread) or ``"inline"``."""

DEFAULT_THREAD_LIMIT = 40
"""Worker threads a runtime runs plain ``def`` executes in at once by default: trio's (and
AnyIO's, so FastAPI's and pydantic-ai's) default thread limit."""

_log = logging.getLogger("pai_actors")


@dataclass(frozen=True, slots=True)
class BlockingToolStatistics:
    """A snapshot of a runtime's blocking tools (:meth:`BlockingTools.statistics`).

    ``running``: executes in worker threads now (abandoned ones included); ``abandoned``:
    those of them whose call was cancelled; ``discarded``: results (or exceptions) of
    abandoned executes thrown away since the runtime was made.
    """

    sync_tools: SyncTools
    thread_limit: int
    running: int
    abandoned: int
    discarded: int


class BlockingTools:
    """A runtime's policy for plain ``def`` executes, its limiter and its counters.

    Concurrency contract: :meth:`call` is used from the runtime's trio tasks; the counters
    are also updated from worker threads, under a lock, so :meth:`statistics` may be read
    from any thread.
    """

    def __init__(
        self, sync_tools: SyncTools = "thread", thread_limit: int = DEFAULT_THREAD_LIMIT
    ) -> None:
        if sync_tools not in ("thread", "inline"):
            raise RuntimeConfigError(
                f"sync_tools must be 'thread' (plain def executes run in worker threads) or "
                f"'inline' (on the trio thread), got {sync_tools!r}"
            )
        if isinstance(thread_limit, bool) or not isinstance(thread_limit, int) or thread_limit < 1:
            raise RuntimeConfigError(
                f"thread_limit must be an int >= 1 (worker threads at once), got {thread_limit!r}"
            )
        self.sync_tools: SyncTools = sync_tools
        self.thread_limit = thread_limit
        self._limiter: trio.CapacityLimiter | None = None
        self._lock = threading.Lock()
        self._running = 0
        self._abandoned = 0
        self._discarded = 0

    def statistics(self) -> BlockingToolStatistics:
        with self._lock:
            return BlockingToolStatistics(
                self.sync_tools, self.thread_limit, self._running, self._abandoned, self._discarded
            )

    async def call(self, execute: Callable[..., Any], ctx: Any) -> Any:
        """``execute(ctx)``: awaited inline when it is ``async`` (or the runtime is
        ``"inline"``), else run in a worker thread under the limiter (an awaitable it
        returns is awaited here, on the trio thread)."""
        if self.sync_tools == "inline" or _is_async(execute):
            return await call_callback(execute, ctx)
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(self.thread_limit)
        job = _Job(self, execute, _for_thread(ctx))
        thread = ctx.thread
        try:
            [result] = await trio.to_thread.run_sync(
                job.run,
                abandon_on_cancel=True,
                limiter=self._limiter,
                thread_name=f"pai_actors tool {thread.tool_name} {thread.tool_call_id}",
            )
        except trio.Cancelled:
            ctx.signal._abort(None)  # already aborted by every runtime path; never missed
            job.abandon()
            raise
        if inspect.isawaitable(result):
            result = await result
        return result


class _Job:
    """One plain ``def`` execute handed to a worker thread, and who abandoned whom.

    ``abandon`` (trio side, on cancellation) and the end of ``run`` (worker side) meet under
    the lock, so exactly one of them records a discarded result, and a job abandoned before
    its thread picked it up never calls ``execute``.
    """

    def __init__(self, tools: BlockingTools, execute: Callable[..., Any], ctx: Any) -> None:
        self.tools = tools
        self.execute = execute
        self.ctx = ctx
        self.lock = threading.Lock()
        self.started = False
        self.finished: str | None = None  # "returned" / "raised ..." once execute ended
        self.abandoned = False

    def run(self) -> tuple[Any]:
        """In the worker thread: ``(execute(ctx),)``, boxed because trio refuses a
        coroutine as the result of a thread (an awaitable it returns is awaited on trio)."""
        with self.lock:
            if self.abandoned:
                return (None,)  # cancelled before a thread was free: execute never runs
            self.started = True
        tools = self.tools
        with tools._lock:
            tools._running += 1
        try:
            result = self.execute(self.ctx)
        except BaseException as exc:
            self._end(f"raised {type(exc).__name__}: {exc}")
            raise
        self._end("returned")
        if inspect.iscoroutine(result) and self.abandoned:
            result.close()  # nobody will await it
        return (result,)

    def _end(self, outcome: str) -> None:
        tools = self.tools
        with self.lock:
            self.finished = outcome
            abandoned = self.abandoned
            with tools._lock:
                tools._running -= 1
                if abandoned:
                    tools._abandoned -= 1
        if abandoned:
            self._discard(outcome)

    def abandon(self) -> None:
        with self.lock:
            self.abandoned = True
            finished = self.finished
            if self.started and finished is None:
                with self.tools._lock:
                    self.tools._abandoned += 1
        if finished is not None:  # it ended, but its result came after the cancellation
            self._discard(finished)

    def _discard(self, outcome: str) -> None:
        with self.tools._lock:
            self.tools._discarded += 1
        thread = self.ctx.thread
        _log.warning(
            "tool call %r (%s): execute %s after the call was cancelled; discarded (the call "
            "stays recorded cancelled)",
            thread.tool_call_id,
            thread.tool_name,
            outcome,
            extra={
                "tool_call_id": thread.tool_call_id,
                "tool_name": thread.tool_name,
                "discarded": outcome,
            },
        )


def _is_async(function: Callable[..., Any]) -> bool:
    """Whether ``function`` is a coroutine function (also a partial of one, or an object
    whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 (the method, not callability)
    )


def _for_thread(ctx: Any) -> Any:
    """``ctx`` for a worker thread: ``files`` and ``agents`` refuse their async methods
    there with a clear error (``data``, ``tools``, ``trigger`` and ``signal.wait`` check for
    themselves)."""
    files = None if ctx.files is None else _TrioOnly(ctx.files, "ctx.files")
    agents = None if ctx.agents is None else _TrioOnly(ctx.agents, "ctx.agents")
    return replace(ctx, files=files, agents=agents)


class _TrioOnly:
    """A view of ``target`` whose async methods raise outside the trio thread (see
    :func:`require_trio`); everything else is ``target``'s."""

    def __init__(self, target: Any, name: str) -> None:
        self._target = target
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if not inspect.iscoroutinefunction(value):
            return value
        what = f"{self._name}.{attr}()"

        def trio_only(*args: Any, **kwargs: Any) -> Any:
            require_trio(what)
            return value(*args, **kwargs)

        return trio_only

    def __repr__(self) -> str:
        return repr(self._target)
