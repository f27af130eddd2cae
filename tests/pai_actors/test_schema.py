"""Schemas: pydantic models, TypeAdapter types and raw JSON Schemas behind one interface."""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pytest
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, TypeAdapter, computed_field

from pai_actors import OutputNotJSON, SchemaError, ValidationFailed, ValidationIssue, json_schema
from pai_actors._core.schema import Schema, compile_schema


class Invoice(BaseModel):
    number: int
    note: str = "none"


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


Pet = Annotated[Cat | Dog, Field(discriminator="kind")]


def _failure(parse: Callable[[], object]) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as caught:
        parse()
    return caught.value


# --- pydantic models and types --------------------------------------------------------------


def test_a_model_parses_with_defaults_and_lax_conversion() -> None:
    schema = compile_schema(Invoice)
    assert schema.parse({"number": "3"}) == Invoice(number=3, note="none")


def test_a_model_dumps_to_a_dict() -> None:
    schema = compile_schema(Invoice)
    assert schema.dump(schema.parse({"number": 3})) == {"number": 3, "note": "none"}


def test_a_model_json_schema_is_pydantics_validation_schema() -> None:
    assert compile_schema(Invoice).json_schema == TypeAdapter(Invoice).json_schema()


def test_serialization_mode_describes_what_dump_writes() -> None:
    class Box(BaseModel):
        width: int

        @computed_field  # type: ignore[prop-decorator]  # pydantic's documented idiom
        @property
        def area(self) -> int:
            return self.width**2

    assert "area" not in compile_schema(Box).json_schema["properties"]  # type: ignore[operator]
    out = compile_schema(Box, mode="serialization")
    assert "area" in out.json_schema["properties"]  # type: ignore[operator]
    assert out.dump(out.parse({"width": 3})) == {"width": 3, "area": 9}


def test_before_and_after_validators_transform_the_input() -> None:
    Doubled = Annotated[int, BeforeValidator(lambda v: v.strip()), AfterValidator(lambda n: 2 * n)]
    assert compile_schema(Doubled).parse(" 3 ") == 6


def test_plain_types_are_schemas() -> None:
    schema = compile_schema(list[int])
    assert schema.json_schema == {"type": "array", "items": {"type": "integer"}}
    assert schema.parse(["1", 2]) == [1, 2]


def test_a_discriminated_union_parses_to_the_right_model() -> None:
    schema = compile_schema(Pet)
    assert schema.parse({"kind": "dog", "good": True}) == Dog(kind="dog", good=True)
    assert "oneOf" in schema.json_schema


def test_dump_converts_dates_to_json() -> None:
    schema = compile_schema(dict[str, datetime.date])
    assert schema.dump(schema.parse({"due": "2024-05-01"})) == {"due": "2024-05-01"}


def test_a_type_adapter_is_accepted_as_it_is() -> None:
    adapter = TypeAdapter(list[str])
    assert compile_schema(adapter).parse(["a"]) == ["a"]


def test_validation_failures_list_every_error_with_its_location() -> None:
    failure = _failure(
        lambda: compile_schema(list[Invoice]).parse([{"number": "x"}, {}], what="input")
    )
    assert str(failure) == (
        "input does not match its schema (2 errors):\n"
        "  input[0]['number']: Input should be a valid integer, unable to parse string as an "
        "integer\n"
        "  input[1]['number']: Field required"
    )
    assert failure.errors == (
        ValidationIssue(
            (0, "number"),
            "Input should be a valid integer, unable to parse string as an integer",
            "int_parsing",
        ),
        ValidationIssue((1, "number"), "Field required", "missing"),
    )
    assert failure.what == "input"
    assert failure.__cause__ is None  # never a bare pydantic error, not even as the cause


def test_one_error_is_counted_in_the_singular() -> None:
    failure = _failure(lambda: compile_schema(int).parse("x"))
    assert str(failure).splitlines()[0] == "value does not match its schema (1 error):"


def test_dump_of_an_unserializable_value_is_output_not_json() -> None:
    schema = compile_schema(Any)
    with pytest.raises(OutputNotJSON) as caught:
        schema.dump(object(), what="output")
    assert str(caught.value) == (
        "output cannot be serialized by its schema Schema(Any): Unable to serialize "
        "unknown type: <class 'object'>"
    )


