"""The UI message stream endpoints over real loopback HTTP (hypercorn, trio's real clock):
identity and scope, the stream of a turn, answers, resuming a stream, a restart, mounts.

Events are ordered by what the server sends (a test reads a stream up to a chunk, then
acts) and by :meth:`ChatApp.release`, never by sleeping.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from pai_actors import SqliteStore
from pai_actors.server import open_http_server
from pai_actors.testing import create_test_runtime

from .http_app import (
    BOB,
    ChatApp,
    Reply,
    chat_body,
    open_request,
    read_body,
    request,
    serving_http,
    user,
)


def types(reply: Reply) -> list[str | None]:
    return [None if chunk is None else chunk["type"] for chunk in reply.events()]


async def stored_turn(url: str, chat_id: str) -> dict[str, Any]:
    reply = await request(url, "GET", f"/api/chat/{chat_id}/messages")
    assert reply.status == 200, reply.body
    message: dict[str, Any] = reply.json()["messages"][-1]
    return message


async def test_every_request_needs_a_token_of_the_chats_scope() -> None:
    with trio.fail_after(10):
        async with serving_http() as s:
            reply = await request(s.url, "POST", "/api/chat", chat_body("c", user("hi")))
            assert reply.status == 200
            for path in ("/api/chat/c/messages", "/api/chat/c/stream"):
                missing = await request(s.url, "GET", path, token=None)
                assert missing.status == 401
                assert missing.headers["www-authenticate"] == "Bearer"
                assert (await request(s.url, "GET", path, token="nobody")).status == 401
            other = await request(s.url, "GET", "/api/chat/c/messages", token=BOB)
            assert other.status == 404
            assert other.json() == {"error": "no chat 'c' in your scope"}
            # nothing to resume, as for a chat that does not exist yet (a stock useChat with
            # resume: true asks it when its page opens, and stops on an error)
            for chat in ("c", "new-chat"):
                nothing = await request(s.url, "GET", f"/api/chat/{chat}/stream", token=BOB)
                assert (nothing.status, nothing.body) == (204, b"")
            posted = await request(
                s.url, "POST", "/api/chat", chat_body("c", user("hi")), token=BOB
            )
            assert posted.status == 404
            answer = await request(s.url, "POST", "/api/chat/c/actions/x", {"resume": 1}, token=BOB)
            assert answer.status == 404


async def test_a_message_streams_its_turn_token_by_token() -> None:
    with trio.fail_after(10):
        async with serving_http() as s:
            async with open_request(
                s.url, "POST", "/api/chat", chat_body("c", user("hello"))
            ) as head:
                body = await read_body(head, until=lambda b: b"reasoning-delta" in b)
                s.app.release_text()
                body += await read_body(head)
    headers = {name.decode(): value.decode() for name, value in head.headers}
    reply = Reply(head.status_code, headers, body)
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/event-stream"
    assert reply.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert "content-length" not in reply.headers
    chunks = reply.events()
    assert chunks[-1] is None  # data: [DONE]
    assert chunks[0] == {
        "type": "start",
        "messageId": "msg_c_2",
        "messageMetadata": {"pai": {"threadId": "c"}},
    }
    deltas = [c["delta"] for c in chunks[:-1] if c["type"] == "text-delta"]
    assert deltas == ["Hello ", "there, ", "friend."]
    assert [c["delta"] for c in chunks[:-1] if c["type"] == "reasoning-delta"] == ["Think", "ing."]
    assert chunks[-2]["type"] == "finish"
    assert chunks[-2]["finishReason"] == "stop"


async def test_an_approval_answered_in_the_message_continues_the_turn() -> None:
    with trio.fail_after(10):
        async with serving_http() as s:
            first = await request(s.url, "POST", "/api/chat", chat_body("c", user("pay 3")))
            assert "tool-approval-request" in types(first)
            assert first.events()[-2]["finishReason"] == "tool-calls"
            turn = await stored_turn(s.url, "c")
            pay = next(p for p in turn["parts"] if p["type"] == "tool-pay")
            # an answer the resume schema refuses: 422, and the action stays pending
            pay["state"] = "approval-responded"
            pay["approval"]["approved"] = "perhaps"
            refused = await request(s.url, "POST", "/api/chat", chat_body("c", user("pay 3"), turn))
            assert refused.status == 422
            assert "c" in refused.json()["error"]
            assert len(await s.rt.pending_actions("c")) == 1
            pay["approval"]["approved"] = True
            reply = await request(s.url, "POST", "/api/chat", chat_body("c", user("pay 3"), turn))
    kinds = types(reply)
    assert kinds[0] == "start"
    assert reply.events()[0]["messageId"] == turn["id"]
    assert "tool-input-available" not in kinds  # the client has it
    assert kinds.index("tool-output-available") < kinds.index("text-delta")
    assert reply.events()[-2]["finishReason"] == "stop"


async def test_a_new_message_while_a_run_waits_is_refused() -> None:
    with trio.fail_after(10):
        async with serving_http() as s:
            await request(s.url, "POST", "/api/chat", chat_body("c", user("pay 3")))
            busy = await request(s.url, "POST", "/api/chat", chat_body("c", user("hi", "u2")))
            assert busy.status == 409
            regenerate = chat_body("c", user("hi"))
            regenerate["trigger"] = "regenerate-message"
            assert (await request(s.url, "POST", "/api/chat", regenerate)).status == 400
            padded = await request(s.url, "POST", "/api/chat", chat_body(" c ", user("hi")))
            assert padded.status == 400
            assert "whitespace" in padded.json()["error"]


async def test_a_stream_resumes_from_the_turns_start_while_the_run_goes_on() -> None:
    with trio.fail_after(10):
        async with serving_http() as s:
            await request(s.url, "POST", "/api/chat", chat_body("c", user("ship box")))
            assert (await request(s.url, "GET", "/api/chat/c/stream")).status == 204
            turn = await stored_turn(s.url, "c")
            suspension = next(p for p in turn["parts"] if p["type"] == "data-pai-suspension")
            action_id = suspension["data"]["action"]["ref"]["actionId"]
            body = chat_body(
                "c",
                user("ship box"),
                turn,
                paiActions=[{"actionId": action_id, "resume": {"approved": True}}],
            )
            async with open_request(s.url, "POST", "/api/chat", body) as head:
                live = await read_body(head, until=lambda b: b"packing" in b)
                assert b'"transient":true' in live
                async with open_request(s.url, "GET", "/api/chat/c/stream") as resumed:
                    assert resumed.status_code == 200
                    replay = await read_body(resumed, until=lambda b: b"submitted" in b)
                    s.app.release()
                    replay += await read_body(resumed)
                rest = live + await read_body(head)
    replayed = Reply(200, {}, replay).events()
    assert replayed[-1] is None  # data: [DONE]
    replayed = replayed[:-1]
    assert replayed[0]["type"] == "start"
    assert replayed[0]["messageId"] == turn["id"]
    assert [c["type"] for c in replayed[1:3]] == ["start-step", "tool-input-available"]
    ship = [c for c in replayed if c["type"] == "tool-output-available"]
    assert ship[0]["output"] == {"shipped": "box"}
    assert replayed[-1]["type"] == "finish"
    continued = Reply(200, {}, rest).events()[:-1]
    assert [c["type"] for c in continued].count("tool-output-available") == 1
    assert continued[-1]["messageMetadata"]["pai"]["run"]["status"] == "completed"


async def test_a_run_goes_on_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    with trio.fail_after(20):
        with SqliteStore(db) as store:
            async with serving_http(store=store) as s:
                port = s.http.port
                await request(s.url, "POST", "/api/chat", chat_body("c", user("ship crate")))
        with SqliteStore(db) as store:
            async with serving_http(store=store, app=ChatApp(), port=port) as s:
                turn = await stored_turn(s.url, "c")
                [action] = (await request(s.url, "GET", "/api/chat/c/messages")).json()[
                    "pendingActions"
                ]
                action_id = action["ref"]["actionId"]
                wrong = await request(
                    s.url, "POST", f"/api/chat/c/actions/{action_id}", {"resume": {"approved": 3}}
                )
                assert wrong.status == 422
                assert wrong.json()["status"] == "rejected"
                answered = await request(
                    s.url,
                    "POST",
                    f"/api/chat/c/actions/{action_id}",
                    {"resume": {"approved": True}},
                )
                assert answered.json() == {"status": "accepted", "error": None}
                async with open_request(s.url, "GET", "/api/chat/c/stream") as head:
                    assert head.status_code == 200
                    body = await read_body(head, until=lambda b: b"submitted" in b)
                    s.app.release()
                    body += await read_body(head)
    chunks = Reply(200, {}, body).events()[:-1]
    assert chunks[0]["messageId"] == turn["id"]
    outputs = [c for c in chunks if c["type"] == "tool-output-available"]
    assert outputs[0]["output"] == {"shipped": "crate"}
    texts = [c["delta"] for c in chunks if c["type"] == "text-delta"]
    assert texts == ["done"]


async def test_mounts_are_served_beside_the_endpoints() -> None:
    async def hello(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})

    app = ChatApp()
    with trio.fail_after(10):
        async with (
            create_test_runtime(app.agent, model=app.model()) as rt,
            open_http_server(rt, lambda token: None, mounts={"/inbox": hello}) as http,
        ):
            reply = await request(http.url, "GET", "/inbox/page", token=None)
    assert reply.status == 200
    assert reply.body == b"/inbox/page"  # the mounted app does its own authentication


def test_pai_actors_serve_serves_the_endpoint_beside_the_websocket(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pai_actors._cli",
            "serve",
            "pai_actors.demo_app:factory",
            "--port",
            "0",
            "--db",
            str(tmp_path / "served.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        first, second = process.stdout.readline(), process.stdout.readline()
        assert re.search(r"on ws://\S+ ", first), (first, second)
        found = re.search(r"useChat endpoint: (http://\S+)/api/chat$", second.strip())
        assert found, (first, second)
        url = found.group(1)

        async def ask() -> tuple[Reply, Reply]:
            with trio.fail_after(10):
                posted = await request(url, "POST", "/api/chat", chat_body("cli", user("hi")))
                other = await request(url, "GET", "/api/chat/cli/messages", token=BOB)
                return posted, other

        posted, other = trio.run(ask)
        assert posted.status == 200
        assert posted.events()[-2]["type"] == "finish"
        assert other.status == 404
    finally:
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err


async def test_a_sub_agents_action_is_answered_through_the_chat_naming_its_thread() -> None:
    """Two sub-agents of a chat ask for approval under the same action id (an id is unique
    within its thread): the action route asks for the thread, then answers each."""
    from pai_actors._http.server import open_http_server
    from pai_actors.testing import create_test_runtime

    from .http_app import authenticate
    from .test_runtime_subagents_durability import tree_models, tree_pai

    events: list[str] = []
    with trio.fail_after(20):
        async with (
            create_test_runtime(tree_pai(events), model=tree_models()) as rt,
            open_http_server(rt, authenticate) as http,
        ):
            await rt.create_thread("tenant-a", thread_id="tree")
            await rt.send("tree", "go")
            await rt.wait_idle("tree")
            first, second = await rt.pending_actions("tree")
            assert first.ref.action_id == second.ref.action_id
            path = f"/api/chat/tree/actions/{first.ref.action_id}"
            ambiguous = await request(http.url, "POST", path, {"resume": {"approved": True}})
            assert ambiguous.status == 409
            assert "threadId" in ambiguous.json()["error"]
            for action in (first, second):
                body = {"resume": {"approved": True}, "threadId": action.ref.thread_id}
                assert (await request(http.url, "POST", path, body)).status == 200
            await rt.wait_idle("tree")
            state = await rt.get_state("tree")
    assert state.runs[-1].status == "completed"
    assert sorted(events) == ["pay p0", "pay p1"]


async def test_a_sub_agents_approval_is_shown_in_the_calling_turn_and_answered_there() -> None:
    """The turn's call runs a sub-agent that asks for an approval: the stream goes on while
    the sub-agent runs, shows its action as a ``data-pai-action`` part (its thread, its
    origin) after the calling part, and ends waiting; an answer sent with the continued
    message (``paiActions`` naming the sub-agent's thread) streams the rest of the turn."""
    from pai_actors._http.server import open_http_server

    from .http_app import authenticate
    from .test_runtime_subagents_durability import tree_models, tree_pai

    events: list[str] = []
    with trio.fail_after(20):
        async with (
            create_test_runtime(tree_pai(events, specialists=1), model=tree_models()) as rt,
            open_http_server(rt, authenticate) as http,
        ):
            first = await request(http.url, "POST", "/api/chat", chat_body("tree", user("go")))
            turn = await stored_turn(http.url, "tree")
            [sub_view] = await rt.pending_actions("tree")
            shown = [e for e in first.events() if e and e["type"] == "data-pai-action"]
            body = chat_body("tree", user("go"), turn)
            body["paiActions"] = [
                {
                    "actionId": sub_view.ref.action_id,
                    "threadId": sub_view.ref.thread_id,
                    "resume": {"approved": True},
                }
            ]
            second = await request(http.url, "POST", "/api/chat", body)
            final = await stored_turn(http.url, "tree")
    assert first.events()[-2]["finishReason"] == "tool-calls"
    [action] = shown
    assert action["id"] == f"{sub_view.ref.thread_id}:{sub_view.ref.action_id}"
    assert action["data"]["state"] == "pending"
    assert action["data"]["ref"]["threadId"] == sub_view.ref.thread_id
    assert [link["toolName"] for link in action["data"]["originChain"]] == ["ask"]
    ask = next(p for p in turn["parts"] if p["type"] == "tool-ask")
    assert action["data"]["toolCallId"] == ask["toolCallId"]
    kinds = [p["type"] for p in turn["parts"]]
    assert kinds.index("data-pai-action") == kinds.index("tool-ask") + 1
    # the answer: the sub-agent's call, the sub-agent, then the calling call and the turn
    assert events == ["pay p0"]
    assert second.events()[-2]["finishReason"] == "stop"
    resolved = [e for e in second.events() if e and e["type"] == "data-pai-action"]
    assert [e["data"]["state"] for e in resolved] == ["resolved"]
    assert "tool-output-available" in types(second)
    assert [p["type"] for p in final["parts"]][-2:] == ["step-start", "text"]
    assert not [p for p in final["parts"] if p["type"] == "data-pai-action"]
