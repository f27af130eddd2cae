"""Test helpers for applications built on :mod:`pai_actors`: part of the product, not an extra.

It holds the scripted model:

- :class:`ScriptedModel` plays back scripted model steps and records every
  :class:`~pai_actors.ModelRequest` it receives (``model.requests``);
- :func:`tool_call` and :func:`text` build the steps;
- :class:`ScriptedModelError` is raised when a step cannot be played (no step left, a call to
  a tool the request did not offer, a malformed step).

And the store conformance suite:

- :func:`check_store` exercises every method of the :class:`~pai_actors.Store` protocol on
  the stores a factory opens (round trips, ordering, revision conflicts, atomicity under
  exceptions and cancellation, scoping, durability across reopening) and raises
  ``AssertionError`` naming the first deviation; every backend runs it;
- :func:`memory_stores` is such a factory for :class:`~pai_actors.MemoryStore`: the same
  name reopens the same data.

And the test runtime:

- :func:`create_test_runtime` runs an agent on the production code paths (the same actors, a
  real store: a :class:`~pai_actors.MemoryStore` by default) with scripted models and
  deterministic ids, never random ones, numbered within what they are made in: threads by
  creation (``thread_1``, or the id ``create_thread(thread_id=...)`` gives), a thread's
  runs and messages within it (``run_1_1``, ``msg_1_2``), a call's data items and files
  within the call (``data_1_call_1_1``). Concurrent threads and calls draw from sequences
  of their own, so the same inputs give the same stored state under
  ``trio.testing.MockClock``, whatever order trio runs them in. The ids stay unique on
  data a test runtime already wrote to (a reopened file or
  :class:`~pai_actors.MemoryStore`): the generation the data shows comes next
  (``run_1_g2_1``, ...); new data, wherever it lives, starts at ``thread_1`` again. Its
  timestamps read trio's clock (:func:`trio_clock`), so they too replay identically.

And the simulation kit (see the guide "Testing and simulation"):

- :func:`simulate` (or :class:`Simulation`, inside a trio run under ``MockClock``) runs a
  user's agents, with their real tools, through a :class:`Workload` of simulated clients
  (approving, denying, submitting invalid answers, cancelling, going silent, reconnecting)
  under :class:`Faults` (failed store writes, crashes and restarts at any commit, model
  errors and stalls, clock jumps), checks the runtime's invariants after every step and at
  the end, and returns a :class:`SimulationResult`: its trace, the store's contents (the
  same bytes for the same seed) and the violations, with the command that replays it;
- :class:`AgentStateMachine` is a Hypothesis state machine over a user's agents (subclass
  it, naming ``agents``, ``model`` and ``messages``; collect its ``TestCase``): it draws
  sequences of sends, valid and invalid answers, cancelled and failed actions, cancelled
  runs, crashes and virtual time (and, asked for, graceful restarts and cancellations that
  race a submission or the next deadline), checks the same invariants after every rule
  (and the subclass's own, given an :class:`Observation`), and prints a failure as a short
  program to paste into a test. It needs Hypothesis (a test dependency), so it is imported
  on first use.
"""

import contextlib
import os
import re
import sqlite3
import tempfile
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

from .._core.clock import Clock
from .._core.errors import ScriptedModelError as ScriptedModelError
from .._core.model import Model
from .._runtime.clock import trio_clock as trio_clock
from .._runtime.create import counter_ids, create_agent_runtime
from .._runtime.runtime import DEFAULT_MAX_ACTIVE_RUNS, DEFAULT_MAX_AGENT_DEPTH, AgentRuntime
from .._runtime.services import MapError
from .._runtime.warm import DEFAULT_KEEP_WARM
from .._store.base import Store
from .._store.memory import MemoryBacking, MemoryStore
from .._store.postgres import PostgresStore, stored_ids
from .._store.sqlite import SqliteStore
from .._tools.agent import AgentDefinition, Pai
from .._tools.blocking import DEFAULT_THREAD_LIMIT, SyncTools
from .._tools.files import DEFAULT_MAX_FILE_BYTES
from ._machine_world import Observation as Observation
from ._scripted_model import ScriptedModel as ScriptedModel
from ._scripted_model import ScriptedText as ScriptedText
from ._scripted_model import ScriptedToolCall as ScriptedToolCall
from ._scripted_model import text as text
from ._scripted_model import tool_call as tool_call
from ._simulation import Faults as Faults
from ._simulation import Simulation as Simulation
from ._simulation import SimulationFailure as SimulationFailure
from ._simulation import SimulationResult as SimulationResult
from ._simulation import TraceEvent as TraceEvent
from ._simulation import Workload as Workload
from ._simulation import simulate as simulate
from ._store_check import StoreOpener as StoreOpener
from ._store_check import check_store as check_store

