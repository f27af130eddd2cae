"""Tool preparation: what the model is offered for one step, resolved from the registrations.

Before each model step the runtime calls :func:`prepare_tools`. For each registration, in
registration order, it evaluates ``enabled``; a disabled tool stops there (its context is not
mapped). For an enabled tool it maps the context (``map_context``, or the agent's runtime
context as it is). A tool with a callback description then, in the seed's order:

1. resolves its children's availability (each child registration's ``enabled``, called with
   the parent's mapped context as ``runtime_context``);
2. describes each enabled child: a callback description gets the child's mapped context
   (its ``map_context`` is called only then), a static one is used as it is;
3. calls the parent's description with ``DescriptionContext(context, tools)``, where
   ``tools`` holds only the enabled children's :class:`ChildToolInfo`.

A tool with a static description skips its children entirely. Nothing here acquires a
capability or calls ``execute``. Any failing callback fails the whole preparation with a
:class:`ToolPreparationError` naming the tool (and child) and the callback; a child whose
resolution failed is never reported as disabled.

Callbacks run one at a time, in a fixed order, so a step's preparation is deterministic.
Cancellation passes through untouched.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NoReturn

from .._core.client_tool import ClientTool
from .._core.errors import DefinitionError, ToolPreparationError
from .._core.model import ModelTool
from .._tools.agent import AgentDefinition, RuntimeScope
from .._tools.registration import ToolRegistration, as_registration, call_callback
from .._tools.tool import ChildToolInfo, DescriptionContext

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60


@dataclass(frozen=True, slots=True)
class PreparedTools:
    """The outcome of :func:`prepare_tools` for one model step.

    ``tools`` is what the model is offered, by name: the enabled registrations, then the
    request's client tools (ready for ``ModelRequest(tools=...)``). ``client_tools`` holds
    those client tools by name. ``children`` records, for each parent whose children were
    resolved in this step, each declared child's enabled state; a parent with a static
    description does not resolve its children, so it has no entry.
    """

    tools: Mapping[str, ModelTool]
    client_tools: Mapping[str, ClientTool]
    children: Mapping[str, Mapping[str, bool]]


async def resolve_runtime_context(agent: AgentDefinition, scope: RuntimeScope) -> Any:
    """The agent's runtime context for a run: its value, or its callable's result for ``scope``.

    A failing callable raises :class:`ToolPreparationError` (``callback="runtime_context"``).
    """
    factory = agent.runtime_context
    if not callable(factory):
        return factory
    try:
        return await call_callback(factory, scope)
    except Exception as exc:
        raise ToolPreparationError(
            f"agent {agent.name!r}: the runtime_context callback {_name(factory)} raised "
            f"{_error(exc)}; no run can start without its runtime context",
            tool=None,
            child=None,
            callback="runtime_context",
        ) from exc


async def prepare_tools(
    agent: AgentDefinition,
    *,
    runtime_context: Any,
    identity: Any = None,
    client_data: Any = None,
    client_tools: Sequence[ClientTool] = (),
) -> PreparedTools:
    """Prepare ``agent``'s tools for one model step, in the order the module docs describe.

    ``runtime_context`` is the run's resolved context (see :func:`resolve_runtime_context`);
    ``identity`` (trusted) and ``client_data`` (untrusted) come from the request and are
    passed to every ``enabled`` and ``map_context`` callback. ``client_tools`` are offered
    after the registered tools; a client tool whose name is taken raises
    :class:`DefinitionError`. A failing callback raises :class:`ToolPreparationError`.
    """
    offered = check_client_tools(agent, client_tools)
    resolver = _Resolver(identity=identity, client_data=client_data)
    tools: dict[str, ModelTool] = {}
    children: dict[str, Mapping[str, bool]] = {}
    for name, registration in agent.tools.items():
        where = _Where(name)
        if not await resolver.enabled(registration, runtime_context, where):
            continue
        context = await resolver.map_context(registration, runtime_context, where)
        definition = registration.tool
        description = definition.config.description
        if not isinstance(description, str):
            infos: dict[str, ChildToolInfo] = {}
            if definition.tools:
                states = await resolve_children(
                    name,
                    registration,
                    context=context,
                    identity=identity,
                    client_data=client_data,
                )
                children[name] = MappingProxyType(states)
                infos = await resolver.describe_children(registration, context, states, name)
            description = resolver.describe(description, DescriptionContext(context, infos), where)
        tools[name] = ModelTool(description, definition._schemas.input.json_schema)
    for client_tool in offered:
        tools[client_tool.name] = ModelTool(client_tool.description, client_tool.input_schema)
    return PreparedTools(
        tools=MappingProxyType(tools),
        client_tools=MappingProxyType({tool.name: tool for tool in offered}),
        children=MappingProxyType(children),
    )


async def resolve_children(
    name: str,
    registration: ToolRegistration,
    *,
    context: Any,
    identity: Any = None,
    client_data: Any = None,
    invocation: bool = False,
) -> dict[str, bool]:
    """Each declared child's enabled state for the parent registered as ``name``.

    ``context`` is the parent's mapped context, which child callbacks receive as their
    ``runtime_context``. Used before each model step, and by the runtime once before each
    parent invocation (the value then stays fixed for that invocation). A failing callback
    raises :class:`ToolPreparationError`; it is never read as ``False``.
    """
    resolver = _Resolver(identity=identity, client_data=client_data)
    stage = _INVOCATION if invocation else _STEP
    return {
        child: await resolver.enabled(as_registration(value), context, _Where(name, child, stage))
        for child, value in registration.tool.tools.items()
    }


async def describe_children(
    name: str,
    registration: ToolRegistration,
    *,
    context: Any,
    states: Mapping[str, bool],
    identity: Any = None,
    client_data: Any = None,
    invocation: bool = False,
) -> dict[str, ChildToolInfo]:
    """The :class:`ChildToolInfo` of each enabled child (``states``) of the parent registered
    as ``name`` whose context is ``context``: its description resolved (a callback one with
    the child's mapped context), its input and output JSON Schemas. A failing callback
    raises :class:`ToolPreparationError`."""
    resolver = _Resolver(identity=identity, client_data=client_data)
    stage = _INVOCATION if invocation else _STEP
    return await resolver.describe_children(registration, context, states, name, stage)


_STEP = "the tools for this model step could not be prepared"
_INVOCATION = "the tool call could not start (its children are resolved before execute)"


@dataclass(frozen=True, slots=True)
class _Where:
    tool: str
    child: str | None = None
    stage: str = _STEP

    def __str__(self) -> str:
        if self.child is None:
            return f"tool {self.tool!r}"
        return f"child {self.child!r} of tool {self.tool!r}"

    def fail(self, callback: str, problem: str, cause: BaseException | None = None) -> NoReturn:
        raise ToolPreparationError(
            f"{self}: {problem}; {self.stage}",
            tool=self.tool,
            child=self.child,
            callback=callback,
        ) from cause


@dataclass(frozen=True, slots=True)
class _Resolver:
    identity: Any
    client_data: Any

    async def call(
        self, callback: str, function: Callable[..., Any], runtime_context: Any, where: _Where
    ) -> Any:
        try:
            return await call_callback(
                function,
                runtime_context=runtime_context,
                identity=self.identity,
                client_data=self.client_data,
            )
        except Exception as exc:
            where.fail(
                callback, f"the {callback} callback {_name(function)} raised {_error(exc)}", exc
            )

    async def enabled(
        self, registration: ToolRegistration, runtime_context: Any, where: _Where
    ) -> bool:
        if isinstance(registration.enabled, bool):
            return registration.enabled
        value = await self.call("enabled", registration.enabled, runtime_context, where)
        if not isinstance(value, bool):
            where.fail(
                "enabled",
                f"the enabled callback {_name(registration.enabled)} returned {_show(value)}; "
                "it must return True or False",
            )
        return value

    async def map_context(
        self, registration: ToolRegistration, runtime_context: Any, where: _Where
    ) -> Any:
        if registration.map_context is None:
            return runtime_context
        return await self.call("map_context", registration.map_context, runtime_context, where)

    async def describe_children(
        self,
        registration: ToolRegistration,
        context: Any,
        states: Mapping[str, bool],
        name: str,
        stage: str = _STEP,
    ) -> dict[str, ChildToolInfo]:
        infos: dict[str, ChildToolInfo] = {}
        for child, value in registration.tool.tools.items():
            if not states[child]:
                continue
            child_registration = as_registration(value)
            where = _Where(name, child, stage)
            description = child_registration.tool.config.description
            if not isinstance(description, str):
                child_context = await self.map_context(child_registration, context, where)
                description = self.describe(description, DescriptionContext(child_context), where)
            spec = child_registration.tool.wire_spec()
            infos[child] = ChildToolInfo(description, spec.input_schema, spec.output_schema)
        return infos

    def describe(
        self,
        function: Callable[[DescriptionContext], str],
        context: DescriptionContext,
        where: _Where,
    ) -> str:
        try:
            text = function(context)
        except Exception as exc:
            where.fail(
                "description",
                f"the description callback {_name(function)} raised {_error(exc)}",
                exc,
            )
        if inspect.iscoroutine(text):
            text.close()  # never awaited: close it so it does not warn later
            where.fail(
                "description",
                f"the description callback {_name(function)} returned a coroutine; "
                "descriptions are synchronous: return a str, and load what it needs in "
                "map_context, which may be async",
            )
        if not isinstance(text, str):
            where.fail(
                "description",
                f"the description callback {_name(function)} returned {_show(text)}; "
                "it must return a str",
            )
        return text


def check_client_tools(
    agent: AgentDefinition, client_tools: Sequence[ClientTool]
) -> list[ClientTool]:
    """The request's client tools, checked: :class:`DefinitionError` for a value that is not
    a list of :class:`ClientTool`, a name the agent registers, or a name given twice."""
    if isinstance(client_tools, str | bytes) or not isinstance(client_tools, Sequence):
        raise DefinitionError(
            f"client_tools must be a list of ClientTool(name, description, input_schema), "
            f"got {_show(client_tools)}"
        )
    seen: set[str] = set()
    for tool in client_tools:
        if not isinstance(tool, ClientTool):
            raise DefinitionError(
                f"client_tools must hold ClientTool(name, description, input_schema) values, "
                f"got {_show(tool)}"
            )
        if tool.name in agent.tools:
            raise DefinitionError(
                f"client tool {tool.name!r} has the name of a tool registered on agent "
                f"{agent.name!r}; give the client tool another name"
            )
        if tool.name in seen:
            raise DefinitionError(
                f"client tool {tool.name!r} is given twice; give each client tool its own name"
            )
        seen.add(tool.name)
    return list(client_tools)


def _name(function: object) -> str:
    return str(getattr(function, "__qualname__", None) or _repr.repr(function))


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _show(value: object) -> str:
    return f"{_repr.repr(value)} ({type(value).__name__})"
