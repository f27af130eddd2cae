"""The runtime: :func:`create_agent_runtime` and :class:`AgentRuntime`.

``AgentRuntime`` is an async context manager owning the root supervisor: each run is an
actor under it, and each tool call an actor under its run (see ``_runtime.run``). Pending actions
are resolved here: the submission is judged by the pure core (``_core.calls``), written with the
call's part in one transaction, and then the run is woken; its actor resumes every accepted
submission without a live actor and runs ``on_output`` for every output not yet
observed (see ``_runtime.run``). A run that is not alive (after the runtime
was reopened on the same store) is activated by a runtime-owned task, never in the
submitter's cancel scope, and only while its stored status is ``running`` or ``waiting``.

Activation in a fresh runtime: loading a thread (``send``, ``get_state``,
``pending_actions``) activates each run of it that holds an accepted submission whose resume
never ran (``executing``, latest episode ``submitted``, no result), and its active run
without a live actor whose calls are all done (an accepted cancel, fail or output
submission ended its last call before the run went on) — the thread is read there anyway,
and the store has no listing of all threads to scan when the runtime opens. An activation
reads the run again right before starting it, and starts it only while it is active and
not being cancelled.

Deadlines of pending actions: one task of the runtime, its :class:`DeadlineTimer`
(``_runtime.deadlines``), resolves each action whose deadline passed as its definition
declares, through the same ``resolve`` a submission takes; the first thing it does when the
runtime opens is resolve those that passed while no runtime ran.

Which run, activation or continuation starts, and when, is decided by the pure admission
table (``_runtime.admission``): the runtime feeds it an event at each change and carries out
the commands it returns in the same step (``AgentRuntime._handle``); it keeps only the
in-memory handle of each live run.

Concurrency contract: every method may be called from any task of the trio run that entered
the runtime. A submission either resolves its action and returns ``accepted``, or returns
``rejected`` (or raises) and leaves it pending; an action resolves once. ``accepted`` means
the resume is durable: it runs in this runtime, or, if it is closing, when a later runtime
loads the thread. A submission to a run that is being cancelled, or whose stored run is no
longer active, is rejected.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, NamedTuple, overload

import trio

from supervisors import Supervisor, open_supervisor

from .._core.actions import ActionResult, PendingActionRef, SubAgentOrigin
from .._core.call_record import CallRecord, CallSpec
from .._core.calls import Submission, cancel_action, fail_action, interrupt_call, submit
from .._core.client_tool import ClientTool
from .._core.clock import Clock
from .._core.errors import (
    AgentNotFound,
    FileNotFound,
    PaiError,
    RuntimeClosed,
    RuntimeConfigError,
    StoreConflict,
    StoreError,
    ThreadBusy,
    ThreadNotFound,
    ThreadOwnedElsewhere,
)
from .._core.ids import IdMaker
from .._core.json import to_json_value
from .._core.model import Model, ModelSettings
from .._core.parts import FilePart, Message, TextPart, ToolPart
from .._core.pending import PendingActionView
from .._core.records import (
    ClientToolRecord,
    OpenAction,
    RunRecord,
    StoredCall,
    StoredFileBody,
    ThreadRecord,
)
from .._core.state import RunState, RunStatus, ThreadState
from .._core.trigger import is_notification, notification_message
from .._core.updates import MessageDelta, ThreadUpdate, ThreadUpdateOrDelta
from .._core.wire import shared_fields_set
from .._store.base import Store, Transaction
from .._tools.agent import AgentDefinition
from .._tools.blocking import BlockingTools, BlockingToolStatistics
from .._tools.capabilities import Binding
from .._tools.files import DEFAULT_MAX_FILE_BYTES
from .admission import (
    ActivationEnded,
    ActivationRequested,
    Admission,
    CancelBegan,
    CancelEnded,
    Closed,
    Closing,
    ContinuationEnded,
    Event,
    NotificationAppended,
    NotificationFound,
    Opened,
    RunCreated,
    RunEnded,
    SendBegan,
    SendEnded,
    StartActivation,
    StartContinuation,
    StartRun,
    WakeIdle,
)
from .call import backoff, resumable
from .deadlines import DeadlineTimer, fire_deadline
from .elsewhere import Elsewhere
from .forwarding import Answer, Forwarding, Request, raise_error
from .live import LiveRun
from .loading import (
    INDEX_CAPACITY,
    BoundedIndex,
    MessageIndex,
    check_migration,
    index_calls,
    pending_action_for,
    resume_schema_of,
)
from .prepare import check_client_tools
from .resolution import resolve, settle_caller
from .run import CLEANUP_SECONDS, calls_of_run, record_cancelled, run_actor
from .run_io import RUNTIME_CLOSING, TAKEN_OVER, stage_call
from .services import MapError, Services
from .subagents import CALLER_ENDED
from .tracing import current_span_context
from .warm import DEFAULT_KEEP_WARM, KeepWarm, check_keep_warm
from .watch import (
    DEFAULT_WATCH_CAPACITY,
    PublishingTransaction,
    Pulse,
    ThreadWatch,
    Watcher,
    WatchHub,
)

_RUN_MAILBOX = 1024
_log = logging.getLogger("pai_actors")

_SNAPSHOT_TRIES = 10
"""How often a watch's snapshot is read again while other nodes keep changing its thread,
before it is taken with the changes logged meanwhile shown as a difference."""

DEFAULT_MAX_ACTIVE_RUNS = 256
"""How many runs a runtime keeps active (stepping, or running calls) at once by default.

Beyond some hundreds in flight, more concurrency buys no throughput on one trio thread: the
commits already share transactions, and every active run's tasks, frames and records are
live objects that CPython's cyclic collector scans again and again (at 10,000 runs started
at once it took half of the time). The runs past the limit wait, stored, for a slot."""


DEFAULT_MAX_AGENT_DEPTH = 4
"""How deep sub-agent runs nest by default (``ctx.agents.run`` inside a sub-agent's tool is
depth 2)."""


def check_max_agent_depth(value: int) -> int:
    """``value`` if it is a valid ``max_agent_depth`` (an int >= 1)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RuntimeConfigError(
            f"max_agent_depth must be an int >= 1 (how deep sub-agent runs nest), got {value!r}"
        )
    return value


def check_max_active_runs(value: int | None) -> int | None:
    """``value`` if it is a valid ``max_active_runs`` (an int >= 1, or ``None``: no limit)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise RuntimeConfigError(
            "max_active_runs must be an int >= 1 (runs active at once; the others wait for a "
            f"slot) or None (no limit), got {value!r}"
        )
    return value


class _Start(NamedTuple):
    """What the shell holds to spawn a run's actor when admission says :class:`StartRun`."""

    thread: ThreadRecord
    run: RunRecord
    client_tools: tuple[ClientTool, ...] = ()
    resume_message_id: str | None = None  # where an activated run goes on
    trace_link: Any = None  # the span that caused it (a sub-run's calling call), or None


