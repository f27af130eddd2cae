"""to_json_value: lossless JSON or a clear error naming the offending part."""

from __future__ import annotations

import datetime
import enum
import json
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from pai_actors import MAX_SAFE_INTEGER, OutputNotJSON, to_json_value
from pai_actors._core import json as _json

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_json_values_round_trip_unchanged(value: Any) -> None:
    result = to_json_value(value)
    assert result == value
    assert json.loads(json.dumps(result, allow_nan=False)) == result


class Poison:
    """A value JSON cannot represent, remembered so the error's ``loc`` can be checked."""

    def __init__(self, value: object) -> None:
        self.value = value


poisons = st.sampled_from(
    [math.nan, math.inf, -math.inf, b"\x00", bytearray(b"x"), {1}, frozenset(), object()]
).map(Poison)


def _insert(container: st.DrawFn, inner: Any) -> Any:
    # Wrap ``inner`` (a poisoned value) in a list, tuple or dict among ordinary JSON values.
    kind = container(st.sampled_from(["list", "tuple", "dict"]))
    if kind == "dict":
        others = container(st.dictionaries(st.text(), json_values, max_size=3))
        key = container(st.text().filter(lambda k: k not in others))
        return {**others, key: inner}
    before = container(st.lists(json_values, max_size=2))
    after = container(st.lists(json_values, max_size=2))
    items = [*before, inner, *after]
    return items if kind == "list" else tuple(items)


@st.composite
def poisoned(draw: st.DrawFn) -> tuple[Any, object]:
    poison = draw(poisons)
    value: Any = poison
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        value = _insert(draw, value)
    return _unwrap(value), poison.value


def _unwrap(value: Any) -> Any:
    if isinstance(value, Poison):
        return value.value
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_unwrap(v) for v in value)
    return value


@given(poisoned())
def test_anything_containing_a_non_json_value_at_any_depth_is_rejected_at_its_path(
    case: tuple[Any, object],
) -> None:
    value, poison = case
    with pytest.raises(OutputNotJSON) as caught:
        to_json_value(value, what="output")
    found = value
    for part in caught.value.loc:
        found = found[part]
    assert found is poison
    assert str(caught.value).startswith(caught.value.path + " ")


def test_none_is_a_valid_null() -> None:
    assert to_json_value(None) is None


def test_tuples_become_lists() -> None:
    assert to_json_value({"pair": (1, (2, 3))}) == {"pair": [1, [2, 3]]}


def test_pydantic_models_become_dicts() -> None:
    class Item(BaseModel):
        name: str
        when: datetime.date

    assert to_json_value([Item(name="a", when=datetime.date(2024, 5, 1))]) == [
        {"name": "a", "when": "2024-05-01"}
    ]


def test_a_model_holding_nan_is_rejected_at_the_field() -> None:
    class Point(BaseModel):
        x: float

    with pytest.raises(OutputNotJSON) as caught:
        to_json_value({"p": Point(x=math.nan)}, what="output")
    assert caught.value.path == "output['p']['x']"


def test_mappings_become_dicts() -> None:
    assert to_json_value(MappingProxyType({"a": 1})) == {"a": 1}


