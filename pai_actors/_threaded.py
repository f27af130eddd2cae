"""The synchronous facade: an :class:`AgentRuntime` on its own OS thread, driven from others.

:func:`start` runs ``trio.run`` in a new thread, makes the runtime there (the factory is
called on that thread, so a :class:`SqliteStore` it opens belongs to it), enters it, and
returns a :class:`ThreadedRuntime`. Each method of the handle crosses into trio with
``TrioToken.run_sync_soon`` (thread-safe, never blocks the loop: it appends to trio's entry
queue), which starts one task per call in a nursery the facade owns; the task awaits the
runtime's method and resolves a pykka ``ThreadingFuture`` with its value or its exception.
The caller blocks only in ``future.get(timeout=...)``.

Why pykka's futures and not a ``pykka.ThreadingActor`` in the middle: the trio runtime is
already the actor (its mailbox is trio's entry queue, and each call is a task, so a
``wait_idle`` never holds up a ``submit_action``); an actor thread between the caller and
trio would add a thread hop to every call, and answering from it would serialise every
call behind the slowest. The futures are pykka's own, so ``pykka.get_all``, ``.map`` and
``.join`` work on them and a pykka actor can return them from its methods.

Nothing leaves a caller hanging: a call on a stopped facade fails at once
(:class:`RuntimeClosed`); stopping it fails the calls in flight (``RuntimeClosed``); if the
runtime's thread ends for any other reason, every future still open fails with
``RuntimeClosed`` whose ``__cause__`` is what ended it; and ``get()`` on the runtime's own
thread (from an ``async`` tool) raises instead of deadlocking the loop.

This is the only module of :mod:`pai_actors` that imports pykka; ``import pai_actors`` never
loads it (a test checks).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, TypeVar

import pykka
import trio

from ._core.actions import ActionResult, PendingActionOrigin, PendingActionRef, SubAgentOrigin
from ._core.client_tool import ClientTool
from ._core.errors import RuntimeClosed
from ._core.json import JsonValue
from ._core.pending import PendingActionView
from ._core.state import RunState, ThreadState
from ._runtime.runtime import AgentRuntime
from ._tools.blocking import BlockingToolStatistics

T = TypeVar("T")

_STOP_SECONDS = 30.0
_log = logging.getLogger("pai_actors")


class ThreadedFuture(pykka.ThreadingFuture[T]):
    """A pykka ``ThreadingFuture`` resolved by the runtime's thread.

    ``get(timeout=None)`` returns the value or raises the exception the runtime raised
    (:class:`PaiError` subclasses as they are), ``pykka.Timeout`` when ``timeout`` seconds
    pass first (the call goes on), and ``RuntimeError`` when called on the runtime's own
    thread, where waiting would block the loop that resolves it.
    """

    def __init__(self, owner: ThreadedRuntime) -> None:
        super().__init__()
        self._owner_thread = owner._thread

    def get(self, *, timeout: float | None = None) -> T:
        if threading.current_thread() is self._owner_thread and self._result is None:
            raise RuntimeError(
                "future.get() was called on the runtime's own thread (from an async tool or "
                "callback?): it would block the loop that resolves it; await the runtime's "
                "method instead"
            )
        value: T = super().get(timeout=timeout)
        return value


@dataclass(frozen=True, slots=True, eq=False)
class ThreadedPendingAction:
    """A pending action as the facade hands it out: ``name``, ``input``, ``origin``,
    ``ref``, ``resume_schema``, ``expires_at`` and ``origin_chain`` as
    :class:`PendingActionView` has them, and ``submit``, ``cancel`` and ``fail`` returning
    futures of an :class:`ActionResult`."""

    name: str
    input: JsonValue
    origin: PendingActionOrigin
    ref: PendingActionRef
    resume_schema: dict[str, JsonValue] | None
    expires_at: datetime | None
    origin_chain: tuple[SubAgentOrigin, ...]
    _handle: ThreadedRuntime

    def submit(self, resume: object) -> ThreadedFuture[ActionResult]:
        return self._handle.submit_action(self.ref, resume)

    def cancel(self, reason: str | None = None) -> ThreadedFuture[ActionResult]:
        return self._handle.cancel_action(self.ref, reason)

    def fail(self, error: str | BaseException) -> ThreadedFuture[ActionResult]:
        return self._handle.fail_action(self.ref, error)

    def __repr__(self) -> str:
        return f"ThreadedPendingAction(name={self.name!r}, action_id={self.ref.action_id!r})"


class ThreadedRuntime:
    """A synchronous handle on an :class:`AgentRuntime` running on its own thread; made by
    :func:`start`. Use it as a context manager, or call :meth:`stop`.

    Every method but :meth:`stop`, :meth:`is_alive` and :meth:`blocking_statistics`
    returns a :class:`ThreadedFuture` at once; the call runs as its own task in the
    runtime's trio run, so calls from many threads proceed concurrently, and a call's
    errors are raised by ``future.get()``.

    Concurrency contract: every method may be called from any thread but the runtime's
    own. A call either reaches the runtime, or its future fails with
    :class:`RuntimeClosed` and nothing of it ran. Stopping refuses new calls at once,
    fails the calls in flight with ``RuntimeClosed`` (what the runtime committed before
    stays committed: a submission's contract is the runtime's), then closes the runtime
    (running tool calls are cancelled and recorded; suspended calls and pending actions
    stay in the store) and its store, and joins the thread.
    """

    def __init__(self, factory: Callable[[], AgentRuntime], *, name: str) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._state: Literal["starting", "running", "stopping", "stopped"] = "starting"
        self._token: trio.lowlevel.TrioToken | None = None
        self._runtime: AgentRuntime | None = None
        self._nursery: trio.Nursery | None = None
        self._stop_requested: trio.Event | None = None
        self._open: set[ThreadedFuture[Any]] = set()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._startup_error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=name)

    def __repr__(self) -> str:
        return f"ThreadedRuntime({self._thread.name!r}, state={self._state!r})"

    # -- lifecycle ---------------------------------------------------------------------------

    def is_alive(self) -> bool:
        """Whether the runtime takes calls (started and not stopping or stopped)."""
        return self._state == "running"

    def stop(self, timeout: float | None = _STOP_SECONDS) -> None:
        """Stop the runtime gracefully and join its thread; idempotent.

        Raises ``TimeoutError`` if the thread is still running after ``timeout`` seconds
        (``None``: wait as long as it takes), and :class:`RuntimeClosed` (``__cause__``: the
        error) if the runtime's thread ended with an error rather than by this stop.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                "stop() was called on the runtime's own thread (from an async tool?): it "
                "cannot wait for itself; call it from another thread"
            )
        with self._lock:
            token = self._token if self._state == "running" else None
            if self._state in ("starting", "running"):
                self._state = "stopping"
        if token is not None:
            try:
                token.run_sync_soon(self._request_stop)
            except trio.RunFinishedError:  # it ended meanwhile
                pass
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(
                f"the runtime's thread {self._thread.name!r} did not stop within {timeout} s; "
                "a tool or a store call is blocking its trio loop"
            )
        failure, self._failure = self._failure, None
        if failure is not None:
            raise RuntimeClosed(f"the runtime's thread failed: {failure!r}") from failure

    def blocking_statistics(self) -> BlockingToolStatistics:
        """The runtime's blocking tools now (:meth:`AgentRuntime.blocking_statistics`: worker
        threads running, abandoned after a cancellation, results discarded); read
        synchronously, as the counters are kept under a lock."""
        runtime = self._runtime
        if runtime is None:
            raise RuntimeClosed("this threaded runtime never started")
        return runtime.blocking_statistics()

    def __enter__(self) -> ThreadedRuntime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the runtime's methods ---------------------------------------------------------------

    def create_thread(
        self, scope_key: str, user_key: str | None = None, *, agent_id: str | None = None
    ) -> ThreadedFuture[str]:
        """:meth:`AgentRuntime.create_thread`: a future of the new thread's id."""
        return self.call(lambda rt: rt.create_thread(scope_key, user_key, agent_id=agent_id))

    def send(
        self,
        thread_id: str,
        text: str,
        *,
        identity: Any = None,
        client_data: Any = None,
        client_tools: Sequence[ClientTool] = (),
    ) -> ThreadedFuture[str]:
        """:meth:`AgentRuntime.send`: a future of the new run's id (``ThreadBusy``, ...)."""
        return self.call(
            lambda rt: rt.send(
                thread_id,
                text,
                identity=identity,
                client_data=client_data,
                client_tools=client_tools,
            )
        )

    def wait_idle(self, thread_id: str, *, timeout: float | None = None) -> ThreadedFuture[None]:
        """:meth:`AgentRuntime.wait_idle`, bounded inside the runtime by ``timeout`` seconds
        (``None``: no bound): the future fails with ``TimeoutError`` when the thread is not
        idle by then, and nothing keeps waiting. ``future.get(timeout=...)`` only bounds the
        caller's wait."""
        if timeout is not None and not timeout > 0:
            raise ValueError(f"wait_idle(timeout=...) takes seconds > 0 or None, got {timeout!r}")

        async def wait(rt: AgentRuntime) -> None:
            if timeout is None:
                return await rt.wait_idle(thread_id)
            with trio.move_on_after(timeout) as scope:
                await rt.wait_idle(thread_id)
            if scope.cancelled_caught:
                raise TimeoutError(
                    f"thread {thread_id!r} was not idle within {timeout} s; wait longer, "
                    "or look at its runs (get_state)"
                )

        return self.call(wait)

    def get_state(self, thread_id: str) -> ThreadedFuture[ThreadState]:
        """:meth:`AgentRuntime.get_state`: a future of the thread's state."""
        return self.call(lambda rt: rt.get_state(thread_id))

    def pending_actions(self, thread_id: str) -> ThreadedFuture[list[ThreadedPendingAction]]:
        """:meth:`AgentRuntime.pending_actions`, as :class:`ThreadedPendingAction` objects."""

        async def pending(rt: AgentRuntime) -> list[ThreadedPendingAction]:
            return [self._action(view) for view in await rt.pending_actions(thread_id)]

        return self.call(pending)

    def submit_action(self, ref: PendingActionRef, payload: object) -> ThreadedFuture[ActionResult]:
        """:meth:`AgentRuntime.submit_action`: a future of the :class:`ActionResult`."""
        checked = _ref(ref)
        return self.call(lambda rt: rt.submit_action(checked, payload))

    def cancel_action(
        self, ref: PendingActionRef, reason: str | None = None
    ) -> ThreadedFuture[ActionResult]:
        """:meth:`AgentRuntime.cancel_action`: a future of the :class:`ActionResult`."""
        checked = _ref(ref)
        return self.call(lambda rt: rt.cancel_action(checked, reason))

    def fail_action(
        self, ref: PendingActionRef, error: str | BaseException
    ) -> ThreadedFuture[ActionResult]:
        """:meth:`AgentRuntime.fail_action`: a future of the :class:`ActionResult`."""
        checked = _ref(ref)
        return self.call(lambda rt: rt.fail_action(checked, error))

    def cancel_run(self, run_id: str, reason: str | None = None) -> ThreadedFuture[RunState]:
        """:meth:`AgentRuntime.cancel_run`: resolved once the cancellation is recorded, with
        the run's state (``cancelled``, or the status it had already ended with)."""
        return self.call(lambda rt: rt.cancel_run(run_id, reason))

    def call(self, function: Callable[..., Awaitable[T]], /, *args: Any) -> ThreadedFuture[T]:
        """Run ``await function(runtime, *args)`` as a task of the runtime's trio run; a
        future of what it returns. For what the named methods do not cover
        (``scope_pending_actions``, ``get_thread``, a watch read into a list, ...)."""
        if not callable(function):
            raise TypeError(f"call() takes an async function of the runtime, got {function!r}")
        future: ThreadedFuture[T] = ThreadedFuture(self)
        with self._lock:
            token = self._token
            if self._state != "running" or token is None:
                future.set_exception(_exc_info(self._closed_error()))
                return future
            self._open.add(future)
        try:
            token.run_sync_soon(self._spawn, future, function, args)
        except trio.RunFinishedError:
            self._resolve(future, error=self._closed_error())
        return future

    # -- the runtime's thread ----------------------------------------------------------------

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:
            if self._started.is_set():
                self._failure = exc
            else:
                self._startup_error = exc
        finally:
            with self._lock:
                self._state = "stopped"
                left, self._open = self._open, set()
            failure = self._failure or self._startup_error
            for future in left:  # the thread is ending: nobody else will resolve them
                error = RuntimeClosed(
                    "the runtime's thread ended before this call finished"
                    + (f": {failure!r}" if failure is not None else "")
                )
                error.__cause__ = failure
                future.set_exception(_exc_info(error))
            self._started.set()

    async def _serve(self) -> None:
        runtime = self._factory()
        if not isinstance(runtime, AgentRuntime):
            raise TypeError(
                f"start() takes a function returning an AgentRuntime (create_agent_runtime"
                f"(...)), and it returned {runtime!r}"
            )
        self._runtime = runtime
        try:
            async with runtime, trio.open_nursery() as nursery:
                self._nursery = nursery
                self._stop_requested = trio.Event()
                with self._lock:
                    self._token = trio.lowlevel.current_trio_token()
                    if self._state == "starting":
                        self._state = "running"
                    else:  # stop() came during startup
                        self._stop_requested.set()
                self._started.set()
                await self._stop_requested.wait()
                nursery.cancel_scope.cancel()  # the calls in flight fail with RuntimeClosed
        finally:
            close = getattr(runtime.store, "close", None)
            if callable(close):  # the store was made on this thread: nobody else may use it
                close()

    def _request_stop(self) -> None:
        if self._stop_requested is not None:
            self._stop_requested.set()

    def _spawn(
        self, future: ThreadedFuture[T], function: Callable[..., Awaitable[T]], args: Any
    ) -> None:
        try:
            assert self._nursery is not None
            self._nursery.start_soon(self._run_call, future, function, args)
        except RuntimeError:  # the nursery closed: the runtime is stopping
            self._resolve(future, error=self._closed_error())

    async def _run_call(
        self, future: ThreadedFuture[T], function: Callable[..., Awaitable[T]], args: Any
    ) -> None:
        assert self._runtime is not None
        try:
            value = await function(self._runtime, *args)
        except trio.Cancelled:
            assert self._stop_requested is not None
            if self._stop_requested.is_set():  # else the thread is failing: _main says why
                self._resolve(
                    future,
                    error=RuntimeClosed(
                        "the threaded runtime was stopped while this call was in flight; what "
                        "the runtime committed before stays committed"
                    ),
                )
            raise
        except Exception as exc:
            self._resolve(future, error=exc)
        else:
            self._resolve(future, value=value)

    def _resolve(
        self, future: ThreadedFuture[Any], *, value: Any = None, error: BaseException | None = None
    ) -> None:
        with self._lock:
            if future not in self._open:
                return  # resolved already (the thread's end failed it)
            self._open.discard(future)
        if error is None:
            future.set(value)
        else:
            future.set_exception(_exc_info(error))

    def _closed_error(self) -> RuntimeClosed:
        failure = self._failure or self._startup_error
        error = RuntimeClosed(
            "this threaded runtime is stopped (or stopping); start a new one with "
            "pai_actors.threaded.start(...) to go on"
            + (f" (its thread failed: {failure!r})" if failure is not None else "")
        )
        error.__cause__ = failure
        return error

    def _action(self, view: PendingActionView) -> ThreadedPendingAction:
        return ThreadedPendingAction(
            name=view.name,
            input=view.input,
            origin=view.origin,
            ref=view.ref,
            resume_schema=view.resume_schema,
            expires_at=view.expires_at,
            origin_chain=view.origin_chain,
            _handle=self,
        )


