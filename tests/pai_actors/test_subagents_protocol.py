"""A sub-agent's pending action through the protocol: listed with the calling thread's, with
its ``originChain``, resolved by a client, and shown by the CLI (loopback, port 0, trio's
real clock, as the other protocol tests)."""

from __future__ import annotations

import json

import trio

from pai_actors._cli.actions import describe
from pai_actors.client import ServerError, open_client
from pai_actors.server import open_server
from pai_actors.testing import create_test_runtime

from .protocol_app import ALICE, BOB, authenticate
from .test_runtime_subagents_durability import tree_models, tree_pai


async def test_a_sub_agents_action_reaches_a_client_with_its_origin_chain() -> None:
    events: list[str] = []
    with trio.fail_after(20):
        async with (
            create_test_runtime(tree_pai(events, depth=2), model=tree_models()) as rt,
            open_server(rt, authenticate=authenticate) as server,
            open_client(server.url, token=ALICE) as client,
        ):
            thread = await client.create_thread(agent_id="front")
            await thread.send("go")
            await rt.wait_idle(thread.thread_id)
            actions = await client.pending_actions(thread.thread_id)
            scoped = await client.pending_actions()
            local = await rt.pending_actions(thread.thread_id)
            shown = describe(actions[0])
            raw = await client.request("listPendingActions", threadId=thread.thread_id)
            async with open_client(server.url, token=BOB) as bob:
                refused = await bob.submit_action(actions[0].ref, {"approved": True})
            for action in actions:
                assert (await action.submit({"approved": True})).status == "accepted"
            await rt.wait_idle(thread.thread_id)
            state = await thread.refresh()
            try:
                await client.request("createThread", agentId="nobody")
            except ServerError as exc:
                unknown = str(exc)
    assert [a.origin_chain for a in actions] == [a.origin_chain for a in local]
    assert [a.ref for a in actions] == [a.ref for a in local]
    assert len(actions) == 2
    chain = actions[0].origin_chain
    assert [(link.tool_name, link.agent_id) for link in chain] == [
        ("ask", "middle"),
        ("relay", "payer"),
    ]
    assert chain[0].thread_id == thread.thread_id
    assert chain[-1].sub_thread_id == actions[0].ref.thread_id
    wire = raw["actions"][0]["originChain"]
    assert wire[0] == {
        "threadId": thread.thread_id,
        "runId": chain[0].run_id,
        "messageId": chain[0].message_id,
        "toolCallId": chain[0].tool_call_id,
        "toolName": "ask",
        "agentId": "middle",
        "subThreadId": chain[0].sub_thread_id,
    }
    # the scope's listing has them too (thread by thread), each with its chain
    assert sorted(a.ref.action_id + a.ref.thread_id for a in scoped) == sorted(
        a.ref.action_id + a.ref.thread_id for a in actions
    )
    assert all(a.origin_chain for a in scoped)
    assert "via: ask" in shown
    assert "-> agent middle" in shown
    assert "-> agent payer" in shown
    assert refused.status == "rejected"
    assert state.runs[-1].status == "completed"
    assert sorted(events) == ["pay p0", "pay p1"]
    assert "nobody" in unknown
    assert json.dumps(wire)  # plain JSON