if TYPE_CHECKING:  # (imported when asked for: it needs Hypothesis, a test dependency)
    from ._state_machine import AgentStateMachine as AgentStateMachine


def create_test_runtime(
    agent: AgentDefinition | Pai,
    *,
    model: Model | str | Mapping[str, Model | str],
    store: Store | Literal["memory", "sqlite"] | None = None,
    capabilities: Any = None,
    map_error: MapError | None = None,
    clock: Clock | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    sync_tools: SyncTools = "inline",
    thread_limit: int = DEFAULT_THREAD_LIMIT,
    max_active_runs: int | None = DEFAULT_MAX_ACTIVE_RUNS,
    max_agent_depth: int = DEFAULT_MAX_AGENT_DEPTH,
    keep_warm: float = DEFAULT_KEEP_WARM,
) -> AgentRuntime:
    """An :class:`~pai_actors.AgentRuntime` for tests: ``model`` (usually a
    :class:`ScriptedModel`) instead of the agents' own (one for every agent, or a mapping
    from agent id to model, so each agent of a :class:`~pai_actors.Pai` plays its own
    script; an agent the mapping leaves out keeps its own model), a store (``store``: a new
    :class:`~pai_actors.MemoryStore` by default or with ``"memory"``; ``"sqlite"``: a
    :class:`~pai_actors.SqliteStore` on a temporary file, removed when the runtime closes;
    or the store given), and deterministic ids (see the module's docstring): numbered
    within their thread and call, and prefixed with the next generation on data that
    already holds test ids (``run_1_g2_1``), so reopening a store never reuses an id.

    Timestamps read trio's clock (``clock`` defaults to :func:`trio_clock`: trio time ``0``
    is 2026-01-01T00:00:00Z), so under ``trio.testing.MockClock`` every recorded time is the
    same on each run of a test.

    ``sync_tools`` defaults to ``"inline"`` here (production's default is ``"thread"``): a
    plain ``def`` ``execute`` runs on the trio thread, so a test is deterministic and
    ``trio.testing.MockClock(autojump_threshold=0)`` stays usable. In a worker thread, the
    tool's work is invisible to trio: every task looks blocked, the autojump clock jumps, and
    a ``fail_after`` or grace period expires that real time never reached. Pass
    ``sync_tools="thread"`` (with a real clock and ``trio.fail_after``) to test a blocking
    tool as production runs it."""
    ids = counter_ids()
    temporary: tempfile.TemporaryDirectory[str] | None = None
    if store == "memory":
        store = None
    elif store == "sqlite":
        temporary = tempfile.TemporaryDirectory(prefix="pai-actors-test-")
        store = SqliteStore(os.path.join(temporary.name, "test.db"))
    elif store is not None and not hasattr(store, "commit"):
        raise TypeError(
            f"create_test_runtime(store=...) takes a Store, 'memory' or 'sqlite', got {store!r}"
        )
    if isinstance(store, str):  # checked above; narrows the type
        raise AssertionError(store)
    if store is not None and temporary is None:
        generation = _next_generation(store)
        if generation > 1:
            ids = counter_ids(f"g{generation}_")
    runtime = create_agent_runtime(
        agent,
        store=store,
        capabilities=capabilities,
        map_error=map_error,
        model=model,
        new_id=ids,
        clock=trio_clock() if clock is None else clock,
        max_file_bytes=max_file_bytes,
        sync_tools=sync_tools,
        thread_limit=thread_limit,
        max_active_runs=max_active_runs,
        max_agent_depth=max_agent_depth,
        keep_warm=keep_warm,
    )
    if temporary is not None:
        assert isinstance(store, SqliteStore)
        runtime.close_with(store.close)
        runtime.close_with(temporary.cleanup)
    return runtime


