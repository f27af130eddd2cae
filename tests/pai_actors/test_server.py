"""The protocol server end to end: real sockets on loopback, port 0, frames sent by hand.

These tests run on trio's real clock, not under the autojump ``MockClock`` the rest of the
suite uses: the kernel's sockets do not advance a mock clock, so an autojumping clock would
fire timeouts (the server's, trio-websocket's, ``fail_after``) while a peer's bytes are still
in flight. So every test runs under ``trio.fail_after``, orders events by what it observes
(an answer, an update, the runtime's ``wait_idle``), and never sleeps to order them; the
only polling (``wait_for``) waits for network effects such as a socket closing.

The application they serve is ``protocol_app.App``; Alice and Bob each authenticate into a
scope of their own.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic.alias_generators import to_snake
from trio_websocket import (
    CloseReason,
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
)

from pai_actors import MemoryStore, StoreConflict, ThreadState, ToolPart, UploadedFile
from pai_actors.server import Identity, open_server
from pai_actors.testing import create_test_runtime

from .protocol_app import (
    ALICE,
    BOB,
    UNCLOSED_CLIENT_SOCKETS,
    App,
    Served,
    authenticate,
    next_answer,
    open_raw,
    request,
    serving,
    tool_parts,
    wait_for,
)
from .protocol_app import collect_sockets as collect_sockets  # the fixture, by name

pytestmark = UNCLOSED_CLIENT_SOCKETS

DECISION_SCHEMA = {
    "properties": {
        "approved": {"title": "Approved", "type": "boolean"},
        "note": {"default": "", "title": "Note", "type": "string"},
    },
    "required": ["approved"],
    "title": "Decision",
    "type": "object",
}


class Raw:
    """A raw connection with numbered requests: ``await raw("getState", threadId=...)``.

    The watch frames that arrive while it waits for an answer are kept, in order, for
    :meth:`frames_until`: whether an update goes out before or after an answer is not
    ordered by the protocol (only the frames of one watch are)."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.kept: deque[dict[str, Any]] = deque()

    async def __call__(self, op: str, **fields: Any) -> dict[str, Any]:
        request_id = next(self.ids)
        await self.ws.send_message(json.dumps({"v": 1, "id": request_id, "op": op, **fields}))
        while True:
            frame: dict[str, Any] = json.loads(await self.ws.get_message())
            if frame["type"] not in ("result", "error"):
                self.kept.append(frame)
                continue
            assert frame["id"] == request_id, frame
            return frame

    async def ok(self, op: str, **fields: Any) -> Any:
        answer = await self(op, **fields)
        assert answer["type"] == "result", answer
        return answer["result"]

    async def refused(self, op: str, **fields: Any) -> str:
        answer = await self(op, **fields)
        assert answer["type"] == "error", answer
        return str(answer["code"])

    async def thread(self) -> str:
        return str((await self.ok("createThread"))["threadId"])

    async def start(self, served: Served, thread_id: str, text: str) -> str:
        """Send ``text`` and wait until the run is idle (or only waits on actions)."""
        run_id = str((await self.ok("send", threadId=thread_id, text=text))["runId"])
        await served.rt.wait_idle(thread_id)
        return run_id

    async def frames_until(self, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        """Every watch frame from the last one returned until (and with) the first one
        ``done`` accepts."""
        frames: list[dict[str, Any]] = []
        while True:
            frames.append(
                self.kept.popleft() if self.kept else json.loads(await self.ws.get_message())
            )
            assert frames[-1]["type"] not in ("result", "error"), frames[-1]
            if done(frames[-1]):
                return frames


def update_is(kind: str, **where: Any) -> Callable[[dict[str, Any]], bool]:
    def done(frame: dict[str, Any]) -> bool:
        if frame["type"] != "update" or frame["update"]["type"] != kind:
            return False
        update = frame["update"]
        return all(
            (update.get("run") or update.get("part") or {}).get(key) == value
            for key, value in where.items()
        )

    return done


def assistant_appended(frame: dict[str, Any]) -> bool:
    update = frame.get("update") or {}
    return update.get("type") == "message-appended" and update["message"]["role"] == "assistant"


def has_data(item_id: str) -> Callable[[dict[str, Any]], bool]:
    """Accepts the update that puts a tool part showing the data item ``item_id``."""

    def done(frame: dict[str, Any]) -> bool:
        if frame["type"] != "update" or frame["update"]["type"] != "tool-part-updated":
            return False
        items = frame["update"]["part"].get("data", {}).get("progress", [])
        return any(item["id"] == item_id for item in items)

    return done


def wire(state: ThreadState) -> dict[str, Any]:
    return state.to_wire()


# -- every operation, for the owner -------------------------------------------------------------


async def test_create_send_get_state_and_list_pending_actions() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_raw(s.url) as ws:
            alice = Raw(ws)
            first, second = await alice.thread(), await alice.thread()
            assert first != second
            run_id = await alice.start(s, first, "invoice ACME")
            await alice.start(s, second, "invoice Globex")

            state = await alice.ok("getState", threadId=first)
            assert state["state"] == wire(await s.rt.get_state(first))
            assert [r["runId"] for r in state["state"]["runs"]] == [run_id]
            [action] = state["pendingActions"]
            assert action["name"] == "approve.approval"
            assert action["input"] == {"customer": "ACME", "amount": 120.0}
            assert action["resumeSchema"] == DECISION_SCHEMA
            assert action["ref"]["threadId"] == first

            listed = await alice.ok("listPendingActions", threadId=first)
            assert listed["actions"] == [action]
            scope = await alice.ok("listPendingActions")
            assert [a["ref"]["threadId"] for a in scope["actions"]] == [first, second]
            assert scope["actions"][0] == action

            plain = await alice.thread()
            await alice.start(s, plain, "hello")
            assert (await alice.ok("listPendingActions", threadId=plain))["actions"] == []
            [_, answer] = (await alice.ok("getState", threadId=plain))["state"]["messages"]
            assert answer["parts"] == [
                {"type": "step-start"},
                {"type": "text", "text": "echo: hello"},
            ]

    thread = await s.rt.store.get_thread(first)
    assert thread is not None
    assert (thread.scope_key, thread.user_key) == ("tenant-a", "alice")
    run = await s.rt.store.get_run(run_id)
    assert run is not None
    assert run.identity == Identity("tenant-a", "alice").to_json()


async def test_submit_cancel_and_fail_answer_with_the_action_result() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_raw(s.url) as ws:
            alice = Raw(ws)
            threads = [await alice.thread() for _ in range(3)]
            for thread_id in threads:
                await alice.start(s, thread_id, "invoice ACME")
            submit, cancel, fail = [
                (await alice.ok("listPendingActions", threadId=t))["actions"][0]["ref"]
                for t in threads
            ]

            invalid = await alice.ok("submitAction", ref=submit, payload={"approved": "maybe"})
            assert invalid["actionResult"]["status"] == "rejected"
            assert "approved" in invalid["actionResult"]["error"]
            assert len((await alice.ok("listPendingActions", threadId=threads[0]))["actions"]) == 1

            accepted = await alice.ok("submitAction", ref=submit, payload={"approved": True})
            assert accepted == {"actionResult": {"status": "accepted", "error": None}}
            again = await alice.ok("submitAction", ref=submit, payload={"approved": True})
            assert again["actionResult"]["status"] == "rejected"
            assert "already resolved" in again["actionResult"]["error"]

            cancelled = await alice.ok("cancelAction", ref=cancel, reason="not now")
            assert cancelled == {"actionResult": {"status": "accepted", "error": None}}
            failed = await alice.ok("failAction", ref=fail, error="the printer is on fire")
            assert failed == {"actionResult": {"status": "accepted", "error": None}}

            for thread_id in threads:
                await s.rt.wait_idle(thread_id)
            assert (await alice.ok("listPendingActions"))["actions"] == []
            states = [await s.rt.get_state(t) for t in threads]
    [sent], [not_now], [on_fire] = (tool_parts(state) for state in states)
    assert (sent.state, sent.output) == ("output-available", {"sent": "ACME"})
    assert (not_now.state, not_now.error_text) == (
        "output-error",
        "The tool call was cancelled: not now",
    )
    assert (on_fire.state, on_fire.error_text) == ("output-error", "the printer is on fire")
    assert [state.runs[-1].status for state in states] == ["completed"] * 3


async def test_watch_then_cancel_run_then_unwatch() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_raw(s.url) as ws:
            alice = Raw(ws)
            thread_id = await alice.thread()
            [snapshot] = (await alice.ok("watch", threadId=thread_id))["frames"]
            assert snapshot["type"] == "snapshot"
            assert snapshot["cursor"]["seq"] == 0
            assert snapshot["state"] == wire(await s.rt.get_state(thread_id))

            run_id = (await alice.ok("send", threadId=thread_id, text="tick 5"))["runId"]
            s.app.tick()
            await alice.frames_until(has_data("t0"))

            assert await alice.ok("cancelRun", runId=run_id, reason="enough") == {
                "run": {"runId": run_id, "status": "cancelled", "error": None}
            }
            state = await s.rt.get_state(thread_id)
            [part] = tool_parts(state)
            assert (part.state, state.runs[-1].status) == ("output-error", "cancelled")
            assert "enough" in (part.error_text or "")
            frames = await alice.frames_until(update_is("run-status", status="cancelled"))
            assert all(frame["type"] == "update" for frame in frames)

            assert await alice.ok("unwatch", threadId=thread_id) == {}
            await ws.send_message(
                json.dumps(
                    {"v": 1, "id": 90, "op": "send", **{"threadId": thread_id, "text": "hello"}}
                )
            )
            after = [json.loads(await ws.get_message())]
            await s.rt.wait_idle(thread_id)
            await ws.send_message(
                json.dumps({"v": 1, "id": 91, "op": "getState", **{"threadId": thread_id}})
            )
            after.append(json.loads(await ws.get_message()))
    # Unwatched: the new run's updates never reach this connection, only the two answers.
    assert [(frame["type"], frame["id"]) for frame in after] == [("result", 90), ("result", 91)]
    assert after[1]["result"]["state"]["runs"][-1]["status"] == "completed"


async def test_read_file() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_raw(s.url) as ws:
            alice = Raw(ws)
            thread_id = await alice.thread()
            await alice.start(s, thread_id, "report north")
            [part] = tool_parts(await s.rt.get_state(thread_id))
            assert isinstance(part.output, dict)
            read = await alice.ok("readFile", fileId=part.output["fileId"])
            assert await alice.refused("readFile", fileId="file_nope") == "not-found"
    assert base64.b64decode(read["body"]) == b"name,total\nnorth,12\n"
    assert {"fileId", "mediaType", "scopeKey", "createdAt"} <= read["file"].keys()  # camelCase
    file = UploadedFile.model_validate({to_snake(k): v for k, v in read["file"].items()})
    assert file.file_id == part.output["fileId"]
    assert (file.filename, file.media_type, file.size) == ("report.csv", "text/csv", 20)
    assert (file.thread_id, file.metadata) == (thread_id, {"rows": 1})


# -- scope isolation ----------------------------------------------------------------------------

THREAD_OPS: list[tuple[str, dict[str, Any]]] = [
    ("getState", {}),
    ("send", {"text": "invoice Mallory"}),
    ("watch", {}),
    ("listPendingActions", {}),
]
ACTION_OPS: list[tuple[str, dict[str, Any]]] = [
    ("submitAction", {"payload": {"approved": True}}),
    ("cancelAction", {"reason": "mine now"}),
    ("failAction", {"error": "mine now"}),
]


async def test_another_scope_can_neither_see_nor_touch_anything() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_raw(s.url) as alice_ws, open_raw(s.url, BOB) as bob_ws:
            alice, bob = Raw(alice_ws), Raw(bob_ws)
            asking, ticking, reporting = [await alice.thread() for _ in range(3)]
            await alice.start(s, asking, "invoice ACME")
            [action] = (await alice.ok("listPendingActions"))["actions"]
            ref = action["ref"]
            await alice.start(s, reporting, "report north")
            [report] = tool_parts(await s.rt.get_state(reporting))
            assert isinstance(report.output, dict)
            file_id = report.output["fileId"]
            await alice.ok("watch", threadId=ticking)
            run_id = (await alice.ok("send", threadId=ticking, text="tick 2"))["runId"]
            await alice.frames_until(assistant_appended)
            before = [wire(await s.rt.get_state(t)) for t in (asking, ticking, reporting)]

            own = await bob.thread()
            for thread_id in (asking, ticking, reporting):
                for op, fields in THREAD_OPS:
                    answer = await bob(op, threadId=thread_id, **fields)
                    missing = await bob(op, threadId="thread_404", **fields)
                    assert (answer["type"], answer["code"]) == ("error", "not-found"), answer
                    # Another scope's thread reads exactly as one that does not exist.
                    assert answer["message"] == missing["message"].replace("thread_404", thread_id)
            assert (await bob.ok("listPendingActions"))["actions"] == []
            for op, fields in ACTION_OPS:
                result = (await bob.ok(op, ref=ref, **fields))["actionResult"]
                assert result["status"] == "rejected"
                assert "not in your scope" in result["error"]
                forged = {**ref, "threadId": own}  # Bob's thread, Alice's action
                result = (await bob.ok(op, ref=forged, **fields))["actionResult"]
                assert result["status"] == "rejected"
                assert "no such action" in result["error"]
            assert await bob.refused("cancelRun", runId=run_id) == "not-found"
            assert await bob.refused("cancelRun", runId=ref["runId"]) == "not-found"
            assert await bob.refused("readFile", fileId=file_id) == "not-found"
            assert await alice.refused("getState", threadId=own) == "not-found"

            # No frame can name a scope: the scope is the connection's.
            naming_a_scope: list[tuple[str, dict[str, Any]]] = [
                ("createThread", {"scopeKey": "tenant-a"}),
                ("listPendingActions", {"scope": "tenant-a"}),
                ("getState", {"threadId": asking, "scopeKey": "tenant-a"}),
                ("send", {"threadId": asking, "text": "hi", "identity": {"scope_key": "x"}}),
                ("readFile", {"fileId": file_id, "scopeKey": "tenant-a"}),
            ]
            for op, naming in naming_a_scope:
                answer = await bob(op, **naming)
                assert (answer["type"], answer["code"]) == ("error", "invalid-request"), answer
                assert "Extra inputs are not permitted" in answer["message"]

            after = [wire(await s.rt.get_state(t)) for t in (asking, ticking, reporting)]
            assert after == before
            assert (await alice.ok("listPendingActions"))["actions"] == [action]

            # Bob's unwatch of Alice's thread is a no-op: Alice's watch goes on.
            assert await bob.ok("unwatch", threadId=ticking) == {}
            s.app.tick()
            await alice.frames_until(has_data("t0"))
            accepted = await alice.ok("submitAction", ref=ref, payload={"approved": True})
            assert accepted["actionResult"]["status"] == "accepted"


# -- authentication -----------------------------------------------------------------------------


async def refusal(url: str, token: str | None = None, **options: Any) -> ConnectionRejected:
    with pytest.raises(ConnectionRejected) as refusal:
        async with open_raw(url, token, **options):
            pass  # pragma: no cover
    return refusal.value


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"Authorization", b"Basic YWxpY2U6c2VjcmV0")],
        [(b"Authorization", b"Bearer")],
    ],
    ids=["no-header", "not-bearer", "no-token"],
)
@pytest.mark.usefixtures("collect_sockets")
async def test_a_connection_without_credentials_is_refused(
    headers: list[tuple[bytes, bytes]],
) -> None:
    with trio.fail_after(10):
        async with serving() as s:
            refused = await refusal(s.url, headers=headers)
            assert s.server.statistics().connections == 0
    assert refused.status_code == 401
    assert (b"www-authenticate", b"Bearer") in [
        (name.lower(), value) for name, value in refused.headers or []
    ]
    assert b"Authorization: Bearer" in (refused.body or b"")