def start(
    factory: Callable[[], AgentRuntime], *, name: str = "pai_actors-runtime"
) -> ThreadedRuntime:
    """Start a runtime on its own thread and return its synchronous handle.

    ``factory()`` is called on the new thread and returns the runtime
    (``lambda: create_agent_runtime(agent, store=SqliteStore(path))``): the store belongs to
    that thread, and the facade closes it after the runtime closed. Returns once the runtime
    is open; an error while making or opening it is raised here, as it was raised.

    The thread is not a daemon; at interpreter exit a handle that was never stopped is
    stopped gracefully (as ``concurrent.futures`` does with its workers), so a forgotten
    handle neither keeps the process alive nor loses a running call's record.
    """
    if isinstance(factory, AgentRuntime):
        raise TypeError(
            "start() takes a function returning the runtime, not the runtime: its store must "
            "be made on the runtime's thread; write start(lambda: create_agent_runtime(...))"
        )
    if not callable(factory):
        raise TypeError(
            "start() takes a function returning the runtime, made on the runtime's thread: "
            f"start(lambda: create_agent_runtime(agent, ...)), got {factory!r}"
        )
    handle = ThreadedRuntime(factory, name=name)
    handle._thread.start()
    handle._started.wait()
    if handle._startup_error is not None:
        error, handle._startup_error = handle._startup_error, None
        handle._thread.join()
        raise error
    _stop_at_exit(handle)
    return handle


def _stop_at_exit(handle: ThreadedRuntime) -> None:
    reference = weakref.ref(handle)

    def stop() -> None:
        alive = reference()
        if alive is not None:
            try:
                alive.stop()
            except Exception:  # at exit there is no caller left to raise to
                _log.exception("stopping %r at interpreter exit failed", alive)

    register = getattr(threading, "_register_atexit", None)  # runs before joining threads
    if register is not None:
        try:
            register(stop)
        except RuntimeError:  # the interpreter is already shutting down
            pass


def _ref(ref: Any) -> PendingActionRef:
    if isinstance(ref, ThreadedPendingAction):
        return ref.ref
    if not isinstance(ref, PendingActionRef):
        raise TypeError(
            f"expected a PendingActionRef (action.ref of pending_actions()), got {ref!r}"
        )
    return ref


def _exc_info(error: BaseException) -> tuple[type[BaseException], BaseException, Any]:
    return (type(error), error, error.__traceback__)
