"""The stored call: the fast dump of a ``CallRecord`` writes exactly what its shape writes,
and the fast load reads back exactly what its shape reads."""

from __future__ import annotations

import copy
import enum
import json
import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from pai_actors import (
    MAX_SAFE_INTEGER,
    MemoryStore,
    Message,
    RunRecord,
    StoredCall,
    TextPart,
    create_agent_runtime,
    define_agent,
)
from pai_actors._core.call_json import (
    _CallShape,
    _dump_call,
    _load_call,
    _serialize_call,
    _validate_call,
)
from pai_actors._core.call_record import Approval, CallRecord, Cancellation, DataItem, Episode
from pai_actors._core.schema import frozen_mapping
from pai_actors._core.wire import shared_fields_set, updated
from pai_actors._store.base import AppendMessage, CreateThread, PutRun, Write
from pai_actors.testing import ScriptedModel, text


class Color(enum.StrEnum):
    RED = "red"
    DONE = "done"  # a valid phase, but not a plain str


def _the_shape_way(record: CallRecord) -> tuple[Any, ...]:
    """What ``_serialize_call`` wrote before its fast path: the record through its mirror."""
    try:
        return ("dump", _CallShape.of(record).model_dump(mode="json"))
    except Exception as exc:
        return ("error", type(exc), str(exc))


def _the_fast_way(record: CallRecord) -> tuple[Any, ...]:
    try:
        return ("dump", _serialize_call(record))
    except Exception as exc:
        return ("error", type(exc), str(exc))


# Plain values, as the core writes them, and awkward ones only the shape judges.

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
_awkward_json = _json | st.sampled_from(
    [(1, 2), {"t": (1,)}, math.nan, {1: "x"}, {"big": MAX_SAFE_INTEGER + 1}, b"x", Color.RED]
)
_whole_minutes: st.SearchStrategy[Any] = st.sampled_from(
    [
        UTC,
        timezone(timedelta(hours=5, minutes=30)),
        timezone(timedelta(hours=-4)),
        TypeAdapter(datetime).validate_python("2025-01-01T00:00:00Z").tzinfo,  # pydantic's TzInfo
    ]
)
_odd_offsets = st.sampled_from(
    [
        timezone(timedelta(hours=-4, minutes=-59, seconds=-53)),
        timezone(timedelta(seconds=-1)),
        timezone(timedelta(microseconds=-1)),
    ]
)
_instants = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=_whole_minutes
) | st.datetimes(min_value=datetime(1980, 1, 1), timezones=st.timezones())
_awkward_instants = (
    _instants
    | st.datetimes(min_value=datetime(1, 1, 2), timezones=_odd_offsets)
    | st.datetimes(timezones=st.timezones())  # zones' early local mean times: odd offsets
    | st.datetimes(timezones=st.none())
    | st.just("2025-01-01T00:00:00Z")
)
_text = st.text(max_size=4)
_awkward_text = _text | st.just(Color.RED) | st.just(3)
_states = st.sampled_from(["pending", "submitted", "cancelled", "failed"])
_awkward_states = _states | st.just("done")


