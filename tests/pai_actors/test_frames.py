"""The client protocol's frames: every request parses, every bad frame gets its error code.

``parse_request`` is the server's whole defence against what a client sends, so besides the
examples a Hypothesis test feeds it arbitrary text, arbitrary JSON and mutations of valid
frames: it returns a request or raises :class:`FrameError`, never anything else, and the
error it raises can always be sent back as a text frame.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pai_actors import ActionResult, PendingActionRef
from pai_actors._core.json import JsonValue
from pai_actors._protocol.frames import (
    OPS,
    PROTOCOL_VERSION,
    CancelActionRequest,
    CancelRunRequest,
    ClientToolSpec,
    CreateThreadRequest,
    Cursor,
    FailActionRequest,
    FrameError,
    GetStateRequest,
    ListPendingActionsRequest,
    ReadFileRequest,
    SendRequest,
    SubmitActionRequest,
    UnwatchRequest,
    WatchRequest,
    action_result_wire,
    action_wire,
    encode,
    error_frame,
    parse_request,
    result_frame,
    snapshot_frame,
    update_frame,
    watch_ended_frame,
)

REF_WIRE: dict[str, Any] = {
    "kind": "tool",
    "threadId": "thread_1",
    "toolName": "ask",
    "suspendName": "approval",
    "messageId": "msg_2",
    "toolCallId": "call_1",
    "runId": "run_1",
    "actionId": "act_1",
    "name": "ask.approval",
}
REF = PendingActionRef(
    thread_id="thread_1",
    tool_name="ask",
    suspend_name="approval",
    message_id="msg_2",
    tool_call_id="call_1",
    run_id="run_1",
    action_id="act_1",
    name="ask.approval",
)

# One frame per op with every field set (camelCase, as a client sends it), and what it reads as.
FULL: dict[str, tuple[dict[str, Any], Any]] = {
    "createThread": (
        {"v": 1, "id": 1, "op": "createThread"},
        CreateThreadRequest(v=1, id=1, op="createThread"),
    ),
    "send": (
        {
            "v": 1,
            "id": 2,
            "op": "send",
            "threadId": "thread_1",
            "text": "héllo",
            "clientData": {"page": ["a", 1, None, True, 1.5]},
            "clientTools": [
                {
                    "name": "pickColor",
                    "description": "Let the user pick a color.",
                    "inputSchema": {"type": "object"},
                },
                {"name": "bare"},
            ],
        },
        SendRequest(
            v=1,
            id=2,
            op="send",
            thread_id="thread_1",
            text="héllo",
            client_data={"page": ["a", 1, None, True, 1.5]},
            client_tools=(
                ClientToolSpec(
                    name="pickColor",
                    description="Let the user pick a color.",
                    input_schema={"type": "object"},
                ),
                ClientToolSpec(name="bare"),
            ),
        ),
    ),
    "getState": (
        {"v": 1, "id": 3, "op": "getState", "threadId": "t"},
        GetStateRequest(v=1, id=3, op="getState", thread_id="t"),
    ),
    "watch": (
        {"v": 1, "id": 4, "op": "watch", "threadId": "t", "cursor": {"epoch": "s.1", "seq": 7}},
        WatchRequest(v=1, id=4, op="watch", thread_id="t", cursor=Cursor(epoch="s.1", seq=7)),
    ),
    "unwatch": (
        {"v": 1, "id": 5, "op": "unwatch", "threadId": "t"},
        UnwatchRequest(v=1, id=5, op="unwatch", thread_id="t"),
    ),
    "listPendingActions": (
        {"v": 1, "id": 6, "op": "listPendingActions", "threadId": "t"},
        ListPendingActionsRequest(v=1, id=6, op="listPendingActions", thread_id="t"),
    ),
    "submitAction": (
        {"v": 1, "id": 7, "op": "submitAction", "ref": REF_WIRE, "payload": {"approved": True}},
        SubmitActionRequest(v=1, id=7, op="submitAction", ref=REF, payload={"approved": True}),
    ),
    "cancelAction": (
        {"v": 1, "id": 8, "op": "cancelAction", "ref": REF_WIRE, "reason": "changed my mind"},
        CancelActionRequest(v=1, id=8, op="cancelAction", ref=REF, reason="changed my mind"),
    ),
    "failAction": (
        {"v": 1, "id": 9, "op": "failAction", "ref": REF_WIRE, "error": "no camera"},
        FailActionRequest(v=1, id=9, op="failAction", ref=REF, error="no camera"),
    ),
    "cancelRun": (
        {"v": 1, "id": 10, "op": "cancelRun", "runId": "run_1", "reason": "stop"},
        CancelRunRequest(v=1, id=10, op="cancelRun", run_id="run_1", reason="stop"),
    ),
    "readFile": (
        {"v": 1, "id": 2**53 - 1, "op": "readFile", "fileId": "file_1"},
        ReadFileRequest(v=1, id=2**53 - 1, op="readFile", file_id="file_1"),
    ),
}

# The same with only the required fields: the rest take their defaults.
MINIMAL: dict[str, tuple[dict[str, Any], Any]] = {
    "send": (
        {"v": 1, "id": 0, "op": "send", "threadId": "t", "text": ""},
        SendRequest(
            v=1, id=0, op="send", thread_id="t", text="", client_data=None, client_tools=()
        ),
    ),
    "watch": (
        {"v": 1, "id": 0, "op": "watch", "threadId": "t"},
        WatchRequest(v=1, id=0, op="watch", thread_id="t", cursor=None),
    ),
    "listPendingActions": (
        {"v": 1, "id": 0, "op": "listPendingActions"},
        ListPendingActionsRequest(v=1, id=0, op="listPendingActions", thread_id=None),
    ),
    "submitAction": (
        {
            "v": 1,
            "id": 0,
            "op": "submitAction",
            "ref": {k: v for k, v in REF_WIRE.items() if k != "suspendName"},
        },
        SubmitActionRequest(
            v=1,
            id=0,
            op="submitAction",
            ref=REF.model_copy(update={"suspend_name": None}),
            payload=None,
        ),
    ),
    "cancelAction": (
        {"v": 1, "id": 0, "op": "cancelAction", "ref": REF_WIRE},
        CancelActionRequest(v=1, id=0, op="cancelAction", ref=REF, reason=None),
    ),
    "cancelRun": (
        {"v": 1, "id": 0, "op": "cancelRun", "runId": "r"},
        CancelRunRequest(v=1, id=0, op="cancelRun", run_id="r", reason=None),
    ),
}


def parse(frame: object) -> Any:
    return parse_request(json.dumps(frame))


def refused(frame: object) -> FrameError:
    """The error ``frame`` (a JSON value, sent as its JSON text) is refused with."""
    return refused_text(json.dumps(frame))


def refused_text(text: str | bytes) -> FrameError:
    with pytest.raises(FrameError) as info:
        parse_request(text)
    error = info.value
    assert str(error) == error.message
    return error


# -- every op parses ------------------------------------------------------------------------


def test_every_op_has_an_example_and_a_model() -> None:
    assert set(FULL) == set(OPS)
    assert len(OPS) == len(set(OPS))


@pytest.mark.parametrize("op", list(FULL))
def test_a_full_frame_of_each_op_parses_with_its_camelcase_fields(op: str) -> None:
    frame, expected = FULL[op]
    request = parse(frame)
    assert type(request) is type(expected)
    assert request == expected
    assert (request.v, request.op) == (PROTOCOL_VERSION, op)


@pytest.mark.parametrize("op", list(MINIMAL))
def test_optional_fields_take_their_defaults(op: str) -> None:
    frame, expected = MINIMAL[op]
    assert parse(frame) == expected


def test_the_frame_may_be_surrounded_by_whitespace_and_keys_in_any_order() -> None:
    frame, expected = FULL["getState"]
    text = "\n " + json.dumps(dict(reversed(frame.items()))) + " \t"
    assert parse_request(text) == expected


def test_a_request_is_frozen() -> None:
    request = parse(FULL["getState"][0])
    with pytest.raises(ValueError, match="frozen"):
        request.thread_id = "other"


# -- what is wrong with a frame ---------------------------------------------------------------


def test_a_binary_message_is_a_bad_frame() -> None:
    error = refused_text(json.dumps(FULL["createThread"][0]).encode())
    assert (error.code, error.request_id) == ("bad-frame", None)
    assert "binary" in error.message


@pytest.mark.parametrize("text", ["", "{", "not json", "{'v': 1}", '{"v": 1,}', "[1] 2"])
def test_text_that_is_not_json_is_a_bad_frame(text: str) -> None:
    error = refused_text(text)
    assert (error.code, error.request_id) == ("bad-frame", None)
    assert "not JSON" in error.message


def test_json_nested_too_deeply_to_read_is_a_bad_frame() -> None:
    error = refused_text("[" * 100_000 + "]" * 100_000)
    assert (error.code, error.request_id) == ("bad-frame", None)
    assert "nested too deeply" in error.message
    deep = '{"v": 1, "id": 3, "op": "send", "threadId": "t", "text": "x", "clientData": %s}'
    error = refused_text(deep % ("[" * 50_000 + "]" * 50_000))
    assert error.code == "bad-frame"


@pytest.mark.parametrize(
    ("value", "kind"),
    [([], "list"), ("frame", "str"), (1, "int"), (None, "NoneType"), (True, "bool")],
)
def test_a_frame_that_is_not_a_json_object_is_a_bad_frame(value: object, kind: str) -> None:
    error = refused(value)
    assert (error.code, error.request_id) == ("bad-frame", None)
    assert error.message == f"a frame is a JSON object, got {kind}"


@pytest.mark.parametrize(
    "request_id", ["missing", None, -1, 2**53, True, False, 1.0, 1.5, "1", [1], {"id": 1}]
)
def test_a_frame_without_a_non_negative_integer_id_is_a_bad_frame(request_id: object) -> None:
    frame: dict[str, Any] = {"v": 1, "op": "createThread"}
    if request_id != "missing":
        frame["id"] = request_id
    error = refused(frame)
    assert (error.code, error.request_id) == ("bad-frame", None)
    shown = None if request_id == "missing" else request_id
    assert error.message == (
        f"a request needs an 'id' that is an integer from 0 to 2**53 - 1, got {shown!r}"
    )


@pytest.mark.parametrize("version", ["missing", None, 0, 2, "1", True, 1.0, [1]])
def test_a_frame_of_another_version_is_unsupported(version: object) -> None:
    frame: dict[str, Any] = {"id": 12, "op": "createThread"}
    if version != "missing":
        frame["v"] = version
    error = refused(frame)
    assert (error.code, error.request_id) == ("unsupported-version", 12)
    shown = None if version == "missing" else version
    assert f"the frame says 'v': {shown!r}; send 'v': 1" in error.message


def test_the_id_is_checked_before_the_version() -> None:
    assert refused({"v": 2, "op": "createThread"}).code == "bad-frame"


@pytest.mark.parametrize("op", ["missing", None, "", "CreateThread", "create_thread", 1, ["send"]])
def test_an_unknown_op_names_the_ops_there_are(op: object) -> None:
    frame: dict[str, Any] = {"v": 1, "id": 5}
    if op != "missing":
        frame["op"] = op
    error = refused(frame)
    assert (error.code, error.request_id) == ("unknown-op", 5)
    shown = None if op == "missing" else op
    assert error.message == f"unknown op {shown!r}; use one of {', '.join(OPS)}"


def _with(frame: dict[str, Any], path: tuple[str, ...], value: object) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(frame))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


SCOPE_PLACES = [(op, ("scopeKey",)) for op in OPS] + [
    ("submitAction", ("ref", "scopeKey")),
    ("cancelAction", ("ref", "scopeKey")),
    ("failAction", ("ref", "scopeKey")),
    ("watch", ("cursor", "scopeKey")),
    ("send", ("clientTools", "0", "scopeKey")),
]


@pytest.mark.parametrize(("op", "path"), SCOPE_PLACES)
def test_no_frame_can_name_a_scope(op: str, path: tuple[str, ...]) -> None:
    frame = json.loads(json.dumps(FULL[op][0]))
    if path[:2] == ("clientTools", "0"):
        frame["clientTools"][0]["scopeKey"] = "acme"
    else:
        frame = _with(frame, path, "acme")
    error = refused(frame)
    assert (error.code, error.request_id) == ("invalid-request", frame["id"])
    where = ".".join(path)
    assert error.message == f"invalid {op!r} request: {where}: Extra inputs are not permitted"


@pytest.mark.parametrize(
    ("op", "path", "value", "expected"),
    [
        ("send", ("threadId",), 1, "threadId: Input should be a valid string"),
        ("send", ("text",), None, "text: Input should be a valid string"),
        ("send", ("clientTools",), {"name": "x"}, "clientTools: Input should be a valid tuple"),
        ("send", ("clientTools",), [{"description": "no name"}], "clientTools.0.name: Field"),
        ("send", ("clientData",), 2**60, "clientData: 1152921504606846976 is beyond"),
        ("watch", ("cursor",), "s.1:7", "cursor: Input should be a valid dictionary"),
        ("watch", ("cursor", "seq"), -1, "cursor.seq: Input should be greater than or equal"),
        ("watch", ("cursor", "seq"), "7", "cursor.seq: Input should be a valid integer"),
        ("watch", ("cursor", "seq"), 7.0, "cursor.seq: Input should be a valid integer"),
        ("watch", ("cursor", "seq"), True, "cursor.seq: Input should be a valid integer"),
        ("submitAction", ("ref", "kind"), "agent", "ref.kind: Input should be 'tool'"),
        ("submitAction", ("ref", "runId"), None, "ref.runId: Input should be a valid string"),
        ("failAction", ("error",), None, "error: Input should be a valid string"),
        ("cancelRun", ("reason",), 3, "reason: Input should be a valid string"),
        ("readFile", ("fileId",), ["f"], "fileId: Input should be a valid string"),
    ],
)
def test_a_field_of_the_wrong_type_is_an_invalid_request_naming_the_field(
    op: str, path: tuple[str, ...], value: object, expected: str
) -> None:
    frame = _with(FULL[op][0], path, value)
    error = refused(frame)
    assert (error.code, error.request_id) == ("invalid-request", frame["id"])
    assert error.message.startswith(f"invalid {op!r} request: {expected}"), error.message


@pytest.mark.parametrize(
    ("op", "missing"),
    [
        ("send", "threadId"),
        ("send", "text"),
        ("getState", "threadId"),
        ("submitAction", "ref"),
        ("failAction", "error"),
        ("cancelRun", "runId"),
        ("readFile", "fileId"),
    ],
)
def test_a_missing_field_is_an_invalid_request_naming_it(op: str, missing: str) -> None:
    frame = dict(FULL[op][0])
    del frame[missing]
    error = refused(frame)
    assert (error.code, error.request_id) == ("invalid-request", frame["id"])
    assert f"{missing}: Field required" in error.message


@pytest.mark.parametrize("op", ["submitAction", "cancelAction", "failAction"])
def test_a_ref_without_its_kind_is_an_invalid_request_naming_it(op: str) -> None:
    # A ref goes back as the server sent it, "kind" included; the runtime's own refs may
    # leave it out (it has one value), a client's may not.
    frame = json.loads(json.dumps(FULL[op][0]))
    del frame["ref"]["kind"]
    error = refused(frame)
    assert (error.code, error.request_id) == ("invalid-request", frame["id"])
    assert error.message == f"invalid {op!r} request: ref.kind: Field required"


SAFE = 2**53 - 1


@pytest.mark.parametrize(
    ("op", "path", "value"),
    [
        ("watch", ("cursor", "seq"), SAFE + 1),
        ("watch", ("cursor", "seq"), 2**64),
        ("watch", ("cursor", "seq"), -SAFE - 1),
        ("send", ("clientData",), {"page": [1, 2**60]}),
        ("send", ("clientTools",), [{"name": "x", "inputSchema": {"maximum": SAFE + 1}}]),
        ("submitAction", ("payload",), {"approved": True, "count": -(2**70)}),
    ],
)
def test_an_integer_beyond_the_safe_range_is_an_invalid_request_naming_the_field(
    op: str, path: tuple[str, ...], value: object
) -> None:
    # A JavaScript client reads such a number rounded (2**53 + 1 as 2**53); the server would
    # act on a number the client did not mean. Wherever it is, the frame is refused.
    frame = _with(FULL[op][0], path, value)
    error = refused(frame)
    assert (error.code, error.request_id) == ("invalid-request", frame["id"])
    where, number = {
        ("cursor", "seq"): ("cursor.seq", value),
        ("clientData",): ("clientData.page.1", 2**60),
        ("clientTools",): ("clientTools.0.inputSchema.maximum", SAFE + 1),
        ("payload",): ("payload.count", -(2**70)),
    }[path]
    assert error.message == (
        f"invalid {op!r} request: {where}: {number} is beyond ±(2**53 - 1), the integers "
        "every JSON reader holds exactly; send a number within that range"
    )


def test_the_largest_safe_integers_are_taken() -> None:
    frame = _with(FULL["watch"][0], ("cursor", "seq"), SAFE)
    assert parse(frame).cursor == Cursor(epoch="s.1", seq=SAFE)
    frame = _with(FULL["send"][0], ("clientData",), [SAFE, -SAFE, 1e300])
    assert parse(frame).client_data == [SAFE, -SAFE, 1e300]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"v": 1, "id": 3, "op": "getState", "threadId": "a", "threadId": "b"}', "threadId"),
        ('{"v": 1, "id": 3, "op": "getState", "threadId": "a", "threadId": "a"}', "threadId"),
        ('{"v": 1, "v": 1, "id": 3, "op": "getState", "threadId": "a"}', "v"),
        ('{"v": 1, "id": 3, "op": "unwatch", "op": "getState", "threadId": "a"}', "op"),
        (
            '{"v": 1, "id": 3, "op": "watch", "threadId": "t",'
            ' "cursor": {"epoch": "s.1", "seq": 0, "seq": 7}}',
            "cursor.seq",
        ),
        (
            '{"v": 1, "id": 3, "op": "send", "threadId": "t", "text": "x",'
            ' "clientTools": [{"name": "a"}, {"name": "b", "name": "c"}]}',
            "clientTools.1.name",
        ),
        (
            '{"v": 1, "id": 3, "op": "send", "threadId": "t", "text": "x",'
            ' "clientData": {"a": [{"b": {"c": 1, "c": 2}}]}}',
            "clientData.a.0.b.c",
        ),
    ],
)
def test_a_key_given_twice_is_an_invalid_request_naming_it(text: str, where: str) -> None:
    # json.loads would keep the last of the two; another reader may keep the first, so the
    # server would act on a frame the client's own code reads differently.
    error = refused_text(text)
    assert (error.code, error.request_id) == ("invalid-request", 3)
    key = where.rsplit(".", 1)[-1]
    assert error.message == (
        f"invalid {json.loads(text)['op']!r} request: {where}: the key {key!r} appears more "
        "than once in its object; send each key once"
    )


def test_a_ref_with_a_key_given_twice_is_refused() -> None:
    ref = json.dumps(REF_WIRE)
    text = '{"v": 1, "id": 4, "op": "submitAction", "ref": %s, "payload": null}'
    twice = ref[:-1] + ', "actionId": "act_2"}'
    error = refused_text(text % twice)
    assert (error.code, error.request_id) == ("invalid-request", 4)
    assert error.message.startswith("invalid 'submitAction' request: ref.actionId: the key")
    request = parse_request(text % ref)  # the same frame with each key once
    assert type(request.ref) is PendingActionRef  # the runtime's ref, not the reader's
    assert request.ref == REF


def test_a_frame_with_two_ids_is_a_bad_frame() -> None:
    error = refused_text('{"v": 1, "id": 1, "id": 2, "op": "createThread"}')
    assert (error.code, error.request_id) == ("bad-frame", None)
    assert error.message == ("a request needs one 'id'; this frame has the key 'id' more than once")


def test_every_problem_of_a_frame_is_listed() -> None:
    frame = {"v": 1, "id": 1, "op": "send", "threadId": 2, "scopeKey": "x"}
    error = refused(frame)
    assert error.message == (
        "invalid 'send' request: threadId: Input should be a valid string; "
        "text: Field required; scopeKey: Extra inputs are not permitted"
    )


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("text",), "a\ud800b"),
        (("threadId",), "\udfff"),
        (("clientData",), {"k": ["\ud83d"]}),
        (("clientData",), {"\ud800": 1}),
        (("clientTools",), [{"name": "x", "description": "\udc00"}]),
    ],
)
def test_a_string_with_a_lone_surrogate_is_an_invalid_request(
    path: tuple[str, ...], value: object
) -> None:
    # JSON can escape half a surrogate pair; such a string cannot be encoded as UTF-8, so it
    # could be neither stored nor sent back to any watcher in a text frame.
    frame = _with(FULL["send"][0], path, value)
    error = refused(frame)
    assert (error.code, error.request_id) == ("invalid-request", 2)
    assert "lone surrogate" in error.message
    error.message.encode("utf-8")
    assert parse(_with(FULL["send"][0], ("text",), "\ud83d\ude00")).text == "\U0001f600"


def test_a_frame_error_carries_its_code_message_and_request_id() -> None:
    error = FrameError("not-found", "no thread 't'", 3)
    assert (error.code, error.message, error.request_id, str(error)) == (
        "not-found",
        "no thread 't'",
        3,
        "no thread 't'",
    )
    assert FrameError("bad-frame", "x").request_id is None


# -- the fuzz test ----------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.sampled_from([*OPS, "thread_1", "scopeKey"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    sorted({key for frame, _ in FULL.values() for key in frame} | {*REF_WIRE, "scopeKey"})
)


@st.composite
def mutated_frames(draw: st.DrawFn) -> str:
    """A valid frame with a few of its fields, anywhere in it, removed, added or changed."""
    frame = json.loads(json.dumps(draw(st.sampled_from([f for f, _ in FULL.values()]))))
    for _ in range(draw(st.integers(1, 3))):
        objects = [frame] + [v for v in frame.values() if isinstance(v, dict)]
        tools = frame.get("clientTools")  # an earlier mutation may have replaced it
        if isinstance(tools, list):
            objects += [t for t in tools if isinstance(t, dict)]
        target = draw(st.sampled_from(objects))
        action = draw(st.sampled_from(["delete", "set", "add"]))
        if action == "delete" and target:
            del target[draw(st.sampled_from(sorted(target)))]
        elif action == "set" and target:
            target[draw(st.sampled_from(sorted(target)))] = draw(JSON_VALUES)
        else:
            target[draw(KEYS | st.text(max_size=8))] = draw(JSON_VALUES)
    return json.dumps(frame, ensure_ascii=draw(st.booleans()))


REQUEST_TYPES = tuple(type(expected) for _, expected in FULL.values())


@given(
    st.text()
    | st.binary()
    | JSON_VALUES.map(json.dumps)
    | st.dictionaries(KEYS, JSON_VALUES).map(json.dumps)
    | mutated_frames()
)
def test_parse_request_returns_a_request_or_raises_frame_error(text: str | bytes) -> None:
    try:
        outcome: Any = parse_request(text)
    except FrameError as error:  # anything else fails the test
        outcome = error
    raw = None if isinstance(text, bytes) else _loads(text)
    if isinstance(outcome, FrameError):
        assert outcome.code in ("bad-frame", "unsupported-version", "unknown-op", "invalid-request")
        assert outcome.message
        if outcome.code == "bad-frame":
            assert outcome.request_id is None
        else:
            assert isinstance(raw, dict)
            assert outcome.request_id == raw["id"]
        # The error can always be sent back to the client.
        encode(error_frame(outcome.code, outcome.message, outcome.request_id)).encode("utf-8")
    else:
        assert isinstance(outcome, REQUEST_TYPES)
        assert isinstance(raw, dict)
        assert (outcome.v, outcome.id, outcome.op) == (1, raw["id"], raw["op"])
        # What a request holds can be sent back: its wire dump is valid UTF-8 JSON.
        json.dumps(outcome.model_dump(mode="json", by_alias=True), ensure_ascii=False).encode()


def _loads(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


# -- server frames ----------------------------------------------------------------------------


def test_result_and_error_frames() -> None:
    assert result_frame(4, {"threadId": "t"}) == {
        "v": 1,
        "type": "result",
        "id": 4,
        "result": {"threadId": "t"},
    }
    assert error_frame("not-found", "no thread 't'", None) == {
        "v": 1,
        "type": "error",
        "id": None,
        "code": "not-found",
        "message": "no thread 't'",
    }


def test_snapshot_and_update_frames_carry_the_cursor() -> None:
    cursor = Cursor(epoch="s.1", seq=3)
    state: dict[str, JsonValue] = {"version": 1, "threadId": "t", "messages": [], "runs": []}
    assert snapshot_frame("t", cursor, state, []) == {
        "v": 1,
        "type": "snapshot",
        "threadId": "t",
        "cursor": {"epoch": "s.1", "seq": 3},
        "state": state,
        "pendingActions": [],
    }
    run: dict[str, JsonValue] = {
        "type": "run-status",
        "threadId": "t",
        "run": {"runId": "r", "status": "running"},
    }
    assert update_frame("t", cursor, run, {"ignored": True}) == {
        "v": 1,
        "type": "update",
        "threadId": "t",
        "cursor": {"epoch": "s.1", "seq": 3},
        "update": run,
    }


def test_a_tool_part_update_always_says_which_action_its_part_shows() -> None:
    cursor = Cursor(epoch="e", seq=1)
    update: dict[str, Any] = {"type": "tool-part-updated", "threadId": "t", "messageId": "m"}
    assert update_frame("t", cursor, update)["pendingAction"] is None
    action = action_wire("ask.approval", {"n": 1}, REF, {"type": "object"})
    assert action == {
        "name": "ask.approval",
        "input": {"n": 1},
        "ref": REF_WIRE,
        "resumeSchema": {"type": "object"},
        "expiresAt": None,  # no deadline
    }
    assert update_frame("t", cursor, update, action)["pendingAction"] == action
    at = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)
    expiring = action_wire("ask.approval", {"n": 1}, REF, {"type": "object"}, at)
    assert expiring["expiresAt"] == "2026-01-01T12:30:00Z"


def test_a_message_update_says_which_action_each_of_its_tool_parts_shows() -> None:
    cursor = Cursor(epoch="e", seq=2)
    action = action_wire("pickColor", {"hint": "warm"}, REF, None)
    for kind in ("message-appended", "message-replaced"):
        update: dict[str, Any] = {"type": kind, "threadId": "t", "message": {"id": "m"}}
        frame = update_frame("t", cursor, update, None, {"call_1": action, "call_2": None})
        assert frame["pendingActions"] == {"call_1": action, "call_2": None}
        assert "pendingAction" not in frame
        assert update_frame("t", cursor, update)["pendingActions"] == {}
    run: dict[str, Any] = {"type": "run-status", "threadId": "t", "run": {}}
    assert "pendingActions" not in update_frame("t", cursor, run)


def test_watch_ended_and_action_result_frames() -> None:
    assert watch_ended_frame("t", "overflow", "watch again") == {
        "v": 1,
        "type": "watchEnded",
        "threadId": "t",
        "reason": "overflow",
        "message": "watch again",
    }
    assert action_result_wire(ActionResult.rejected("already resolved")) == {
        "actionResult": {"status": "rejected", "error": "already resolved"}
    }


def test_encode_writes_compact_utf8_json_and_refuses_nan() -> None:
    assert encode({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'
    with pytest.raises(ValueError, match="JSON compliant"):
        encode({"x": float("nan")})


def test_snake_case_names_are_not_the_wire_s() -> None:
    error = refused({"v": 1, "id": 3, "op": "getState", "thread_id": "thread_1"})
    assert (error.code, error.request_id) == ("invalid-request", 3)
    assert "threadId: Field required" in error.message


def test_an_unknown_op_is_shown_cut_short() -> None:
    error = refused({"v": 1, "id": 4, "op": "x" * 10_000})
    assert error.code == "unknown-op"
    assert len(error.message) < 400
