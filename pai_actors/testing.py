"""Test helpers for applications built on :mod:`pai_actors`: part of the product, not an extra.

This module grows with the runtime. Today it holds the scripted model:

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
  real store: a :class:`~pai_actors.MemoryStore` by default) with a scripted model and
  deterministic ids (``thread_1``, ``run_2``, ...: one counter per runtime, never
  random ones), so a run replays identically under ``trio.testing.MockClock``. The ids stay
  unique per store: the n-th test runtime created on the same data (n >= 2: a
  :class:`~pai_actors.MemoryStore` reopened on the same backing, or the same store object)
  prefixes its ids with its generation (``run_g2_1``, ...). Its timestamps read trio's
  clock (:func:`trio_clock`), so they too replay identically under ``MockClock``.

Fault injection helpers will follow.
"""

import os
import tempfile
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal

from ._agent import AgentDefinition, Pai
from ._blocking import DEFAULT_THREAD_LIMIT, SyncTools
from ._clock import Clock
from ._clock import trio_clock as trio_clock
from ._create import counter_ids, create_agent_runtime
from ._errors import ScriptedModelError as ScriptedModelError
from ._files import DEFAULT_MAX_FILE_BYTES
from ._memory_store import MemoryBacking, MemoryStore
from ._model import Model
from ._runtime import DEFAULT_MAX_ACTIVE_RUNS, AgentRuntime, MapError
from ._scripted_model import ScriptedModel as ScriptedModel
from ._scripted_model import ScriptedText as ScriptedText
from ._scripted_model import ScriptedToolCall as ScriptedToolCall
from ._scripted_model import text as text
from ._scripted_model import tool_call as tool_call
from ._sqlite_store import SqliteStore
from ._store import Store
from ._store_check import StoreOpener as StoreOpener
from ._store_check import check_store as check_store


def create_test_runtime(
    agent: AgentDefinition | Pai,
    *,
    model: Model,
    store: Store | Literal["memory", "sqlite"] | None = None,
    capabilities: Any = None,
    map_error: MapError | None = None,
    clock: Clock | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    sync_tools: SyncTools = "inline",
    thread_limit: int = DEFAULT_THREAD_LIMIT,
    max_active_runs: int | None = DEFAULT_MAX_ACTIVE_RUNS,
) -> AgentRuntime:
    """An :class:`~pai_actors.AgentRuntime` for tests: ``model`` (usually a
    :class:`ScriptedModel`) instead of the agent's, a store (``store``: a new
    :class:`~pai_actors.MemoryStore` by default or with ``"memory"``; ``"sqlite"``: a
    :class:`~pai_actors.SqliteStore` on a temporary file, removed when the runtime closes;
    or the store given), and deterministic ids from a per-runtime counter, prefixed
    with the generation from the second runtime on the same store's data on (``run_g2_1``),
    so reopening a store never reuses an id.

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
        if isinstance(store, SqliteStore):  # the same file, whatever store object opens it
            path = os.path.realpath(store.path)
            generation = _file_generations[path] = _file_generations.get(path, 0) + 1
        else:
            key: object = store.backing if isinstance(store, MemoryStore) else store
            generation = _generations.get(key, 0) + 1
            _generations[key] = generation
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
    )
    if temporary is not None:
        assert isinstance(store, SqliteStore)
        runtime.on_close.extend([store.close, temporary.cleanup])
    return runtime


_generations: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
_file_generations: dict[str, int] = {}  # SQLite files by real path
"""How many test runtimes were created on each store's data (its ids' generation)."""


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
    "ScriptedModel",
    "ScriptedModelError",
    "ScriptedText",
    "ScriptedToolCall",
    "StoreOpener",
    "check_store",
    "create_test_runtime",
    "memory_stores",
    "text",
    "tool_call",
    "trio_clock",
]

for _name in __all__:
    if _name != "StoreOpener":  # a type alias has no settable __module__
        globals()[_name].__module__ = __name__  # tracebacks read pai_actors.testing.ScriptedModel
del _name
