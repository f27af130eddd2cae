"""The sans-IO mapping of a thread onto the AI SDK's UI messages and their stream
(``pai_actors._http.ui_stream``, ``pai_actors._http.turn``).

:class:`Client` applies chunks as the SDK's ``processUIMessageStream`` does (the chunk kinds
the endpoint sends), so a test can check the property that matters: a client that applies
the chunks holds the message the projection shows, from nothing (a replay) or from the
parts it had (a continuation), with nothing sent twice.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pai_actors._http.turn import TurnFeed
from pai_actors._http.ui_stream import (
    TurnWriter,
    client_keys,
    tool_input_key,
    transient_chunk,
    turn_parts,
    turn_steps,
    ui_messages,
)

AT = "2026-01-01T00:00:00Z"


class Client:
    """The SDK's reducer of UI message chunks, for the chunks the endpoint sends."""

    def __init__(self, parts: list[dict[str, Any]] | None = None) -> None:
        self.id: str | None = None
        self.metadata: dict[str, Any] = {}
        self.parts: list[dict[str, Any]] = copy.deepcopy(parts or [])
        self.open: dict[str, dict[str, Any]] = {}
        self.finish: dict[str, Any] | None = None
        self.errors: list[str] = []

    def tool(self, call_id: str) -> dict[str, Any]:
        for part in reversed(self.parts):
            if part.get("toolCallId") == call_id:
                return part
        raise AssertionError(f"no tool invocation {call_id!r}")

    def apply(self, chunks: list[dict[str, Any]]) -> Client:
        for chunk in chunks:
            self._apply(chunk)
        return self

    def _apply(self, chunk: dict[str, Any]) -> None:  # one arm per chunk kind
        kind = chunk["type"]
        if kind == "start":
            self.id = chunk.get("messageId", self.id)
            self.metadata |= chunk.get("messageMetadata", {})
        elif kind == "start-step":
            self.parts.append({"type": "step-start"})
        elif kind in ("finish-step",):
            pass
        elif kind in ("text-start", "reasoning-start"):
            part = {"type": kind.split("-")[0], "text": "", "state": "streaming"}
            assert chunk["id"] not in self.open, chunk
            self.open[chunk["id"]] = part
            self.parts.append(part)
        elif kind in ("text-delta", "reasoning-delta"):
            self.open[chunk["id"]]["text"] += chunk["delta"]
        elif kind in ("text-end", "reasoning-end"):
            self.open.pop(chunk["id"])["state"] = "done"
        elif kind == "tool-input-start":
            self.parts.append(
                {"type": f"tool-{chunk['toolName']}", "toolCallId": chunk["toolCallId"]}
                | {"state": "input-streaming"}
            )
        elif kind == "tool-input-delta":
            part = next(p for p in self.parts if p.get("toolCallId") == chunk["toolCallId"])
            assert part["state"] == "input-streaming", chunk
            part["inputText"] = part.get("inputText", "") + chunk["inputTextDelta"]
        elif kind == "tool-input-available":
            part = next((p for p in self.parts if p.get("toolCallId") == chunk["toolCallId"]), None)
            if part is None:
                part = {"type": f"tool-{chunk['toolName']}", "toolCallId": chunk["toolCallId"]}
                self.parts.append(part)
            part |= {"state": "input-available", "input": chunk["input"]}
        elif kind == "tool-input-error":
            self.parts.append(
                {"type": f"tool-{chunk['toolName']}", "toolCallId": chunk["toolCallId"]}
                | {
                    "state": "output-error",
                    "input": chunk["input"],
                    "errorText": chunk["errorText"],
                }
            )
        elif kind == "tool-approval-request":
            part = self.tool(chunk["toolCallId"])
            part |= {"state": "approval-requested", "approval": {"id": chunk["approvalId"]}}
        elif kind == "tool-approval-response":
            part = next(
                p for p in self.parts if (p.get("approval") or {}).get("id") == chunk["approvalId"]
            )
            approval = {**part["approval"], "approved": chunk["approved"]}
            if "reason" in chunk:
                approval["reason"] = chunk["reason"]
            part |= {"state": "approval-responded", "approval": approval}
        elif kind == "tool-output-available":
            self.tool(chunk["toolCallId"]).update(state="output-available", output=chunk["output"])
        elif kind == "tool-output-error":
            self.tool(chunk["toolCallId"]).update(
                state="output-error", errorText=chunk["errorText"]
            )
        elif kind == "tool-output-denied":
            self.tool(chunk["toolCallId"])["state"] = "output-denied"
        elif kind == "finish":
            self.finish = chunk
            self.metadata |= chunk.get("messageMetadata", {})
        elif kind == "error":
            self.errors.append(chunk["errorText"])
        elif kind.startswith("data-"):
            if chunk.get("transient"):
                return
            for part in self.parts:
                if part["type"] == kind and part.get("id") == chunk["id"]:
                    part["data"] = chunk["data"]
                    break
            else:
                self.parts.append({"type": kind, "id": chunk["id"], "data": chunk["data"]})
        else:  # pragma: no cover
            raise AssertionError(f"a chunk the endpoint never sends: {chunk!r}")


