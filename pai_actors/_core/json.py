"""Lossless JSON: :func:`to_json_value`, the one normaliser for outputs, tool data and payloads.

Everything pai_actors stores or sends (tool outputs, tool data, suspend payloads) is a JSON
value that reads back exactly as it was written, by Python and by the JavaScript clients the
wire format is made for. :func:`to_json_value` turns a Python value into that shape or says
precisely which part cannot be represented and what to write instead.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Mapping
from typing import Any, TypeAlias

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json

from .errors import Loc, OutputNotJSON

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
"""A JSON value as Python holds it: only these types, dict keys always ``str``."""

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer every JSON reader holds exactly.

JavaScript's ``JSON.parse`` reads numbers as IEEE doubles: beyond ±(2**53 - 1) it silently
rounds (9007199254740993 reads as 9007199254740992). The wire format is made for JavaScript
clients, so larger integers are rejected rather than corrupted; send them as strings.
"""

_repr = reprlib.Repr()
_repr.maxstring = 40
_repr.maxother = 40
_repr.maxlevel = 2
_repr.maxset = _repr.maxlist = _repr.maxdict = 4

_ALTERNATIVES = "str, int, float, bool, None, a list or a dict with str keys"


def to_json_value(value: object, *, what: str = "value") -> JsonValue:
    """Return ``value`` as a lossless JSON value, or raise :class:`OutputNotJSON`.

    - ``None``, ``bool``, ``str``, finite ``float`` and ``int`` within
      ±:data:`MAX_SAFE_INTEGER` are kept (subclasses such as ``StrEnum`` members become the
      plain ``str``/``int``/``float`` that JSON writes for them);
    - lists and tuples become lists, mappings with ``str`` keys become dicts;
    - a pydantic model becomes what ``model_dump(mode="json")`` makes of it, checked the
      same way.

    Rejected, with the path of the offending part (``output['items'][2]``, where ``what`` is
    ``"output"``): NaN and ±inf, bytes, sets and frozensets, non-``str`` dict keys, integers
    beyond the safe range, strings that are not valid Unicode (lone surrogates), cycles, and
    any other object (datetimes, dataclasses, ...: serialize them first, or parse the value
    with a pydantic schema that does).

    The input is not modified; the result shares no containers with it.
    """
    try:
        plain: JsonValue = plain_json(value)
        return plain
    except (NotPlain, RecursionError):
        pass
    try:
        return _convert(value, what, (), set())
    except RecursionError:
        raise OutputNotJSON(
            what, (), "is nested too deeply to convert; flatten it or store it in parts"
        ) from None


class NotPlain(Exception):
    """A value is not plain JSON (see :func:`plain_json`): take the long way."""


_PLAIN_DEPTH = 64


def plain_json(value: Any, depth: int = 0) -> Any:
    """``to_json_value(value)`` for what nearly every value is, or raise :class:`NotPlain`.

    Plain JSON: exact ``dict``/``list``/``str``/``int``/``float``/``bool``/``None``, valid
    Unicode text, safe integers, finite floats, at most ``_PLAIN_DEPTH`` deep (so cycles and
    deep values take the long way too). The containers are copied; no path and no cycle is
    tracked. For anything else ``to_json_value`` does it all again with ``_convert``, so its
    result, or its error, is ``_convert``'s exactly.
    """
    # ``value`` is ``Any``: ``kind is ...`` narrows it, mypy does not.
    kind = type(value)
    if kind is str:
        if not value.isascii():
            _check_plain_text(value)
        return value
    if kind is dict:
        if depth == _PLAIN_DEPTH:
            raise NotPlain
        result: dict[str, JsonValue] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise NotPlain
            if not key.isascii():
                _check_plain_text(key)
            result[key] = plain_json(item, depth + 1)
        return result
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return value
        raise NotPlain
    if value is None or kind is bool:
        return value
    if kind is list:
        if depth == _PLAIN_DEPTH:
            raise NotPlain
        return [plain_json(item, depth + 1) for item in value]
    if kind is float and math.isfinite(value):
        return value
    raise NotPlain


