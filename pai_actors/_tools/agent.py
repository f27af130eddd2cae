"""Agents: :func:`define_agent`, the :func:`create_pai` registry, and runtime-creation checks.

An :class:`AgentDefinition` is an agent's name, instructions, model, runtime context and its
tool registrations by model-facing name; :meth:`AgentDefinition.manifest` is its static
(client-safe) description. A :class:`Pai` names several agents. :func:`as_model` is the one
path from what a user gives as a model (an object of the Model protocol, or a spec string
such as ``"openai:gpt-4.1-mini"``) to a model, for ``define_agent`` and the runtime alike.
:func:`check_runtime` is the pure validation a runtime performs when it is created from an
agent or a registry: no tool id may stand for two wire specs, and every capability a tool or
child declares needs a binding.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NoReturn, cast

from .._core.capability import Capability
from .._core.client_tool import check_tool_name
from .._core.errors import DefinitionError, RuntimeConfigError
from .._core.ids import check_id
from .._core.json import JsonValue
from .._core.model import Model, ModelSettings
from .._models.spec import model_from_spec
from .registration import ToolRegistration, as_registration
from .tool import ToolDefinition, ToolWireSpec

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60


@dataclass(frozen=True, slots=True)
class RuntimeScope:
    """What an agent's ``runtime_context`` callable receives for a run.

    ``scope_key`` is the tenant the thread belongs to, ``user_key`` the acting user (or
    ``None``), ``thread_id`` the thread, and ``identity`` the trusted identity of the request
    (from the server's authentication).
    """

    scope_key: str
    user_key: str | None
    thread_id: str
    identity: Any = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AgentDefinition:
    """An immutable agent definition, made by :func:`define_agent`.

    ``tools`` maps each model-facing tool name to its :class:`ToolRegistration` (a bare
    definition given to ``define_agent`` is registered with the defaults); it is read-only.
    ``runtime_context`` is the value, or the callable of :class:`RuntimeScope`, given to
    ``define_agent``; ``model_settings`` the agent's :class:`~pai_actors.ModelSettings`
    (``None``: the model's own). Compares by identity.
    """

    name: str
    instructions: str | None
    model: Model | None
    runtime_context: Any
    tools: Mapping[str, ToolRegistration]
    model_settings: ModelSettings | None = None

    def manifest(self) -> dict[str, JsonValue]:
        """The static manifest: ``{"name", "tools": {name: {"id", "description",
        "inputSchema", "outputSchema"}}}``.

        It needs no runtime context, so a callback description is ``""`` here (the model
        receives the resolved text); ``outputSchema`` is ``None`` when the tool has none.
        """
        tools: dict[str, JsonValue] = {}
        for name, registration in self.tools.items():
            description = registration.tool.config.description
            spec = registration.tool.wire_spec()
            tools[name] = {
                "id": spec.id,
                "description": description if isinstance(description, str) else "",
                "inputSchema": spec.input_schema,
                "outputSchema": spec.output_schema,
            }
        return {"name": self.name, "tools": tools}

    def __repr__(self) -> str:
        return f"AgentDefinition(name={self.name!r}, tools={list(self.tools)!r})"


def define_agent(
    *,
    name: str,
    instructions: str | None = None,
    model: Model | str | None = None,
    model_settings: ModelSettings | None = None,
    runtime_context: Any = None,
    tools: Mapping[str, ToolDefinition | ToolRegistration],
) -> AgentDefinition:
    """Define an agent: check every argument now and return an :class:`AgentDefinition`.

    ``name`` names the agent (a non-empty ``str`` without padding whitespace).
    ``instructions`` is its system prompt. ``model`` is a :class:`~pai_actors.Model` (an
    object with a ``stream(request)`` method), a spec string such as
    ``"openai:gpt-4.1-mini"`` (made into its adapter now, see
    :func:`~pai_actors.models.model_from_spec`), or ``None`` to give one at the runtime.
    ``model_settings`` (:class:`~pai_actors.ModelSettings`: temperature, max tokens, tool
    choice, ...) applies to every model step of its runs, under a request's own
    (``send(..., model_settings=...)``). ``runtime_context`` is a value, or a callable
    (sync or async) receiving a :class:`RuntimeScope` and returning the value, evaluated
    for each run. ``tools`` maps
    model-facing names (1 to 64 ASCII letters, digits, ``_`` or ``-``) to tool definitions
    or :class:`ToolRegistration` values. A misuse raises :class:`DefinitionError`.
    """
    agent_name = check_id(name, what="agent name", error=DefinitionError)

    def fail(problem: str) -> NoReturn:
        raise DefinitionError(f"agent {agent_name!r}: {problem}")

    if instructions is not None and not isinstance(instructions, str):
        fail(f"instructions must be a str or None, got {_show(instructions)}")
    checked_model = (
        None
        if model is None
        else as_model(
            model,
            where=f"agent {agent_name!r}",
            or_else="leave it out and give the model at the runtime",
        )
    )
    if model_settings is not None and not isinstance(model_settings, ModelSettings):
        fail(f"model_settings must be a ModelSettings or None, got {_show(model_settings)}")
    if not isinstance(tools, Mapping):
        fail(f"tools must be a mapping of tool names to tool definitions, got {_show(tools)}")
    registrations: dict[str, ToolRegistration] = {}
    for key, value in tools.items():
        tool_name = check_tool_name(key, what=f"agent {agent_name!r}: the tool name")
        if not isinstance(value, ToolDefinition | ToolRegistration):
            fail(
                f"tools[{tool_name!r}] must be a tool definition from define_tool or a "
                f"ToolRegistration(definition, ...), got {_show(value)}"
            )
        registrations[tool_name] = as_registration(value)
    return AgentDefinition(
        name=agent_name,
        instructions=instructions,
        model=checked_model,
        runtime_context=runtime_context,
        tools=MappingProxyType(registrations),
        model_settings=model_settings,
    )


def as_model(model: object, *, where: str, or_else: str | None = None) -> Model:
    """``model`` as a :class:`~pai_actors.Model`: an object with a ``stream(request)``
    method as it is, a spec string (``"openai:gpt-4.1-mini"``) as the adapter
    :func:`~pai_actors.models.model_from_spec` makes of it (keys and base URLs from the
    environment). Anything else, a spec that names no adapter, or an adapter whose SDK is
    not installed raises :class:`DefinitionError` starting with ``where`` (which names the
    agent); ``or_else`` is the alternative to a model that message offers last."""
    if isinstance(model, str):
        try:
            return model_from_spec(model)
        except DefinitionError as exc:
            raise DefinitionError(f"{where}: {exc}") from None
    if not callable(getattr(model, "stream", None)):
        alternative = "" if or_else is None else f"; or {or_else}"
        raise DefinitionError(
            f"{where}: model must be a spec string such as 'openai:gpt-4.1-mini' or have a "
            f"stream(request) method (the Model protocol), got {_show(model)}{alternative}"
        )
    return cast(Model, model)  # it has the protocol's one method


@dataclass(frozen=True, slots=True, eq=False)
class Pai:
    """A registry of agents by id, made by :func:`create_pai`; a runtime can host it whole.

    ``agents`` is read-only. A tool learns which agent runs it from ``ctx.agent_id``: the id
    here, not the agent's own name.
    """

    agents: Mapping[str, AgentDefinition] = field(default_factory=dict)


def create_pai(agents: Mapping[str, AgentDefinition]) -> Pai:
    """Make the registry of ``agents`` by id (ids follow the same rules as tool ids).

    A misuse (not a mapping, an id that is not a usable id, a value that is not an
    :class:`AgentDefinition`) raises :class:`DefinitionError`.
    """
    if not isinstance(agents, Mapping):
        raise DefinitionError(
            f"create_pai() takes a mapping of agent ids to agent definitions, got {_show(agents)}"
        )
    checked: dict[str, AgentDefinition] = {}
    for key, agent in agents.items():
        agent_id = check_id(key, what="agent id", error=DefinitionError)
        if not isinstance(agent, AgentDefinition):
            raise DefinitionError(
                f"create_pai(): agents[{agent_id!r}] must be an agent definition from "
                f"define_agent, got {_show(agent)}"
            )
        checked[agent_id] = agent
    return Pai(agents=MappingProxyType(checked))


def check_runtime(
    target: AgentDefinition | Pai,
    *,
    capabilities: Mapping[Capability | str, Any] | None = None,
) -> dict[str, Any]:
    """Check what a runtime is created from; return the capability bindings by id.

    Raises :class:`RuntimeConfigError` when two registered definitions (children included)
    share an ``id`` but not a wire spec, or when a capability a tool or child declares has
    no binding. ``capabilities`` is keyed by :class:`Capability` token or by its id string;
    each binding must be callable. Pure: it calls no callback.
    """
    bindings = _bindings(capabilities)
    first: dict[str, tuple[str, ToolDefinition, ToolWireSpec]] = {}
    conflicts: list[str] = []
    needed: dict[str, list[str]] = {}
    illegal: list[str] = []
    for path, definition, is_child in _registered(target):
        if is_child:
            illegal.extend(_illegal_child(path, definition))
        for ctx_name, token in definition.capabilities.items():
            needed.setdefault(token.id, []).append(f"{path} (as {ctx_name!r})")
        seen = first.get(definition.id)
        if seen is None:
            first[definition.id] = (path, definition, definition.wire_spec())
            continue
        if seen[1] is definition:
            continue
        differences = seen[2].differences(definition.wire_spec())
        if differences:
            conflicts.append(
                f"tool id {definition.id!r} names two different wire specs: {seen[0]} and "
                f"{path} differ in {', '.join(differences)}"
            )
    if illegal:
        raise RuntimeConfigError(
            "child tools that a runtime cannot run (define_tool refuses these; was a "
            "definition changed after it was made?):\n  " + "\n  ".join(illegal)
        )
    if conflicts:
        raise RuntimeConfigError(
            "\n".join(conflicts)
            + "\ntwo incompatible specs must never share an id: give one of them a new or "
            "versioned id (such as 'crm.lookup-customer.v2'), or make the specs equal"
        )
    missing = [
        f"  {cid!r}: needed by {', '.join(paths)}"
        for cid, paths in needed.items()
        if cid not in bindings
    ]
    if missing:
        raise RuntimeConfigError(
            "missing capability bindings; give create_agent_runtime(capabilities={token: "
            "binding, ...}) a binding for each:\n" + "\n".join(missing)
        )
    return bindings


def _registered(
    target: AgentDefinition | Pai,
) -> Iterator[tuple[str, ToolDefinition, bool]]:
    """Every registered definition with its registration path and whether it is a child."""
    if isinstance(target, Pai):
        agents = [(f"agents[{agent_id!r}].", agent) for agent_id, agent in target.agents.items()]
    elif isinstance(target, AgentDefinition):
        agents = [(f"agent {target.name!r}: ", target)]
    else:
        raise RuntimeConfigError(
            f"a runtime runs an agent definition or a Pai registry, got {_show(target)}; "
            "use define_agent(...) or create_pai({...})"
        )
    for prefix, agent in agents:
        for name, registration in agent.tools.items():
            path = f"{prefix}tools[{name!r}]"
            yield path, registration.tool, False
            for child_name, child in registration.tool.tools.items():
                yield f"{path}.tools[{child_name!r}]", as_registration(child).tool, True


def _illegal_child(path: str, definition: ToolDefinition) -> list[str]:
    """What makes a child definition one the runtime cannot run (API §2)."""
    problems = []
    if not definition.has_execute:
        problems.append(f"{path} has no execute (children run in the backend)")
    if definition.config.suspend:
        problems.append(f"{path} declares suspend points (children cannot suspend)")
    if definition.config.data_schemas:
        problems.append(f"{path} declares data_schemas (children write no tool data)")
    if definition.tools:
        problems.append(f"{path} declares child tools (tools nest one level only)")
    return problems


def _bindings(capabilities: Mapping[Capability | str, Any] | None) -> dict[str, Any]:
    if capabilities is None:
        return {}
    if not isinstance(capabilities, Mapping):
        raise RuntimeConfigError(
            "capabilities must be a mapping of capability tokens (or their id strings) to "
            f"bindings, got {_show(capabilities)}"
        )
    bindings: dict[str, Any] = {}
    for key, binding in capabilities.items():
        if isinstance(key, Capability):
            cid = key.id
        elif isinstance(key, str):
            try:
                cid = check_id(key, what="capability id", error=DefinitionError)
            except DefinitionError as exc:
                raise RuntimeConfigError(f"capabilities: {exc}") from None
        else:
            raise RuntimeConfigError(
                f"capabilities keys must be capability tokens or their id strings, got {_show(key)}"
            )
        if cid in bindings:
            raise RuntimeConfigError(
                f"capability {cid!r} is bound twice (by its token and by its id string); "
                "give one binding"
            )
        if not callable(binding):
            raise RuntimeConfigError(
                f"the binding for capability {cid!r} must be a callable receiving a "
                f"CapabilityRequest and returning an async context manager, got {_show(binding)}"
            )
        bindings[cid] = binding
    return bindings


def _show(value: object) -> str:
    return f"{_repr.repr(value)} ({type(value).__name__})"