def test_dump_rejects_nan_even_where_pydantic_lets_it_through() -> None:
    schema = compile_schema(dict[str, float])
    with pytest.raises(OutputNotJSON) as caught:
        schema.dump(schema.parse({"x": math.nan}), what="output")
    assert caught.value.path == "output['x']"


def test_a_compiled_schema_is_returned_as_it_is() -> None:
    schema = json_schema({"type": "integer"})
    assert compile_schema(schema) is schema


def test_json_schema_returns_a_copy() -> None:
    schema = compile_schema(Invoice)
    schema.json_schema["title"] = "changed"
    assert schema.json_schema["title"] == "Invoice"
    copied: Any = schema.json_schema
    copied["properties"]["changed"] = {}
    assert "changed" not in schema.json_schema["properties"]  # type: ignore[operator]
    assert schema.json_schema == Invoice.model_json_schema()


def test_repr_names_the_type() -> None:
    assert repr(compile_schema(Invoice)) == "Schema(Invoice)"
    assert repr(compile_schema(list[int])) == "Schema(list[int])"


# --- unusable schemas --------------------------------------------------------------------


def _schema_error(value: object) -> str:
    with pytest.raises(SchemaError) as caught:
        compile_schema(value)
    return str(caught.value)


def test_a_raw_dict_is_not_a_schema() -> None:
    assert _schema_error({"type": "object"}) == (
        "a dict is not a schema type; to use a raw JSON Schema, wrap it: json_schema({...})"
    )


def test_none_is_not_a_schema() -> None:
    assert _schema_error(None) == (
        "None is not a schema; for a schema that accepts only null, write type(None)"
    )


def test_a_string_is_not_a_schema() -> None:
    assert _schema_error("int") == (
        "the string 'int' is not a schema; pass the type itself (int, not 'int')"
    )


def test_a_model_instance_is_not_a_schema() -> None:
    assert _schema_error(Invoice(number=1)) == (
        "an instance of Invoice is not a schema; pass the class itself: Invoice"
    )


def test_an_unknown_class_is_not_a_schema() -> None:
    class Store:
        pass

    message = _schema_error(Store)
    assert message.startswith("cannot use Store as a schema: Unable to generate pydantic-core")
    assert message.endswith(
        "; pass a pydantic model class, a type such as int or list[str], or json_schema({...})"
    )


def test_a_type_without_a_json_schema_is_unusable() -> None:
    message = _schema_error(Callable[[int], int])
    assert message.startswith("cannot generate a JSON Schema for ")
    assert message.endswith(
        "use a type pydantic can describe, or give the JSON Schema yourself with "
        "json_schema({...}, type=...)"
    )


# --- raw JSON Schemas --------------------------------------------------------------------

POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "minimum": 0}},
    "required": ["x", "y"],
    "additionalProperties": False,
}


def test_json_schema_is_shown_as_given() -> None:
    assert json_schema(POINT).json_schema == POINT


def test_json_schema_parses_valid_json_unchanged() -> None:
    assert json_schema(POINT).parse({"x": 1, "y": 2}) == {"x": 1, "y": 2}


def test_json_schema_normalises_tuples_before_checking() -> None:
    assert json_schema({"type": "array"}).parse((1, 2)) == [1, 2]


def test_json_schema_reports_every_error_with_its_location() -> None:
    failure = _failure(lambda: json_schema(POINT).parse({"x": "1", "y": -1, "z": 0}, what="input"))
    assert str(failure) == (
        "input does not match its schema (3 errors):\n"
        "  input['x']: '1' is not of type 'integer'\n"
        "  input['y']: -1 is less than the minimum of 0\n"
        "  input: Additional properties are not allowed ('z' was unexpected)"
    )
    assert [e.kind for e in failure.errors] == ["type", "minimum", "additionalProperties"]


def test_json_schema_reports_a_missing_property() -> None:
    failure = _failure(lambda: json_schema(POINT).parse({"x": 1}, what="input"))
    assert failure.errors == (ValidationIssue((), "'y' is a required property", "required"),)


def test_json_schema_rejects_a_value_that_is_not_json() -> None:
    failure = _failure(lambda: json_schema({}).parse({"x": math.nan}, what="input"))
    assert failure.errors == (
        ValidationIssue(
            ("x",),
            "the value is nan, which JSON cannot represent; use a finite number, or None for "
            "a missing value",
            "not_json",
        ),
    )