def _records(odd: str | None = None) -> st.SearchStrategy[CallRecord]:
    """Records as the core makes them; given ``odd``, with one awkward value at that slot."""

    def slot(name: str, plain: st.SearchStrategy[Any], awkward: st.SearchStrategy[Any]) -> Any:
        return awkward if name == odd else plain

    flags = st.booleans() | st.just(1)
    episode = st.builds(
        Episode,
        action_id=slot("episode.action_id", _text, _awkward_text),
        name=_text,
        input=slot("episode.input", _json, _awkward_json),
        suspended_at=slot("episode.suspended_at", _instants, _awkward_instants),
        state=slot("episode.state", _states, _awkward_states),
        resolved_at=st.none() | slot("episode.resolved_at", _instants, _awkward_instants),
        resume=slot("episode.resume", _json, _awkward_json),
        expires_at=st.none() | slot("episode.expires_at", _instants, _awkward_instants),
    )
    item = st.builds(
        DataItem,
        id=_text,
        value=slot("item.value", _json, _awkward_json),
        updated_at=slot("item.updated_at", _instants, _awkward_instants),
    )
    episodes = st.lists(episode, min_size=1 if odd and "episode" in odd else 0, max_size=3)
    data = st.dictionaries(
        slot("data.channel", _text, _awkward_text),
        st.lists(item, max_size=2).map(tuple),
        min_size=1 if odd and ("item" in odd or "data" in odd) else 0,
        max_size=2,
    )
    approval = st.builds(
        Approval,
        id=_text,
        requested_at=slot("approval.requested_at", _instants, _awkward_instants),
        state=_states,
        approved=st.none() | slot("approval.approved", st.booleans(), flags),
        reason=st.none() | slot("approval.reason", _text, _awkward_text),
        resolved_at=st.none() | _instants,
        expires_at=st.none() | slot("approval.expires_at", _instants, _awkward_instants),
    )
    cancelled = st.builds(
        Cancellation,
        reason=st.none() | _text,
        at=slot("cancelled.at", _instants, _awkward_instants),
    )
    return st.builds(
        CallRecord,
        name=slot("name", _text, _awkward_text),
        tool_call_id=_text,
        dynamic=slot("dynamic", st.booleans(), flags),
        phase=slot("phase", _phases, _phases | st.sampled_from(["waiting", Color.RED, Color.DONE])),
        input_text=slot("input_text", _text, _awkward_text),
        input=slot("input", _json, _awkward_json),
        raw_input=_json,
        finish=st.none() | slot("finish", _finishes, st.just("done")),
        output=slot("output", _json, _awkward_json),
        error_text=st.none() | slot("error_text", _text, _awkward_text),
        episodes=slot("episodes", episodes.map(tuple), episodes),  # a list for a tuple
        output_action=st.none() | slot("output_action", _states, _awkward_states),
        output_expires_at=st.none() | slot("output_expires_at", _instants, _awkward_instants),
        approval=slot("approval", st.none() | approval, approval),
        entry_started=st.booleans(),
        cancelled=slot("cancelled", st.none() | cancelled, cancelled),
        data=slot("data", data.map(frozen_mapping), data.map(dict) | data.map(list)),
        observed=slot("observed", st.booleans(), flags),
        sub_threads=slot(
            "sub_threads",
            st.lists(_text, max_size=3).map(tuple),
            st.lists(_text, max_size=2) | st.lists(_awkward_text, min_size=1).map(tuple),
        ),
        version=slot("version", st.just(1), st.sampled_from([2, True, 1.0])),
    )


_ODD_SLOTS = [
    "episode.action_id",
    "episode.input",
    "episode.suspended_at",
    "episode.state",
    "episode.resolved_at",
    "episode.resume",
    "episode.expires_at",
    "item.value",
    "item.updated_at",
    "data.channel",
    "approval.requested_at",
    "approval.approved",
    "approval.reason",
    "approval.expires_at",
    "cancelled.at",
    "name",
    "dynamic",
    "phase",
    "input_text",
    "input",
    "finish",
    "output",
    "error_text",
    "episodes",
    "output_action",
    "output_expires_at",
    "approval",
    "cancelled",
    "data",
    "observed",
    "sub_threads",
    "version",
]
_phases = st.sampled_from(
    [
        "streaming",
        "awaiting_approval",
        "executing",
        "suspended",
        "awaiting_output",
        "awaiting_agents",
        "done",
    ]
)
_finishes = st.sampled_from(["output-available", "output-error", "output-denied"])


@given(_records())
def test_a_record_of_the_core_is_dumped_as_its_shape_dumps_it(record: CallRecord) -> None:
    assert repr(_dump_call(record)) == repr(_the_shape_way(record)[1])  # the fast way, taken
    stored = StoredCall(thread_id="t", run_id="r", message_id="m", record=record)
    assert StoredCall.model_validate_json(stored.model_dump_json()).record == _roundtrip(record)


@given(st.sampled_from(_ODD_SLOTS).flatmap(_records))
def test_any_record_is_dumped_or_refused_as_its_shape_does(record: CallRecord) -> None:
    assert repr(_the_fast_way(record)) == repr(_the_shape_way(record))


def _roundtrip(record: CallRecord) -> CallRecord:
    return _CallShape.model_validate(_CallShape.of(record).model_dump(mode="json")).record()


@pytest.mark.parametrize(
    ("at", "text"),
    [
        (datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), "2025-01-02T03:04:05Z"),
        (datetime(2025, 1, 2, 3, 4, 5, 120000, tzinfo=UTC), "2025-01-02T03:04:05.120000Z"),
        (
            datetime(2025, 1, 2, 3, 4, 5, 1, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
            "2025-01-02T03:04:05.000001-05:30",
        ),
    ],
)
def test_instants_are_written_as_before(at: datetime, text: str) -> None:
    record = CallRecord(name="n", tool_call_id="c", cancelled=Cancellation(None, at))
    dumped: Any = _serialize_call(record)
    assert dumped["cancelled"] == {"reason": None, "at": text}
    assert repr(dumped) == repr(_the_shape_way(record)[1])


