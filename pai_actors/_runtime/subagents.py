"""``ctx.agents``: running another registered agent as part of this run (:class:`AgentRunner`).

``await ctx.agents.run(agent_id, prompt)`` runs the agent registered as ``agent_id`` (in the
runtime's :class:`Pai`) on a conversation of its own that starts with ``prompt``, and returns
its final answer as a :class:`AgentRunResult`. It runs inside the calling tool call, in its
task: cancelling the call (its run, the runtime) cancels the sub-run and every tool call in
it, and each of those calls' ``ctx.signal`` is aborted with the reason.

The sub-run is part of the calling call, not of the thread's conversation: its messages are
not stored and are not parts (the calling tool returns what it wants the model to see). Its
tools run in process, concurrently within a step: their input is parsed, ``execute`` runs
(capabilities acquired, children available), and the output is parsed and projected for the
sub-agent's model with ``to_model_output``. A tool that would need a client or a person
(no ``execute``, ``needs_approval``, ``ctx.suspend``) cannot finish inside a sub-run: the
sub-agent's model reads an error result saying so. The sub-agent is bounded by ``max_steps``
model steps (:class:`AgentRunError` beyond).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from .._core.errors import AgentNotFound, AgentRunError, ValidationFailed
from .._core.json import to_json_value
from .._core.model import (
    ModelAssistantMessage,
    ModelMessage,
    ModelRequest,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolMessage,
    ModelToolResultPart,
    ModelUserMessage,
    ToolCallEvent,
    ToolResultOutput,
)
from .._core.parts import ToolDataItem
from .._core.step import accumulate_step
from .._tools.agent import RuntimeScope
from .._tools.capabilities import Capabilities
from .._tools.context import (
    AbortController,
    AbortSignal,
    InitialEntry,
    ToolContext,
    ToolDataWriter,
    ToolFailResult,
    ToolSuspendResult,
    ToolThread,
    tool_failure_details,
)
from .._tools.registration import ToolRegistration, call_callback
from .history import bare_output
from .prepare import prepare_tools, resolve_runtime_context

if TYPE_CHECKING:
    from .run import LiveRun
    from .runtime import AgentRuntime

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

    _rt: AgentRuntime
    _live: LiveRun
    _caller: ToolThread
    _signal: AbortSignal
    _numbers: Any = field(default_factory=lambda: itertools.count(1))

    async def run(
        self, agent_id: str, prompt: str, *, max_steps: int = DEFAULT_MAX_STEPS
    ) -> AgentRunResult:
        """Run the agent registered as ``agent_id`` on ``prompt``; return its final answer.

        Raises :class:`AgentNotFound` for an agent the runtime does not host,
        :class:`AgentRunError` when it cannot finish.
        """
        rt = self._rt
        if agent_id not in rt.agents:
            known = ", ".join(map(repr, rt.agents))
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
        sub = _SubRun(rt, self._live, agent_id, f"{self._caller.tool_call_id}/{agent_id}.{number}")
        return await sub.run(prompt, max_steps, self._signal)


@dataclass(eq=False)
class _SubRun:
    rt: AgentRuntime
    live: LiveRun
    agent_id: str
    prefix: str

    async def run(self, prompt: str, max_steps: int, signal: AbortSignal) -> AgentRunResult:
        rt, live, agent = self.rt, self.live, self.rt.agents[self.agent_id]
        thread = live.thread
        scope = RuntimeScope(thread.scope_key, thread.user_key, thread.thread_id, live.identity)
        runtime_context = await resolve_runtime_context(agent, scope)
        messages: list[ModelMessage] = [ModelUserMessage(prompt)]
        for step_number in range(1, max_steps + 1):
            prepared = await prepare_tools(
                agent,
                runtime_context=runtime_context,
                identity=live.identity,
                client_data=live.client_data,
            )
            request = ModelRequest(agent.instructions, list(messages), dict(prepared.tools))
            try:
                step = await accumulate_step(rt.models[self.agent_id].stream(request))
            except Exception as exc:
                raise AgentRunError(
                    f"agent {self.agent_id!r}: its model failed in step {step_number}: {exc}",
                    agent_id=self.agent_id,
                ) from exc
            said: list[ModelTextPart | ModelToolCallPart] = []
            if step.text:
                said.append(ModelTextPart(step.text))
            said.extend(
                ModelToolCallPart(c.tool_call_id, c.tool_name, c.input) for c in step.tool_calls
            )
            if said:
                messages.append(ModelAssistantMessage(said))
            if not step.tool_calls:
                return AgentRunResult(step.text, step_number)
            outputs: dict[str, ToolResultOutput] = {}
            async with trio.open_nursery() as nursery:
                for call in step.tool_calls:
                    registration = agent.tools.get(call.tool_name)
                    offered = call.tool_name in prepared.tools
                    nursery.start_soon(
                        self._call,
                        outputs,
                        call,
                        registration if offered else None,
                        runtime_context,
                        signal,
                    )
            messages.append(
                ModelToolMessage(
                    [
                        ModelToolResultPart(c.tool_call_id, c.tool_name, outputs[c.tool_call_id])
                        for c in step.tool_calls
                    ]
                )
            )
        raise AgentRunError(
            f"agent {self.agent_id!r} did not answer within {max_steps} model steps; raise "
            "max_steps or give it a clearer task",
            agent_id=self.agent_id,
        )

    async def _call(
        self,
        outputs: dict[str, ToolResultOutput],
        call: ToolCallEvent,
        registration: ToolRegistration | None,
        runtime_context: Any,
        signal: AbortSignal,
    ) -> None:
        """One tool call of the sub-run: its result, as the sub-agent's model reads it, goes
        to ``outputs``."""
        outputs[call.tool_call_id] = await self._outcome(
            call.tool_call_id, call.tool_name, call.input, registration, runtime_context, signal
        )

    async def _outcome(
        self,
        tool_call_id: str,
        name: str,
        raw_input: object,
        registration: ToolRegistration | None,
        runtime_context: Any,
        signal: AbortSignal,
    ) -> ToolResultOutput:
        if registration is None:
            return _error(f"the tool {name!r} is not offered to this agent")
        definition = registration.tool
        if definition.execute is None or registration.needs_approval is not False:
            return _error(
                f"the tool {name!r} needs a client or a person to finish, which a sub-agent "
                "run does not have"
            )
        try:
            parsed = definition._schemas.input.parse(raw_input, what="input")
        except ValidationFailed as exc:
            return _error(str(exc))
        rt, live = self.rt, self.live
        thread = ToolThread(live.thread_id, live.run_id, f"{self.prefix}/{tool_call_id}", name)
        controller = AbortController()
        signal._follow(controller)
        try:
            context = (
                runtime_context
                if registration.map_context is None
                else await call_callback(
                    registration.map_context,
                    runtime_context=runtime_context,
                    identity=live.identity,
                    client_data=live.client_data,
                )
            )
            ctx = ToolContext(
                input=parsed,
                context=context,
                agent_id=self.agent_id,
                thread=thread,
                signal=controller.signal,
                entry=InitialEntry(),
                data=ToolDataWriter(_no_data, _no_list),
                capabilities=Capabilities(),
                files=live.files(rt, thread.tool_call_id),
                agents=AgentRunner(rt, live, thread, controller.signal),
                _trigger=partial(rt.trigger, live.thread_id),
            )
            execute = definition.execute
            if definition.capabilities:
                async with rt.acquire(definition.capabilities, live, thread) as capabilities:
                    result = await call_callback(execute, replace(ctx, capabilities=capabilities))
            else:
                result = await call_callback(execute, ctx)
        except Exception as exc:
            return _error(await rt.error_text(exc, thread))
        if isinstance(result, ToolSuspendResult):
            return _error(f"the tool {name!r} suspended, which it cannot do in a sub-agent run")
        if isinstance(result, ToolFailResult):
            return _error(tool_failure_details(result)["message"])
        schemas = definition._schemas
        try:
            output = (
                to_json_value(result)
                if schemas.output is None
                else schemas.output.dump(schemas.output.parse(result, what="output"), what="output")
            )
        except Exception as exc:
            return _error(str(exc))
        convert = definition.config.to_model_output
        if convert is None:
            return bare_output(output)
        value = await call_callback(
            convert, output=output, input=to_json_value(raw_input), tool_call_id=tool_call_id
        )
        if isinstance(value, Mapping) and set(value) == {"type", "value"}:
            return {"type": value["type"], "value": to_json_value(value["value"])}
        return bare_output(to_json_value(value))


def _error(text: str) -> ToolResultOutput:
    return {"type": "error-text", "value": text}


async def _no_data(name: str, value: object, item_id: str | None, transient: bool) -> None:
    raise ValueError(
        "a tool in a sub-agent run has no tool data: it is not a conversation part; report "
        "progress from the calling tool"
    )


async def _no_list(name: str) -> list[ToolDataItem]:
    return []
