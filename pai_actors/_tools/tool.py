"""Tool definitions: the immutable :class:`ToolDefinition` and the records around it.

:func:`~pai_actors.define_tool` (in ``_define_tool.py``) checks a tool's arguments and builds
a :class:`ToolDefinition`; this module holds the definition itself, its :class:`ToolConfig`,
the :class:`SuspendPoint` declarations, what description callbacks receive
(:class:`DescriptionContext`, :class:`ChildToolInfo`) and the :class:`ToolWireSpec` that
identifies a definition's wire contract.

Typing: ``ToolDefinition[InputT, ContextT]`` carries the types its ``execute`` sees as
``ctx.input`` and ``ctx.context`` (``define_tool`` infers them from its schemas), and
``DescriptionContext[ContextT]`` the type of a description callback's ``context``. Both
parameters default to ``Any`` and are covariant, so definitions of different tools go
together in one mapping (``{"quote": quote_tool, "order": order_tool}``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any, ClassVar, Generic, Literal

from typing_extensions import TypeVar

from .._core.capability import Capability
from .._core.deadlines import CancelAtDeadline, OnDeadline
from .._core.json import JsonValue
from .._core.schema import _EMPTY, ToolSchemas, frozen_mapping
from .context import ToolContext

InputT = TypeVar("InputT", covariant=True, default=Any)
ContextT = TypeVar("ContextT", covariant=True, default=Any)

JsonSchema = dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class SuspendPoint:
    """A named wait point of a tool: what it exposes while waiting, and what resumes it.

    ``suspend_schema`` parses the input ``ctx.suspend(name, input)`` gives (durable, and
    visible to clients while the call waits); ``resume_schema`` parses the payload a client
    submits to resume it. Both are ``ToolSchema`` values; ``define_tool`` checks them.

    ``deadline`` (a positive ``timedelta``, or ``None``: none) bounds how long a call waits
    here, from when it suspends; ``ctx.suspend(name, input, deadline=...)`` gives one call
    another. ``on_deadline`` says what happens then: :class:`CancelAtDeadline` (the
    default), :class:`FailAtDeadline`, or :class:`ResolveAtDeadline` with a default resume
    payload, which ``define_tool`` checks against ``resume_schema``.
    """

    suspend_schema: Any
    resume_schema: Any
    deadline: timedelta | None = field(default=None, kw_only=True)
    on_deadline: OnDeadline = field(default_factory=CancelAtDeadline, kw_only=True)


@dataclass(frozen=True, slots=True)
class ChildToolInfo:
    """What a description callback learns about one enabled child tool.

    ``input_schema`` and ``output_schema`` are JSON Schema dicts (``output_schema`` is
    ``None`` when the child has none); ``description`` is the child's resolved description.
    """

    description: str
    input_schema: JsonSchema
    output_schema: JsonSchema | None = None


@dataclass(frozen=True, slots=True)
class DescriptionContext(Generic[ContextT]):
    """What a ``description`` callback receives before each model step.

    ``context`` is the tool's mapped context; ``tools`` is a read-only mapping of its
    **enabled** children's :class:`ChildToolInfo`, by declared name (disabled children are
    absent).
    """

    context: ContextT
    tools: Mapping[str, ChildToolInfo] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", frozen_mapping(self.tools))


@dataclass(frozen=True, slots=True)
class ToolConfig:
    """A tool's schemas and metadata as ``define_tool`` was given them (no ``execute``).

    The schema fields hold the ``ToolSchema`` values as written (a model class, a type, a
    ``json_schema(...)``); ``suspend`` and ``data_schemas`` are read-only mappings, empty when
    none were declared. ``context_schema`` is documentation for the tool's context: the
    runtime passes the context through unparsed, so it is stored as given and never checked.
    """

    description: str | Callable[[DescriptionContext], str]
    input_schema: Any
    output_schema: Any = None
    to_model_output: Callable[..., Any] | None = None
    context_schema: Any = None
    suspend: Mapping[str, SuspendPoint] = field(default_factory=lambda: _EMPTY)
    data_schemas: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


_SPEC_FIELDS = ("has_execute", "input_schema", "output_schema", "data_schemas", "suspend")


@dataclass(frozen=True, slots=True)
class ToolWireSpec:
    """The wire contract a tool id stands for: schemas and execution mode.

    Two definitions may share an ``id`` only if their wire specs are equal; a runtime
    refuses two registered definitions with one id and different specs. The description,
    children and capabilities are not part of it: they can change without breaking stored
    calls or generated clients. Schemas are the JSON Schema dicts readers see; ``suspend``
    maps each suspend name to ``(suspend_schema, resume_schema)``.
    """

    id: str
    has_execute: bool
    input_schema: JsonSchema
    output_schema: JsonSchema | None
    data_schemas: Mapping[str, JsonSchema]
    suspend: Mapping[str, tuple[JsonSchema, JsonSchema]]

    def to_json(self) -> dict[str, JsonValue]:
        """The spec as a camelCase JSON dict, e.g. to store or to show in an error."""
        return {
            "id": self.id,
            "hasExecute": self.has_execute,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "dataSchemas": dict(self.data_schemas),
            "suspend": {
                name: {"suspendSchema": pair[0], "resumeSchema": pair[1]}
                for name, pair in self.suspend.items()
            },
        }

    def differences(self, other: ToolWireSpec) -> tuple[str, ...]:
        """The names of the fields (other than ``id``) in which ``other`` differs."""
        return tuple(f for f in _SPEC_FIELDS if getattr(self, f) != getattr(other, f))

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ToolDefinition(Generic[InputT, ContextT]):
    """An immutable tool definition, made by ``define_tool``.

    ``id`` is the stable identity of the tool's wire spec; ``config`` holds its schemas and
    metadata; ``capabilities`` maps ctx names to :class:`Capability` tokens and ``tools``
    declared names to child definitions (both read-only, empty when none were declared);
    ``execute`` is the backend implementation, or ``None`` when a client submits the output.
    One definition can be registered under several names and on several agents; it compares
    by identity. Do not construct it directly: ``define_tool`` checks the arguments.
    ``ToolDefinition[InputT, ContextT]``: the ``ctx.input`` and ``ctx.context`` types of its
    ``execute`` (a bare ``ToolDefinition`` is ``ToolDefinition[Any, Any]``).
    """

    kind: ClassVar[Literal["tool"]] = "tool"

    id: str
    config: ToolConfig
    capabilities: Mapping[str, Capability]
    tools: Mapping[str, ToolDefinition]
    execute: Callable[[ToolContext[InputT, ContextT]], Any] | None
    _schemas: ToolSchemas

    @property
    def has_execute(self) -> bool:
        """Whether the tool executes in the backend (``False``: a client submits its output)."""
        return self.execute is not None

    def wire_spec(self) -> ToolWireSpec:
        """This definition's :class:`ToolWireSpec` (fresh JSON Schema copies each call)."""
        schemas = self._schemas
        return ToolWireSpec(
            id=self.id,
            has_execute=self.has_execute,
            input_schema=schemas.input.json_schema,
            output_schema=None if schemas.output is None else schemas.output.json_schema,
            data_schemas=MappingProxyType(
                {name: schema.json_schema for name, schema in schemas.data.items()}
            ),
            suspend=MappingProxyType(
                {
                    name: (pair[0].json_schema, pair[1].json_schema)
                    for name, pair in schemas.suspend.items()
                }
            ),
        )

    def __repr__(self) -> str:
        return f"ToolDefinition(id={self.id!r}, has_execute={self.has_execute})"
