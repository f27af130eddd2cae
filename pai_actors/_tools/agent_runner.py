"""``ctx.agents``: the :class:`AgentRunner` a tool call is given, and what a sub-run returns
(:class:`AgentRunResult`). The runtime's sub-run (``_runtime.subagents``) does the work,
through the callable it gives the runner; see that module for what a sub-run is.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from .._core.errors import AgentNotFound
from .signal import AbortSignal, ToolThread

DEFAULT_MAX_STEPS = 16


@dataclass(frozen=True, slots=True)
class AgentRunResult:
    """What a sub-run produced: ``text``, its final answer, and ``steps``, how many model
    steps it took."""

    text: str
    steps: int


@dataclass(eq=False)
class AgentRunner:
    """``ctx.agents``: runs the runtime's other agents as part of the calling tool call.

    Concurrency contract: ``run`` may be called from any task of the calling ``execute``,
    several at once; each sub-run is independent.
    """

    _agents: Collection[str]
    _caller: ToolThread
    _signal: AbortSignal
    _start: Callable[[str, str, str, int, AbortSignal], Awaitable[AgentRunResult]]
    _numbers: Any = field(default_factory=lambda: itertools.count(1))

    async def run(
        self, agent_id: str, prompt: str, *, max_steps: int = DEFAULT_MAX_STEPS
    ) -> AgentRunResult:
        """Run the agent registered as ``agent_id`` on ``prompt``; return its final answer.

        Raises :class:`AgentNotFound` for an agent the runtime does not host,
        :class:`AgentRunError` when it cannot finish.
        """
        if agent_id not in self._agents:
            known = ", ".join(map(repr, self._agents))
            raise AgentNotFound(
                f"ctx.agents.run({agent_id!r}, ...): this runtime hosts no such agent; use one "
                f"of {known} (register agents with create_pai)",
                agent_id=agent_id,
            )
        if not isinstance(prompt, str):
            raise TypeError(f"ctx.agents.run() takes the prompt as a str, got {prompt!r}")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        number = next(self._numbers)
        prefix = f"{self._caller.tool_call_id}/{agent_id}.{number}"
        return await self._start(agent_id, prefix, prompt, max_steps, self._signal)