@pytest.mark.usefixtures("collect_sockets")
async def test_a_refused_token_gets_401() -> None:
    with trio.fail_after(10):
        async with serving() as s:
            refused = await refusal(s.url, "mallory-token")
    assert refused.status_code == 401
    assert refused.body == b"the token was refused"


@pytest.mark.usefixtures("collect_sockets")
async def test_an_authenticate_hook_that_raises_or_misbehaves_refuses_with_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(token: str) -> Identity | None:
        if token == "raise":
            raise RuntimeError("the identity provider is down")
        if token == "wrong":
            return "tenant-a"  # type: ignore[return-value]  # the misuse under test
        return authenticate(token)

    with trio.fail_after(10):
        async with serving(authenticate=broken) as s:
            refusals = [await refusal(s.url, token) for token in ("raise", "wrong")]
            async with open_raw(s.url, ALICE) as ws:  # the server is still up
                assert "threadId" in (await Raw(ws).ok("createThread"))
    assert [r.status_code for r in refusals] == [500, 500]
    assert "the identity provider is down" in caplog.text
    assert "'tenant-a', not an Identity" in caplog.text


@pytest.mark.usefixtures("collect_sockets")
async def test_an_async_authenticate_hook_works() -> None:
    async def check(token: str) -> Identity | None:
        await trio.lowlevel.checkpoint()
        return Identity("tenant-z", claims={"plan": "pro"}) if token == "zed" else None

    with trio.fail_after(10):
        async with serving(authenticate=check) as s:
            async with open_raw(s.url, "zed") as ws:
                raw = Raw(ws)
                thread_id = await raw.thread()
                run_id = await raw.start(s, thread_id, "hello")
            assert (await refusal(s.url, ALICE)).status_code == 401
            run = await s.rt.store.get_run(run_id)
            thread = await s.rt.store.get_thread(thread_id)
    assert thread is not None
    assert thread.scope_key == "tenant-z"
    assert run is not None
    assert run.identity == {"scope_key": "tenant-z", "user_key": None, "claims": {"plan": "pro"}}


