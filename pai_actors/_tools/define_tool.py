"""``define_tool``: check a tool's arguments at construction and build its definition.

Its signature is where the types of ``ctx.input`` and ``ctx.context`` come from:
``input_schema`` and ``context_schema`` are ``TypeForm`` values (PEP 747), so a pydantic model
class, ``list[Item]``, ``Literal[...]`` or ``int | None`` each gives ``execute`` a
``ToolContext`` of that input type; a :func:`json_schema` (or a pydantic ``TypeAdapter``)
gives ``Any``.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NoReturn, overload

from pydantic import TypeAdapter
from typing_extensions import TypeForm, TypeVar

from .._core.capability import Capability
from .._core.deadlines import check_delay, check_on_deadline
from .._core.errors import DefinitionError, SchemaError, ToolDefinitionError
from .._core.ids import check_id, check_name
from .._core.schema import (
    Schema,
    SchemaMode,
    ToolSchema,
    ToolSchemas,
    compile_schema,
    frozen_mapping,
)
from .context import ToolContext
from .registration import ToolRegistration
from .tool import DescriptionContext, SuspendPoint, ToolConfig, ToolDefinition

# Solved from ``input_schema`` / ``context_schema`` (or from ``execute``'s annotation);
# ``Any`` when nothing says (a json_schema input, no context_schema, an unannotated lambda).
InputT = TypeVar("InputT", default=Any)
ContextT = TypeVar("ContextT", default=Any)


class _Required:
    def __repr__(self) -> str:
        return "<required>"


# ``id``, ``description`` and ``input_schema`` default to this marker rather than being
# required keywords, so that leaving one out is a ToolDefinitionError from define_tool itself
# (with advice) instead of Python's TypeError.
_REQUIRED: Any = _Required()
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60


# Two overloads because a checker solves a type variable from a ``TypeForm`` only when the
# parameter is that ``TypeForm`` alone: in a union (with ``Schema``, or with ``None``) it
# infers ``object`` for ``Literal[...]`` and refuses ``X | None``. For the same reason
# ``context_schema`` is not ``... | None``: leave it out rather than pass ``None``.
@overload
def define_tool(
    *,
    id: str = ...,
    description: str | Callable[[DescriptionContext[ContextT]], str] = ...,
    input_schema: TypeForm[InputT] = ...,
    output_schema: ToolSchema | None = None,
    to_model_output: Callable[..., Any] | None = None,
    context_schema: TypeForm[ContextT] = ...,
    suspend: Mapping[str, SuspendPoint] | None = None,
    data_schemas: Mapping[str, ToolSchema] | None = None,
    capabilities: Mapping[str, Capability] | None = None,
    tools: Mapping[str, ToolDefinition | ToolRegistration] | None = None,
    execute: Callable[[ToolContext[InputT, ContextT]], object] | None = None,
) -> ToolDefinition[InputT, ContextT]: ...
@overload
def define_tool(
    *,
    id: str = ...,
    description: str | Callable[[DescriptionContext[ContextT]], str] = ...,
    input_schema: Schema | TypeAdapter[Any] = ...,
    output_schema: ToolSchema | None = None,
    to_model_output: Callable[..., Any] | None = None,
    context_schema: TypeForm[ContextT] = ...,
    suspend: Mapping[str, SuspendPoint] | None = None,
    data_schemas: Mapping[str, ToolSchema] | None = None,
    capabilities: Mapping[str, Capability] | None = None,
    tools: Mapping[str, ToolDefinition | ToolRegistration] | None = None,
    execute: Callable[[ToolContext[Any, ContextT]], object] | None = None,
) -> ToolDefinition[Any, ContextT]: ...
def define_tool(
    *,
    id: str = _REQUIRED,
    description: str | Callable[[DescriptionContext], str] = _REQUIRED,
    input_schema: ToolSchema = _REQUIRED,
    output_schema: ToolSchema | None = None,
    to_model_output: Callable[..., Any] | None = None,
    context_schema: ToolSchema = None,
    suspend: Mapping[str, SuspendPoint] | None = None,
    data_schemas: Mapping[str, ToolSchema] | None = None,
    capabilities: Mapping[str, Capability] | None = None,
    tools: Mapping[str, ToolDefinition | ToolRegistration] | None = None,
    execute: Callable[[ToolContext], object] | None = None,
) -> ToolDefinition:
    """Define a tool: check every argument now and return an immutable :class:`ToolDefinition`.

    ``id`` is the stable, globally unique identity of the tool's wire spec (namespace it:
    ``"crm.lookup-customer.v1"``). ``description`` is a ``str`` or a synchronous function of
    :class:`DescriptionContext`. Schemas are ``ToolSchema`` values: a pydantic model class, a
    type pydantic accepts, or ``json_schema({...})``. ``execute(ctx)`` (sync or async) runs
    the tool in the backend; without it, a client submits the output, parsed by
    ``output_schema``. ``suspend``, ``capabilities`` and ``tools`` need ``execute``.
    ``context_schema`` documents the context the tool needs; it is not parsed. A child in
    ``tools`` is a definition, or a :class:`ToolRegistration` giving it its own
    ``map_context`` / ``enabled`` / ``on_output`` (kept in ``definition.tools`` as given).

    Typing: the result is a ``ToolDefinition[InputT, ContextT]`` and ``execute`` receives a
    ``ToolContext[InputT, ContextT]``. ``InputT`` is what ``input_schema`` parses to (the
    model class for a pydantic model, ``list[Item]`` for ``list[Item]``, ``Any`` for
    ``json_schema(...)``); ``ContextT`` is ``context_schema`` when given, else what
    ``execute``'s ``ctx`` annotation says, else ``Any``. A mismatch, such as an ``execute``
    annotated ``ToolContext[Quote]`` on a tool whose ``input_schema`` is ``Order``, is a
    type error.

    Every misuse raises :class:`ToolDefinitionError`, naming the tool and the argument:
    a missing, non-``str``, empty or whitespace-padded ``id``; a missing ``description`` or
    ``input_schema``; a coroutine-function description; a schema that cannot be used (the
    :class:`SchemaError` is the ``__cause__``); ``suspend``, ``capabilities`` or ``tools``
    without ``execute``; and a child in ``tools`` that has no ``execute``, declares
    ``suspend`` or ``data_schemas``, or has children of its own, or is registered with
    ``needs_approval``.
    """
    if id is _REQUIRED:
        raise ToolDefinitionError(
            "define_tool() needs id=..., the stable identity of the tool's wire spec; use a "
            "namespaced string such as 'crm.lookup-customer.v1'"
        )
    tool_id = check_id(id, what="tool id", error=ToolDefinitionError)
    check = _Checker(tool_id)
    has_execute = execute is not None
    if execute is not None and not callable(execute):
        check.fail(
            f"execute must be a function of the ToolContext (sync or async), got {_show(execute)}"
        )
    check.description(description)
    if to_model_output is not None and not callable(to_model_output):
        check.fail(
            "to_model_output must be a function (sync or async) called with "
            f"output=, input= and tool_call_id=, got {_show(to_model_output)}"
        )
    if input_schema is _REQUIRED or input_schema is None:
        check.fail(
            "input_schema is required: a pydantic model class, a type, or json_schema({...}); "
            "for a tool that takes no input, use a model with no fields"
        )
    compiled_input = check.schema("input_schema", input_schema, "validation")
    # An executing tool's output is JSON the tool produces and others read (stored output,
    # clients, a parent tool): describe what ``dump`` writes. A tool without execute gets its
    # output from a client's submission: describe what ``parse`` accepts.
    output_mode: SchemaMode = "serialization" if has_execute else "validation"
    compiled_output = (
        None if output_schema is None else check.schema("output_schema", output_schema, output_mode)
    )
    suspend_map = check.mapping(
        "suspend", suspend, "SuspendPoint(suspend_schema=..., resume_schema=...)"
    )
    data_map = check.mapping("data_schemas", data_schemas, "a schema")
    capability_map = check.mapping("capabilities", capabilities, "capability('...')")
    tools_map = check.mapping("tools", tools, "a tool definition or a ToolRegistration")
    if not has_execute:
        for argument, declared, why in [
            ("suspend points", suspend_map, "only execute can suspend"),
            ("capabilities", capability_map, "capabilities are acquired for execute"),
            ("child tools", tools_map, "children are called from execute through ctx.tools"),
        ]:
            if declared:
                check.fail(
                    f"declares {argument} ({_names(declared)}) but has no execute; {why}: "
                    f"give the tool an execute function, or drop them"
                )
    compiled_suspend = {
        name: check.suspend_point(name, point) for name, point in suspend_map.items()
    }
    compiled_data = {
        name: check.schema(f"data_schemas[{name!r}]", schema, "serialization")
        for name, schema in data_map.items()
    }
    for name, token in capability_map.items():
        if not isinstance(token, Capability):
            check.fail(
                f"capabilities[{name!r}] must be a capability token such as "
                f"capability('acme.sandbox'), got {_show(token)}"
            )
    for name, child in tools_map.items():
        check.child(name, child)
    config = ToolConfig(
        description=description,
        input_schema=input_schema,
        output_schema=output_schema,
        to_model_output=to_model_output,
        context_schema=context_schema,
        suspend=suspend_map,
        data_schemas=data_map,
    )
    schemas = ToolSchemas(
        input=compiled_input,
        output=compiled_output,
        suspend=MappingProxyType(compiled_suspend),
        data=MappingProxyType(compiled_data),
    )
    return ToolDefinition(
        id=tool_id,
        config=config,
        capabilities=capability_map,
        tools=tools_map,
        execute=execute,
        _schemas=schemas,
    )


class _Checker:
    """The checks of one define_tool call; every message starts with the tool's id."""

    def __init__(self, tool_id: str) -> None:
        self.tool_id = tool_id

    def fail(self, problem: str) -> NoReturn:
        raise ToolDefinitionError(f"tool {self.tool_id!r}: {problem}")

    def description(self, value: object) -> None:
        if value is _REQUIRED:
            self.fail(
                "description is required: a str, or a function of DescriptionContext returning one"
            )
        if isinstance(value, str):
            return
        if not callable(value):
            self.fail(
                "description must be a str or a function of DescriptionContext returning "
                f"a str, got {_show(value)}"
            )
        if _is_async(value):
            self.fail(
                f"description is an async function ({_callable_name(value)}); descriptions "
                "are synchronous: make it a plain def returning a str, and load what it "
                "needs in the registration's map_context, which may be async"
            )

    def schema(self, argument: str, value: object, mode: SchemaMode) -> Schema:
        try:
            return compile_schema(value, mode=mode)
        except SchemaError as exc:
            raise ToolDefinitionError(
                f"tool {self.tool_id!r}: {argument} cannot be used: {exc}"
            ) from exc

    def mapping(self, argument: str, value: object, expected: str) -> Mapping[str, Any]:
        if value is None:
            return frozen_mapping(None)
        if not isinstance(value, Mapping):
            self.fail(f"{argument} must be a mapping of names to {expected}, got {_show(value)}")
        for name in value:
            check_name(
                name,
                what=f"tool {self.tool_id!r}: the {argument} key",
                error=ToolDefinitionError,
            )
        return frozen_mapping(value)

    def suspend_point(self, name: str, point: object) -> tuple[Schema, Schema]:
        where = f"suspend[{name!r}]"
        if not isinstance(point, SuspendPoint):
            self.fail(
                f"{where} must be a SuspendPoint(suspend_schema=..., resume_schema=...), "
                f"got {_show(point)}"
            )
        # The suspend input is produced by the tool and read by clients; the resume payload
        # comes in from a client (see SchemaMode).
        compiled = (
            self.schema(f"{where}.suspend_schema", point.suspend_schema, "serialization"),
            self.schema(f"{where}.resume_schema", point.resume_schema, "validation"),
        )
        try:
            check_delay(point.deadline, where=f"{where}.deadline")
            check_on_deadline(
                point.on_deadline, where=f"{where}.on_deadline", schema=compiled[1], what="resume"
            )
        except DefinitionError as exc:
            raise ToolDefinitionError(f"tool {self.tool_id!r}: {exc}") from None
        return compiled

    def child(self, name: str, value: object) -> None:
        # A child is a ToolDefinition or a ToolRegistration wrapping one (with its own
        # map_context / enabled / on_output policy); the wrapped definition is checked.
        where = f"tools[{name!r}]"
        if isinstance(value, ToolRegistration):
            if value.needs_approval is not False:
                self.fail(
                    f"{where} is a registration with needs_approval; approval applies to a "
                    "call the model makes, not to a child the parent's execute calls: drop "
                    "needs_approval, or register the tool on the agent instead"
                )
            value = value.tool
        elif not isinstance(value, ToolDefinition):
            self.fail(
                f"{where} must be a tool definition from define_tool, got {_show(value)}; "
                "or a ToolRegistration(definition, ...) to give the child its own policy"
            )
        child = f"{where} is tool {value.id!r}, which"
        advice = "register it on the agent instead"
        if value.execute is None:
            self.fail(
                f"{child} has no execute (a client submits its output); children must "
                f"execute in the backend: give it an execute function, or {advice}"
            )
        for declared, what, why in [
            (value.config.suspend, "suspend points", "children cannot suspend"),
            (value.config.data_schemas, "data_schemas", "children cannot write tool data"),
            (value.tools, "child tools of its own", "tools nest one level only"),
        ]:
            if declared:
                self.fail(f"{child} declares {what} ({_names(declared)}); {why}: {advice}")


def _is_async(function: object) -> bool:
    # Also catches an object whose __call__ is ``async def``, and functools.partial of one.
    call = getattr(function, "__call__", None)  # noqa: B004  # we need the attribute itself
    return any(
        inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in (function, call)
    )


def _callable_name(function: object) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def _names(mapping: Mapping[str, Any]) -> str:
    return ", ".join(repr(name) for name in mapping)


def _show(value: object) -> str:
    return f"{_repr.repr(value)} ({type(value).__name__})"
