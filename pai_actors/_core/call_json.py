"""How a :class:`~pai_actors.CallRecord` is stored as JSON inside a ``StoredCall``: the
private pydantic mirror ``_CallShape`` of the pure core's dataclasses (the definition, and
the slow path), and the fast dump and load that write and read exactly what it does for
the records the runtime makes (anything else takes the shape's way, so the JSON, the record
or the error is always the shape's)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Literal, TypeVar, get_args

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from pydantic_core import TzInfo

from .call_record import (
    Approval,
    CallRecord,
    Cancellation,
    DataItem,
    Episode,
    EpisodeState,
    Finish,
    Phase,
)
from .json import NotPlain, plain_json
from .schema import frozen_mapping
from .wire import Json, iso

# The stored mirror of the pure core's dataclasses. ``CallRecord`` holds ``JsonValue`` (a
# recursive alias pydantic cannot build a schema for) and a read-only mapping, so it is
# converted through these models rather than handed to pydantic directly.


class _Shape(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", from_attributes=True)


class _EpisodeShape(_Shape):
    action_id: str
    name: str
    input: Json = None
    suspended_at: AwareDatetime
    state: EpisodeState = "pending"
    resolved_at: AwareDatetime | None = None
    resume: Json = None
    expires_at: AwareDatetime | None = None


class _DataItemShape(_Shape):
    id: str
    value: Json = None
    updated_at: AwareDatetime


class _ApprovalShape(_Shape):
    id: str
    requested_at: AwareDatetime
    state: EpisodeState = "pending"
    approved: bool | None = None
    reason: str | None = None
    resolved_at: AwareDatetime | None = None
    expires_at: AwareDatetime | None = None


class _CancellationShape(_Shape):
    reason: str | None = None
    at: AwareDatetime


class _CallShape(_Shape):
    version: Literal[1] = 1
    name: str
    tool_call_id: str
    dynamic: bool = False
    phase: Phase = "streaming"
    input_text: str = ""
    input: Json = None
    raw_input: Json = None
    finish: Finish | None = None
    output: Json = None
    error_text: str | None = None
    episodes: tuple[_EpisodeShape, ...] = ()
    output_action: EpisodeState | None = None
    output_expires_at: AwareDatetime | None = None
    approval: _ApprovalShape | None = None
    entry_started: bool = False
    cancelled: _CancellationShape | None = None
    data: dict[str, tuple[_DataItemShape, ...]] = Field(default_factory=dict)
    observed: bool = False
    sub_threads: tuple[str, ...] = ()

    @classmethod
    def of(cls, record: CallRecord) -> _CallShape:
        # The shapes mirror the dataclasses field for field, so pydantic reads them directly.
        return cls.model_validate(record, from_attributes=True)

    def record(self) -> CallRecord:
        cancelled = self.cancelled
        approval = self.approval
        return CallRecord(
            **{name: getattr(self, name) for name in _SCALAR_CALL_FIELDS},
            episodes=tuple(Episode(**dict(e)) for e in self.episodes),
            cancelled=None if cancelled is None else Cancellation(**dict(cancelled)),
            approval=None if approval is None else Approval(**dict(approval)),
            data=frozen_mapping(
                {
                    channel: tuple(DataItem(**dict(i)) for i in items)
                    for channel, items in self.data.items()
                }
            ),
        )


_SCALAR_CALL_FIELDS = tuple(
    name
    for name in _CallShape.model_fields
    if name not in ("episodes", "cancelled", "approval", "data")
)


def _validate_call(value: Any) -> CallRecord:
    if isinstance(value, CallRecord):
        return value
    try:
        return _load_call(value)
    except (NotPlain, RecursionError):
        pass  # not as the fast dump writes it: the shape does it all (outside this handler)
    return _CallShape.model_validate(value).record()


def _serialize_call(record: CallRecord) -> dict[str, Any]:
    try:
        return _dump_call(record)
    except (NotPlain, RecursionError):
        return _CallShape.of(record).model_dump(mode="json")


# The fast dump: what ``_CallShape.of(record).model_dump(mode="json")`` writes, built from the
# record's fields directly (~4x cheaper: no validation of the whole record against its
# mirror). It vouches only for records whose every value is already exactly what the shape
# holds (exact types, known literals, plain JSON, datetimes with whole-minute offsets); for
# anything else it raises ``NotPlain`` and the shape does it all, so the JSON written, or
# the error raised, is the shape's exactly (a property test checks both).

_PHASES: frozenset[Phase] = frozenset(get_args(Phase))
_FINISHES: frozenset[Finish] = frozenset(get_args(Finish))
_EPISODE_STATES: frozenset[EpisodeState] = frozenset(get_args(EpisodeState))
_MAPPINGS = (MappingProxyType, dict)
_L = TypeVar("_L", bound=str)  # a Literal of str


def _dump_call(record: CallRecord) -> dict[str, Any]:
    if type(record) is not CallRecord or type(record.version) is not int or record.version != 1:
        raise NotPlain
    approval, cancelled, data = record.approval, record.cancelled, record.data
    if type(data) not in _MAPPINGS:
        raise NotPlain
    return {
        "version": 1,
        "name": _text(record.name),
        "tool_call_id": _text(record.tool_call_id),
        "dynamic": _flag(record.dynamic),
        "phase": _among(record.phase, _PHASES),
        "input_text": _text(record.input_text),
        "input": plain_json(record.input),
        "raw_input": plain_json(record.raw_input),
        "finish": None if record.finish is None else _among(record.finish, _FINISHES),
        "output": plain_json(record.output),
        "error_text": _text_or_none(record.error_text),
        "episodes": [_dump_episode(e) for e in _tuple(record.episodes)],
        "output_action": None
        if record.output_action is None
        else _among(record.output_action, _EPISODE_STATES),
        "output_expires_at": _instant_or_none(record.output_expires_at),
        "approval": None if approval is None else _dump_approval(approval),
        "entry_started": _flag(record.entry_started),
        "cancelled": None if cancelled is None else _dump_cancellation(cancelled),
        "data": {
            _text(channel): [_dump_item(item) for item in _tuple(items)]
            for channel, items in data.items()
        },
        "observed": _flag(record.observed),
        "sub_threads": [_text(t) for t in _tuple(record.sub_threads)],
    }


def _dump_episode(episode: Episode) -> dict[str, Any]:
    if type(episode) is not Episode:
        raise NotPlain
    return {
        "action_id": _text(episode.action_id),
        "name": _text(episode.name),
        "input": plain_json(episode.input),
        "suspended_at": _instant(episode.suspended_at),
        "state": _among(episode.state, _EPISODE_STATES),
        "resolved_at": _instant_or_none(episode.resolved_at),
        "resume": plain_json(episode.resume),
        "expires_at": _instant_or_none(episode.expires_at),
    }


def _dump_item(item: DataItem) -> dict[str, Any]:
    if type(item) is not DataItem:
        raise NotPlain
    return {
        "id": _text(item.id),
        "value": plain_json(item.value),
        "updated_at": _instant(item.updated_at),
    }


def _dump_approval(approval: Approval) -> dict[str, Any]:
    if type(approval) is not Approval or not (
        approval.approved is None or type(approval.approved) is bool
    ):
        raise NotPlain
    return {
        "id": _text(approval.id),
        "requested_at": _instant(approval.requested_at),
        "state": _among(approval.state, _EPISODE_STATES),
        "approved": approval.approved,
        "reason": _text_or_none(approval.reason),
        "resolved_at": _instant_or_none(approval.resolved_at),
        "expires_at": _instant_or_none(approval.expires_at),
    }


def _dump_cancellation(cancelled: Cancellation) -> dict[str, Any]:
    if type(cancelled) is not Cancellation:
        raise NotPlain
    return {"reason": _text_or_none(cancelled.reason), "at": _instant(cancelled.at)}


def _text(value: str) -> str:
    if type(value) is not str:
        raise NotPlain
    return value


def _text_or_none(value: str | None) -> str | None:
    if value is not None and type(value) is not str:
        raise NotPlain
    return value


def _flag(value: bool) -> bool:
    if type(value) is not bool:
        raise NotPlain
    return value


def _among(value: Any, allowed: frozenset[_L]) -> _L:
    if type(value) is not str or value not in allowed:
        raise NotPlain
    return value


def _tuple(value: tuple[Any, ...]) -> tuple[Any, ...]:
    if type(value) is not tuple:
        raise NotPlain
    return value


def _instant(at: datetime) -> str:
    """``at`` as pydantic writes an ``AwareDatetime`` in JSON: ISO 8601, UTC as ``Z``.

    Offsets that are not whole minutes (pydantic cuts them short) take the long way."""
    offset = at.utcoffset() if type(at) is datetime else None
    if offset is None or offset.microseconds or offset.seconds % 60:
        raise NotPlain
    return iso(at)  # (the same text: UTC as ``Z``, another offset as ``+hh:mm``)


def _instant_or_none(at: datetime | None) -> str | None:
    return None if at is None else _instant(at)


# The fast load, the fast dump's mirror: what ``_CallShape.model_validate(value).record()``
# returns, built directly from the plain dict that JSON parsing makes of what the fast dump
# wrote (~1.5x cheaper: ~10 µs against ~15 for a W1 call; the rest is mostly the frozen
# dataclasses' own ``__init__``). It vouches only for exactly that: the keys the dump writes
# (or wrote before the deadlines' ``expires_at`` keys were added; records of other older
# versions may omit other keys, and the shape judges those), exact types, known literals,
# plain JSON, and instants in ``_instant``'s forms; for anything else it raises ``NotPlain``
# and the shape does it all, so the record returned, or the error raised, is the shape's
# exactly (property tests check both). Instants get pydantic's own ``TzInfo``, as the shape
# gives them, so nothing (``repr``, ``tzname()``) tells a record read either way apart.

_CALL_KEYS = frozenset(_CallShape.model_fields)
_EPISODE_KEYS = frozenset(_EpisodeShape.model_fields)
_ITEM_KEYS = frozenset(_DataItemShape.model_fields)
_APPROVAL_KEYS = frozenset(_ApprovalShape.model_fields)
_CANCELLATION_KEYS = frozenset(_CancellationShape.model_fields)
# What the dump wrote before deadlines (and sub-agents): records stored then read without
# the slow way.
_OLD_CALL_KEYS = _CALL_KEYS - {"output_expires_at", "sub_threads"}
_SUB_AGENTS_CALL_KEYS = _CALL_KEYS - {"sub_threads"}
_OLD_EPISODE_KEYS = _EPISODE_KEYS - {"expires_at"}
_OLD_APPROVAL_KEYS = _APPROVAL_KEYS - {"expires_at"}


def _load_call(value: Any) -> CallRecord:
    version = _fields(value, _CALL_KEYS, _OLD_CALL_KEYS, _SUB_AGENTS_CALL_KEYS)["version"]
    if type(version) is not int or version != 1:
        raise NotPlain
    finish, output_action = value["finish"], value["output_action"]
    approval, cancelled, data = value["approval"], value["cancelled"], value["data"]
    if type(data) is not dict:
        raise NotPlain
    return CallRecord(
        name=_text(value["name"]),
        tool_call_id=_text(value["tool_call_id"]),
        dynamic=_flag(value["dynamic"]),
        phase=_among(value["phase"], _PHASES),
        input_text=_text(value["input_text"]),
        input=plain_json(value["input"]),
        raw_input=plain_json(value["raw_input"]),
        finish=None if finish is None else _among(finish, _FINISHES),
        output=plain_json(value["output"]),
        error_text=_text_or_none(value["error_text"]),
        episodes=tuple(_load_episode(e) for e in _list(value["episodes"])),
        output_action=None if output_action is None else _among(output_action, _EPISODE_STATES),
        output_expires_at=_parse_instant_or_none(value.get("output_expires_at")),
        approval=None if approval is None else _load_approval(approval),
        entry_started=_flag(value["entry_started"]),
        cancelled=None if cancelled is None else _load_cancellation(cancelled),
        data=frozen_mapping(
            {
                _text(channel): tuple(_load_item(item) for item in _list(items))
                for channel, items in data.items()
            }
        ),
        observed=_flag(value["observed"]),
        sub_threads=tuple(_text(t) for t in _list(value.get("sub_threads", []))),
    )


def _load_episode(value: Any) -> Episode:
    _fields(value, _EPISODE_KEYS, _OLD_EPISODE_KEYS)
    return Episode(
        action_id=_text(value["action_id"]),
        name=_text(value["name"]),
        input=plain_json(value["input"]),
        suspended_at=_parse_instant(value["suspended_at"]),
        state=_among(value["state"], _EPISODE_STATES),
        resolved_at=_parse_instant_or_none(value["resolved_at"]),
        resume=plain_json(value["resume"]),
        expires_at=_parse_instant_or_none(value.get("expires_at")),
    )


def _load_item(value: Any) -> DataItem:
    _fields(value, _ITEM_KEYS)
    return DataItem(
        id=_text(value["id"]),
        value=plain_json(value["value"]),
        updated_at=_parse_instant(value["updated_at"]),
    )


def _load_approval(value: Any) -> Approval:
    approved = _fields(value, _APPROVAL_KEYS, _OLD_APPROVAL_KEYS)["approved"]
    if approved is not None and type(approved) is not bool:
        raise NotPlain
    return Approval(
        id=_text(value["id"]),
        requested_at=_parse_instant(value["requested_at"]),
        state=_among(value["state"], _EPISODE_STATES),
        approved=approved,
        reason=_text_or_none(value["reason"]),
        resolved_at=_parse_instant_or_none(value["resolved_at"]),
        expires_at=_parse_instant_or_none(value.get("expires_at")),
    )


def _load_cancellation(value: Any) -> Cancellation:
    _fields(value, _CANCELLATION_KEYS)
    return Cancellation(reason=_text_or_none(value["reason"]), at=_parse_instant(value["at"]))


def _fields(value: Any, keys: frozenset[str], *old: frozenset[str]) -> dict[str, Any]:
    """``value`` if it is a dict with exactly ``keys`` (or exactly one of ``old``: as written
    before keys were added, which the shape reads as their defaults), else
    :class:`NotPlain`."""
    if type(value) is not dict or (value.keys() != keys and value.keys() not in old):
        raise NotPlain
    return value


def _list(value: list[Any]) -> list[Any]:
    if type(value) is not list:
        raise NotPlain
    return value


_ZONES: dict[timedelta, TzInfo] = {}  # at most one per whole minute in ±24 hours
_INSTANT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{6})?(?:Z|[+-][0-9]{2}:[0-9]{2})"
).fullmatch


def _parse_instant(text: str) -> datetime:
    """The instant ``_instant`` wrote as ``text``, as pydantic reads it (with its ``TzInfo``).

    Only ``_instant``'s own forms: ASCII digits, six digits of fraction only when there are
    microseconds, ``Z`` for UTC and only for UTC. (pydantic reads ``.000000`` and
    ``+00:00`` the same way; they are refused only to vouch for no more than the dump
    writes.)"""
    if type(text) is not str or _INSTANT(text) is None:
        raise NotPlain
    try:
        at = datetime.fromisoformat(text)
    except ValueError:  # a day or hour out of range
        raise NotPlain from None
    offset = at.utcoffset()
    if offset is None or (text[-1] == "Z") == bool(offset) or (not at.microsecond and "." in text):
        raise NotPlain
    zone = _ZONES.get(offset)
    if zone is None:
        zone = _ZONES.setdefault(offset, TzInfo(int(offset.total_seconds())))
    # Not ``at.replace(tzinfo=zone)``: the constructor is ~4x cheaper.
    return datetime(at.year, at.month, at.day, at.hour, at.minute, at.second, at.microsecond, zone)


def _parse_instant_or_none(text: str | None) -> datetime | None:
    return None if text is None else _parse_instant(text)
