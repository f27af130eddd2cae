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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trio

from .._core.errors import AgentRunError, ValidationFailed
from .._core.json import to_json_value
from .._core.model import (
    ModelAssistantMessage,
    ModelMessage,
    ModelRequest,
    ModelSettings,
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
from .._tools.agent_runner import AgentRunResult
from .._tools.context import (
    AbortController,
    AbortSignal,
    ToolDataWriter,
    ToolFailResult,
    ToolSuspendResult,
    ToolThread,
    tool_failure_details,
)
from .._tools.registration import ToolRegistration, call_callback
from .history import bare_output
from .invoke import call_context, invoke
from .live import LiveRun
from .prepare import prepare_tools, resolve_runtime_context
from .services import Services


@dataclass(eq=False)
class _SubRun:
    services: Services
    live: LiveRun
    agent_id: str
    prefix: str

    async def run(self, prompt: str, max_steps: int, signal: AbortSignal) -> AgentRunResult:
        services, live, agent = self.services, self.live, self.services.agents[self.agent_id]
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
            request = ModelRequest(
                agent.instructions,
                list(messages),
                dict(prepared.tools),
                agent.model_settings or ModelSettings(),
            )
            try:
                step = await accumulate_step(services.models[self.agent_id].stream(request))
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
        services, live = self.services, self.live
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
            ctx = call_context(
                services,
                live,
                agent_id=self.agent_id,
                thread=thread,
                signal=controller.signal,
                input=parsed,
                context=context,
                data=ToolDataWriter(_no_data, _no_list),
            )
            result = await invoke(services, live, definition, ctx)
        except Exception as exc:
            return _error(await services.error_text(exc, thread))
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


async def run_agent(
    services: Services,
    live: LiveRun,
    agent_id: str,
    prefix: str,
    prompt: str,
    max_steps: int,
    signal: AbortSignal,
) -> AgentRunResult:
    """Run the agent ``agent_id`` on ``prompt`` inside a call of ``live`` (what
    ``ctx.agents.run`` does; the runtime gives it to the actors as ``Services.run_agent``):
    cancelled with the call, each of its calls' signals following ``signal``."""
    return await _SubRun(services, live, agent_id, prefix).run(prompt, max_steps, signal)
