"""``ctx.agents``: the :class:`AgentRunner` a tool call is given, and what a sub-run returns
(:class:`AgentRunResult`). The runtime's sub-runs (``_runtime.subagents``) do the work,
through the :class:`SubRunStarter` it gives the runner; see that module for what a sub-run
is.

A sub-run is durable and the calling ``execute`` is re-entered to read its answer, as a
suspended call is: the first ``ctx.agents.run(...)`` of a run starts it and stops
``execute`` (with :class:`SubRunWaiting`, which the runtime catches: a tool does not); once
every sub-run the call started has ended, the runtime enters ``execute`` again from the same
entry, and the same ``ctx.agents.run(...)`` returns that run's answer at once. Each sub-run
is named by its ``key``: given, or made from the agent and the prompt (and how many runs of
the same agent with the same prompt this entry started before it), so that ``execute`` meets
the same sub-runs in the same state on every entry, in whatever order trio runs its tasks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio

from .._core.errors import AgentNotFound

DEFAULT_MAX_STEPS = 16


@dataclass(frozen=True, slots=True)
class AgentRunResult:
    """What a sub-run produced: ``text``, its final answer, and ``steps``, how many model
    steps it took. ``thread_id`` is the sub-run's thread (its messages, parts and actions)."""

    text: str
    steps: int
    thread_id: str = ""


class SubRunWaiting(BaseException):
    """``execute`` stops here: a sub-run it started has not ended yet (it runs, or waits on a
    person). The runtime records the call waiting for its sub-runs and enters ``execute``
    again once they all ended. A ``BaseException``, as ``trio.Cancelled`` is, so that
    ``except Exception`` in a tool does not catch it: let it pass."""

    def __init__(self, thread_ids: Sequence[str]) -> None:
        super().__init__(
            "execute stopped to wait for its sub-agent runs "
            f"({', '.join(map(repr, thread_ids))}); the runtime enters it again once they "
            "ended (do not catch this exception)"
        )
        self.thread_ids = tuple(thread_ids)


@dataclass(frozen=True, slots=True)
class SubRunRequest:
    """One sub-run asked for: its agent, its key within the call (``keyed``: given by the
    tool, not made from the agent and the prompt) and its prompt."""

    agent_id: str
    key: str
    prompt: str
    keyed: bool


class SubRunStarter(Protocol):
    """What the runtime gives a runner: ``begin`` starts the sub-runs ``requests`` ask for
    (or finds them, on a later entry), all at once, and returns their thread ids;
    ``outcome`` returns a sub-run's answer once it ended, raises :class:`AgentRunError`
    when it failed or was cancelled, and :class:`SubRunWaiting` while it has not ended."""

    async def begin(self, requests: Sequence[SubRunRequest], max_steps: int) -> list[str]: ...

    async def outcome(self, agent_id: str, thread_id: str) -> AgentRunResult: ...


@dataclass(eq=False)
class AgentRunner:
    """``ctx.agents``: runs the runtime's other agents as part of the calling tool call.

    Concurrency contract: ``run`` may be called from any task of the calling ``execute``,
    several at once; each sub-run is independent. ``run_all`` starts several and waits for
    them all.
    """

    _agents: Collection[str]
    _starter: SubRunStarter
    _seen: dict[tuple[str, str], int] = field(default_factory=dict)
    _beginning: int = 0
    _began: trio.Event | None = None

    async def run(
        self,
        agent_id: str,
        prompt: str,
        *,
        key: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> AgentRunResult:
        """Run the agent registered as ``agent_id`` on ``prompt``; return its final answer.

        The sub-run has a thread of its own, linked to the calling tool call (its part's
        ``sub_threads``), with every tool feature: its pending actions are listed with the
        calling thread's, with their origin chain. ``key`` names the sub-run within the
        call (default: made from ``agent_id`` and ``prompt``); ``execute`` must ask for the
        same sub-runs, with the same prompts, on every entry (see the module docstring).

        Raises :class:`AgentNotFound` for an agent the runtime does not host,
        :class:`AgentRunError` when the sub-run failed, was cancelled or cannot start.
        """
        (result,) = await self.run_all([(agent_id, prompt)], keys=[key], max_steps=max_steps)
        return result

    async def run_all(
        self,
        requests: Iterable[tuple[str, str]],
        *,
        keys: Sequence[str | None] | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> list[AgentRunResult]:
        """Run several agents at once (``(agent_id, prompt)`` pairs) and return their answers
        in the same order, once they all ended; each may wait on its own pending actions
        meanwhile. ``keys`` names the sub-runs (``None`` members: the default key). The
        first that failed raises its :class:`AgentRunError` once none is left running."""
        requests = list(requests)
        named = [None] * len(requests) if keys is None else list(keys)
        if len(named) != len(requests):
            raise ValueError(f"run_all(keys=...) needs one key per request, got {len(named)}")
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        checked = [
            self._check(agent_id, prompt, k)
            for (agent_id, prompt), k in zip(requests, named, strict=True)
        ]
        self._beginning += 1
        try:
            threads = await self._starter.begin(checked, max_steps)
        finally:
            self._beginning -= 1
            if self._beginning == 0 and self._began is not None:
                self._began.set()
                self._began = None
        results: list[AgentRunResult | BaseException] = []
        for request, thread_id in zip(checked, threads, strict=True):
            try:
                results.append(await self._starter.outcome(request.agent_id, thread_id))
            except (SubRunWaiting, Exception) as exc:
                results.append(exc)
        waiting = [t for t, r in zip(threads, results, strict=True) if isinstance(r, SubRunWaiting)]
        if waiting:
            await self._let_siblings_begin()
            raise SubRunWaiting(waiting)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [r for r in results if isinstance(r, AgentRunResult)]

    def _check(self, agent_id: str, prompt: str, key: str | None) -> SubRunRequest:
        if agent_id not in self._agents:
            known = ", ".join(map(repr, self._agents))
            raise AgentNotFound(
                f"ctx.agents.run({agent_id!r}, ...): this runtime hosts no such agent; use one "
                f"of {known} (register agents with create_pai)",
                agent_id=agent_id,
            )
        if not isinstance(prompt, str):
            raise TypeError(f"ctx.agents.run() takes the prompt as a str, got {prompt!r}")
        if key is None:
            digest = hashlib.sha256(prompt.encode()).hexdigest()[:12]
            seen = self._seen.get((agent_id, digest), 0) + 1
            self._seen[(agent_id, digest)] = seen
            made = f"{agent_id}-{digest}" + ("" if seen == 1 else f"-{seen}")
            return SubRunRequest(agent_id, made, prompt, keyed=False)
        if not isinstance(key, str) or not key.strip() or "/" in key:
            raise ValueError(
                f"ctx.agents.run(key={key!r}): a key is a non-empty str without '/', unique "
                "among the sub-runs of the call"
            )
        return SubRunRequest(agent_id, key, prompt, keyed=True)

    async def _let_siblings_begin(self) -> None:
        """Before ``execute`` stops: let the other tasks of this entry that are starting
        sub-runs (``ctx.agents.run`` in a nursery) start theirs first, so that the call
        waits for all of them at once rather than one entry each."""
        await trio.lowlevel.checkpoint()  # the tasks started with it take their first step
        while self._beginning:
            if self._began is None:
                self._began = trio.Event()
            await self._began.wait()