# The fast load: what the shape reads from the JSON of a stored record, built directly.


def _the_shape_load(value: Any) -> tuple[Any, ...]:
    """What ``_validate_call`` returned before its fast path: the value through the mirror."""
    try:
        return ("record", repr(_CallShape.model_validate(value).record()))
    except Exception as exc:
        return ("error", type(exc), str(exc))


def _the_fast_load(value: Any) -> tuple[Any, ...]:
    try:
        return ("record", repr(_validate_call(value)))
    except Exception as exc:
        return ("error", type(exc), str(exc))


def _stored_json(record: CallRecord) -> Any:
    """The record's part of a stored call, as JSON parsing gives it back."""
    stored = StoredCall(thread_id="t", run_id="r", message_id="m", record=record)
    return json.loads(stored.model_dump_json())["record"]


@given(_records())
def test_a_stored_record_is_loaded_as_its_shape_loads_it(record: CallRecord) -> None:
    value = _stored_json(record)
    loaded = _load_call(value)  # the fast way, taken
    old = _CallShape.model_validate(value).record()
    # ``repr`` tells apart what ``==`` does not: tuples and lists, 1 and 1.0 and True, the
    # tzinfo's type, a mapping proxy and a dict.
    assert loaded == old
    assert repr(loaded) == repr(old)
    assert repr(_dump_call(loaded)) == repr(_dump_call(old)) == repr(value)
    stored = StoredCall(thread_id="t", run_id="r", message_id="m", record=record)
    assert StoredCall.model_validate_json(stored.model_dump_json()).record == old


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every slot of a JSON value, each as the keys and indices that lead to it."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*path, index))
    return found


def _slots(value: Any) -> list[tuple[Any, ...]]:
    """The fields of a stored record, nested ones too: the places a stored value can be odd."""
    found: list[tuple[Any, ...]] = [(), *((key,) for key in value)]
    for index, episode in enumerate(value["episodes"]):
        found += [("episodes", index, key) for key in episode]
    for name in ("approval", "cancelled"):
        if value[name] is not None:
            found += [(name, key) for key in value[name]]
    for channel, items in value["data"].items():
        found.append(("data", channel))
        for index, item in enumerate(items):
            found += [("data", channel, index, key) for key in item]
    return found


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


_instant_texts = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.none() | _whole_minutes | _odd_offsets,
).flatmap(
    lambda at: st.sampled_from(
        [
            at.isoformat(),
            at.isoformat(sep=" "),
            at.isoformat(timespec="microseconds"),
            at.isoformat(timespec="milliseconds"),
            at.isoformat(timespec="minutes"),
            at.isoformat().replace("+00:00", "Z"),
            at.isoformat().replace("+00:00", "-00:00"),
            at.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        ]
    )
)
_odd_values = (
    _json
    | _instant_texts
    | st.text(max_size=30)
    | st.sampled_from(
        [
            (),
            (1,),
            {"k": (1,)},
            1.0,
            -1,
            MAX_SAFE_INTEGER + 1,
            math.nan,
            math.inf,
            "\udc00",
            {"\ud800": 1},
            ["x\ud800"],
            _nested(70),
            "pending",
            "done",
            "output-available",
            Color.RED,
            Color.DONE,
            "2025-01-01T00:00:00Z",
            "2025-01-01T00:00:00.000000Z",
            "2025-01-01T00:00:00+00:00",
            "2025-02-30T00:00:00Z",
            "2025-01-01T24:00:00Z",
            "2025-01-01T23:59:60Z",
            "2025-01-01T00:00:00+24:00",
            "0000-01-01T00:00:00Z",
            "2025-01-01T00:00:00.5Z",
            "\uff12025-01-01T00:00:00Z",  # a fullwidth digit
            "20250101T000000Z",
            "2025-01-01",
            0,
            1_700_000_000,
            datetime(2025, 1, 1, tzinfo=UTC),
            datetime(2025, 1, 1),
        ]
    )
)