def _next_generation(store: Store) -> int:
    """The generation of a new test runtime's ids on ``store``'s data: 1 on data that holds
    no thread, else one more than the latest generation its thread, run and message ids show
    (a runtime that stopped after storing a message of an existing run made no run id). Read
    from the data, so the same data gives the same ids wherever it lives (a new file at a
    path used before is new data; a PostgreSQL database is read on a connection of its own);
    a store of another kind is counted per store object (a simulation's view of its store
    names the data it shows: ``data_store``)."""
    store = getattr(store, "data_store", store)
    if isinstance(store, SqliteStore):
        ids = _sqlite_ids(store.path)
    elif isinstance(store, PostgresStore):
        ids = stored_ids(store)
    elif isinstance(store, MemoryStore):
        tables = store.backing.tables
        ids = [
            *tables.threads.keys(),
            *tables.runs.keys(),
            *(m for thread in tables.threads.values() for m in thread.message_ids),
        ]
    else:
        generation = _generations.get(store, 0) + 1
        _generations[store] = generation
        return generation
    return max((_generation_of(value) for value in ids), default=0) + 1


def _sqlite_ids(path: str) -> list[str]:
    if path == ":memory:" or not os.path.exists(path):
        return []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if not {"threads", "runs"} <= tables:
            return []
        rows = db.execute(
            "SELECT thread_id FROM threads UNION ALL SELECT run_id FROM runs"
            " UNION ALL SELECT message_id FROM messages"
        )
        return [str(row[0]) for row in rows]


_GENERATION = re.compile(r"_g(\d+)_\d+$")


def _generation_of(stored_id: str) -> int:
    """The generation of a test id (``run_1_g2_3``: 2; ``thread_1``, or any other id: 1)."""
    found = _GENERATION.search(stored_id)
    return 1 if found is None else int(found.group(1))


_generations: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
"""How many test runtimes were created on each store of another kind (its ids' generation)."""


def memory_stores() -> Callable[[str], AbstractAsyncContextManager[MemoryStore]]:
    """A :data:`StoreOpener` for :func:`check_store`: ``open_store(name)`` opens a
    :class:`~pai_actors.MemoryStore` on the data kept under ``name`` (new data for a new
    name), as a file path would for a SQLite store."""
    backings: dict[str, MemoryBacking] = {}

    @asynccontextmanager
    async def open_store(name: str) -> AsyncIterator[MemoryStore]:
        yield MemoryStore(backings.setdefault(name, MemoryBacking()))

    return open_store


__all__ = [
    "AgentStateMachine",
    "Faults",
    "Observation",
    "ScriptedModel",
    "ScriptedModelError",
    "ScriptedText",
    "ScriptedToolCall",
    "Simulation",
    "SimulationFailure",
    "SimulationResult",
    "StoreOpener",
    "TraceEvent",
    "Workload",
    "check_store",
    "create_test_runtime",
    "memory_stores",
    "simulate",
    "text",
    "tool_call",
    "trio_clock",
]

for _name in __all__:
    if _name not in ("StoreOpener", "AgentStateMachine"):  # (an alias; a lazy import)
        globals()[_name].__module__ = __name__  # tracebacks read pai_actors.testing.ScriptedModel
del _name


def __getattr__(name: str) -> Any:
    """``AgentStateMachine``, imported on first use: it needs Hypothesis, which only tests
    install (the rest of this package does not)."""
    if name == "AgentStateMachine":
        from ._state_machine import AgentStateMachine

        AgentStateMachine.__module__ = __name__
        globals()[name] = AgentStateMachine
        return AgentStateMachine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