# -- bad frames ---------------------------------------------------------------------------------


async def test_bad_frames_get_error_frames_and_the_connection_goes_on() -> None:
    bad: list[tuple[str | bytes, str, int | None]] = [
        ("{not json", "bad-frame", None),
        ("[1, 2]", "bad-frame", None),
        ('{"v": 1, "op": "createThread"}', "bad-frame", None),
        ('{"v": 1, "id": -1, "op": "createThread"}', "bad-frame", None),
        ('{"v": 1, "id": 3, "op": "dropTables"}', "unknown-op", 3),
        ('{"v": 2, "id": 4, "op": "createThread"}', "unsupported-version", 4),
        ('{"id": 5, "op": "createThread"}', "unsupported-version", 5),
        (b'{"v": 1, "id": 6, "op": "createThread"}', "bad-frame", None),
        ('{"v": 1, "id": 7, "op": "getState"}', "invalid-request", 7),
        ('{"v": 1, "id": 8, "op": "send", "threadId": 1, "text": "x"}', "invalid-request", 8),
        ('{"v": 1, "id": 9, "op": "getState", "threadId": "t", "x": 1}', "invalid-request", 9),
        # Refused, though json.loads reads them: a key twice, an integer JavaScript rounds,
        # a ref without its kind.
        (
            '{"v": 1, "id": 10, "op": "getState", "threadId": "t", "threadId": "u"}',
            "invalid-request",
            10,
        ),
        (
            '{"v": 1, "id": 11, "op": "watch", "threadId": "t",'
            ' "cursor": {"epoch": "e", "seq": 9007199254740992}}',
            "invalid-request",
            11,
        ),
        (
            '{"v": 1, "id": 12, "op": "cancelAction", "ref": {"threadId": "t", "toolName": "x",'
            ' "messageId": "m", "toolCallId": "c", "runId": "r", "actionId": "a", "name": "x"}}',
            "invalid-request",
            12,
        ),
    ]
    with trio.fail_after(10):
        async with serving() as s, open_raw(s.url) as ws:
            answers = []
            for frame, _, _ in bad:
                await ws.send_message(frame)
                answers.append(await next_answer(ws))
                # Still usable: a good request after each bad one is answered.
                assert "threadId" in (await request(ws, 100, "createThread"))["result"]
            assert s.server.statistics().connections == 1
    assert [(a["type"], a["code"], a["id"]) for a in answers] == [
        ("error", code, request_id) for _, code, request_id in bad
    ]
    assert "binary" in answers[7]["message"]
    assert "not JSON" in answers[0]["message"]
    assert "createThread" in answers[4]["message"]  # the unknown op's error lists the ops
    assert "threadId: the key 'threadId' appears more than once" in answers[11]["message"]
    assert "cursor.seq: 9007199254740992 is beyond" in answers[12]["message"]
    assert "ref.kind: Field required" in answers[13]["message"]