@given(_records(), st.data())
def test_any_stored_value_is_loaded_or_refused_as_its_shape_does(
    record: CallRecord, data: st.DataObject
) -> None:
    """One odd value at any slot, and the result, or the error, is the shape's."""
    value = _stored_json(record)
    path = data.draw(st.sampled_from(_slots(value)), label="slot")
    inner = _at(value, path)
    if isinstance(inner, dict | list) and data.draw(st.booleans(), label="deeper"):
        path += data.draw(st.sampled_from(_paths(inner)), label="path inside")
    odd = data.draw(_odd_values | st.just([value]), label="odd")
    if path:
        *parents, last = path
        value = copy.deepcopy(value)
        parent = value
        for key in parents:
            parent = parent[key]
        parent[last], odd = odd, value
    assert _the_fast_load(odd) == _the_shape_load(odd)


@given(_records(), st.data())
def test_a_stored_object_with_a_key_missing_or_added_is_loaded_as_its_shape_loads_it(
    record: CallRecord, data: st.DataObject
) -> None:
    """Records of older versions may omit keys: the shape judges what they mean."""
    value = copy.deepcopy(_stored_json(record))
    objects = [path for path in _paths(value) if isinstance(_at(value, path), dict)]
    found = _at(value, data.draw(st.sampled_from(objects), label="object"))
    key = data.draw(st.sampled_from(sorted(found) or [""]) | st.text(max_size=12), label="key")
    if key in found and data.draw(st.booleans(), label="delete"):
        del found[key]
    else:
        found[data.draw(st.text(max_size=12) | st.just(1), label="new key")] = found.pop(key, None)
    assert _the_fast_load(value) == _the_shape_load(value)


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


@given(_records())
def test_a_record_stored_before_deadlines_is_read_fast_with_none(record: CallRecord) -> None:
    """Records written before the ``expires_at`` keys existed lack them: the fast load reads
    them (no deadline), exactly as the shape does."""
    value = _stored_json(record)
    del value["output_expires_at"]
    del value["sub_threads"]  # (added later still)
    for episode in value["episodes"]:
        del episode["expires_at"]
    if value["approval"] is not None:
        del value["approval"]["expires_at"]
    loaded = _load_call(value)  # the fast way, taken
    assert repr(loaded) == _the_shape_load(value)[1]
    assert loaded.output_expires_at is None
    assert all(e.expires_at is None for e in loaded.episodes)
    assert loaded.approval is None or loaded.approval.expires_at is None


@given(_records())
def test_a_record_stored_before_sub_agents_is_read_fast_with_none(record: CallRecord) -> None:
    """Records written before ``sub_threads`` existed lack it: the fast load reads them (no
    sub-agent run), exactly as the shape does."""
    value = _stored_json(record)
    del value["sub_threads"]
    loaded = _load_call(value)  # the fast way, taken
    assert repr(loaded) == _the_shape_load(value)[1]
    assert loaded.sub_threads == ()


@given(_instant_texts | _odd_values)
def test_any_stored_instant_is_loaded_or_refused_as_its_shape_does(odd: Any) -> None:
    value = _stored_json(CallRecord(name="n", tool_call_id="c"))
    value["cancelled"] = {"reason": None, "at": odd}
    assert _the_fast_load(value) == _the_shape_load(value)


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("2025-01-02T03:04:05Z", datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2025-01-02T03:04:05.120000Z", datetime(2025, 1, 2, 3, 4, 5, 120000, tzinfo=UTC)),
        (
            "2025-01-02T03:04:05.000001-05:30",
            datetime(2025, 1, 2, 3, 4, 5, 1, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        ),
    ],
)
def test_instants_are_read_as_before(text: str, at: datetime) -> None:
    value = _stored_json(CallRecord(name="n", tool_call_id="c"))
    value["cancelled"] = {"reason": None, "at": text}
    loaded = _load_call(value)
    assert loaded.cancelled is not None
    assert loaded.cancelled.at == at
    assert repr(loaded) == _the_shape_load(value)[1]


def test_updated_makes_what_model_copy_makes_and_leaves_the_model_as_it_was() -> None:
    run = RunRecord(
        thread_id="t", run_id="r", status="running", created_at=datetime(2025, 1, 2, tzinfo=UTC)
    )
    for model, update in [
        (run, {"revision": 1}),  # a field not set before: now set
        (run, {"status": "waiting", "error": None}),
        (Message(id="m", role="user", parts=(TextPart(text="a"),)), {"parts": ()}),
    ]:
        made, expected = updated(model, **update), model.model_copy(update=update)
        assert made == expected
        assert type(made) is type(expected)
        assert made.model_fields_set == expected.model_fields_set
        assert made.model_dump_json() == expected.model_dump_json()
        for name, value in update.items():
            assert getattr(made, name) == value
        assert model.model_fields_set <= made.model_fields_set
    # Revisions adding the same fields share one set (a frozen model never changes it).
    assert updated(run, revision=1).model_fields_set is updated(run, revision=2).model_fields_set
    assert updated(run, revision=1).model_fields_set == run.model_fields_set | {"revision"}
    assert (run.revision, run.status, run.model_fields_set) == (
        0,
        "running",
        {"thread_id", "run_id", "status", "created_at"},
    )


