"""The base of every wire model: frozen pydantic, snake_case in Python, camelCase on the wire.

Wire models (message parts, thread and run state, action results and refs) are what crosses
the wire and the disk. Each is a frozen pydantic model whose attributes are snake_case and
whose aliases are the AI SDK's camelCase names; ``to_wire()`` is the exact JSON a client
receives, and ``Model.model_validate(obj.to_wire())`` reads it back.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, tzinfo
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, Self, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic.alias_generators import to_camel

from .errors import OutputNotJSON
from .json import JsonValue, to_json_value


def _check_json(value: object) -> JsonValue:
    try:
        return to_json_value(value)
    except OutputNotJSON as exc:  # pydantic reports ValueError as a validation error
        raise ValueError(str(exc)) from None


if TYPE_CHECKING:
    Json = JsonValue
else:
    # ``JsonValue`` is a recursive alias pydantic cannot build a schema for; the field holds
    # Any, checked and normalised by ``to_json_value`` (so NaN, sets, ... are rejected).
    Json = Annotated[Any, BeforeValidator(_check_json)]


def iso(at: datetime) -> str:
    """``at`` as an ISO-8601 string, UTC written as ``Z`` (as JavaScript's ``toISOString``)."""
    return _iso(at, at.tzinfo, at.fold)


@lru_cache(maxsize=1024, typed=True)
def _iso(at: datetime, zone: tzinfo | None, fold: int) -> str:
    # Cached: a record's instants are written again with every revision of it (a call's
    # ``suspendedAt`` a dozen times in a W1 conversation), and ``isoformat`` costs several
    # times a lookup. ``zone`` and ``fold`` are in the key because equal datetimes can write
    # different offsets: equal instants in two zones, and, in one zone, a wall time that
    # comes twice (``fold`` tells which; equality ignores it).
    text = at.isoformat()
    return text[:-6] + "Z" if at.utcoffset() == timedelta(0) and text.endswith("+00:00") else text


_Model = TypeVar("_Model", bound=BaseModel)
_new, _set = object.__new__, object.__setattr__
_ALL_FIELDS: dict[type[BaseModel], set[str]] = {}
"""Each class's set of all its fields: the one ``WireModel.trusted`` gives its instances."""
_FIELDS_SETS: dict[tuple[type[BaseModel], frozenset[str]], set[str]] = {}
"""The sets of fields ``updated`` gave revised models, by class and content."""
_FIELDS_SETS_KEPT = 4096


def updated(model: _Model, /, **update: Any) -> _Model:
    """``model.model_copy(update=update)`` for a frozen model, at about a third of its cost:
    the new model's fields are ``model``'s with ``update`` over them, taken as they are (no
    validation, as ``model_copy``). It shares what a frozen model never changes in place (its
    set of fields set, unless ``update`` adds to it); the runtime and the stores make a
    revised record with every write."""
    new = _new(model.__class__)
    _set(new, "__dict__", {**model.__dict__, **update})
    fields_set = model.__pydantic_fields_set__
    if not update.keys() <= fields_set:
        fields_set = _shared_fields_set(model.__class__, fields_set, update.keys())
    _set(new, "__pydantic_fields_set__", fields_set)
    _set(new, "__pydantic_extra__", model.__pydantic_extra__)
    _set(new, "__pydantic_private__", model.__pydantic_private__)
    return new


def shared_fields_set(model: _Model, /) -> _Model:
    """``model``, its set of fields set swapped for the one set of that content its class
    shares (as ``updated`` and ``WireModel.trusted`` give theirs): a validated model holds
    a set of its own, one more object for the garbage collector to scan for as long as the
    model lives. For the records a runtime keeps while their runs wait (a thousand
    conversations at once keep a thousand of each)."""
    _set(
        model,
        "__pydantic_fields_set__",
        _shared_fields_set(model.__class__, model.__pydantic_fields_set__, ()),
    )
    return model


def _shared_fields_set(cls: type[BaseModel], before: set[str], added: Iterable[str]) -> set[str]:
    """``before | added``, one set for each class and content: a frozen model never
    changes its set in place, so its revisions share it, as a class's ``trusted`` instances
    do, rather than each keeping one more object for the garbage collector to scan."""
    names = frozenset(before).union(added)
    shared = _FIELDS_SETS.get((cls, names))
    if shared is None:
        shared = set(names)
        if len(_FIELDS_SETS) < _FIELDS_SETS_KEPT:  # (a bound, never reached in practice)
            _FIELDS_SETS[cls, names] = shared
    return shared


class WireModel(BaseModel):
    """A frozen wire model: snake_case attributes, camelCase aliases, unknown fields refused.

    Frozen all the way to ``model_fields_set``: records may share that set (see
    :meth:`trusted` and ``updated``), so treat it as read-only (``model_copy`` copies it).
    """

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
    )

    @classmethod
    def trusted(cls, **fields: Any) -> Self:
        """An instance from values known to be valid, built without validation: every field
        given, by its Python name, already of its field's type (as ``model_construct`` with
        all fields set, minus its per-field bookkeeping). The runtime projects every call
        transition through this; the tests check that each projection validates."""
        # (``__pydantic_fields__``: the dict ``model_fields`` returns, read without its
        # descriptor, which costs microseconds a call)
        if __debug__ and fields.keys() != cls.__pydantic_fields__.keys():
            missing = cls.__pydantic_fields__.keys() - fields.keys()
            extra = fields.keys() - cls.__pydantic_fields__.keys()
            raise TypeError(f"{cls.__name__}.trusted(): missing {missing}, unknown {extra}")
        model = cls.__new__(cls)
        object.__setattr__(model, "__dict__", fields)
        # Every field is set, so the instances of a class share one set of them: a frozen
        # model never changes it in place (``model_copy`` and ``copy`` copy it). One set
        # fewer per record is one object fewer for the garbage collector to scan for as
        # long as the record lives, and a runtime holds thousands of them.
        fields_set = _ALL_FIELDS.get(cls)
        if fields_set is None:
            fields_set = _ALL_FIELDS[cls] = set(cls.__pydantic_fields__)
        object.__setattr__(model, "__pydantic_fields_set__", fields_set)
        object.__setattr__(model, "__pydantic_extra__", None)
        object.__setattr__(model, "__pydantic_private__", None)
        return model