@pytest.mark.usefixtures("collect_sockets")
async def test_an_oversized_frame_closes_only_its_connection_with_1009() -> None:
    with trio.fail_after(10):
        async with serving(max_frame_bytes=1024) as s:
            async with open_raw(s.url) as other, open_raw(s.url) as ws:
                text = "x" * 2000
                await ws.send_message(json.dumps({"v": 1, "id": 1, "op": "send", "text": text}))
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
                assert "threadId" in (await Raw(other).ok("createThread"))
                await wait_for(lambda: s.server.statistics().connections == 1)
    assert closed.value.reason is not None
    assert closed.value.reason.code == 1009


# -- fuzzed frames ------------------------------------------------------------------------------

OPS = [
    "createThread",
    "send",
    "getState",
    "watch",
    "unwatch",
    "listPendingActions",
    "submitAction",
    "cancelAction",
    "failAction",
    "cancelRun",
    "readFile",
]
IDS = st.sampled_from(["thread_1", "thread_2", "thread_3", "run_4", "call_1.1", "file_1", ""])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
FIELDS = st.dictionaries(
    st.sampled_from(
        [
            *("threadId", "text", "ref", "payload", "cursor", "runId", "fileId", "reason"),
            *("error", "clientTools", "clientData", "scopeKey"),
        ]
    ),
    IDS | JSON,
    max_size=4,
)
REQUESTS = st.builds(
    lambda v, request_id, op, fields: {"v": v, "id": request_id, "op": op, **fields},
    st.sampled_from([1, 1, 1, 2, "1", None]),
    st.integers(min_value=-2, max_value=2**54),
    st.sampled_from([*OPS, "", "nope"]),
    FIELDS,
)
FRAMES = st.one_of(
    REQUESTS.map(json.dumps),
    JSON.map(json.dumps),
    st.text(max_size=40),
    st.binary(max_size=40),
)


