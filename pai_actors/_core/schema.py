"""Schemas: every ``ToolSchema`` form becomes one internal :class:`Schema`.

A ``ToolSchema`` is a pydantic ``BaseModel`` subclass, any type pydantic's ``TypeAdapter``
accepts (``int``, ``list[Item]``, ``Annotated[...]``, a discriminated union, ...), or a raw
JSON Schema wrapped by :func:`json_schema`. Whichever it is, the rest of the package sees a
:class:`Schema`: the JSON Schema a reader sees, ``parse`` and ``dump``.
"""

from __future__ import annotations

import copy
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, cast

from jsonschema import Draft202012Validator
from jsonschema import exceptions as jsonschema_errors
from pydantic import BaseModel, TypeAdapter
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import PydanticSerializationError
from referencing.exceptions import Unresolvable

from .errors import (
    OutputNotJSON,
    SchemaError,
    ValidationFailed,
    ValidationIssue,
    format_path,
)
from .json import JsonValue, NotPlain, plain_json, to_json_value

SchemaMode: TypeAlias = Literal["validation", "serialization"]
"""Which JSON Schema pydantic generates for a type (the two differ for some types).

``"validation"`` describes the JSON that ``parse`` accepts: use it for JSON that comes in
from outside (model input, payloads clients submit). ``"serialization"`` describes the JSON
that ``dump`` produces (computed fields included, custom serializers applied): use it for
JSON the tool produces and others read (outputs of executing tools, suspend payloads, tool
data). A raw :func:`json_schema` is the same document in both modes.
"""

ToolSchema: TypeAlias = Any
"""What a tool's schema arguments accept (API §1): a pydantic ``BaseModel`` subclass, any
type pydantic's ``TypeAdapter`` accepts (``int``, ``list[Foo]``, ``Literal[...]``,
``Annotated[...]``, a discriminated union, ...), or :func:`json_schema` ``(schema)`` for a
raw JSON Schema. Python's type system cannot spell "any type pydantic accepts", so the
alias is ``Any``; :func:`compile_schema` checks the value and names what is wrong."""

_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlevel = 3
_builtin_type = type  # json_schema's ``type`` parameter shadows the builtin in its body
_KINDS = "a pydantic model class, a type such as int or list[str], or json_schema({...})"


class Schema:
    """A usable schema: the JSON Schema readers see, a parser and a dumper.

    Made by :func:`compile_schema` for pydantic models and types, or by :func:`json_schema`
    for a raw JSON Schema. Immutable; ``parse`` and ``dump`` keep no state, so one schema can
    be shared by any number of tools and tasks.
    """

    __slots__ = ("_adapter", "_json_schema", "_repr", "_validator")

    def __init__(
        self,
        *,
        json_schema: dict[str, JsonValue],
        adapter: TypeAdapter[Any] | None,
        validator: Draft202012Validator | None,
        repr: str,
    ) -> None:
        self._json_schema = json_schema
        self._adapter = adapter
        self._validator = validator
        self._repr = repr

    def __repr__(self) -> str:
        return self._repr

    @property
    def json_schema(self) -> dict[str, JsonValue]:
        """The JSON Schema (draft 2020-12) a model or client sees; a fresh copy each time."""
        try:  # a model step copies each offered tool's schema: copy plain JSON the fast way
            copied: dict[str, JsonValue] = plain_json(self._json_schema)
        except (NotPlain, RecursionError):
            return copy.deepcopy(self._json_schema)
        return copied

    def parse(self, value: object, *, what: str = "value") -> Any:
        """Validate ``value`` and return it parsed, or raise :class:`ValidationFailed`.

        Parsing applies defaults and conversions: pydantic's lax mode and any
        ``BeforeValidator``/``AfterValidator`` run, so ``"3"`` becomes ``3`` for ``int``. A
        raw JSON Schema first normalises the value to JSON (a value that is not JSON fails
        with kind ``"not_json"``) and checks it with the JSON Schema validator; only when that
        passes does its ``type=`` (if any) validate and convert it with pydantic. ``what``
        names the value in messages (``input['items'][2]: ...``).
        """
        if self._validator is not None:
            value = self._check_json(value, what)
        if self._adapter is None:
            return value
        try:
            return self._adapter.validate_python(value)
        except PydanticValidationError as exc:
            issues = tuple(
                ValidationIssue(tuple(e["loc"]), e["msg"], e["type"])
                for e in exc.errors(include_url=False)
            )
            raise ValidationFailed(what, issues) from None

    def dump(self, value: Any, *, what: str = "value") -> JsonValue:
        """Return a value ``parse`` produced as lossless JSON (a model instance as a dict).

        Raises :class:`OutputNotJSON` when the value cannot be represented (see
        :func:`to_json_value`), naming its path with ``what``.
        """
        if self._adapter is not None:
            try:
                value = self._adapter.dump_python(value, mode="json", warnings="error")
            except PydanticSerializationError as exc:
                reason = f"cannot be serialized by its schema {self!r}: {_first_line(exc)}"
                raise OutputNotJSON(what, (), reason) from exc
        return to_json_value(value, what=what)

    def _check_json(self, value: object, what: str) -> JsonValue:
        assert self._validator is not None
        try:
            data = to_json_value(value, what=what)
        except OutputNotJSON as exc:
            issue = ValidationIssue(exc.loc, f"the value {exc.reason}", "not_json")
            raise ValidationFailed(what, (issue,)) from None
        try:
            issues = tuple(
                ValidationIssue(tuple(e.absolute_path), e.message, str(e.validator))
                for e in self._validator.iter_errors(data)
            )
        except Unresolvable as exc:
            raise SchemaError(
                f"{self!r} refers to {exc.ref!r}, which cannot be resolved; define the "
                "referenced schema under '$defs' and refer to it as '#/$defs/<name>'"
            ) from None
        if issues:
            raise ValidationFailed(what, issues)
        return data