class AgentRuntime:
    """Runs an agent's threads: ``async with create_agent_runtime(agent) as rt: ...``.

    Leaving the block stops every run: running calls are recorded as cancelled, suspended
    calls and pending actions stay in the store for the next runtime on it. A run that was
    waiting on its calls stays active (stored ``waiting``) and goes on when a later runtime
    loads its thread; a run in the middle of a model step is recorded cancelled (unless it
    keeps a pending call); a run ``cancel_run`` was cancelling is recorded cancelled.
    """

    def __init__(
        self,
        agents: Mapping[str, AgentDefinition],
        *,
        models: Mapping[str, Model],
        store: Store,
        map_error: MapError | None,
        new_id: IdMaker,
        clock: Clock,
        bindings: Mapping[str, Binding] | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        blocking: BlockingTools | None = None,
        max_active_runs: int | None = DEFAULT_MAX_ACTIVE_RUNS,
        max_agent_depth: int = DEFAULT_MAX_AGENT_DEPTH,
        keep_warm: float = DEFAULT_KEEP_WARM,
    ) -> None:
        self._agents = agents
        self._max_active_runs = check_max_active_runs(max_active_runs)
        seconds_warm = check_keep_warm(keep_warm)  # (checked on a shared store too)
        # where plain def executes run (a worker thread or inline) and their limiter
        self._blocking = blocking if blocking is not None else BlockingTools()
        self._bindings: Mapping[str, Binding] = dict(bindings or {})
        self._max_file_bytes = max_file_bytes
        self._on_close: list[Callable[[], object]] = []  # run once the runtime has closed
        self._default_agent_id = next(iter(agents))
        self._models = models
        self._store = store
        self._new_id = new_id
        self._now = clock
        # thread_id -> agent_id of recently loaded threads (for get_pending_action)
        self._thread_agents: BoundedIndex[str, str] = BoundedIndex(INDEX_CAPACITY)
        # (thread, call id) -> the client tool a dynamic call was made to (its input schema)
        self._client_tools: BoundedIndex[tuple[str, str], ClientTool] = BoundedIndex(INDEX_CAPACITY)
        self._message_index: MessageIndex = BoundedIndex(INDEX_CAPACITY)
        self._loaded: BoundedIndex[str, bool] = BoundedIndex(INDEX_CAPACITY)  # settled threads
        # threads whose calls' sub-runs a load looked at (a full load need not look again)
        self._reconciled: BoundedIndex[str, bool] = BoundedIndex(INDEX_CAPACITY)
        # whether this runtime met a sub-agent run (started one, or loaded a call that did):
        # until it does, wait_idle and pending_actions skip looking for them
        self._sub_runs = False
        self._thread_records: BoundedIndex[str, ThreadRecord] = BoundedIndex(INDEX_CAPACITY)
        self._map_error = map_error
        # Every admission decision (which run, activation or continuation starts, and when):
        # the shell feeds it events and carries out its commands (see ``_handle``).
        self._admission = Admission(self._max_active_runs)
        self._live: dict[str, LiveRun] = {}  # run_id -> the handle of each run whose actor runs
        self._idle_waits: dict[str, trio.Event] = {}  # thread_id -> what wait_idle waits on
        # thread_id -> what wait_idle waits on for a thread another node drives
        self._elsewhere_waits: dict[str, trio.Event] = {}
        self._stack: AsyncExitStack | None = None
        self._root: Supervisor | None = None
        # A store shared with other nodes (PostgresStore with a node_id) says when another
        # node took a thread over: what this runtime settled of it is stale then.
        self._following = False  # whether other processes' changes reach the watchers
        self._elsewhere: Elsewhere | None = None  # (what they are shown of them)
        self._shared = getattr(store, "node_id", None) is not None  # with other nodes
        # Requests for threads another node drives are handed to it (``_runtime.forwarding``).
        self._forwarding: Forwarding | None = None
        if self._shared:
            store.on_lost(self._thread_lost)  # type: ignore[attr-defined]
            store.on_fenced(self._thread_fenced)  # type: ignore[attr-defined]
            self._forwarding = Forwarding(store, self._apply_request)  # type: ignore[arg-type]
        self._nursery: trio.Nursery | None = None
        self._hub = WatchHub()
        # One task resolves every pending action's deadline (see ``_runtime.deadlines``).
        self._deadlines = DeadlineTimer(store=store, now=clock, fire=self._fire_deadline)
        self._note_deadline = self._deadlines.note  # (bound once: given to every transaction)
        self._services = Services(
            store=store,
            transaction=self._transaction,
            publish=self._publish,
            watched_for_deltas=self._watched_for_deltas,
            new_id=new_id,
            now=clock,
            blocking=self._blocking,
            agents=agents,
            models=models,
            bindings=self._bindings,
            max_file_bytes=max_file_bytes,
            map_error=map_error,
            client_tools=self._client_tools,
            message_index=self._message_index,
            closing=lambda: self._admission.closing,
            notify=self._notify,
            notified=self._notified,
            passivated=self._passivated,
            is_cancelling=self._is_cancelling,
            live_run=self._live_of,
            activate_soon=self._activate_soon,
            park=self._park,
            run_ended=self._forget,
            thread=self._thread,
            agent_of=self.agent_of,
            trigger=self.trigger,
            max_agent_depth=check_max_agent_depth(max_agent_depth),
            begin_sub_runs=self._begin_sub_runs,
            cancel_sub_threads_soon=self._cancel_sub_threads_soon,
            # (on a store shared with other nodes a waiting run gives its thread's lease up in the
            # commit that records it waiting: it is not kept warm, see ``_runtime.warm``)
            keep_warm=KeepWarm(0.0 if self._shared else seconds_warm),
        )

    @property
    def max_active_runs(self) -> int | None:
        """How many runs this runtime keeps active at once (``None``: no limit)."""
        return self._max_active_runs

    @property
    def store(self) -> Store:
        """The store this runtime runs on."""
        return self._store

    @property
    def calls_written(self) -> Pulse:
        """Beats once for each committed transaction of this runtime that wrote a tool call
        (a pending action may have opened, changed or closed): what the inbox's live view
        of a scope waits for. Changes another process makes to the store do not beat it."""
        return self._hub.calls_written

    def message_location(self, message_id: str) -> tuple[str, str] | None:
        """The thread and run of the message ``message_id``, when this runtime made it or
        loaded its thread recently (a bounded index), else ``None``: ask
        :meth:`message_runs`."""
        return self._message_index.get(message_id)

    def thread_agent(self, thread_id: str) -> AgentDefinition | None:
        """The agent of the thread ``thread_id``, when this runtime loaded it recently (a
        bounded index), else ``None``."""
        return self._known_agent(thread_id)

    def close_with(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` once the runtime has closed (its runs recorded, its watches
        ended): for what its owner made for it, such as a store or a temporary directory."""
        self._on_close.append(callback)

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> AgentRuntime:
        if self._stack is not None:
            raise PaiError("this runtime was already opened; create a new one")
        self._stack = AsyncExitStack()
        self._root = await self._stack.enter_async_context(open_supervisor(name="runtime"))
        self._nursery = await self._stack.enter_async_context(trio.open_nursery())
        self._handle(Opened())
        self._nursery.start_soon(self._deadlines.run)  # also those that passed while closed
        follow = getattr(self._store, "follow_other_nodes", None)
        if follow is not None and self._forwarding is not None:
            forwarding, nursery = self._forwarding, self._nursery
            elsewhere = self._elsewhere = Elsewhere(
                self._store, self._hub, self._read_state, nursery
            )
            await nursery.start(
                functools.partial(
                    follow,
                    self._changed_elsewhere,
                    requested=lambda thread_id: forwarding.requested(thread_id, nursery),
                    answered=forwarding.answered,
                    live=elsewhere.received,
                    watching=elsewhere.watching,
                )
            )
            await nursery.start(elsewhere.run)
            self._following = True
            if elsewhere.logs:
                self._hub.catch_up_first = functools.partial(elsewhere.catch_up, everything=True)
            if elsewhere.live:
                self._hub.before_commit = elsewhere.flush
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._stack is not None
        assert self._root is not None
        assert self._nursery is not None
        self._handle(Closing())
        unstarted = self._admission.unstarted()  # their activations are cancelled just below
        self._nursery.cancel_scope.cancel()
        for live in list(self._live.values()):
            live.abort_calls(RUNTIME_CLOSING)
        self._root.cancel(RUNTIME_CLOSING)
        try:
            result = await self._stack.__aexit__(exc_type, exc, tb)
            # and the runs a continuation committed as the close began
            unstarted += self._admission.unstarted()
            with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                await self._park_unstarted(dict.fromkeys(unstarted))
            return result
        finally:
            self._handle(Closed())  # the queue never starts here: wait_idle stops waiting
            self._hub.close()
            for close in self._on_close:
                close()

    # -- admission: the shell around the pure table ----------------------------------------

    def _handle(self, event: Event, start: _Start | None = None) -> None:
        """Feed ``event`` to the admission table and carry out its commands, in order, in
        this step (no await): ``start`` holds the records of the run the event may start."""
        for command in self._admission.handle(event):
            if isinstance(command, WakeIdle):
                self._notify(command.thread_id)
            elif isinstance(command, StartRun):
                assert start is not None, f"{command!r} without the records to start it"
                self._spawn(start)
            elif isinstance(command, StartActivation):
                assert self._nursery is not None
                self._nursery.start_soon(
                    self._activate, command.thread_id, command.run_id, command.message_id
                )
            else:
                assert isinstance(command, StartContinuation)
                assert self._nursery is not None
                self._nursery.start_soon(self._continue, command.thread_id)

    def _spawn(self, start: _Start) -> None:
        """Spawn the actor of a run admission started (it is live from here)."""
        assert self._root is not None, "use the runtime inside `async with`"
        live = self._new_live(start.thread, start.run, start.client_tools)
        live.resume_message_id = start.resume_message_id
        live.trace_link = start.trace_link
        self._live[live.run_id] = live

        live.ref = self._root.spawn(
            # (a partial, not a closure: two objects where a closure is four, and one
            # coroutine fewer for as long as the run's actor lives)
            functools.partial(run_actor, self._services, live),
            # (an actor's name has no '/': a path of names is how the supervision tree is
            # shown; a sub-agent's ids hold its thread's, <thread>/<call>/<key>)
            name=f"run-{live.run_id}".replace("/", "|"),
            restart="temporary",
            capacity=_RUN_MAILBOX,
        )

    # -- internals used by the actors -------------------------------------------------------

    def _check_open(self) -> None:
        """Raise :class:`RuntimeClosed` once the runtime began to close (before any write)."""
        if self._admission.closing:
            raise RuntimeClosed(
                "this runtime is closed (its `async with` block has exited); open a new "
                "runtime on the store to go on"
            )

    def _transaction(self) -> Transaction:
        """A store transaction whose writes reach the watchers once it committed (and its
        calls' deadlines the deadline timer)."""
        return PublishingTransaction(self._store, self._hub, self._note_deadline)

    def _publish(self, update: ThreadUpdateOrDelta) -> None:
        """Send ``update`` (never stored: a text fragment, transient tool data) to the
        watchers connected now, here and on other nodes."""
        self._hub.publish((update,))
        if self._elsewhere is not None:
            self._elsewhere.offer(update)

    def _notify(self, thread_id: str) -> None:
        """Wake the ``wait_idle`` calls of ``thread_id`` if it is idle now.

        Call it after every change that can make a thread idle, once the change is complete
        (it looks at the thread then, not when a waiter runs). A thread changes many times a
        conversation and becomes idle once or twice: waking its waiters only then spares
        each needless wake its task switch and a new ``Event`` to wait on.
        """
        if thread_id in self._idle_waits and self._idle(thread_id):
            self._idle_waits.pop(thread_id).set()

    def _idle(self, thread_id: str) -> bool:
        """No run of the thread is active, or its run waits only on pending actions."""
        run_id = self._admission.live_run_of(thread_id)
        live = None if run_id is None else self._live.get(run_id)
        quiet = live is not None and (
            live.status == "waiting"
            and not live.busy
            and live.active_calls == 0
            and not live.changed
        )
        return self._admission.idle(thread_id, live_run_quiet=quiet)

    def _forget(self, live: LiveRun) -> None:
        """The run actor's last word: its run is no longer live."""
        del self._live[live.run_id]
        live.end()
        # passivated while a submission changed it: activate it again, from its calls
        again = live.waiting_message_id if live.passivated and live.changed else None
        self._handle(RunEnded(live.run_id, again))
        if live.thread.parent is not None and not live.run.active:  # a sub-run ended
            self._settle_caller_soon(live.thread)
        if live.run.status == "running" and not self._admission.closing:
            # It ended without recording where its run stands (the store refused that
            # write, or the actor failed): recover it, as the next load would.
            self._recover_soon(live.thread_id)

    def _recover_soon(self, thread_id: str) -> None:
        """Load ``thread_id`` afresh in a runtime-owned task, which settles what a run left
        running with no actor (as a restart does); retried with a growing pause while the
        store fails."""
        self._thread_lost(thread_id)
        if self._nursery is not None:
            self._nursery.start_soon(self._recover, thread_id)

    async def _recover(self, thread_id: str) -> None:
        for attempt in itertools.count(1):
            await trio.sleep(backoff(attempt))
            if self._admission.closing:
                return  # the next runtime's load settles it
            try:
                await self._load(thread_id)
                return
            except StoreError:
                _log.warning("recovering thread %r failed (attempt %d)", thread_id, attempt)
            except PaiError:  # not this runtime's to settle (another node, a migration)
                _log.exception("recovering thread %r failed", thread_id)
                return

    def _live_of(self, run_id: str) -> LiveRun | None:
        """The run's in-memory handle, while its actor is alive."""
        return self._live.get(run_id)

    def _passivated(self, run_id: str) -> bool:
        """Whether no actor runs ``run_id``, none is starting and no cancellation is at it."""
        return self._admission.passivated(run_id)

    def _is_cancelling(self, run_id: str) -> bool:
        """Whether ``cancel_run`` is cancelling the run (alive or not)."""
        return self._admission.is_cancelling(run_id)

    def agent_of(self, thread: ThreadRecord) -> AgentDefinition:
        """The agent that runs ``thread`` (checked to be hosted by :meth:`thread`)."""
        return self._agents[self._default_agent_id if thread.agent_id is None else thread.agent_id]

    def _known_agent(self, thread_id: str) -> AgentDefinition | None:
        """The agent of a thread this runtime loaded recently, else ``None``."""
        agent_id = self._thread_agents.get(thread_id)
        return None if agent_id is None else self._agents[agent_id]

    def _new_live(
        self, thread: ThreadRecord, run: RunRecord, client_tools: tuple[ClientTool, ...]
    ) -> LiveRun:
        agent_id = self._default_agent_id if thread.agent_id is None else thread.agent_id
        return LiveRun(
            status="waiting" if run.status == "waiting" else "running",
            thread=thread,
            run=run,
            agent_id=agent_id,
            agent=self._agents[agent_id],
            model=self._models[agent_id],
            identity=run.identity,
            client_data=run.client_data,
            client_tools=client_tools,
        )

    # -- threads and runs --------------------------------------------------------------------

    async def create_thread(
        self,
        scope_key: str,
        user_key: str | None = None,
        *,
        agent_id: str | None = None,
        thread_id: str | None = None,
    ) -> str:
        """Create a thread in ``scope_key`` and return its id.

        ``agent_id`` picks the agent that runs the thread, for a runtime made from a
        :class:`Pai` (its registry id); the default is the Pai's first agent, or the one
        agent the runtime was made from (by its name). An unknown id raises
        :class:`AgentNotFound`.

        ``thread_id`` gives the thread the caller's id instead of a new one (a conversation
        id of the application's, or a name a simulation chooses so that threads created
        concurrently get the same ids on every run): a non-empty ``str`` without padding
        whitespace, unique in the store (:class:`PaiError` if a thread has it already). The
        thread's runs, messages and calls are numbered within it.
        """
        self._check_open()
        if thread_id is not None and (
            not isinstance(thread_id, str)
            or not thread_id.strip()
            or thread_id != thread_id.strip()
        ):
            raise PaiError(
                f"create_thread(thread_id={thread_id!r}): a thread id is a non-empty str "
                "without leading or trailing whitespace"
            )
        if agent_id is None:
            agent_id = self._default_agent_id
        elif agent_id not in self._agents:
            known = ", ".join(map(repr, self._agents))
            raise AgentNotFound(
                f"create_thread(agent_id={agent_id!r}): this runtime has no such agent; use "
                f"one of {known}",
                agent_id=agent_id,
            )
        thread = shared_fields_set(  # (kept while the thread's runs go on: see its doc)
            ThreadRecord(
                thread_id=self._new_id("thread") if thread_id is None else thread_id,
                scope_key=scope_key,
                user_key=user_key,
                agent_id=agent_id,
                created_at=self._now(),
            )
        )
        try:
            async with self._transaction() as tx:
                tx.create_thread(thread)
        except StoreConflict as exc:
            if thread_id is None:  # a new id is unique: this is the store's trouble
                raise
            raise PaiError(
                f"create_thread(thread_id={thread_id!r}): a thread with that id exists "
                "already; choose another id, or use the existing thread"
            ) from exc
        # A thread this runtime created holds nothing to settle (it owns the store): it is
        # loaded already, and its record is known.
        self._thread_records[thread.thread_id] = thread
        self._thread_agents[thread.thread_id] = agent_id
        self._loaded[thread.thread_id] = True
        return thread.thread_id

    def _notified(self, thread_id: str) -> bool:
        """Whether a notification for the thread is waiting to be answered (``trigger``)."""
        return self._admission.notified(thread_id)

    async def _thread(self, thread_id: str, *, schedule: bool = True) -> ThreadRecord:
        """The stored thread, once its agent is known to be registered here (remembered for
        :meth:`agent_of`). Thread records never change, so recent ones are kept in memory.

        A checkpoint when the record is in memory (``trio.lowlevel.checkpoint()``), as the
        store's read is otherwise (at least a cancel point: a store's mirror answers
        without giving the scheduler a turn). ``schedule=False``: a cancel point only, from
        memory, for a caller that reaches a schedule point later in the same operation (a
        commit, a wait); a schedule point costs every coroutine of the caller's stack a
        suspension and a resumption."""
        thread = self._thread_records.get(thread_id)
        if thread is None:
            thread = await self._store.get_thread(thread_id)
        elif schedule:
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        if thread is None:
            raise ThreadNotFound(f"no thread {thread_id!r}; create it with create_thread()")
        agent_id = self._default_agent_id if thread.agent_id is None else thread.agent_id
        if agent_id not in self._agents:
            known = ", ".join(map(repr, self._agents))
            raise AgentNotFound(
                f"thread {thread_id!r} is run by the agent {agent_id!r}, which this runtime "
                f"does not host (it hosts {known}); register that agent under the id "
                f"{agent_id!r} in create_pai(...), or migrate the thread",
                agent_id=agent_id,
            )
        self._thread_agents[thread_id] = agent_id
        self._thread_records[thread_id] = thread
        return thread

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        """The thread's record: its ``scope_key``, ``user_key`` and agent
        (:class:`ThreadNotFound`; :class:`AgentNotFound` if its agent is not hosted here)."""
        return await self._thread(thread_id)

    async def thread_scope(self, thread_id: str) -> str | None:
        """The ``scope_key`` of the stored thread ``thread_id``, or ``None`` when there is no
        such thread (whichever agent runs it: a server checks a client's scope with it)."""
        thread = await self._store.get_thread(thread_id)
        return None if thread is None else thread.scope_key

    async def run_thread(self, run_id: str) -> str | None:
        """The id of the thread the run ``run_id`` belongs to, or ``None`` when there is no
        such run."""
        run = await self._store.get_run(run_id)
        return None if run is None else run.thread_id

    async def message_runs(self, thread_id: str) -> dict[str, str]:
        """Which run made each message of the thread that holds tool calls: message id to
        run id (a message without tool calls is not there)."""
        return {call.message_id: call.run_id for call in await self._store.list_calls(thread_id)}

    def blocking_statistics(self) -> BlockingToolStatistics:
        """The worker-thread calls of plain ``def`` tools: running, abandoned after a
        cancellation, results discarded (read synchronously)."""
        return self._blocking.statistics()

    async def read_file(self, file_id: str, *, scope_key: str) -> StoredFileBody:
        """The file ``file_id`` of ``scope_key`` and its body; :class:`FileNotFound` when there
        is none (missing, or in another scope: the two look the same on purpose)."""
        found = await self._store.read_file(file_id, scope_key=scope_key)
        if found is None:
            raise FileNotFound(
                f"no file {file_id!r} in this scope; use a file_id a tool of this scope saved",
                file_id=file_id,
            )
        return found

    def _changed_elsewhere(self, thread_id: str, logged: int | None = None) -> None:
        """Another process committed a change to ``thread_id`` (a store shared by several
        nodes; ``logged``: the last row of the thread's update log it wrote): what this
        runtime settled of it is stale, and its watchers here are shown the change
        (``_runtime.elsewhere``)."""
        self._thread_lost(thread_id)
        if thread_id in self._elsewhere_waits:
            self._elsewhere_waits.pop(thread_id).set()
        if self._elsewhere is not None:
            self._elsewhere.changed(thread_id, logged)

    async def _read_followed(self, thread_id: str) -> tuple[ThreadState, int | None]:
        """The thread's state, and the last row of its update log it holds (if known)."""
        if self._elsewhere is None:
            return await self._read_state(thread_id), None
        return await self._elsewhere.read_followed(thread_id)

    def _watched_for_deltas(self, thread_id: str) -> bool:
        """Whether a watcher here or on another node takes the thread's text fragments."""
        return self._hub.watched_for_deltas(thread_id) or (
            self._elsewhere is not None and self._elsewhere.watched(thread_id)
        )

    async def _follow(
        self, thread_id: str, state: ThreadState | None = None, logged: int | None = None
    ) -> None:
        """Keep what the watchers of ``thread_id`` are shown (``state``, holding the logged
        changes up to ``logged``), when other processes may change it (see
        :meth:`_changed_elsewhere`)."""
        if self._following:
            if state is None:
                state, logged = await self._read_followed(thread_id)
            if not self._hub.followed(thread_id):
                self._hub.follow(state, logged)
                if self._elsewhere is not None and self._hub.followed(thread_id):
                    await self._elsewhere.followed(thread_id)

    def _thread_fenced(self, thread_id: str) -> None:
        """Another node took ``thread_id`` from this one (its lease lapsed): the run this
        runtime drove there stops at once; its writes are refused (the store fences the
        thread until this runtime loads it afresh, with no run of it alive here)."""
        run_id = self._admission.live_run_of(thread_id)
        live = None if run_id is None else self._live.get(run_id)
        if live is not None:
            live.abort_calls(TAKEN_OVER)
            live.scope.cancel()

    def _thread_lost(self, thread_id: str) -> None:
        """This node no longer owns ``thread_id``: its next load settles it again (another
        node may have left a run to recover)."""
        self._loaded[thread_id] = False
        self._reconciled[thread_id] = False

    async def _load(
        self,
        thread_id: str,
        *,
        full: bool = False,
        by_starter: bool = False,
        schedule: bool = True,
    ) -> ThreadRecord:
        """The thread, once its calls are checked (:class:`MigrationRequired`) and indexed,
        and whatever a stopped process or a closed runtime left of it is settled.

        That needs doing once per thread in a runtime (it owns the store): later loads read
        only the thread, unless ``full`` (``get_state`` and ``watch``, which also re-index
        its messages for ``get_pending_action``) or the thread left the bounded index.
        ``by_starter``: the send or continuation holding the thread loads it (before its
        commit, so an active run it finds is not its own, and is recovered if orphaned).
        ``schedule=False``: see :meth:`_thread`.
        """
        if not full and self._loaded.get(thread_id):
            return await self._thread(thread_id, schedule=schedule)
        thread = await self._thread(thread_id, schedule=schedule)
        calls = await self._store.list_calls(thread_id)
        check_migration(thread_id, calls, self.agent_of(thread).tools)
        index_calls(self._message_index, calls)
        if not self._sub_runs and any(c.record.sub_threads for c in calls):
            self._sub_runs = True  # (also for a thread another node runs: its actions list them)
        active = await self._store.get_active_run(thread_id)
        orphaned = active is not None and self._admission.orphaned(
            active.run_id, thread_id, by_starter=by_starter
        )
        if orphaned and self._forwarding is not None and not _left_to_settle(active, calls):
            # A run that waits on actions, as its node left it: nothing to take over (its
            # lease was given up with it; the next write to it takes it, here or elsewhere).
            orphaned = False
        if (
            not orphaned
            and self._forwarding is not None
            and (active is None or active.status != "running")
            and self._store.fenced(thread_id)  # type: ignore[attr-defined]
        ):
            # This node lost it to another, which is done with it (no run runs now): take
            # it again, or this node could never write it again (a new message, say).
            await self._store.take(thread_id)  # type: ignore[attr-defined]
        if orphaned and self._forwarding is not None:
            if not await self._store.take(thread_id):  # type: ignore[attr-defined]
                # Another node drives it (or recovers it): not this runtime's to settle.
                return thread
            # Taken over: read it again (its owner may have written it between the reads
            # above and the take; from now on it cannot); what other nodes asked of its
            # stopped owner is this node's now.
            calls = await self._store.list_calls(thread_id)
            index_calls(self._message_index, calls)
            active = await self._store.get_active_run(thread_id)
            orphaned = active is not None and self._admission.orphaned(
                active.run_id, thread_id, by_starter=by_starter
            )
            assert self._nursery is not None
            self._nursery.start_soon(self._forwarding.serve, thread_id)
        if active is not None and orphaned:
            # No actor runs it: a runtime closed (or its process stopped) under it.
            run_calls = calls_of_run(calls, active.run_id)
            if any(_interrupted(c.record) for c in run_calls):
                await self._record_interrupted(thread, active, run_calls)
                calls = await self._store.list_calls(thread_id)
                run_calls = calls_of_run(calls, active.run_id)
            messages = await self._store.list_messages(thread_id)
            last = messages[-1] if messages else None
            done = all(c.record.phase == "done" for c in run_calls)
            if done and last is not None and _final_answer(last):
                # Its final answer is stored: the process stopped before the run was
                # recorded completed (a separate commit). It is over; do not ask again.
                await self._settle(active, "completed")
                if thread.parent is not None:  # a sub-run: its caller goes on
                    await self._settle_caller(thread.parent.thread_id, thread.parent.tool_call_id)
            elif not run_calls:  # its process stopped in its first model step: do it again
                self._activate_run_soon(thread_id, active.run_id, None)
            elif done:
                # An accepted cancel/fail/output (or an interruption) ended its last call
                # before the run went on: nothing is resumable, yet it must reach the model.
                self._activate_soon(run_calls[-1])
            elif active.status == "running" and not any(resumable(c.record) for c in run_calls):
                # It waits on pending actions only; the process stopped before saying so.
                await self._settle(active, "waiting")
        for call in calls:
            if resumable(call.record):
                self._activate_soon(call)
        if active is None and not self._admission.continuing(thread_id):
            messages = await self._store.list_messages(thread_id)
            if messages and is_notification(messages[-1]):  # appended, never answered
                self._handle(NotificationFound(thread_id))
        self._loaded[thread_id] = True
        if not self._reconciled.get(thread_id):
            self._reconciled[thread_id] = True
            await self._reconcile_sub_runs(calls)
        return thread

    async def _park_unstarted(self, unstarted: Iterable[str]) -> None:
        """Park the runs the close left unstarted (their activation cut off, queued, or
        committed by a continuation as the close began); an actor that did start recorded
        its own status on the way out."""
        for run_id in unstarted:
            await self._park(run_id)

    async def _park(self, run_id: str) -> None:
        """Record ``run_id`` ``waiting`` if it is stored ``running`` but no actor will take it
        up (a submission recorded it running, see ``_runtime.resolution``, or it was queued for a
        slot of ``max_active_runs``): a closed runtime leaves no run said to be running. (A
        stopped process leaves such runs ``running``; the next load activates them all the
        same, as it does a ``waiting`` run with an accepted submission or no calls yet.)"""
        try:
            run = await self._store.get_run(run_id)
            if run is not None and run.status == "running":
                await self._settle(run, "waiting")
        except Exception:  # the store fails: the next load activates it anyway
            _log.exception("recording run %r waiting at close failed", run_id)

    async def _settle(self, run: RunRecord, status: RunStatus) -> None:
        """Record the status an orphaned run is in (a stopped process could not)."""
        try:
            async with self._transaction() as tx:
                tx.put_run(run.model_copy(update={"status": status}))
        except StoreConflict:  # changed meanwhile: someone else settled it
            pass
        self._notify(run.thread_id)

    async def _record_interrupted(
        self, thread: ThreadRecord, run: RunRecord, calls: list[StoredCall]
    ) -> None:
        """Record the run's calls that a stopped process left started as interrupted (or,
        for registrations with ``rerun_interrupted``, make them run again), in one commit."""
        agent = self.agent_of(thread)
        try:
            async with self._transaction() as tx:
                for call in calls:
                    if not _interrupted(call.record):
                        continue
                    registration = (
                        None if call.record.dynamic else agent.tools.get(call.record.name)
                    )
                    rerun = registration is not None and registration.rerun_interrupted
                    step = interrupt_call(call.record, rerun=rerun, at=self._now())
                    stage_call(tx, call, step.record)
        except StoreConflict:  # changed meanwhile (another task recorded it): judge later
            _log.info("interrupted calls of run %r changed while recorded", run.run_id)

    async def trigger(
        self, thread_id: str, notification: str, *, data: Any = None, hidden: bool = False
    ) -> None:
        """Append a server notification to the thread and continue generation (what
        ``ctx.trigger`` does; see ``_core.trigger``). Returns once the notification is stored:
        the run that answers it starts at once when the thread is idle, after the thread's
        run otherwise, with or without a client connected."""
        self._check_open()
        message = notification_message(
            self._new_id("msg", thread_id), notification, data=data, hidden=hidden
        )
        await self._thread(thread_id)
        async with self._transaction() as tx:
            tx.append_message(thread_id, message)
        # answered by a continuation once the thread is free (at once if it is now)
        self._handle(NotificationAppended(thread_id))

    async def _continue(self, thread_id: str) -> None:
        """A continuation (admission's :class:`StartContinuation`): it holds the thread from
        when it was scheduled, and starts a run answering its notifications, if no run is
        active and the last message is still a notification."""
        deferred = False
        try:
            thread = await self._load(thread_id, by_starter=True)
            if await self._store.get_active_run(thread_id) is not None or self._admission.closing:
                deferred = True  # answered after that run (or by a later runtime)
                return
            messages = await self._store.list_messages(thread_id)
            if not messages or not is_notification(messages[-1]):
                return  # answered meanwhile (by the run it arrived during)
            run = RunRecord(
                thread_id=thread_id,
                run_id=self._new_id("run", thread_id),
                status="running",
                created_at=self._now(),
            )
            async with self._transaction() as tx:
                run = tx.put_run(run)
            # Started, queued, or (committed as the close began) parked at the close.
            self._handle(RunCreated(thread_id, run.run_id), _Start(thread, run))
        except Exception:  # the store failed: the notification stays, a later load goes on
            _log.exception("continuing thread %r after a notification failed", thread_id)
        finally:
            self._handle(ContinuationEnded(thread_id, deferred))

    async def send(
        self,
        thread_id: str,
        text: str,
        *,
        identity: Any = None,
        client_data: Any = None,
        client_tools: Sequence[ClientTool] = (),
        model_settings: ModelSettings | None = None,
        files: Sequence[FilePart] = (),
    ) -> str:
        """Append the user's ``text`` (and ``files``: :class:`FilePart` values, the images
        and documents the user sent, given to the model with the text) and start a run;
        return its ``run_id``.

        A thread has one run at a time: :class:`ThreadBusy` if one is running or waiting.
        :class:`MigrationRequired` if the thread holds an unfinished call of a tool that is
        no longer registered.

        The request is stored with the run (``identity`` and ``client_data`` as lossless
        JSON, :class:`OutputNotJSON` otherwise, before anything is written; the client
        tools' name, description and input schema, and ``model_settings``: the run's
        :class:`ModelSettings`, over the agent's), so the callbacks see the same JSON
        values and the model is offered the same client tools and settings when a later
        runtime continues the run.
        """
        files = tuple(files)
        for file in files:
            if not isinstance(file, FilePart):
                raise TypeError(
                    f"send(files=...) takes FilePart values, got {file!r}; e.g. "
                    "FilePart(media_type='image/png', url='data:image/png;base64,...')"
                )
        if model_settings is not None and not isinstance(model_settings, ModelSettings):
            raise TypeError(
                f"send(model_settings=...) takes a ModelSettings, got {model_settings!r}"
            )
        self._check_open()
        # Reserve the thread before the first await: of two concurrent sends, one runs (and
        # none while a continuation holds it).
        if not self._admission.can_send(thread_id):
            raise self._busy(thread_id, None)
        self._handle(SendBegan(thread_id))
        try:
            # (its schedule point is the commit's)
            thread = await self._load(thread_id, by_starter=True, schedule=False)
            if thread.parent is not None:
                raise PaiError(
                    f"thread {thread_id!r} holds a sub-agent run of the tool call "
                    f"{thread.parent.tool_call_id!r} (thread {thread.parent.thread_id!r}); "
                    "it takes no messages from clients: send to the thread that started it"
                )
            client_tools = check_client_tools(self.agent_of(thread), client_tools)
            if self._admission.live_run_of(thread_id) is not None:  # activated meanwhile
                raise self._busy(thread_id, None)
            # A stored active run (a waiting one, or one another runtime on the store started)
            # refuses the commit below: a thread has one run at a time. No read before it.
            # (each validated, then given its class's shared set of fields set: a run
            # waiting for a slot keeps these three, see ``shared_fields_set``)
            run = shared_fields_set(
                RunRecord(
                    thread_id=thread_id,
                    run_id=self._new_id("run", thread_id),
                    status="running",
                    created_at=self._now(),
                    identity=to_json_value(identity, what="identity"),
                    client_data=to_json_value(client_data, what="client_data"),
                    client_tools=tuple(ClientToolRecord.of(t) for t in client_tools),
                    model_settings=None if model_settings is None else model_settings.to_json(),
                )
            )
            text_part = shared_fields_set(TextPart(text=text))
            message = shared_fields_set(
                Message(id=self._new_id("msg", thread_id), role="user", parts=(text_part, *files))
            )
            self._check_open()
            try:
                async with self._transaction() as tx:
                    tx.append_message(thread_id, message)
                    run = tx.put_run(run)
            except StoreConflict as exc:  # the thread has an active run?
                active = await self._store.get_active_run(thread_id)
                if active is None:  # no: a real conflict (e.g. a reused id), not a busy thread
                    raise
                raise self._busy(thread_id, active) from exc
            if self._admission.closing:  # closed while the run was written: it never starts
                with trio.CancelScope(shield=True):
                    async with self._transaction() as tx:
                        tx.put_run(run.model_copy(update={"status": "cancelled"}))
                self._check_open()
            self._handle(
                RunCreated(thread_id, run.run_id), _Start(thread, run, tuple(client_tools))
            )
        finally:
            # (a notification that came meanwhile is answered now if the send started nothing)
            self._handle(SendEnded(thread_id))
        return run.run_id

    def _busy(self, thread_id: str, active: RunRecord | None) -> ThreadBusy:
        live = self._admission.live_run_of(thread_id)
        if active is not None:
            busy = repr(active.run_id)
        elif live is not None:
            busy = repr(live)
        elif self._admission.continuing(thread_id):
            busy = "that a notification's continuation is starting"
        else:
            busy = "that another send() is starting"
        return ThreadBusy(
            f"thread {thread_id!r} already has the active run {busy}; wait for it "
            "(wait_idle), resolve its pending actions, or cancel it (cancel_run)"
        )

    async def wait_idle(self, thread_id: str) -> None:
        """Return when the thread has no active run, or its run waits only on actions (its
        own, or those its sub-agent runs wait on, at every depth).

        Loads the thread first, as :meth:`get_state` does (:class:`ThreadNotFound`,
        :class:`MigrationRequired`), so a run a closed runtime left to go on (an accepted
        submission whose resume never ran) is activated and waited for; and, in a runtime
        that just opened, once the deadlines that passed while none ran were resolved (what
        they resolve goes on, and is waited for).
        """
        if not self._deadlines.swept.is_set():  # (no extra checkpoint once it is)
            await self._deadlines.swept.wait()
        await self._load(thread_id, schedule=False)
        # Without sub-agent runs in this runtime, or another node's changes to follow, it
        # is the thread's own idleness: waited for here, two coroutines fewer alive while
        # it waits than through ``_idle_tree``. Either can start meanwhile, so it is looked
        # at again after every wait. Its schedule point: the first wait, or (a thread found
        # idle) one before it is looked at again, as the load's would have been.
        scheduled = False
        while not (self._sub_runs or self._following):
            if not self._idle(thread_id):
                await _wait_for(self._idle_waits, thread_id)
            elif scheduled:
                return
            else:
                await trio.lowlevel.cancel_shielded_checkpoint()
            scheduled = True
        if not scheduled:
            await trio.lowlevel.cancel_shielded_checkpoint()
        while not await self._idle_tree(thread_id):
            pass

    async def _idle_tree(self, thread_id: str) -> bool:
        """Wait until the thread is idle; then whether its sub-agent runs are too, at every
        depth (``False``: something of the tree was waited for or went on meanwhile, so look
        again). A call whose sub-runs all ended is settled here (it goes on), so that a
        waiter never sees a tree idle that is about to move."""
        quiet = await self._wait_own_idle(thread_id)
        if not self._sub_runs:
            return quiet
        active = await self._store.get_active_run(thread_id)
        if active is None:
            return quiet
        for call in await self._store.list_calls(thread_id):
            record = call.record
            if call.run_id != active.run_id or not record.sub_threads:
                continue
            if resumable(record):  # settled meanwhile (by a sub-run's end): it goes on
                await trio.lowlevel.checkpoint()
                quiet = False
                continue
            if record.phase != "awaiting_agents":
                continue
            running = False
            for sub_thread_id in record.sub_threads:
                if await self._store.get_active_run(sub_thread_id) is not None:
                    running = True  # (the caller's load recovered it, if it needed that)
                    quiet = await self._idle_tree(sub_thread_id) and quiet
            if not running:  # all ended: it goes on (settled here, or by their ends)
                await settle_caller(self._services, thread_id, record.tool_call_id)
                await trio.lowlevel.checkpoint()
                quiet = False
        return quiet and self._idle(thread_id)

    async def _wait_own_idle(self, thread_id: str) -> bool:
        """Return when the thread has no active run, or its run waits only on its calls'
        actions and sub-runs: whether it was so already (nothing was waited for). On a
        store shared by several nodes, a thread no run of which is live here may be driven
        by another node: then its stored run says (:meth:`_quiet_elsewhere`)."""
        already = True
        while True:
            while not self._idle(thread_id):
                already = False  # (it may be busy again by the time a waiter runs)
                await _wait_for(self._idle_waits, thread_id)
            if not self._following or await self._quiet_elsewhere(thread_id):
                return already
            already = False
            # Woken by the next change another node commits to it; or, should its node have
            # stopped, after a lease: loaded again then, which takes an orphan over here.
            with trio.move_on_after(self._store.lease) as lapsed:  # type: ignore[attr-defined]
                await _wait_for(self._elsewhere_waits, thread_id)
            if lapsed.cancelled_caught:
                await self._load(thread_id)

    async def _quiet_elsewhere(self, thread_id: str) -> bool:
        """For a thread no run of which is live here, on a store shared by several nodes:
        whether it is quiet as stored (no active run, or its run waits on actions and has no
        accepted submission left to resume). A thread whose lease this node holds is this
        runtime's to say (quiet: nothing runs it here)."""
        if self._admission.live_run_of(thread_id) is not None:
            return True
        if self._store.holds(thread_id):  # type: ignore[attr-defined]
            return True
        active = await self._store.get_active_run(thread_id)
        if active is None:
            return True
        if active.status == "running":
            return False
        calls = await self._store.list_calls(thread_id)
        return not any(c.run_id == active.run_id and resumable(c.record) for c in calls)

    async def get_state(self, thread_id: str) -> ThreadState:
        """The thread's messages and runs (:class:`MigrationRequired`: see :meth:`send`)."""
        await self._load(thread_id, full=True)
        return await self._read_state(thread_id)

    async def _read_state(self, thread_id: str) -> ThreadState:
        # The runs first: two reads are two snapshots when another node writes the thread,
        # and a run's status is written after (or with) the messages it settles, so a state
        # read this way never shows a run ended without the message that ended it.
        runs = tuple(run.state for run in await self._store.list_runs(thread_id))
        messages = await self._store.list_messages(thread_id)
        return ThreadState(
            thread_id=thread_id,
            # A copy: the application may change what it gets, never what the store holds.
            messages=tuple(message.model_copy(deep=True) for message in messages),
            runs=runs,
        )

    async def cancel_run(self, run_id: str, reason: str | None = None) -> RunState:
        """Cancel a run: every unfinished call in it is recorded as cancelled (with
        ``reason``), and the run, in one commit.

        Returns the run's state once that is recorded: ``cancelled``, or, for a run that was
        already over (or ended before the cancellation reached it), the status it ended
        with, left as it is. A submission racing the cancellation is either accepted before
        it (and its call then cancelled with the run, or its work done if the run ended
        first) or rejected. :class:`PaiError` if there is no such run. On a store shared
        by several nodes, a run another node is running is cancelled by that node, asked
        through the store (``_runtime.forwarding``).
        """
        self._check_open()
        return await self._cancel_run(run_id, reason, forward=True)

    async def _cancel_run(self, run_id: str, reason: str | None, *, forward: bool) -> RunState:
        """:meth:`cancel_run`; ``forward``: ask the owner of a run another node runs (else
        :class:`ThreadOwnedElsewhere`)."""
        live = self._live.get(run_id)
        if live is not None:
            self._handle(CancelBegan(run_id))  # (until its actor ends)
            live.cancel_reason = reason
            live.abort_calls(reason)
            live.scope.cancel()
            await live.wait_ended()
            return await self._cancelled(live.thread_id, run_id, reason)
        # Not alive: no submission resolves and no activation starts it until it is recorded
        # (and until every concurrent cancel_run of it ended: admission counts them).
        self._handle(CancelBegan(run_id))
        thread_id: str | None = None
        try:
            run = await self._store.get_run(run_id)
            if run is None:
                raise PaiError(f"no run {run_id!r}; use a run_id that send() returned")
            # Re-read and judged again whenever a submission changed the run or a call
            # meanwhile (a store conflict is the race, not an error).
            try:
                await record_cancelled(self._services, run.thread_id, run_id, reason, end_run=True)
            except ThreadOwnedElsewhere as refused:  # another node runs it: it cancels it
                if self._forwarding is None or not forward:
                    raise
                elsewhere = refused
            else:
                thread_id = run.thread_id
        finally:
            self._handle(CancelEnded(run_id, thread_id))  # (a queued activation is dropped)
        if thread_id is None:
            assert self._forwarding is not None
            request = {"op": "cancel_run", "run_id": run_id, "reason": reason}
            answer = await self._forwarding.ask(run.thread_id, request, elsewhere)
            raise_error(answer)
            return RunState.model_validate(answer["state"])
        return await self._cancelled(run.thread_id, run_id, reason)

    async def _cancelled(self, thread_id: str, run_id: str, reason: str | None) -> RunState:
        """After ``cancel_run`` recorded the run: cancel the sub-runs its calls started (each
        subtree recorded before this returns), and, for a sub-agent's run, settle the call
        that started it (its ``ctx.agents.run`` raises :class:`AgentRunError`)."""
        state = await self._run_state(run_id)
        if state.status == "cancelled":
            await self._cancel_sub_runs_of(thread_id, run_id, reason)
        thread = await self._store.get_thread(thread_id)
        if thread is not None and thread.parent is not None:
            await self._settle_caller(thread.parent.thread_id, thread.parent.tool_call_id)
        return state

    async def _run_state(self, run_id: str) -> RunState:
        run = await self._store.get_run(run_id)
        assert run is not None, "runs are never deleted"
        return run.state

    @overload
    def watch(
        self,
        thread_id: str,
        *,
        capacity: int = ...,
        snapshot: bool = ...,
        deltas: Literal[False] = ...,
    ) -> AbstractAsyncContextManager[ThreadWatch[ThreadUpdate]]: ...

    @overload
    def watch(
        self,
        thread_id: str,
        *,
        capacity: int = ...,
        snapshot: bool = ...,
        deltas: Literal[True],
    ) -> AbstractAsyncContextManager[ThreadWatch[ThreadUpdateOrDelta]]: ...

    @overload
    def watch(
        self,
        thread_id: str,
        *,
        capacity: int = ...,
        snapshot: bool = ...,
        deltas: bool,
    ) -> AbstractAsyncContextManager[ThreadWatch[ThreadUpdateOrDelta]]: ...

    def watch(
        self,
        thread_id: str,
        *,
        capacity: int = DEFAULT_WATCH_CAPACITY,
        snapshot: bool = False,
        deltas: bool = False,
    ) -> AbstractAsyncContextManager[ThreadWatch[Any]]:
        """Watch a thread: ``async with rt.watch(tid) as updates: async for u in updates``.

        An async context manager (trio gives async generators no timely cleanup): the
        watcher is connected from entering the block to leaving it, and receives every
        update committed meanwhile (:data:`ThreadUpdate`, each with ``to_wire()``), plus
        the transient tool data written meanwhile, which is never stored. Entering loads
        the thread as :meth:`get_state` does (:class:`ThreadNotFound`,
        :class:`MigrationRequired`). The runtime never waits for a watcher: one more than
        ``capacity`` updates behind is dropped, and its next receive (after the buffered
        updates) raises :class:`WatchOverflow`. Closing the runtime ends every watch (its
        iteration stops).

        ``snapshot=True`` also reads the thread's state as ``updates.snapshot``, exactly
        the state before the first update the watch yields: applying the updates to it
        gives the thread as it is, with no update missing and none applied twice.

        ``deltas=True`` also yields the model's text and reasoning as they stream
        (:class:`MessageDelta`: live only, never stored, never in a snapshot); a watch that
        starts during a model step first gets the step's text (and reasoning) so far, as one
        fragment each, then the rest. Off by default: a stored message arrives complete
        either way, and a watcher that does not show tokens need not read them.
        """
        if capacity < 1:
            raise ValueError(f"watch(capacity=...) must be at least 1, got {capacity!r}")
        if snapshot:
            return self._watch_from_snapshot(thread_id, capacity, deltas)
        return self._watch(thread_id, capacity, deltas)

    @asynccontextmanager
    async def _watch(
        self, thread_id: str, capacity: int, deltas: bool
    ) -> AsyncIterator[ThreadWatch[Any]]:
        self._check_open()
        watcher, receive = self._add_watcher(thread_id, capacity, deltas)
        try:
            await self._load(thread_id, full=True)
            await self._follow(thread_id)
            async with receive:
                yield ThreadWatch(watcher, receive)
        finally:
            self._hub.remove(watcher)

    @asynccontextmanager
    async def _watch_from_snapshot(
        self, thread_id: str, capacity: int, deltas: bool
    ) -> AsyncIterator[ThreadWatch[Any]]:
        self._check_open()
        await self._load(thread_id, full=True)
        tries = 0
        while True:
            # With no commit of the thread in flight, a watcher added now sees every commit
            # after the read below; if one began meanwhile (dirty), the read may or may not
            # hold it, so read again. So too when another node logged a change while it was
            # read (which the read holds is unknown: the watcher would see it twice or never).
            await self._hub.wait_quiet(thread_id)
            watcher, receive = self._add_watcher(thread_id, capacity, deltas)
            try:
                state, logged = await self._read_followed(thread_id)
            except BaseException:
                self._hub.remove(watcher)
                raise
            tries += 1
            if logged is not None:
                watcher.logged = logged
            elif self._elsewhere is not None and self._elsewhere.logs and tries < _SNAPSHOT_TRIES:
                watcher.dirty = True
            if not watcher.dirty:
                break
            self._hub.remove(watcher)
        await self._follow(thread_id, state, logged)
        try:
            async with receive:
                yield ThreadWatch(watcher, receive, state)
        finally:
            self._hub.remove(watcher)

    def _add_watcher(
        self, thread_id: str, capacity: int, deltas: bool
    ) -> tuple[Watcher, trio.MemoryReceiveChannel[ThreadUpdateOrDelta]]:
        """A new watcher of the thread. With ``deltas``, if a model step of the thread is
        streaming, the watcher first receives its text so far (and its reasoning so far),
        as one :class:`MessageDelta` each, in the same scheduler step as it is connected:
        every later fragment reaches it too, and none twice."""
        watcher, receive = self._hub.add(thread_id, capacity, deltas=deltas)
        run_id = self._admission.live_run_of(thread_id)
        live = None if run_id is None else self._live.get(run_id)
        if deltas and live is not None and live.step_message_id is not None:
            streamed: tuple[tuple[Literal["text", "reasoning"], list[str]], ...] = (
                ("reasoning", live.step_reasoning),
                ("text", live.step_text),
            )
            so_far = [
                MessageDelta(
                    thread_id=thread_id,
                    run_id=live.run_id,
                    message_id=live.step_message_id,
                    step=live.step_index,
                    part=part,
                    delta="".join(fragments),
                )
                for part, fragments in streamed
                if fragments
            ]
            self._hub.send_to(watcher, so_far)
        return watcher, receive

    # -- sub-agent runs (see ``_runtime.subagents``) ---------------------------------------

    async def _begin_sub_runs(
        self, sub_runs: Sequence[tuple[ThreadRecord, Message, RunRecord]], caller: StoredCall
    ) -> StoredCall:
        """Commit sub-runs' threads, prompts and runs with their caller's links to them, in
        one transaction, and start each run as ``send`` does (admission may queue them);
        return the caller as stored."""
        self._check_open()
        self._sub_runs = True
        began: list[str] = []
        try:
            for thread, _, _ in sub_runs:  # new threads: nothing else holds them
                self._handle(SendBegan(thread.thread_id))
                began.append(thread.thread_id)
            async with self._transaction() as tx:
                runs = []
                for thread, prompt, run in sub_runs:
                    tx.create_thread(thread)
                    tx.append_message(thread.thread_id, prompt)
                    runs.append(tx.put_run(run))
                stored = stage_call(tx, caller, caller.record)
            link = current_span_context()
            for (thread, _, _), run in zip(sub_runs, runs, strict=True):
                thread_id = thread.thread_id
                self._thread_records[thread_id] = thread
                self._thread_agents[thread_id] = self.agent_id_of(thread)
                self._loaded[thread_id] = True
                start = _Start(thread, run, trace_link=link)
                self._handle(RunCreated(thread_id, run.run_id), start)
        finally:
            for thread_id in began:
                self._handle(SendEnded(thread_id))
        return stored

    def _settle_caller_soon(self, thread: ThreadRecord) -> None:
        """A run of the sub-agent thread ``thread`` ended: settle its caller in a
        runtime-owned task (a closing runtime leaves it to the next load)."""
        parent = thread.parent
        assert parent is not None
        if self._nursery is None or self._admission.closing:
            return
        self._nursery.start_soon(self._settle_caller, parent.thread_id, parent.tool_call_id)

    async def _settle_caller(self, thread_id: str, tool_call_id: str) -> None:
        try:
            try:
                await settle_caller(self._services, thread_id, tool_call_id)
            except ThreadOwnedElsewhere as refused:  # another node runs the caller's run
                if self._forwarding is None:
                    raise
                request = {
                    "op": "settle_caller",
                    "thread_id": thread_id,
                    "tool_call_id": tool_call_id,
                }
                raise_error(await self._forwarding.ask(thread_id, request, refused))
        except Exception:  # the store failed: the caller's thread settles it when loaded
            _log.exception("settling call %r after its sub-run ended failed", tool_call_id)

    def _cancel_sub_threads_soon(self, thread_ids: tuple[str, ...], reason: str | None) -> None:
        """Cancel the active runs of the sub-agent threads ``thread_ids`` (and their
        subtrees), in a runtime-owned task (a closing runtime leaves them to the next
        load)."""
        if self._nursery is None or self._admission.closing:
            return
        self._nursery.start_soon(self._cancel_sub_threads, thread_ids, reason)

    async def _cancel_sub_threads(self, thread_ids: Iterable[str], reason: str | None) -> None:
        """Cancel the active run of each sub-agent thread of ``thread_ids`` with ``reason``
        (``cancel_run`` cancels its own sub-runs in turn)."""
        for thread_id in thread_ids:
            try:
                active = await self._store.get_active_run(thread_id)
                if active is not None:
                    await self.cancel_run(active.run_id, reason)
            except RuntimeClosed:
                return  # the next load cancels what is left
            except Exception:
                _log.exception("cancelling the sub-run of thread %r failed", thread_id)

    async def _cancel_sub_runs_of(self, thread_id: str, run_id: str, reason: str | None) -> None:
        """Cancel the sub-runs the calls of the run ``run_id`` started (its cancellation is
        recorded: those calls are done)."""
        for call in await self._store.list_calls(thread_id):
            if call.run_id == run_id and call.record.sub_threads:
                await self._cancel_sub_threads(call.record.sub_threads, reason)

    async def _reconcile_sub_runs(self, calls: Sequence[StoredCall]) -> None:
        """Repair, on a thread's first load, what a stopped process left between the commits
        that link a call and its sub-runs: load each active sub-run of an unfinished call
        (its own repairs: an orphaned run is recovered as any is), settle a waiting call
        whose sub-runs all ended, and cancel the sub-runs of a call that ended without
        them."""
        for call in calls:
            record = call.record
            if not record.sub_threads:
                continue
            self._sub_runs = True
            if record.phase != "done":
                for thread_id in record.sub_threads:
                    if await self._needs_recovery(thread_id):
                        await self._load(thread_id)
                if record.phase == "awaiting_agents":
                    await settle_caller(self._services, call.thread_id, record.tool_call_id)
                continue
            cancelled = record.cancelled
            reason = cancelled.reason if cancelled is not None else CALLER_ENDED
            for thread_id in record.sub_threads:
                if await self._store.get_active_run(thread_id) is not None:
                    self._cancel_sub_threads_soon((thread_id,), reason)

    async def _needs_recovery(self, thread_id: str) -> bool:
        """Whether a sub-run's thread may hold what a stopped process left to recover: it
        has an active run and no actor here. A ``running`` one was cut off; a ``waiting``
        one may wait on nothing: an accepted cancellation or failure of its last pending
        action ends that call without recording the run ``running`` (the wake-up that goes
        on with it is in memory), so a process that stopped right after it left the run
        waiting for nothing, and only a load goes on with it."""
        active = await self._store.get_active_run(thread_id)
        return active is not None and self._admission.live_run_of(thread_id) is None

    async def _origin_chain(self, thread: ThreadRecord) -> tuple[SubAgentOrigin, ...]:
        """The tool calls that started the sub-agent thread ``thread`` and the ones above
        it, outermost first (``()`` for a thread a client created)."""
        chain: list[SubAgentOrigin] = []
        while thread.parent is not None:
            parent = thread.parent
            chain.append(
                SubAgentOrigin(
                    thread_id=parent.thread_id,
                    run_id=parent.run_id,
                    message_id=parent.message_id,
                    tool_call_id=parent.tool_call_id,
                    tool_name=parent.tool_name,
                    agent_id=self.agent_id_of(thread),
                    sub_thread_id=thread.thread_id,
                )
            )
            thread = await self._thread(parent.thread_id)
        return tuple(reversed(chain))

    def agent_id_of(self, thread: ThreadRecord) -> str:
        """The registry id of the agent that runs ``thread``."""
        return self._default_agent_id if thread.agent_id is None else thread.agent_id

    # -- pending actions ---------------------------------------------------------------------

    async def pending_actions(self, thread_id: str) -> list[PendingActionView]:
        """The thread's pending actions in the order their parts appear in the thread, each
        followed where its call is by the pending actions of the sub-agent runs the call
        started (and theirs), with their ``origin_chain`` (:class:`MigrationRequired`: see
        :meth:`send`)."""
        return await self._pending_actions(await self._load(thread_id))

    async def _pending_actions(self, thread: ThreadRecord) -> list[PendingActionView]:
        """:meth:`pending_actions` of a loaded thread (its sub-runs' threads are loaded with
        it: read, not loaded again)."""
        thread_id = thread.thread_id
        actions = await self._store.list_pending_actions(thread_id)
        views = await self._own_views(thread, actions)
        if not self._sub_runs:
            return views
        calls = await self._store.list_calls(thread_id)
        callers = [c for c in calls if c.record.sub_threads and c.record.phase != "done"]
        if not callers:
            return views
        # Each caller's sub-runs' actions go where its part is: after the thread's own
        # actions of earlier parts.
        position = await self._part_positions(thread_id)
        placed = [(position.get(v.ref.tool_call_id, (-1, -1)), n, [v]) for n, v in enumerate(views)]
        for n, caller in enumerate(callers, start=len(views)):
            below: list[PendingActionView] = []
            for sub_thread_id in caller.record.sub_threads:  # (linked as they were made)
                below.extend(await self._pending_actions(await self._thread(sub_thread_id)))
            placed.append((position.get(caller.record.tool_call_id, (-1, -1)), n, below))
        placed.sort(key=lambda entry: (entry[0], entry[1]))
        return [view for _, _, group in placed for view in group]

    async def _own_views(
        self, thread: ThreadRecord, actions: list[OpenAction]
    ) -> list[PendingActionView]:
        """The views of a thread's own pending ``actions``, in part order."""
        thread_id = thread.thread_id
        if len(actions) > 1:  # a streamed call is stored before the calls its step ended with
            position = await self._part_positions(thread_id)
            actions.sort(key=lambda action: position.get(action.ref.tool_call_id, (-1, -1)))
        agent = self.agent_of(thread)
        chain = await self._origin_chain(thread) if thread.parent is not None else ()
        return [
            PendingActionView(
                self,
                action.ref,
                action.input,
                resume_schema_of(agent, action.ref),
                action.expires_at,
                chain,
            )
            for action in actions
        ]

    async def _part_positions(self, thread_id: str) -> dict[str, tuple[int, int]]:
        """Where each tool call's part is in the thread: (message, part) by tool call id."""
        return {
            part.tool_call_id: (m, p)
            for m, message in enumerate(await self._store.list_messages(thread_id))
            for p, part in enumerate(message.parts)
            if isinstance(part, ToolPart)
        }

    async def scope_pending_actions(self, scope_key: str) -> list[PendingActionView]:
        """Every pending action of the threads in ``scope_key``, thread by thread (each in
        the order of :meth:`pending_actions`; a sub-agent thread's own actions under it,
        with their ``origin_chain``). Loads each thread that has one."""
        actions = await self._store.list_scope_pending_actions(scope_key)
        threads: dict[str, list[OpenAction]] = {}
        for action in actions:
            threads.setdefault(action.ref.thread_id, []).append(action)
        views: list[PendingActionView] = []
        for thread_id, own in threads.items():
            views.extend(await self._own_views(await self._load(thread_id), own))
        return views

    def get_pending_action(
        self, message: Message | Mapping[str, Any], part: ToolPart | Mapping[str, Any]
    ) -> PendingActionView | None:
        """The pending action ``part`` (of ``message``, from ``get_state``) shows, or ``None``.

        Synchronous: it reads the part. A message of a thread this runtime has not loaded
        raises :class:`PaiError`.
        """
        return pending_action_for(self, message, part)

    async def submit_action(self, ref: PendingActionRef, payload: object) -> ActionResult:
        """Submit ``payload`` to the action ``ref`` names (validated by its schema).

        On a store shared by several nodes, an action of a thread another node is running
        is resolved by that node (this one asks it through the store and returns its
        answer); so are :meth:`cancel_action` and :meth:`fail_action`."""
        self._check_open()
        return await self._resolution(ref, {"op": "submit", "payload": payload})

    async def cancel_action(self, ref: PendingActionRef, reason: str | None = None) -> ActionResult:
        """Cancel the action: it and its call end as cancelled (with ``reason``)."""
        self._check_open()
        return await self._resolution(ref, {"op": "cancel_action", "reason": reason})

    async def fail_action(self, ref: PendingActionRef, error: str | BaseException) -> ActionResult:
        """Fail the action: its call ends in ``output-error`` with ``errorText == str(error)``."""
        self._check_open()
        return await self._resolution(ref, {"op": "fail_action", "error": str(error)}, error)

    async def _resolution(
        self, ref: PendingActionRef, request: Request, error: str | BaseException | None = None
    ) -> ActionResult:
        """Resolve the action ``ref`` names as ``request`` says (its ``op``: ``submit``,
        ``cancel_action``, ``fail_action``), here, or by the node that runs its thread."""
        try:
            return await self._resolve_here(ref, request, error)
        except ThreadOwnedElsewhere as refused:
            if self._forwarding is None:
                raise
            forwarded = {**request, "ref": ref.model_dump(mode="json")}
            answer = await self._forwarding.ask(ref.thread_id, forwarded, refused)
        raise_error(answer)
        return ActionResult.model_validate(answer["result"])

    async def _resolve_here(
        self, ref: PendingActionRef, request: Request, error: str | BaseException | None = None
    ) -> ActionResult:
        """:meth:`_resolution` by this node (:class:`ThreadOwnedElsewhere` if another
        node runs the thread)."""
        await self._settle_first(ref.thread_id)
        op = request["op"]
        if op == "submit":
            value = request["payload"]
        elif op == "cancel_action":
            value = request["reason"]
        else:
            value = request["error"] if error is None else error
        # (a partial, not a closure: this coroutine's variables stay plain locals, not cells
        # that live, with the closure, for as long as the submission is written)
        judge = functools.partial(_judge, op, ref.action_id, value, self._now)
        return await resolve(self._services, ref, judge)

    async def _apply_request(self, request: Request) -> Answer:
        """Apply here a request another node handed to this one (it runs the thread), and
        return the answer (``_runtime.forwarding``)."""
        op = request["op"]
        if op == "cancel_run":
            state = await self._cancel_run(request["run_id"], request["reason"], forward=False)
            return {"state": state.model_dump(mode="json")}
        if op == "settle_caller":
            await settle_caller(self._services, request["thread_id"], request["tool_call_id"])
            return {}
        ref = PendingActionRef.model_validate(request["ref"])
        return {"result": (await self._resolve_here(ref, request)).model_dump(mode="json")}

    async def _settle_first(self, thread_id: str) -> None:
        """Before a resolution: what a stopped process left of the thread is settled (its
        interrupted calls recorded), so the run a submission wakes never finds a call it
        cannot resume. A thread that is not there is the resolution's to reject."""
        try:
            await self._load(thread_id)
        except ThreadNotFound:
            pass

    async def _fire_deadline(self, action: OpenAction) -> bool:
        """Resolve ``action``, whose deadline passed, as its definition declares (the
        deadline timer's ``fire``): its thread is loaded first, as for a client's submission
        (a thread that cannot be loaded here is left as it is). Whether it was resolved."""
        try:
            thread = await self._load(action.ref.thread_id)
        except StoreError:
            raise  # the timer tries it again later
        except PaiError as exc:  # MigrationRequired, AgentNotFound: not this runtime's to do
            _log.warning("the deadline of action %r cannot be applied here: %s", action.ref, exc)
            return False
        result = await fire_deadline(self._services, action, self.agent_of(thread))
        if result.status == "rejected":
            _log.info("the deadline of action %r did nothing: %s", action.ref, result.error)
        return result.status == "accepted"

    def _activate_soon(self, call: StoredCall) -> None:
        """Activate the run of ``call`` in a runtime-owned task (unless it is alive)."""
        self._activate_run_soon(call.thread_id, call.run_id, call.message_id)

    def _activate_run_soon(self, thread_id: str, run_id: str, message_id: str | None) -> None:
        """Activate a run that is not alive, in a runtime-owned task: it goes on from the
        calls of the message ``message_id`` (``None``: from its next model step). Admission
        takes it unless the run is alive, starting, queued or being cancelled, or the runtime
        is not open; past ``max_active_runs`` it waits for a slot, in the order it came."""
        self._handle(ActivationRequested(thread_id, run_id, message_id))

    async def _activate(self, thread_id: str, run_id: str, message_id: str | None) -> None:
        """An activation (admission's :class:`StartActivation`, holding a slot): start the
        actor of a run that is not alive, if its stored run is still active."""
        start: _Start | None = None
        try:
            # (a task of its own, that starts the run and ends: no schedule point needed)
            thread = await self._thread(thread_id, schedule=False)
            # Read the run last and start it with no await in between: the actor starts
            # from the latest revision (a cancellation meanwhile is seen), or not at all.
            run = await self._store.get_run(run_id)
            if run is not None and run.active:
                client_tools = tuple(t.tool() for t in run.client_tools)
                start = _Start(thread, run, client_tools, message_id)
        except Exception:  # the store failed: the stored intent stays for the next load
            _log.exception("activating run %r failed", run_id)
        finally:
            # Started unless the runtime is closing, the run is being cancelled or its thread
            # has a live run; the slot goes on to the next queued activation either way.
            self._handle(ActivationEnded(run_id, stored_active=start is not None), start)


def _judge(
    op: str,
    action_id: str,
    value: Any,
    now: Callable[[], datetime],
    record: CallRecord,
    spec: CallSpec,
) -> Submission:
    """The judgement of a request's ``op`` on the action ``action_id`` of ``record``:
    ``value`` is the submission's payload, the cancellation's reason or the failure."""
    if op == "submit":
        return submit(record, spec, action_id, value, at=now())
    if op == "cancel_action":
        return cancel_action(record, action_id, value, at=now())
    return fail_action(record, action_id, value, at=now())


def _left_to_settle(run: RunRecord | None, calls: list[StoredCall]) -> bool:
    """Whether an active ``run`` no actor runs has something a load must settle: it is
    stored running, or it has no calls yet, or its calls all ended, or one was cut off or
    holds an accepted submission to resume. A run waiting on its calls' actions has not."""
    if run is None or run.status != "waiting":
        return True
    run_calls = [c.record for c in calls if c.run_id == run.run_id]
    return (
        not run_calls
        or all(r.phase == "done" for r in run_calls)
        or any(_interrupted(r) or resumable(r) for r in run_calls)
    )


def _interrupted(record: CallRecord) -> bool:
    """Whether a call no actor runs was cut off: streaming, or executing an entry that had
    started."""
    return record.phase == "streaming" or (record.phase == "executing" and record.entry_started)


def _final_answer(message: Message) -> bool:
    """Whether ``message`` is a model's final answer: an assistant message with no tool call."""
    return message.role == "assistant" and not any(isinstance(p, ToolPart) for p in message.parts)


async def _wait_for(waits: dict[str, trio.Event], thread_id: str) -> None:
    """Wait for the event ``waits`` holds for ``thread_id`` (made by the first waiter, set
    and dropped by whoever wakes them); a cancelled wait leaves no event behind that nobody
    waits on."""
    event = waits.get(thread_id)
    if event is None:
        event = waits[thread_id] = trio.Event()
    try:
        await event.wait()
    finally:
        idle = not event.is_set() and not event.statistics().tasks_waiting
        if idle and waits.get(thread_id) is event:
            del waits[thread_id]