@settings(max_examples=30, deadline=None)
@given(frames=st.lists(FRAMES, min_size=1, max_size=8))
async def test_fuzzed_frames_never_reach_another_connection(frames: list[str | bytes]) -> None:
    with trio.fail_after(20):
        async with (
            serving() as s,
            open_raw(s.url) as alice_ws,
            open_raw(s.url, BOB) as fuzz_ws,
        ):
            alice = Raw(alice_ws)
            thread_id = await alice.thread()
            [snapshot] = (await alice.ok("watch", threadId=thread_id))["frames"]
            await alice.ok("send", threadId=thread_id, text="invoice ACME")
            for frame in frames:
                await fuzz_ws.send_message(frame)
                answer = await next_answer(fuzz_ws)  # one answer per frame, in order
                assert answer["type"] == "result" or answer["code"] != "internal", answer
            # Alice's watch sees her run, every update once, and nothing of Bob's frames.
            await s.rt.wait_idle(thread_id)
            [action] = (await alice.ok("listPendingActions"))["actions"]
            await alice.ok("submitAction", ref=action["ref"], payload={"approved": True})
            seen = await alice.frames_until(update_is("run-status", status="completed"))
            state = await alice.ok("getState", threadId=thread_id)
            async with open_raw(s.url) as late:  # the server still takes connections
                await Raw(late).ok("listPendingActions")
    assert [f["cursor"]["seq"] for f in seen] == list(range(1, len(seen) + 1))
    assert {f["threadId"] for f in seen} == {thread_id}
    assert state["state"]["runs"][-1]["status"] == "completed"
    assert snapshot["cursor"]["seq"] == 0


