"""The one path from a tool call to its ``execute``: :func:`call_context` builds the
:class:`ToolContext`, :func:`invoke` calls ``execute`` with it.

Every call goes through here, whatever made it: a model's call in a run (``call``; a
sub-agent's run is a run like any other), a child called through ``ctx.tools``
(``children``). So they agree on what a tool gets: its files and ``ctx.trigger`` for the
run's thread, the ``ctx.agents`` its caller gives it (a child tool's sub-runs are its
parent call's); its declared capabilities acquired around ``execute`` and released after it (also on
failure and cancellation); a plain ``def`` run in a worker thread unless the runtime runs
them inline (see ``_tools.blocking``). Each caller says only what differs: the entry, the
input and context, the data writer, the children.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from .._core.json import JsonValue
from .._tools.agent_runner import AgentRunner
from .._tools.capabilities import Capabilities
from .._tools.context import (
    InitialEntry,
    ResumeEntry,
    ToolContext,
    ToolDataWriter,
)
from .._tools.signal import AbortSignal, ToolThread
from .._tools.tool import ToolDefinition
from .._tools.tool_calls import ToolCallMap
from .live import LiveRun
from .services import Services


def call_context(
    services: Services,
    live: LiveRun,
    *,
    agent_id: str,
    thread: ToolThread,
    signal: AbortSignal,
    input: Any,
    context: Any,
    data: ToolDataWriter,
    agents: AgentRunner,
    entry: InitialEntry | ResumeEntry | None = None,
    suspend_history: Sequence[dict[str, JsonValue]] = (),
    tools: ToolCallMap | None = None,
) -> ToolContext:
    """The context of a call of ``live`` at ``thread`` (``entry`` defaults to the initial
    one; ``tools``: the parent's children, none by default)."""
    ctx: ToolContext = ToolContext(
        input=input,
        context=context,
        agent_id=agent_id,
        thread=thread,
        signal=signal,
        entry=InitialEntry() if entry is None else entry,
        data=data,
        suspend_history=list(suspend_history),
        capabilities=Capabilities(),
        files=services.files(live, thread.tool_call_id),
        agents=agents,
        _trigger=partial(services.trigger, live.thread_id),
    )
    return ctx if tools is None else replace(ctx, tools=tools)


async def invoke(
    services: Services, live: LiveRun, definition: ToolDefinition, ctx: ToolContext
) -> Any:
    """``execute(ctx)``: inside the tool's capability facades when it declares any (acquired
    before, released after, also on failure and cancellation); a plain ``def`` in a worker
    thread unless the runtime runs them inline. Returns what ``execute`` returned; raises
    what it raised."""
    execute = definition.execute
    assert execute is not None, "only a tool with execute is invoked"
    declared = definition.capabilities
    if not declared:
        return await services.blocking.call(execute, ctx)
    async with services.acquire(declared, live, ctx.thread) as capabilities:
        return await services.blocking.call(execute, replace(ctx, capabilities=capabilities))
