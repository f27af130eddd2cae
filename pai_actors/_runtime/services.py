"""What the actors need from the runtime, as one frozen record (:class:`Services`).

The run and call actors and their collaborators (the model step's I/O, child calls,
sub-agents, the resolution of pending actions) receive this record, never the
``AgentRuntime``: the store and its publishing transactions, ids and time, the worker
threads of plain ``def`` tools, the hosted agents and models, capability bindings, the
error text of a tool's exception, and a handful of callables into the runtime's admission
(whether a run is passivated or being cancelled, waking ``wait_idle``, activating a run,
ending one). Temporal's worker hands its sub-workers keyword-only dependencies the same way,
and pydantic-ai's graph nodes get ``GraphAgentDeps``: the runtime builds the record once, and
the dependency points one way, from the runtime to its actors.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any

from .._core.call_record import CallSpec
from .._core.capability import Capability
from .._core.client_tool import ClientTool
from .._core.clock import Clock
from .._core.ids import IdMaker
from .._core.model import Model
from .._core.parts import Message
from .._core.records import RunRecord, StoredCall, ThreadRecord
from .._core.updates import ThreadUpdateOrDelta
from .._store.base import Store, Transaction
from .._tools.agent import AgentDefinition
from .._tools.blocking import BlockingTools
from .._tools.capabilities import Binding, Capabilities, acquire_capabilities
from .._tools.context import ToolThread
from .._tools.files import ScopedFiles
from .._tools.registration import call_callback
from .live import LiveRun
from .loading import BoundedIndex, MessageIndex
from .warm import KeepWarm

_log = logging.getLogger("pai_actors")

MapError = Callable[[Exception, ToolThread], Any]
"""``map_error(exc, call) -> str`` (sync or async): the ``errorText`` for an exception
``execute`` raised."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Services:
    """The runtime's services for its actors (see the module docstring).

    ``publish(update)`` sends a transient update to the watchers connected now;
    ``watched_for_deltas(thread_id)`` says whether the thread has one that takes
    ``MessageDelta`` updates (so that none is made for nobody). The callables reach the
    runtime's admission: ``closing()`` whether it began to close,
    ``notify(thread_id)`` wakes the thread's ``wait_idle`` if it is idle now,
    ``notified(thread_id)`` whether a notification waits to be answered,
    ``passivated(run_id)`` / ``is_cancelling(run_id)`` / ``live_run(run_id)`` the run's
    admission state, ``activate_soon(call)`` activates the run of an accepted submission,
    ``park(run_id)`` records a run that will not start here ``waiting``, ``run_ended(live)``
    is the run actor's last word, ``thread(thread_id)`` reads a hosted thread, ``trigger``
    is :meth:`AgentRuntime.trigger`. Sub-agent runs (``subagents``): ``max_agent_depth``
    bounds how deep they nest, ``begin_sub_runs(sub_runs, caller)`` commits sub-runs'
    threads, prompts and runs with their caller's links to them, in one transaction, and
    starts the runs (returning the caller as stored),
    ``cancel_sub_threads_soon(thread_ids, reason)`` cancels the active runs of those threads
    (and their subtrees) in a runtime-owned task. ``keep_warm`` says whether a run waiting
    only on pending actions keeps its actor a while (``_runtime.warm``).
    """

    store: Store
    transaction: Callable[[], Transaction]
    publish: Callable[[ThreadUpdateOrDelta], None]
    watched_for_deltas: Callable[[str], bool]
    new_id: IdMaker
    now: Clock
    blocking: BlockingTools
    agents: Mapping[str, AgentDefinition]
    models: Mapping[str, Model]
    bindings: Mapping[str, Binding]
    max_file_bytes: int
    map_error: MapError | None
    client_tools: BoundedIndex[tuple[str, str], ClientTool]
    message_index: MessageIndex
    closing: Callable[[], bool]
    notify: Callable[[str], None]
    notified: Callable[[str], bool]
    passivated: Callable[[str], bool]
    is_cancelling: Callable[[str], bool]
    live_run: Callable[[str], LiveRun | None]
    activate_soon: Callable[[StoredCall], None]
    park: Callable[[str], Awaitable[None]]
    run_ended: Callable[[LiveRun], None]
    thread: Callable[[str], Awaitable[ThreadRecord]]
    agent_of: Callable[[ThreadRecord], AgentDefinition]
    trigger: Callable[..., Awaitable[None]]
    max_agent_depth: int
    begin_sub_runs: Callable[
        [Sequence[tuple[ThreadRecord, Message, RunRecord]], StoredCall], Awaitable[StoredCall]
    ]
    cancel_sub_threads_soon: Callable[[tuple[str, ...], str | None], None]
    keep_warm: KeepWarm

    def spec_for(self, call: StoredCall, agent: AgentDefinition) -> CallSpec | None:
        """The schemas a call is judged by: its tool's, or a client tool's (``None``: the
        tool is no longer registered)."""
        record = call.record
        if record.dynamic:
            client_tool = self.client_tools.get((call.thread_id, record.tool_call_id))
            return CallSpec.external(None if client_tool is None else client_tool.schema)
        registration = agent.tools.get(record.name)
        return None if registration is None else CallSpec.for_tool(registration.tool)

    def acquire(
        self, declared: Mapping[str, Capability], live: LiveRun, call: ToolThread
    ) -> AbstractAsyncContextManager[Capabilities]:
        """Acquire the facades ``declared`` for ``call`` (see ``_tools.capabilities``)."""
        return acquire_capabilities(
            declared,
            self.bindings,
            scope_key=live.thread.scope_key,
            thread_id=call.thread_id,
            run_id=call.run_id,
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
        )

    def files(self, live: LiveRun, tool_call_id: str) -> ScopedFiles:
        """The :class:`ScopedFiles` of a call of ``live`` (the thread's scope, creator and
        id); its file ids are made within the call, so concurrent calls draw their own."""
        thread = live.thread
        return ScopedFiles(
            store=self.store,
            transaction=self.transaction,
            scope_key=thread.scope_key,
            user_key=thread.user_key,
            thread_id=thread.thread_id,
            new_id=partial(_within, self.new_id, thread.thread_id, tool_call_id),
            clock=self.now,
            max_bytes=self.max_file_bytes,
        )

    async def mapped_error_text(self, exc: Exception, call: ToolThread) -> str | None:
        """``map_error``'s text for ``exc`` (sync or async), or ``None`` when there is no
        ``map_error``, it raised, or it returned something other than a ``str``."""
        if self.map_error is None:
            return None
        try:
            text = await call_callback(self.map_error, exc, call)
        except Exception:  # a failing map_error must not hide the tool's error
            _log.exception("map_error raised for call %r", call.tool_call_id)
            return None
        if isinstance(text, str):
            return text
        _log.error(
            "map_error returned %r for call %r, not a str; using the default text",
            text,
            call.tool_call_id,
        )
        return None

    async def error_text(self, exc: Exception, call: ToolThread) -> str:
        """The ``errorText`` of ``exc``: ``map_error``'s (sync or async) when it returns a
        string, else the exception's message (or its type's name)."""
        text = await self.mapped_error_text(exc, call)
        return text if text is not None else (str(exc) or type(exc).__name__)


def _within(new_id: IdMaker, thread_id: str, tool_call_id: str, prefix: str) -> str:
    return new_id(prefix, thread_id, tool_call_id)