# -- watching -----------------------------------------------------------------------------------


async def test_a_watch_is_a_snapshot_then_numbered_updates_and_resumes_from_a_cursor() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_raw(s.url) as ws:
            alice = Raw(ws)
            thread_id = await alice.thread()
            await alice.start(s, thread_id, "hello")
            [snapshot] = (await alice.ok("watch", threadId=thread_id))["frames"]
            assert snapshot["type"] == "snapshot"
            assert snapshot["state"] == wire(await s.rt.get_state(thread_id))
            epoch = snapshot["cursor"]["epoch"]

            await alice.ok("send", threadId=thread_id, text="tick 4")
            s.app.tick(2)
            first = await alice.frames_until(has_data("t1"))
            assert await alice.ok("unwatch", threadId=thread_id) == {}
            s.app.tick(2)
            await s.rt.wait_idle(thread_id)

            # Watching again from the cursor replays exactly what this watcher missed.
            cursor = first[-1]["cursor"]
            missed = (await alice.ok("watch", threadId=thread_id, cursor=cursor))["frames"]
            assert await alice.ok("unwatch", threadId=thread_id) == {}
            # A cursor of another stream (or one this stream never reached) gets a snapshot.
            for stranger in ({"epoch": "elsewhere.1", "seq": 2}, {"epoch": epoch, "seq": 999}):
                [again] = (await alice.ok("watch", threadId=thread_id, cursor=stranger))["frames"]
                assert again["type"] == "snapshot"
            state = await s.rt.get_state(thread_id)
    updates = first + missed
    assert all(frame["type"] == "update" for frame in updates)
    assert [f["cursor"] for f in updates] == [
        {"epoch": epoch, "seq": seq} for seq in range(1, len(updates) + 1)
    ]
    assert updates[-1]["update"] == {"type": "run-status", "threadId": thread_id} | {
        "run": {"runId": state.runs[-1].run_id, "status": "completed", "error": None}
    }
    assert again["state"] == wire(state)
    assert again["cursor"] == {"epoch": epoch, "seq": len(updates)}