def _check_plain_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise NotPlain from None


def _convert(value: object, what: str, loc: Loc, active: set[int]) -> JsonValue:
    # Exact types first: they are by far the most common and need no conversion.
    kind = type(value)
    if value is None or kind is bool:
        return value  # type: ignore[return-value]  # None or a bool
    if isinstance(value, str):
        text = value if kind is str else str.__str__(value)
        _check_text(text, what, loc)
        return text
    if isinstance(value, int):
        number = value if kind is int else int.__int__(value)
        if -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
            return number
        raise OutputNotJSON(
            what,
            loc,
            f"is {number}, outside JSON's safe integer range "
            f"(±{MAX_SAFE_INTEGER}, which JavaScript clients read exactly); "
            f"send it as a string, str({number})",
        )
    if isinstance(value, float):
        if math.isfinite(value):
            return value if kind is float else float.__float__(value)
        raise OutputNotJSON(
            what,
            loc,
            f"is {value}, which JSON cannot represent; use a finite number, "
            "or None for a missing value",
        )
    if isinstance(value, list | tuple | Mapping):
        if id(value) in active:
            raise OutputNotJSON(what, loc, "contains itself (a cycle); JSON values are trees")
        active.add(id(value))
        try:
            if isinstance(value, Mapping):
                return _convert_mapping(value, what, loc, active)
            return [_convert(item, what, (*loc, i), active) for i, item in enumerate(value)]
        finally:
            active.discard(id(value))
    if isinstance(value, BaseModel):
        try:
            dumped = value.model_dump(mode="json", warnings="error")
        except PydanticSerializationError as exc:
            raise OutputNotJSON(
                what, loc, f"is {_a_type(value)} that pydantic cannot serialize: {exc}"
            ) from exc
        return _convert(dumped, what, loc, active)
    raise OutputNotJSON(what, loc, _rejection(value))


def _convert_mapping(
    value: Mapping[object, object], what: str, loc: Loc, active: set[int]
) -> JsonValue:
    result: dict[str, JsonValue] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise OutputNotJSON(
                what,
                loc,
                f"has the key {_repr.repr(key)} ({_type_name(key)}); JSON object keys are "
                "strings: convert the keys with str(), or use a list of pairs",
            )
        text = key if type(key) is str else str.__str__(key)
        _check_text(text, what, (*loc, text))
        result[text] = _convert(item, what, (*loc, text), active)
    return result


def _check_text(text: str, what: str, loc: Loc) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OutputNotJSON(
            what,
            loc,
            f"contains the lone surrogate {text[exc.start]!r} at index {exc.start}, which is "
            "not valid Unicode and cannot be stored as UTF-8; decode the text it came from "
            "correctly, or replace the surrogates",
        ) from None


def _rejection(value: object) -> str:
    shown = _repr.repr(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return (
            f"is {_type_name(value)} ({shown}), which JSON cannot represent; encode it as "
            "text first, e.g. base64.b64encode(data).decode('ascii')"
        )
    if isinstance(value, set | frozenset):
        return (
            f"is {_a_type(value)} ({shown}), which JSON cannot represent; use a list "
            "instead (sorted(...) keeps its order stable)"
        )
    return (
        f"is {_a_type(value)} ({shown}), which is not a JSON value; convert it to "
        f"{_ALTERNATIVES}, or parse it with a pydantic schema that serializes it"
    )


def _a_type(value: object) -> str:
    """``"a set"``, ``"an object"``, ``"a decimal.Decimal"``."""
    name = _type_name(value)
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def _type_name(value: object) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def json_text(value: JsonValue) -> str:
    """``value`` as compact JSON text, other characters than ASCII written as they are:
    what a store writes. pydantic-core's encoder, a few times faster than ``json.dumps``,
    which writes the text it cannot (lone surrogates, which only text that is not
    :func:`to_json_value`'s can hold) as escapes."""
    try:
        return to_json(value).decode()
    except PydanticSerializationError:  # a lone surrogate (an exception's text, say)
        return json.dumps(value, separators=(",", ":"))  # escaped, as it always was