def _shape(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a client's parts and the projection's must agree on."""
    keep = ("type", "toolCallId", "state", "input", "output", "errorText", "approval", "text")
    return [{k: v for k, v in part.items() if k in keep or k in ("id", "data")} for part in parts]


# -- messages ----------------------------------------------------------------------------------


def user(mid: str, text: str) -> dict[str, Any]:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def assistant(mid: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"id": mid, "role": "assistant", "parts": list(parts)}


def tool(call_id: str, state: str, **fields: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool-pay", "toolCallId": call_id, "state": state}
    if state != "input-streaming":
        part["input"] = {"amount": 3}
    part |= {"data": {}, "suspensions": [], "pendingSuspension": None, "cancelled": None}
    return part | fields


def item(item_id: str, value: Any) -> dict[str, Any]:
    return {"id": item_id, "value": value, "updatedAt": AT}


def approval_action(call_id: str) -> dict[str, Any]:
    return {
        "name": "pay",
        "input": {"amount": 3},
        "ref": {
            "kind": "tool",
            "threadId": "t",
            "toolName": "pay",
            "messageId": "m2",
            "toolCallId": call_id,
            "runId": "r1",
            "actionId": f"{call_id}.approval",
            "name": "pay",
        },
        "resumeSchema": {"type": "object"},
        "expiresAt": None,
    }


TURN = [  # as stored: one assistant message per turn, a step-start before each step
    assistant(
        "m2",
        {"type": "step-start"},
        {"type": "reasoning", "text": "Hmm."},
        {"type": "text", "text": "Paying."},
        tool(
            "c1",
            "output-available",
            output={"paid": 3},
            approval={"id": "c1.approval", "approved": True},
            data={"progress": [item("status", {"step": "sent"})]},
        ),
        {"type": "step-start"},
        {"type": "text", "text": "done"},
    ),
]


def project(
    messages: list[dict[str, Any]],
    pending: dict[str, Any],
    live: dict[tuple[str, int], dict[str, str]] | None = None,
) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """The keyed UI parts of a turn's stored assistant messages (and its live steps)."""
    return turn_parts(turn_steps(messages), pending, live)


def test_a_turn_is_one_message_with_a_step_start_per_step() -> None:
    messages = ui_messages("t", [user("m1", "pay"), *TURN, user("m4", "again")], {})
    assert [m["id"] for m in messages] == ["m1", "m2", "m4"]
    turn = messages[1]
    assert turn["metadata"] == {"pai": {"threadId": "t"}}
    assert [p["type"] for p in turn["parts"]] == [  # type: ignore[index,union-attr]
        "step-start",
        "reasoning",
        "text",
        "tool-pay",
        "data-progress",
        "step-start",
        "text",
    ]
    pay = turn["parts"][3]  # type: ignore[index]
    assert "data" not in pay
    assert "suspensions" not in pay
    progress = turn["parts"][4]  # type: ignore[index]
    assert progress == {
        "type": "data-progress",
        "id": "c1:status",
        "data": {"toolCallId": "c1", "id": "status", "value": {"step": "sent"}, "updatedAt": AT},
    }


def test_a_replay_builds_the_projected_message() -> None:
    writer = TurnWriter("t")
    chunks = writer.update("m2", project(TURN, {}))
    chunks += writer.finish({"runId": "r1", "status": "completed", "error": None})
    client = Client().apply(chunks)
    assert client.id == "m2"
    expected = _shape([p for _, p in project(TURN, {})])
    # a granted approval shows as the call's output only: no request to answer again (and
    # no `tool-approval-response` chunk, which ai 6 does not know)
    del expected[3]["approval"]
    assert _shape(client.parts) == expected
    assert client.finish is not None
    assert client.finish["finishReason"] == "stop"
    assert client.metadata["pai"]["run"]["status"] == "completed"
    kinds = [c["type"] for c in chunks]
    assert "tool-approval-request" not in kinds
    assert kinds[:2] == ["start", "start-step"]
    assert kinds[-2:] == ["finish-step", "finish"]


def test_streamed_text_is_sent_once_then_ended_when_stored() -> None:
    writer = TurnWriter("t")
    client = Client()
    client.apply(writer.update("m2", project([], {}, {("m2", 0): {"text": "Hel"}})))
    client.apply(writer.update("m2", project([], {}, {("m2", 0): {"text": "Hello"}})))
    stored = [assistant("m2", {"type": "text", "text": "Hello"})]
    chunks = writer.update("m2", project(stored, {}))
    assert chunks == [{"type": "text-end", "id": "text-0-0"}]
    client.apply(chunks)
    assert client.parts == [
        {"type": "step-start"},
        {"type": "text", "text": "Hello", "state": "done"},
    ]
    assert writer.update("m2", project(stored, {})) == []


def test_a_streaming_calls_input_text_is_sent_as_it_comes_once() -> None:
    """The raw input text a call's step streams live (``tool-input`` deltas) goes out as
    ``tool-input-delta`` chunks after ``tool-input-start``, each fragment once; then the
    whole input, once stored."""
    writer = TurnWriter("t")
    client = Client()
    streaming = [assistant("m2", tool("c1", "input-streaming"))]
    key = tool_input_key("c1")
    first = writer.update("m2", project(streaming, {}, {("m2", 0): {key: '{"amo'}}))
    assert [c["type"] for c in first] == [
        "start",
        "start-step",
        "tool-input-start",
        "tool-input-delta",
    ]
    client.apply(first)
    more = writer.update("m2", project(streaming, {}, {("m2", 0): {key: '{"amount": 3}'}}))
    assert more == [{"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": 'unt": 3}'}]
    client.apply(more)
    assert writer.update("m2", project(streaming, {}, {("m2", 0): {key: '{"amount": 3}'}})) == []
    assert client.tool("c1")["inputText"] == '{"amount": 3}'
    stored = [assistant("m2", tool("c1", "input-available"))]
    client.apply(writer.update("m2", project(stored, {})))
    assert client.tool("c1")["input"] == {"amount": 3}


def test_a_continuation_sends_only_what_the_client_lacks() -> None:
    waiting = [
        assistant(
            "m2", tool("c1", "approval-responded", approval={"id": "c1.approval", "approved": True})
        )
    ]
    held = [p for _, p in project(waiting, {})]  # what the client holds after answering
    writer = TurnWriter("t", client_keys(held))
    ran = [
        assistant(
            "m2",
            tool(
                "c1",
                "output-available",
                output={"paid": 3},
                approval={"id": "c1.approval", "approved": True},
            ),
        ),
        assistant("m3", {"type": "text", "text": "done"}),
    ]
    chunks = writer.update("m2", project(ran, {}))
    assert [c["type"] for c in chunks] == [
        "start",
        "tool-output-available",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
    ]
    client = Client(held).apply(chunks)
    assert _shape(client.parts) == _shape([p for _, p in project(ran, {})])


def test_an_approval_answered_elsewhere_is_answered_on_the_client_first() -> None:
    asked = [assistant("m2", tool("c1", "approval-requested", approval={"id": "c1.approval"}))]
    writer = TurnWriter("t")
    client = Client().apply(writer.update("m2", project(asked, {"c1": approval_action("c1")})))
    assert client.tool("c1")["state"] == "approval-requested"
    pending = [p for p in client.parts if p["type"] == "data-pai-action"]
    assert pending[0]["data"]["state"] == "pending"
    assert pending[0]["data"]["ref"]["actionId"] == "c1.approval"
    ran = [
        assistant(
            "m2",
            tool(
                "c1", "output-available", output=1, approval={"id": "c1.approval", "approved": True}
            ),
        )
    ]
    chunks = writer.update("m2", project(ran, {}))
    assert [c["type"] for c in chunks] == [
        "tool-approval-response",
        "tool-output-available",
        "data-pai-action",
    ]
    client.apply(chunks)
    assert client.tool("c1")["approval"] == {"id": "c1.approval", "approved": True}
    assert [p["data"]["state"] for p in client.parts if p["type"] == "data-pai-action"] == [
        "resolved"
    ]


def test_a_denial_replays_with_its_answer() -> None:
    denied = [
        assistant(
            "m2",
            tool(
                "c1",
                "output-denied",
                approval={"id": "c1.approval", "approved": False, "reason": "no"},
            ),
        )
    ]
    client = Client().apply(TurnWriter("t").update("m2", project(denied, {})))
    assert client.tool("c1") == {
        "type": "tool-pay",
        "toolCallId": "c1",
        "state": "output-denied",
        "input": {"amount": 3},
        "approval": {"id": "c1.approval", "approved": False, "reason": "no"},
    }


def test_invalid_input_is_a_tool_input_error() -> None:
    broken = tool("c1", "output-error", errorText="bad input", rawInput={"amount": "x"})
    del broken["input"]
    chunks = TurnWriter("t").update("m2", project([assistant("m2", broken)], {}))
    assert chunks[-1] == {
        "type": "tool-input-error",
        "toolCallId": "c1",
        "toolName": "pay",
        "input": {"amount": "x"},
        "errorText": "bad input",
    }


def test_data_items_update_in_place_and_transient_ones_only_live() -> None:
    writer = TurnWriter("t")
    first = [assistant("m2", tool("c1", "input-available", data={"progress": [item("s", 1)]}))]
    writer.update("m2", project(first, {}))
    assert writer.update("m2", project(first, {})) == []
    second = [assistant("m2", tool("c1", "input-available", data={"progress": [item("s", 2)]}))]
    assert writer.update("m2", project(second, {})) == [
        {
            "type": "data-progress",
            "id": "c1:s",
            "data": {"toolCallId": "c1", "id": "s", "value": 2, "updatedAt": AT},
        }
    ]
    update = {"type": "tool-data", "toolCallId": "c1", "channel": "progress", "item": item("u", 5)}
    assert transient_chunk(update)["transient"] is True


def test_suspensions_and_cancellations_are_data_parts() -> None:
    episode = {
        "actionId": "c1.1",
        "name": "confirm",
        "input": None,
        "suspendedAt": AT,
        "state": "cancelled",
        "resolvedAt": AT,
    }
    part = tool(
        "c1",
        "output-error",
        errorText="cancelled",
        suspensions=[episode],
        cancelled={"reason": "stop", "at": AT},
    )
    parts = [p for _, p in project([assistant("m2", part)], {})]
    assert [p["type"] for p in parts] == [
        "step-start",
        "tool-pay",
        "data-pai-suspension",
        "data-pai-cancelled",
    ]
    assert parts[2]["data"] == {"toolCallId": "c1", **episode, "action": None}
    assert parts[3] == {
        "type": "data-pai-cancelled",
        "id": "c1",
        "data": {"toolCallId": "c1", "reason": "stop", "at": AT},
    }


def test_a_failed_run_ends_with_an_error() -> None:
    writer = TurnWriter("t")
    chunks = writer.finish({"runId": "r1", "status": "failed", "error": "model down"})
    assert [c["type"] for c in chunks] == ["start", "error", "finish"]
    assert chunks[1]["errorText"] == "model down"
    assert chunks[2]["finishReason"] == "error"


# -- a property: whatever states a tool part goes through, the client ends where it is ------

PATHS = {
    "approved": [
        "input-streaming",
        "input-available",
        "approval-requested",
        "approval-responded",
        "output-available",
    ],
    "denied": ["input-available", "approval-requested", "approval-responded", "output-denied"],
    "plain": ["input-streaming", "input-available", "output-available"],
    "failed": ["input-available", "output-error"],
}


def _at(path: str, state: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if path in ("approved", "denied") and state not in ("input-streaming", "input-available"):
        fields["approval"] = {"id": "c1.approval"}
        if state != "approval-requested":
            fields["approval"]["approved"] = path == "approved"
    if state == "output-available":
        fields["output"] = {"ok": True}
    if state == "output-error":
        fields["errorText"] = "broke"
    return tool("c1", state, **fields)


@given(st.sampled_from(sorted(PATHS)), st.data())
def test_any_observed_states_lead_the_client_to_the_last(path: str, data: st.DataObject) -> None:
    states = PATHS[path]
    seen = data.draw(
        st.lists(st.sampled_from(range(len(states))), min_size=1, max_size=5).map(sorted)
    )
    start = data.draw(st.sampled_from([None, *range(seen[0] + 1)]))  # what the client held
    held: list[dict[str, Any]] = []
    if start is not None:
        held = [p for _, p in project([assistant("m2", _at(path, states[start]))], {})]
    writer = TurnWriter("t", client_keys(held))
    client = Client(held)
    for index in seen:
        target = [assistant("m2", _at(path, states[index]))]
        client.apply(writer.update("m2", project(target, {})))
    final = [assistant("m2", _at(path, states[seen[-1]]))]
    expected = _shape([p for _, p in project(final, {})])
    got = _shape(client.parts)
    if states[seen[-1]] in ("output-available", "output-error") and path == "approved":
        # a granted approval a client never saw is not sent: the call's output says it all
        for part in (*expected, *got):
            part.pop("approval", None)
    if states[seen[-1]] == "input-streaming":
        for part in (*expected, *got):
            part.pop("input", None)
    assert got == expected


# -- the turn, from the protocol's frames ------------------------------------------------------


def snapshot(messages: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "v": 1,
        "type": "snapshot",
        "threadId": "t",
        "cursor": {"epoch": "e", "seq": 0},
        "state": {"version": 1, "threadId": "t", "messages": messages, "runs": runs},
        "pendingActions": [],
    }


def update(seq: int, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "type": "update",
        "threadId": "t",
        "cursor": {"epoch": "e", "seq": seq},
        "update": body,
    } | extra


def run(status: str, run_id: str = "r2") -> dict[str, Any]:
    return {
        "type": "run-status",
        "threadId": "t",
        "run": {"runId": run_id, "status": status, "error": None},
    }


def test_a_turn_waits_for_the_run_its_request_started() -> None:
    old = [user("m1", "hi"), assistant("m2", {"type": "text", "text": "old"})]
    feed = TurnFeed(
        snapshot(old, [{"runId": "r1", "status": "completed", "error": None}]), run_id="r2"
    )
    assert feed.chunks() == []
    assert not feed.done
    feed.apply(
        update(
            1,
            {"type": "message-appended", "threadId": "t", "message": user("m3", "again")},
            pendingActions={},
        )
    )
    feed.apply(update(2, run("running")))
    delta = {
        "type": "message-delta",
        "threadId": "t",
        "runId": "r2",
        "messageId": "m4",
        "part": "text",
        "delta": "Ne",
    }
    chunks = feed.apply({"v": 1, "type": "delta", "threadId": "t", "update": delta})
    assert [c["type"] for c in chunks] == ["start", "start-step", "text-start", "text-delta"]
    assert chunks[0]["messageId"] == "m4"
    feed.apply(
        update(
            3,
            {
                "type": "message-appended",
                "threadId": "t",
                "message": assistant("m4", {"type": "text", "text": "New"}),
            },
            pendingActions={},
        )
    )
    chunks = feed.apply(update(4, run("completed")))
    assert [c["type"] for c in chunks] == ["finish-step", "finish"]
    assert feed.done


def test_a_waiting_status_older_than_the_answer_does_not_end_the_stream() -> None:
    asked = [
        user("m1", "pay"),
        assistant("m2", tool("c1", "approval-requested", approval={"id": "c1.approval"})),
    ]
    frame = snapshot(asked, [{"runId": "r1", "status": "waiting", "error": None}])
    frame["pendingActions"] = [approval_action("c1")]
    held = client_keys([p for _, p in project(asked[1:], {"c1": approval_action("c1")})])
    feed = TurnFeed(frame, held, message_id="m2", answered=frozenset({"c1.approval"}))
    assert feed.running
    assert not any(c["type"] == "finish" for c in feed.chunks())
    feed.apply(update(1, run("running", "r1")))
    feed.apply(update(2, run("waiting", "r1")))
    assert feed.done  # waiting again, now on nothing it answered: over


def delta_frame(part: str, text: str, step: int, **extra: Any) -> dict[str, Any]:
    body = {"type": "message-delta", "threadId": "t", "runId": "r1", "messageId": "m2"}
    body |= {"step": step, "part": part, "delta": text} | extra
    return {"v": 1, "type": "delta", "threadId": "t", "update": body}


def test_the_next_step_of_a_turn_streams_into_the_same_message() -> None:
    first_step = [{"type": "step-start"}, tool("c1", "output-available", output={"paid": 3})]
    stored = [user("m1", "pay"), assistant("m2", *first_step)]
    feed = TurnFeed(snapshot(stored, [{"runId": "r1", "status": "running", "error": None}]))
    client = Client().apply(feed.chunks())
    client.apply(feed.apply(delta_frame("text", "Do", step=1)))
    client.apply(feed.apply(delta_frame("text", "ne", step=1)))
    assert client.parts[-2:] == [
        {"type": "step-start"},
        {"type": "text", "text": "Done", "state": "streaming"},
    ]
    whole = assistant("m2", *first_step, {"type": "step-start"}, {"type": "text", "text": "Done"})
    message = {"type": "message-replaced", "threadId": "t", "message": whole}
    client.apply(feed.apply(update(1, message, pendingActions={})))
    client.apply(feed.apply(update(2, run("completed", "r1"))))
    assert feed.done
    assert client.id == "m2"
    assert [p["type"] for p in client.parts] == ["step-start", "tool-pay", "step-start", "text"]
    assert client.parts[-1] == {"type": "text", "text": "Done", "state": "done"}


def test_a_stream_that_joins_in_the_middle_of_a_calls_input_gets_it_whole() -> None:
    """The input fragments before the feed began were live only: the later ones alone would
    not make the input, so the client gets none of them, then the input whole."""
    streaming = [{"type": "step-start"}, tool("c1", "input-streaming")]
    stored = [user("m1", "pay"), assistant("m2", *streaming)]
    feed = TurnFeed(snapshot(stored, [{"runId": "r1", "status": "running", "error": None}]))
    client = Client().apply(feed.chunks())
    key = {"toolCallId": "c1"}
    assert feed.apply(delta_frame("tool-input", 'unt": 3}', step=0, **key)) == []
    available = assistant("m2", {"type": "step-start"}, tool("c1", "input-available"))
    message = {"type": "message-replaced", "threadId": "t", "message": available}
    chunks = feed.apply(update(1, message, pendingActions={}))
    assert [c["type"] for c in chunks] == ["tool-input-available"]
    client.apply(chunks)
    assert client.parts[-1]["input"] == {"amount": 3}
