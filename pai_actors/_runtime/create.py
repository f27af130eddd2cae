"""Making a runtime: :func:`create_agent_runtime`, and the id makers it takes
(:func:`uuid_ids` in production, :func:`counter_ids` in tests)."""

from __future__ import annotations

import inspect
import itertools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .._core.clock import Clock, wall_clock
from .._core.errors import PaiError
from .._core.ids import IdMaker
from .._core.model import Model
from .._store.base import Store
from .._store.memory import MemoryStore
from .._tools.agent import AgentDefinition, Pai, as_model, check_runtime
from .._tools.blocking import DEFAULT_THREAD_LIMIT, BlockingTools, SyncTools
from .._tools.files import DEFAULT_MAX_FILE_BYTES
from .runtime import (
    DEFAULT_MAX_ACTIVE_RUNS,
    DEFAULT_MAX_AGENT_DEPTH,
    AgentRuntime,
    check_max_active_runs,
    check_max_agent_depth,
)
from .services import MapError
from .warm import DEFAULT_KEEP_WARM, check_keep_warm


def uuid_ids(prefix: str, *within: str) -> str:
    """Production ids: ``"<prefix>_<hex>"``, the hex of a version-7 UUID (RFC 9562): the
    creation time in milliseconds, then 74 random bits.

    Time first, so that ids made later sort after earlier ones: a thread's rows sit where the
    SQLite store's indexes are being written, not at random places in files that outgrow the
    page cache (suspending 10,000 conversations took ~13% less time than with version-4
    UUIDs, ~42 instead of ~55 µs a commit). The price: an id shows when it was made.
    ``within`` (the thread, and call, the id is made in; see :data:`IdMaker`) is not needed
    for uniqueness here.
    """
    return f"{prefix}_{uuid7_hex(time.time_ns() // 1_000_000, os.urandom(10))}"


def uuid7_hex(unix_ms: int, random: bytes) -> str:
    """The 32 hex digits of the version-7 UUID of ``unix_ms`` and 10 ``random`` bytes (of
    which 74 bits are used: the version and variant take the rest)."""
    value = (unix_ms & _MS_MASK) << 80 | int.from_bytes(random, "big")
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # variant 10 (RFC 9562)
    return f"{value:032x}"


_MS_MASK = (1 << 48) - 1


def counter_ids(generation: str = "") -> IdMaker:
    """Deterministic ids for tests, numbered within what they are made in:

    - threads by creation: ``thread_1``, ``thread_2``, ... (``thread_<generation>1``);
    - a thread's runs and messages within it: the first run of ``thread_1`` is
      ``run_1_1``, its messages ``msg_1_1``, ``msg_1_2``, ...;
    - a call's data items and files within the call: ``data_1_call_1_1``,
      ``file_1_call_1_1``, ...

    A thread id is shown without its ``thread_`` prefix. ``generation`` (``"g2_"``) goes in
    front of a thread's number, and of the numbers made within a thread this id maker did
    not make (``run_1_g2_1``), so a later runtime on the same data never makes an id again.
    """
    counters: dict[tuple[str, ...], Iterator[int]] = {}
    made: set[str] = set()  # the threads made here: what is numbered within them is new

    def new_id(prefix: str, *within: str) -> str:
        key = (prefix, *within)
        counter = counters.get(key)
        if counter is None:
            counter = counters[key] = itertools.count(1)
        names = "".join(f"{name.removeprefix('thread_')}_" for name in within)
        marked = generation if not within or within[0] not in made else ""
        made_id = f"{prefix}_{names}{marked}{next(counter)}"
        if not within and prefix == "thread":
            made.add(made_id)
        return made_id

    return new_id