async def test_transient_tool_data_is_live_only() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_raw(s.url) as ws:
            alice = Raw(ws)
            thread_id = await alice.thread()
            await alice.start(s, thread_id, "invoice ACME")
            [action] = (await alice.ok("watch", threadId=thread_id))["frames"][0]["pendingActions"]
            await alice.ok("submitAction", ref=action["ref"], payload={"approved": True})
            frames = await alice.frames_until(update_is("run-status", status="completed"))
            transient = [f["update"] for f in frames if f["update"]["type"] == "tool-data"]
            state = await alice.ok("getState", threadId=thread_id)
            assert await alice.ok("unwatch", threadId=thread_id) == {}
            [snapshot] = (await alice.ok("watch", threadId=thread_id))["frames"]
    assert [(u["channel"], u["item"]["id"], u["item"]["value"]) for u in transient] == [
        ("progress", "upload", {"step": "upload 50%"}),
        ("progress", "upload", {"step": "upload 100%"}),
    ]
    for shown in (state["state"], snapshot["state"]):
        [part] = [p for m in shown["messages"] for p in m["parts"] if "toolCallId" in p]
        assert [item["id"] for item in part["data"]["progress"]] == ["status"]
        assert "upload" not in json.dumps(shown)


# -- shutting down ------------------------------------------------------------------------------