def test_json_schema_type_converts_after_the_json_schema_check() -> None:
    def total(point: dict[str, int]) -> int:
        return point["x"] + point["y"]

    schema = json_schema(POINT, type=Annotated[dict[str, int], AfterValidator(total)])
    assert schema.parse({"x": 1, "y": 2}) == 3
    failure = _failure(lambda: schema.parse({"x": "1", "y": 2}))
    assert [e.kind for e in failure.errors] == ["type"]  # the JSON Schema check ran first


def test_json_schema_type_can_be_a_model() -> None:
    schema = json_schema({"type": "object"}, type=Invoice)
    invoice = schema.parse({"number": 7})
    assert invoice == Invoice(number=7)
    assert schema.dump(invoice) == {"number": 7, "note": "none"}


def test_json_schema_type_failures_are_validation_failures() -> None:
    failure = _failure(lambda: json_schema({"type": "object"}, type=Invoice).parse({}))
    assert [(e.loc, e.kind) for e in failure.errors] == [(("number",), "missing")]


def test_json_schema_format_is_an_annotation() -> None:
    assert json_schema({"type": "string", "format": "email"}).parse("nope") == "nope"


def test_json_schema_resolves_local_refs() -> None:
    schema = json_schema(
        {"$defs": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/n"}}
    )
    assert schema.parse([1, 2]) == [1, 2]
    assert [e.loc for e in _failure(lambda: schema.parse([1, "2"])).errors] == [(1,)]


def test_an_unresolvable_ref_is_a_schema_error_when_used() -> None:
    schema = json_schema({"$ref": "https://example.com/thing"})
    with pytest.raises(SchemaError, match=r"refers to 'https://example.com/thing', which cannot"):
        schema.parse(1)


def test_json_schema_repr() -> None:
    assert repr(json_schema({"type": "integer"})) == "json_schema({'type': 'integer'})"
    assert repr(json_schema({}, type=Invoice)) == "json_schema({}, type=Invoice)"


def _json_schema_error(schema: Any, **kwargs: Any) -> str:
    with pytest.raises(SchemaError) as caught:
        json_schema(schema, **kwargs)
    return str(caught.value)


def test_an_invalid_json_schema_is_rejected_at_construction() -> None:
    assert _json_schema_error({"properties": {"a": {"type": "strin"}}}) == (
        "json_schema() got an invalid JSON Schema (draft 2020-12): at "
        "schema['properties']['a']['type'], 'strin' is not valid under any of the given schemas"
    )


def test_json_schema_needs_a_dict() -> None:
    assert _json_schema_error(True) == (
        "json_schema() takes a JSON Schema as a dict, got True (bool); for a schema that "
        "accepts any JSON value, write json_schema({})"
    )


def test_json_schema_needs_a_json_document() -> None:
    assert _json_schema_error({"enum": [math.nan]}) == (
        "json_schema() needs a JSON document, but schema['enum'][0] is nan, which JSON cannot "
        "represent; use a finite number, or None for a missing value"
    )


def test_json_schema_is_draft_2020_12_only() -> None:
    assert _json_schema_error({"$schema": "http://json-schema.org/draft-07/schema#"}) == (
        "json_schema() supports JSON Schema draft 2020-12 only, but the schema declares "
        "'$schema': 'http://json-schema.org/draft-07/schema#'; remove '$schema' or set it to "
        "'https://json-schema.org/draft/2020-12/schema'"
    )


def test_json_schema_accepts_the_draft_2020_12_declaration() -> None:
    schema = json_schema({"$schema": "https://json-schema.org/draft/2020-12/schema"})
    assert schema.parse(1) == 1


def test_json_schema_type_must_be_usable() -> None:
    assert _json_schema_error({}, type="int") == (
        "the string 'int' is not a schema; pass the type itself (int, not 'int')"
    )


def test_json_schema_keeps_no_reference_to_the_callers_dict() -> None:
    given: dict[str, Any] = {"type": "integer"}
    schema = json_schema(given)
    given["type"] = "string"
    assert schema.parse(1) == 1
    assert isinstance(schema, Schema)