def compile_schema(value: object, *, mode: SchemaMode = "validation") -> Schema:
    """Return the :class:`Schema` for a ``ToolSchema``, or raise :class:`SchemaError`.

    A :class:`Schema` (from :func:`json_schema`) is returned as it is; a pydantic model or
    type gets a ``TypeAdapter`` and its JSON Schema in ``mode``, generated now, so that a
    type pydantic cannot describe fails here rather than when a model first sees the tool.
    """
    if isinstance(value, Schema):
        return value
    adapter = _adapter_for(value)
    try:
        generated = adapter.json_schema(mode=mode)
    except Exception as exc:  # any failure to describe the type makes the schema unusable
        raise SchemaError(
            f"cannot generate a JSON Schema for {_describe(value)}: {_first_line(exc)}; "
            f"use a type pydantic can describe, or give the JSON Schema yourself with "
            f"json_schema({{...}}, type=...)"
        ) from exc
    return Schema(
        json_schema=cast(dict[str, JsonValue], generated),
        adapter=adapter,
        validator=None,
        repr=f"Schema({_describe(value)})",
    )


def json_schema(schema: Mapping[str, Any], *, type: Any = Any) -> Schema:
    """A schema from a raw JSON Schema (draft 2020-12), checked by a real JSON Schema validator.

    ``schema`` is checked against the draft 2020-12 meta-schema now; an invalid one raises
    :class:`SchemaError` naming where it is wrong. When parsing, a value is checked against
    ``schema`` first; then, if ``type`` is given, pydantic validates and converts the checked
    value to ``type`` (``json_schema({...}, type=Invoice)`` parses to an ``Invoice``).
    ``schema`` stays the JSON Schema readers see, so keep ``type`` consistent with it.

    ``format`` is an annotation, as draft 2020-12 specifies by default: it is not enforced;
    give a ``type=`` whose pydantic validation checks the format if you need it enforced.
    """
    if not isinstance(schema, Mapping):
        raise SchemaError(
            f"json_schema() takes a JSON Schema as a dict, got {_repr.repr(schema)} "
            f"({_builtin_type(schema).__name__}); for a schema that accepts any JSON value, "
            "write json_schema({})"
        )
    try:
        data = to_json_value(schema, what="schema")
    except OutputNotJSON as exc:
        raise SchemaError(f"json_schema() needs a JSON document, but {exc}") from None
    assert isinstance(data, dict)
    declared = data.get("$schema")
    if declared is not None and declared not in (_DRAFT_2020_12, _DRAFT_2020_12 + "#"):
        raise SchemaError(
            f"json_schema() supports JSON Schema draft 2020-12 only, but the schema declares "
            f"'$schema': {declared!r}; remove '$schema' or set it to {_DRAFT_2020_12!r}"
        )
    try:
        Draft202012Validator.check_schema(data)
    except jsonschema_errors.SchemaError as exc:
        raise SchemaError(
            f"json_schema() got an invalid JSON Schema (draft 2020-12): at "
            f"{format_path('schema', tuple(exc.absolute_path))}, {exc.message}"
        ) from None
    adapter = None if type is Any else _adapter_for(type)
    shown = _repr.repr(data) + ("" if type is Any else f", type={_describe(type)}")
    return Schema(
        json_schema=data,
        adapter=adapter,
        validator=Draft202012Validator(data),
        repr=f"json_schema({shown})",
    )


def _adapter_for(value: object) -> TypeAdapter[Any]:
    if isinstance(value, TypeAdapter):
        return value
    if value is None:
        raise SchemaError(
            "None is not a schema; for a schema that accepts only null, write type(None)"
        )
    if isinstance(value, Mapping):
        raise SchemaError(
            f"a {type(value).__name__} is not a schema type; to use a raw JSON "
            "Schema, wrap it: json_schema({...})"
        )
    if isinstance(value, str):
        raise SchemaError(
            f"the string {value!r} is not a schema; pass the type itself (int, not 'int')"
        )
    if isinstance(value, BaseModel):
        name = type(value).__qualname__
        raise SchemaError(f"an instance of {name} is not a schema; pass the class itself: {name}")
    try:
        return TypeAdapter(cast(Any, value))
    except Exception as exc:  # building an adapter runs user code; any failure = unusable
        raise SchemaError(
            f"cannot use {_describe(value)} as a schema: {_first_line(exc)}; pass {_KINDS}"
        ) from exc


def _describe(value: object) -> str:
    if issubclass(type(value), type):  # a class; not list[int], whose type is GenericAlias
        return cast(type, value).__name__
    return _repr.repr(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(".") if text else type(exc).__name__


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def frozen_mapping(items: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A read-only copy of ``items`` (an empty one for ``None``)."""
    return MappingProxyType(dict(items)) if items else _EMPTY


@dataclass(frozen=True, slots=True)
class ToolSchemas:
    """The compiled schemas of one definition, for the runtime (internal)."""

    input: Schema
    output: Schema | None
    suspend: Mapping[str, tuple[Schema, Schema]]  # name -> (suspend_schema, resume_schema)
    data: Mapping[str, Schema]