@pytest.mark.usefixtures("collect_sockets")
async def test_shutdown_closes_connections_cancels_running_calls_and_keeps_suspended_ones() -> None:
    app, store = App(), MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(app.agent, model=app.model(), store=store) as rt:
            async with trio.open_nursery() as outliving:  # a connection outliving the server
                async with open_server(rt, authenticate=authenticate) as server:
                    ws = await outliving.start(hold_open, server.url)
                    alice = Raw(ws)
                    asking, ticking = await alice.thread(), await alice.thread()
                    await alice.ok("send", threadId=asking, text="invoice ACME")
                    await rt.wait_idle(asking)
                    await alice.ok("watch", threadId=ticking)
                    await alice.ok("send", threadId=ticking, text="tick 3")
                    await alice.frames_until(assistant_appended)  # the tick call runs
                    url = server.url
                # Leaving the server closed the connection (after the frames already sent).
                closed = await closing_reason(ws)
                with pytest.raises(HandshakeError):  # and its listener
                    await hold_open(url)
                assert [run.status for run in (await rt.get_state(ticking)).runs] == ["running"]
                outliving.cancel_scope.cancel()
        # Leaving the runtime recorded the running call as cancelled; the suspended call
        # waits in the store for a new runtime.
        [tick] = [
            p
            for m in await store.list_messages(ticking)
            for p in m.parts
            if p.type not in ("text", "step-start")
        ]
        assert isinstance(tick, ToolPart)
        assert (tick.state, tick.error_text) == (
            "output-error",
            "The tool call was cancelled: the runtime is closing",
        )
        async with serving(store=store.reopen()) as s, open_raw(s.url) as ws:
            alice = Raw(ws)
            [action] = (await alice.ok("listPendingActions"))["actions"]
            assert action["ref"]["threadId"] == asking
            accepted = await alice.ok("submitAction", ref=action["ref"], payload={"approved": True})
            assert accepted["actionResult"]["status"] == "accepted"
            await s.rt.wait_idle(asking)
            await s.rt.wait_idle(ticking)  # its run goes on: the model sees the cancelled call
            asked, ticked = [await s.rt.get_state(t) for t in (asking, ticking)]
    assert (closed.code, closed.reason) == (1001, "the server is shutting down")
    [sent] = tool_parts(asked)
    assert (sent.state, sent.output) == ("output-available", {"sent": "ACME"})
    assert [run.status for run in asked.runs] == ["completed"]
    assert [run.status for run in ticked.runs] == ["completed"]
    assert tool_parts(ticked) == [tick]


async def hold_open(
    url: str, *, task_status: trio.TaskStatus[WebSocketConnection] = trio.TASK_STATUS_IGNORED
) -> None:
    """Open a raw connection for another task, and hold it open until cancelled."""
    async with open_raw(url) as ws:
        task_status.started(ws)
        await trio.sleep_forever()


async def closing_reason(ws: WebSocketConnection) -> CloseReason:
    """Read ``ws`` until it is closed (skipping the frames before), and return why."""
    while ws.closed is None:
        with contextlib.suppress(ConnectionClosed):
            await ws.get_message()
    return ws.closed


class _ConflictingStore(MemoryStore):
    """Refuses every commit once ``broken``, as a store another writer raced would."""

    broken = False

    async def commit(self, writes: Any) -> None:
        if self.broken:
            raise StoreConflict("run 'run_x'", "was written with revision 2, but ...")
        await super().commit(writes)


async def test_a_store_failure_is_internal_and_logged_never_invalid_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _ConflictingStore()
    with trio.fail_after(10):
        async with serving(store=store) as s, open_raw(s.url) as ws:
            alice = Raw(ws)
            thread_id = await alice.thread()
            store.broken = True
            answer = await alice("send", threadId=thread_id, text="hello")
            store.broken = False
    assert (answer["type"], answer["code"]) == ("error", "internal")
    assert "revision" not in answer["message"]  # the store's words stay in the log
    assert "request 'send' failed in the store" in caplog.text
    assert "was written with revision 2" in caplog.text