def create_agent_runtime(
    agent_or_pai: AgentDefinition | Pai,
    *,
    store: Store | None = None,
    capabilities: Any = None,
    map_error: MapError | None = None,
    model: Model | str | Mapping[str, Model | str] | None = None,
    new_id: IdMaker = uuid_ids,
    clock: Clock = wall_clock,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    sync_tools: SyncTools = "thread",
    thread_limit: int = DEFAULT_THREAD_LIMIT,
    max_active_runs: int | None = DEFAULT_MAX_ACTIVE_RUNS,
    max_agent_depth: int = DEFAULT_MAX_AGENT_DEPTH,
    keep_warm: float = DEFAULT_KEEP_WARM,
) -> AgentRuntime:
    """Create the runtime for an agent, or for every agent of a :class:`Pai`.

    A runtime made from a Pai hosts all its agents: each thread is run by one of them
    (``create_thread(..., agent_id=...)``, the Pai's first agent by default), and a tool's
    ``ctx.agent_id`` is that agent's registry id; made from one agent, the runtime hosts that
    agent under its name. ``store`` defaults to a new :class:`MemoryStore`; ``model``
    replaces every agent's own model, or, a mapping from agent id to model, the models of
    the agents it names (each id must be an agent of the runtime); a model is a
    :class:`Model` or a spec string such as ``"openai:gpt-4.1-mini"``, made into its
    adapter here (as ``define_agent(model=...)`` does); ``map_error(exc, call)``
    turns an exception of ``execute`` into its ``errorText``; ``new_id(prefix, *within)``
    makes the ids (:data:`IdMaker`); ``clock()`` gives every recorded timestamp
    (timezone-aware); ``capabilities`` binds each capability token
    (or its id) to a callable receiving a :class:`CapabilityRequest` and returning an async
    context manager whose value is the facade; ``max_file_bytes`` bounds a file a tool
    saves (``ctx.files``).

    ``sync_tools`` says where an ``execute`` that is a plain ``def`` runs: ``"thread"`` (the
    default) in a worker thread, at most ``thread_limit`` at once (a ``trio.CapacityLimiter``
    of this runtime), so a blocking tool does not stall the other runs; ``"inline"`` on the
    trio thread, as an ``async def`` would, which a simulation under
    ``trio.testing.MockClock(autojump_threshold=0)`` needs (a worker thread's work is time the
    autojump clock does not see). Only ``execute`` moves; the other callbacks always run
    inline. See ``docs/guides/synchronous.md`` for what a blocking tool may call on ``ctx``
    and what cancellation cannot interrupt.

    ``max_active_runs`` (default 256) bounds the runs active at once: stepping, or running
    their calls. A run past the limit (a new one from ``send``, or one a submission
    resumes) is stored and waits, in order, for an active run to end or to passivate (a run
    waiting only on pending actions holds no slot once it passivated, see ``keep_warm``);
    ``wait_idle`` waits for it too. ``None``
    removes the limit. A tool that blocks until another thread's run does something can
    wait forever once every slot is held by such tools: raise the limit, or use ``None``.
    (``ctx.agents.run`` does not block: the calling call waits without a slot.)

    ``keep_warm`` (default 0.25 seconds) is how long a run waiting only on pending actions
    may keep its actor, and its slot, before it passivates: it does while most recent
    pending actions were resolved within that time (a client tool's output, an automated
    approval), which spares its activation; with slower ones (a person's) it passivates at
    once. Its state is written first either way; ``0`` never keeps it, nor does a store
    shared with other nodes (a ``PostgresStore`` with a ``node_id``). See
    ``docs/guides/durability.md``.

    ``max_agent_depth`` (default 4) bounds how deep sub-agent runs nest (``ctx.agents.run``
    in a sub-agent's tool is depth 2, and so on); deeper raises :class:`AgentRunError` in
    the tool that asks. Misconfiguration raises
    :class:`RuntimeConfigError` (or :class:`PaiError`; a model that is not one, or a spec
    that names no adapter, :class:`DefinitionError`) here, before anything runs.
    """
    blocking = BlockingTools(sync_tools, thread_limit)
    check_max_active_runs(max_active_runs)
    check_max_agent_depth(max_agent_depth)
    check_keep_warm(keep_warm)
    bindings = check_runtime(agent_or_pai, capabilities=capabilities)
    if isinstance(agent_or_pai, Pai):
        if not agent_or_pai.agents:
            raise PaiError("create_agent_runtime() needs a Pai with at least one agent")
        agents: Mapping[str, AgentDefinition] = agent_or_pai.agents
    else:
        agents = {agent_or_pai.name: agent_or_pai}
    models = _models(agents, model)
    return AgentRuntime(
        agents,
        models=models,
        store=store if store is not None else MemoryStore(),
        map_error=map_error,
        new_id=_id_maker(new_id),
        clock=clock,
        bindings=bindings,
        max_file_bytes=max_file_bytes,
        blocking=blocking,
        max_active_runs=max_active_runs,
        max_agent_depth=max_agent_depth,
        keep_warm=keep_warm,
    )


def _models(
    agents: Mapping[str, AgentDefinition],
    model: Model | str | Mapping[str, Model | str] | None,
) -> dict[str, Model]:
    """Each agent's model: ``model`` for all, or the mapping's for the agents it names, else
    the agent's own. A spec string becomes its adapter (:func:`as_model`); one given for
    all agents becomes one adapter they share."""
    if isinstance(model, Mapping):
        unknown = [agent_id for agent_id in model if agent_id not in agents]
        if unknown:
            known = ", ".join(map(repr, agents))
            raise PaiError(
                f"model={{{unknown[0]!r}: ...}} names no agent of this runtime; its agents "
                f"are {known}: key the models by those ids"
            )
        given = {
            agent_id: as_model(
                value,
                where=f"create_agent_runtime(model={{{agent_id!r}: ...}}) for agent {agent_id!r}",
            )
            for agent_id, value in model.items()
        }
    elif model is None:
        given = {}
    else:
        named = ("agents " if len(agents) > 1 else "agent ") + ", ".join(map(repr, agents))
        shared = as_model(model, where=f"create_agent_runtime(model=...) for {named}")
        given = dict.fromkeys(agents, shared)
    models: dict[str, Model] = {}
    for agent_id, agent in agents.items():
        found = given.get(agent_id, agent.model)
        if found is None:
            raise PaiError(
                f"agent {agent_id!r} has no model; give define_agent(model=...) or "
                "create_agent_runtime(..., model=...)"
                + (" (the model mapping has no entry for it)" if isinstance(model, Mapping) else "")
            )
        models[agent_id] = found
    return models


def _id_maker(new_id: IdMaker) -> IdMaker:
    """``new_id`` as an :data:`IdMaker`: one that takes only the prefix (``new_id(prefix)``,
    as id makers did before ids were made within their thread) is given only the prefix."""
    try:
        inspect.signature(new_id).bind("prefix", "thread", "call")
    except TypeError:
        one: Callable[[str], str] = new_id
        return lambda prefix, *within: one(prefix)
    except ValueError:  # no signature to read (a builtin): assume the documented one
        pass
    return new_id