def test_str_int_and_float_subclasses_become_the_plain_types() -> None:
    class Color(enum.StrEnum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    result = to_json_value([Color.RED, Level.HIGH, True])
    assert result == ["red", 3, True]
    assert isinstance(result, list)
    assert [type(v) for v in result] == [str, int, bool]


def test_the_result_shares_no_containers_with_the_input() -> None:
    inner = [1]
    value = {"a": inner}
    result = to_json_value(value)
    assert isinstance(result, dict)
    assert result["a"] is not inner


def _message(value: object) -> str:
    with pytest.raises(OutputNotJSON) as caught:
        to_json_value(value, what="output")
    return str(caught.value)


def test_nan_message() -> None:
    assert _message({"items": [1, 2, math.nan]}) == (
        "output['items'][2] is nan, which JSON cannot represent; use a finite number, "
        "or None for a missing value"
    )


def test_infinity_message() -> None:
    assert _message([-math.inf]) == (
        "output[0] is -inf, which JSON cannot represent; use a finite number, "
        "or None for a missing value"
    )


def test_bytes_message() -> None:
    assert _message({"blob": b"\x00\x01"}) == (
        "output['blob'] is bytes (b'\\x00\\x01'), which JSON cannot represent; encode it as "
        "text first, e.g. base64.b64encode(data).decode('ascii')"
    )


def test_set_message() -> None:
    assert _message({"tags": {"a"}}) == (
        "output['tags'] is a set ({'a'}), which JSON cannot represent; use a list instead "
        "(sorted(...) keeps its order stable)"
    )


def test_frozenset_is_rejected() -> None:
    assert _message(frozenset({1})).startswith("output is a frozenset (frozenset({1}))")


def test_non_str_key_message() -> None:
    assert _message({"counts": {1: "one"}}) == (
        "output['counts'] has the key 1 (int); JSON object keys are strings: convert the "
        "keys with str(), or use a list of pairs"
    )


@dataclass
class Point:
    x: int


def test_arbitrary_object_message() -> None:
    assert _message({"p": Point(1)}) == (
        "output['p'] is a tests.pai_actors.test_json.Point (Point(x=1)), which is not a JSON "
        "value; convert it to str, int, float, bool, None, a list or a dict with str keys, or "
        "parse it with a pydantic schema that serializes it"
    )


def test_datetime_is_an_arbitrary_object() -> None:
    assert _message(datetime.date(2024, 1, 2)) == (
        "output is a datetime.date (datetime.date(2024, 1, 2)), which is not a JSON value; "
        "convert it to str, int, float, bool, None, a list or a dict with str keys, or parse "
        "it with a pydantic schema that serializes it"
    )


def test_safe_integers_at_the_boundary_are_kept() -> None:
    assert to_json_value([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER]) == [
        MAX_SAFE_INTEGER,
        -MAX_SAFE_INTEGER,
    ]


def test_integers_beyond_the_safe_range_are_rejected() -> None:
    assert _message({"id": 2**53 + 1}) == (
        "output['id'] is 9007199254740993, outside JSON's safe integer range "
        "(±9007199254740991, which JavaScript clients read exactly); send it as a string, "
        "str(9007199254740993)"
    )


def test_lone_surrogates_are_rejected() -> None:
    assert _message(["ok", "a\ud800"]) == (
        "output[1] contains the lone surrogate '\\ud800' at index 1, which is not valid "
        "Unicode and cannot be stored as UTF-8; decode the text it came from correctly, "
        "or replace the surrogates"
    )


def test_a_cycle_is_rejected() -> None:
    looped: list[Any] = [1]
    looped.append({"again": looped})
    assert _message(looped) == "output[1]['again'] contains itself (a cycle); JSON values are trees"


def test_a_shared_but_acyclic_value_is_fine() -> None:
    shared = [1]
    assert to_json_value([shared, shared]) == [[1], [1]]


def test_too_deep_nesting_is_a_clear_error() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert _message(deep) == (
        "output is nested too deeply to convert; flatten it or store it in parts"
    )


def test_what_names_the_root_and_loc_locates_the_part() -> None:
    with pytest.raises(OutputNotJSON) as caught:
        to_json_value({"x": [math.nan]}, what="data")
    assert caught.value.path == "data['x'][0]"
    assert caught.value.loc == ("x", 0)
    assert caught.value.reason.startswith("is nan")


def test_the_default_root_is_value() -> None:
    with pytest.raises(OutputNotJSON, match=r"^value\['x'\] is nan"):
        to_json_value({"x": math.nan})


# The fast path (``plain_json``) against the long way (``_convert``): the same result, or the same
# error, for anything, including what only the long way handles.

_any_text = st.text(st.characters(codec=None, exclude_categories=()))
_awkward_scalars = (
    json_scalars
    | _any_text
    | st.integers()
    | st.floats()
    | st.sampled_from([b"x", {1}, object(), MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1])
)
_awkward_values = st.recursive(
    _awkward_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_any_text, inner, max_size=4)
        | st.dictionaries(st.integers(), inner, min_size=1, max_size=2)
        | st.dictionaries(_any_text, inner, max_size=2).map(MappingProxyType)
    ),
    max_leaves=20,
)


def _the_long_way(value: object) -> object:
    try:
        return ("value", _json._convert(value, "output", (), set()))
    except OutputNotJSON as exc:
        return ("error", str(exc), exc.loc)


def _the_public_way(value: object) -> object:
    try:
        return ("value", to_json_value(value, what="output"))
    except OutputNotJSON as exc:
        return ("error", str(exc), exc.loc)


@given(_awkward_values)
def test_the_fast_path_agrees_with_the_long_way(value: Any) -> None:
    assert repr(_the_public_way(value)) == repr(_the_long_way(value))


def test_deep_values_and_cycles_take_the_long_way() -> None:
    deep: Any = 1
    for _ in range(200):
        deep = {"d": [deep]}
    assert to_json_value(deep) == deep
    looped: dict[str, Any] = {}
    looped["self"] = [looped]
    assert _message(looped) == "output['self'][0] contains itself (a cycle); JSON values are trees"


@given(json_values)
def test_json_text_reads_back_the_same(value: Any) -> None:
    assert json.loads(_json.json_text(value)) == value


def test_json_text_is_compact_and_writes_text_as_it_is() -> None:
    value: dict[str, Any] = {"text": 'héllo ☃ \u2028 "q" \\', "n": [1, -2.5, None, True], "o": {}}
    text = _json.json_text(value)
    assert json.loads(text) == value
    assert "☃" in text
    assert ", " not in text
    assert ": " not in text
    # text no JSON value holds (an exception's message, say) is written as escapes
    assert json.loads(_json.json_text({"error": "bad \ud800"})) == {"error": "bad \ud800"}
