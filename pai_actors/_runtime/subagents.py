"""Sub-agent runs (``ctx.agents.run``): runs of another hosted agent, each on a thread of its
own that is linked to the tool call that started it.

A sub-run is a run like any other, on a thread whose record names its parent
(:class:`ThreadParent`: the calling call's thread, run, message, id and tool): its run is an
actor under the runtime's supervisor, its calls actors under it, with every tool feature
(suspensions, approvals, client outputs, tool data, files, child tools, ``trigger``, its own
sub-agents down to ``max_agent_depth``). Its thread id is ``<thread>/<tool call>/<key>``, so
the same tool call asking for the same sub-run finds it again, and its ids are numbered
within it, as any thread's.

The supervision tree is durable rather than held by tasks, so that every level passivates:
the calling call starts its sub-runs (the child thread, its prompt and its run, committed
with the call's link to it, ``CallRecord.sub_threads``, in one transaction) and stops
``execute`` (:class:`SubRunWaiting`); its record waits in ``awaiting_agents`` and its run
waits (no task runs either). When a sub-run ends, the runtime looks at its caller
(``resolution.settle_caller``): once every sub-run it started has ended, the caller is made to
enter ``execute`` again, exactly as an accepted submission is (its run woken, or activated),
and ``ctx.agents.run`` returns each ended run's answer (:class:`SubRuns.outcome`). So a
submission to a sub-agent's pending action resumes the sub-agent's call, then the
sub-agent, then the calling tool, in that order.

Cancellation goes down the same links: a cancelled run, or a calling call that ended (its
run cancelled or failed, or ``execute`` returned without waiting for a sub-run it started),
cancels each sub-run of it still active, with the same reason, and those cancel their own
(``AgentRuntime.cancel_run`` awaits the whole subtree). Loading a thread repairs what a
stopped process left between two of these commits (see ``AgentRuntime._load``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio

from .._core.calls import link_sub_thread
from .._core.errors import AgentRunError
from .._core.parts import Message, TextPart, message_steps
from .._core.records import RunRecord, StoredCall, ThreadParent, ThreadRecord
from .._tools.agent_runner import AgentRunResult, SubRunRequest, SubRunWaiting
from .live import LiveRun
from .services import Services

CALLER_ENDED = "the tool call that started this sub-agent run ended before it did"


class CallHolder(Protocol):
    """The calling call's actor: its latest stored call (it writes it; so does a sub-run's
    start, through it), and the lock its writes from concurrent tasks of ``execute`` take
    (each writes the call's latest revision)."""

    call: StoredCall

    @property
    def lock(self) -> trio.Lock: ...


def sub_thread_id(thread_id: str, tool_call_id: str, key: str) -> str:
    """The id of the thread of the sub-run ``key`` of a call."""
    return f"{thread_id}/{tool_call_id}/{key}"


@dataclass(eq=False)
class SubRuns:
    """The :class:`~pai_actors._tools.agent_runner.SubRunStarter` of one call's entry.

    ``unfinished`` holds the sub-runs this entry started or found still running: only those
    can outlive the call when it ends now (every sub-run of an earlier entry had ended
    before this one began)."""

    services: Services
    live: LiveRun
    holder: CallHolder
    unfinished: set[str] = field(default_factory=set)

    async def begin(self, requests: Sequence[SubRunRequest], max_steps: int) -> list[str]:
        async with self.holder.lock:  # (concurrent starts each link the latest revision)
            return await self._begin(requests, max_steps)

    async def _begin(self, requests: Sequence[SubRunRequest], max_steps: int) -> list[str]:
        """The threads of ``requests``' sub-runs: those the call started before are found
        again (and checked, for a given key), the others started, all in one commit."""
        services, live = self.services, self.live
        call = self.holder.call
        linked = call.record.sub_threads
        thread_ids: list[str] = []
        new: list[tuple[ThreadRecord, Message, RunRecord]] = []
        for request in requests:
            thread_id = sub_thread_id(live.thread_id, call.tool_call_id, request.key)
            thread_ids.append(thread_id)
            if thread_id in linked:  # started by an earlier entry
                if request.keyed:  # (a default key is made from the agent and the prompt)
                    await self._check_same(thread_id, request)
                continue
            if any(thread.thread_id == thread_id for thread, _, _ in new):
                continue  # asked twice in one batch: the same sub-run
            new.append(self._records(thread_id, request, max_steps))
        if new:
            call = self.holder.call  # (the latest: a data write may have come meanwhile)
            record = call.record
            for thread, _, _ in new:
                record = link_sub_thread(record, thread.thread_id)
            self.unfinished.update(t.thread_id for t, _, _ in new)  # (a failed commit...)
            self.holder.call = await services.begin_sub_runs(
                new, call.model_copy(update={"record": record})
            )
        return thread_ids

    def _records(
        self, thread_id: str, request: SubRunRequest, max_steps: int
    ) -> tuple[ThreadRecord, Message, RunRecord]:
        """The thread, prompt and run of a new sub-run (its depth checked)."""
        services, live, call = self.services, self.live, self.holder.call
        agent_id = request.agent_id
        parent = live.thread.parent
        depth = 1 if parent is None else parent.depth + 1
        if depth > services.max_agent_depth:
            raise AgentRunError(
                f"ctx.agents.run({agent_id!r}, ...): sub-agent runs nest at most "
                f"{services.max_agent_depth} deep (this one would be {depth} deep); raise "
                "create_agent_runtime(max_agent_depth=...) or run it from a shallower agent",
                agent_id=agent_id,
            )
        now = services.now()
        thread = ThreadRecord(
            thread_id=thread_id,
            scope_key=live.thread.scope_key,
            user_key=live.thread.user_key,
            agent_id=agent_id,
            created_at=now,
            parent=ThreadParent(
                thread_id=live.thread_id,
                run_id=live.run_id,
                message_id=call.message_id,
                tool_call_id=call.tool_call_id,
                tool_name=call.record.name,
                depth=depth,
            ),
        )
        message = Message(
            id=services.new_id("msg", thread_id),
            role="user",
            parts=(TextPart(text=request.prompt),),
        )
        run = RunRecord(
            thread_id=thread_id,
            run_id=services.new_id("run", thread_id),
            status="running",
            created_at=now,
            identity=live.identity,
            client_data=live.client_data,
            max_steps=max_steps,
        )
        return thread, message, run

    async def _check_same(self, thread_id: str, request: SubRunRequest) -> None:
        """A sub-run found again by its given key must be the one asked for: ``execute``
        asks for the same sub-runs, with the same prompts, on every entry."""
        thread = await self.services.store.get_thread(thread_id)
        messages = await self.services.store.list_messages(thread_id)
        first = messages[0].parts[0] if messages and messages[0].parts else None
        asked = first.text if isinstance(first, TextPart) else None
        agent = None if thread is None else thread.agent_id
        if agent != request.agent_id or asked != request.prompt:
            raise AgentRunError(
                f"ctx.agents.run({request.agent_id!r}, ..., key={request.key!r}): this call's "
                f"sub-run {request.key!r} was started with the agent {agent!r} and another "
                "prompt; execute must ask for the same sub-runs, with the same prompts, on "
                "every entry (give sub-runs that differ different keys)",
                agent_id=request.agent_id,
            )

    async def outcome(self, agent_id: str, thread_id: str) -> AgentRunResult:
        store = self.services.store
        runs = await store.list_runs(thread_id)
        run = runs[0] if runs else None  # the sub-run (later runs answer its triggers)
        if run is None or run.active:
            self.unfinished.add(thread_id)
            raise SubRunWaiting([thread_id])
        self.unfinished.discard(thread_id)
        if run.status == "failed":
            raise AgentRunError(
                f"the sub-agent run of {agent_id!r} (thread {thread_id!r}) failed: {run.error}",
                agent_id=agent_id,
            )
        if run.status == "cancelled":
            reason = await cancelled_reason(self.services, thread_id)
            raise AgentRunError(
                f"the sub-agent run of {agent_id!r} (thread {thread_id!r}) was cancelled"
                + (f": {reason}" if reason else ""),
                agent_id=agent_id,
            )
        messages = await store.list_messages(thread_id)
        steps = [s for m in messages if m.role == "assistant" for s in message_steps(m.parts)]
        text = "".join(p.text for p in (steps[-1] if steps else ()) if isinstance(p, TextPart))
        return AgentRunResult(text, len(steps), thread_id)


async def cancelled_reason(services: Services, thread_id: str) -> str | None:
    """The reason a cancelled sub-run's calls were cancelled with (its first that has one)."""
    for call in await services.store.list_calls(thread_id):
        cancelled = call.record.cancelled
        if cancelled is not None and cancelled.reason:
            return cancelled.reason
    return None


async def ended(services: Services, thread_ids: tuple[str, ...]) -> bool:
    """Whether every sub-run on ``thread_ids`` ended (a thread that does not exist: a start
    that never committed, so nothing to wait for)."""
    for thread_id in thread_ids:
        if await services.store.get_active_run(thread_id) is not None:
            return False
    return True