def test_trusted_instances_share_one_set_of_fields_which_is_all_of_them() -> None:
    first, second = TextPart.trusted(type="text", text="a"), TextPart.trusted(type="text", text="b")
    assert first.model_fields_set is second.model_fields_set  # one set for the class
    assert first.model_fields_set == set(TextPart.model_fields) == {"type", "text"}
    for copied in [
        first.model_copy(update={"text": "c"}),
        copy.copy(first),
        copy.deepcopy(first),
        updated(first, text="d"),
    ]:
        assert copied.model_fields_set == {"type", "text"}
        assert copied.model_dump(exclude_unset=True) == {"type": "text", "text": copied.text}
    assert second.model_fields_set == {"type", "text"}
    assert second.model_dump(exclude_unset=True) == {"type": "text", "text": "b"}


def test_validated_models_given_a_shared_set_of_fields_keep_what_they_had_set() -> None:
    at = datetime(2025, 1, 2, tzinfo=UTC)
    first = RunRecord(thread_id="t", run_id="r1", status="running", created_at=at)
    own = first.model_fields_set
    assert shared_fields_set(first) is first
    second = shared_fields_set(
        RunRecord(thread_id="t", run_id="r2", status="running", created_at=at)
    )
    assert first.model_fields_set is second.model_fields_set  # one set for that content
    assert first.model_fields_set == own == {"thread_id", "run_id", "status", "created_at"}
    assert first.model_fields_set is not own
    # other content, another set; and what is dumped or copied is as before
    third = shared_fields_set(
        RunRecord(thread_id="t", run_id="r3", status="running", created_at=at, revision=0)
    )
    assert third.model_fields_set == own | {"revision"}
    assert first.model_dump(exclude_unset=True) == {
        "thread_id": "t",
        "run_id": "r1",
        "status": "running",
        "created_at": at,
    }
    assert updated(first, revision=1).model_fields_set == own | {"revision"}
    assert first.model_fields_set == own  # (updated made its own, it changed none)


async def test_the_records_of_send_and_create_thread_share_their_sets_of_fields() -> None:
    store = MemoryStore()
    written: list[Write] = []
    commit = store.commit

    async def spying(writes: Sequence[Write]) -> None:
        written.extend(writes)
        await commit(writes)

    store.commit = spying  # type: ignore[method-assign]
    agent = define_agent(name="a", tools={}, model=ScriptedModel([text("done")] * 2))
    async with create_agent_runtime(agent, store=store) as rt:
        for _ in range(2):
            thread_id = await rt.create_thread(scope_key="s")
            await rt.send(thread_id, "hello")
            await rt.wait_idle(thread_id)
    threads = [w.thread for w in written if isinstance(w, CreateThread)]
    messages = [
        w.message for w in written if isinstance(w, AppendMessage) and w.message.role == "user"
    ]
    runs = [w.run for w in written if isinstance(w, PutRun) and w.run.revision == 0]
    for made in threads, messages, runs, [m.parts[0] for m in messages]:
        assert len(made) == 2
        assert made[0].model_fields_set is made[1].model_fields_set
    assert messages[0].model_fields_set == {"id", "role", "parts"}


def test_a_stored_call_dumped_in_python_mode_hands_out_no_value_of_its_record() -> None:
    record = replace(
        CallRecord(name="t", tool_call_id="c1"),
        phase="done",
        finish="output-available",
        input={"order": [1, 2]},
        output={"refunded": {"cents": 5}},
    )
    call = StoredCall(thread_id="t", run_id="r", message_id="m", record=record)
    dumped = call.model_dump()["record"]
    assert (dumped["input"], dumped["output"]) == (record.input, record.output)
    dumped["input"]["order"].append(3)
    dumped["output"]["refunded"]["cents"] = 6
    assert (record.input, record.output) == ({"order": [1, 2]}, {"refunded": {"cents": 5}})
