"""``pai_actors.client`` end to end against a real server: loopback, port 0.

Like ``test_server.py`` these run on trio's real clock, not under the autojump
``MockClock``: the kernel's sockets do not advance a mock clock, so an autojumping clock
would fire timeouts (``fail_after``, trio-websocket's, the client's reconnect backoff) while
bytes are still in flight. Every test runs under ``trio.fail_after`` and orders events by
what it observes; ``wait_for`` polls only for network effects (a reconnection, a feed
closing on the server after its connection dropped), never to order events.

Connections are cut with ``protocol_app.Relay`` (a TCP relay that drops every connection
at once, as a network failure would) or by the server closing them.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
import trio
from trio_websocket import ConnectionRejected

from pai_actors import (
    ClientTool,
    FilePart,
    Finish,
    MemoryStore,
    MessageAppended,
    MessageDelta,
    ModelEvent,
    ModelRequest,
    ModelSettings,
    ResolveAtDeadline,
    ResumeEntry,
    RunStatusChanged,
    SuspendPoint,
    TextDelta,
    ThreadUpdate,
    ToolContext,
    ToolDataUpdated,
    ToolPartUpdated,
    WatchOverflow,
    create_pai,
    define_agent,
    define_tool,
    json_schema,
)
from pai_actors.client import (
    AuthenticationFailed,
    Client,
    ClientWatch,
    ConnectionLost,
    ServerError,
    ThreadResynced,
    open_client,
)
from pai_actors.server import Identity, open_server
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

from .protocol_app import (
    ALICE,
    BOB,
    App,
    Relay,
    Served,
    authenticate,
    open_relay,
    serving,
    tool_parts,
    wait_for,
)
from .protocol_app import collect_sockets as collect_sockets  # the fixture, by name


def completed(update: ThreadUpdate | ThreadResynced) -> bool:
    return isinstance(update, RunStatusChanged) and update.run.status == "completed"


def shows_item(item_id: str) -> Callable[[ThreadUpdate | ThreadResynced], bool]:
    """The update that puts a tool part showing the stored data item ``item_id``."""

    def done(update: ThreadUpdate | ThreadResynced) -> bool:
        if not isinstance(update, ToolPartUpdated):
            return False
        return any(item.id == item_id for item in update.part.data.get("progress", ()))

    return done


async def collect_until(
    updates: ClientWatch,
    done: Callable[[ThreadUpdate | ThreadResynced], bool],
    into: list[ThreadUpdate | ThreadResynced],
) -> None:
    async for update in updates:
        into.append(update)
        if done(update):
            return
    raise AssertionError(f"the watch ended after {into!r}")


def wire(thing: Any) -> Any:
    return thing.to_wire()


# -- every operation through the client ---------------------------------------------------------


async def test_the_client_creates_sends_reads_and_resolves() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_client(s.url, token=ALICE) as client:
            thread = await client.create_thread()
            assert wire(thread.get_state()) == wire(await s.rt.get_state(thread.thread_id))
            assert await client.thread(thread.thread_id) is thread

            others = [await client.create_thread() for _ in range(3)]
            for t in (thread, *others):
                await t.send("invoice ACME")
                await s.rt.wait_idle(t.thread_id)
            assert thread.get_state().messages == ()  # not watched: as last read
            state = await thread.refresh()
            assert wire(state) == wire(await s.rt.get_state(thread.thread_id))
            [action] = thread.pending_actions()
            assert action.name == "approve.approval"
            assert action.input == {"customer": "ACME", "amount": 120.0}
            assert action.resume_schema is not None
            assert action.resume_schema["required"] == ["approved"]
            everything = await client.pending_actions()
            assert [a.ref for a in everything] == [
                a.ref for t in (thread, *others) for a in await client.pending_actions(t.thread_id)
            ]

            rejected = await action.submit({"approved": "maybe"})
            assert rejected.status == "rejected"
            assert [a.ref for a in await client.pending_actions(thread.thread_id)] == [action.ref]
            assert (await action.submit({"approved": True})).status == "accepted"
            assert "already resolved" in ((await action.submit({"approved": True})).error or "")
            cancel, fail, keep = [(await client.pending_actions(t.thread_id))[0] for t in others]
            assert (await cancel.cancel("not now")).status == "accepted"
            assert (await fail.fail(RuntimeError("no paper"))).status == "accepted"
            run_id = keep.ref.run_id
            cancelled = await others[2].cancel_run(run_id, "changed my mind")
            assert (cancelled.run_id, cancelled.status) == (run_id, "cancelled")
            for t in (thread, *others):
                await s.rt.wait_idle(t.thread_id)
            states = [await t.refresh() for t in (thread, *others)]
            assert await client.pending_actions() == []

            report = await client.create_thread()
            await report.send("report south")
            await s.rt.wait_idle(report.thread_id)
            [part] = tool_parts(await report.refresh())
            assert isinstance(part.output, dict)
            download = await client.read_file(str(part.output["fileId"]))
    parts = [tool_parts(state)[0] for state in states]
    assert [(p.state, p.error_text) for p in parts] == [
        ("output-available", None),
        ("output-error", "The tool call was cancelled: not now"),
        ("output-error", "no paper"),
        ("output-error", "The tool call was cancelled: changed my mind"),
    ]
    assert [state.runs[-1].status for state in states] == ["completed"] * 3 + ["cancelled"]
    assert download.body == b"name,total\nsouth,12\n"
    assert (download.file.filename, download.file.media_type) == ("report.csv", "text/csv")


async def test_a_watch_applies_updates_live_and_resolves_the_action_a_part_shows() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_client(s.url, token=ALICE) as client:
            thread = await client.create_thread()
            seen: list[ThreadUpdate | ThreadResynced] = []
            async with (
                s.rt.watch(thread.thread_id, deltas=True) as truth,
                thread.watch(deltas=True) as updates,
                thread.watch() as plain,
            ):
                await thread.send("invoice ACME")
                await collect_until(updates, lambda _: bool(thread.pending_actions()), seen)
                state = thread.get_state()
                [message] = [m for m in state.messages if m.role == "assistant"]
                [part] = tool_parts(state)
                action = thread.get_pending_action(message, part)
                assert action is not None
                assert action.ref.action_id == part.pending_suspension.action_id  # type: ignore[union-attr]
                assert thread.get_pending_action(state.messages[0], part) is None  # wrong message
                rejected = await action.submit({"approved": 1.5})
                assert rejected.status == "rejected"
                assert thread.get_pending_action(message, part) is not None  # still pending
                assert (await action.submit({"approved": True, "note": "ok"})).status == "accepted"
                await collect_until(updates, completed, seen)
                live = thread.get_state()
                expected = drain(truth)
                without_deltas: list[ThreadUpdate | ThreadResynced] = []
                await collect_until(plain, completed, without_deltas)  # buffered meanwhile
                fresh = await thread.refresh()
            stored = await s.rt.get_state(thread.thread_id)
    # Every update, once and in order, as the runtime published it, transient data included.
    assert [wire(u) for u in seen] == [wire(u) for u in expected]
    # The model's text reached the client as it streamed, before its message was stored.
    [answer] = [m for m in stored.messages if m.role == "assistant" and m.parts[-1].type == "text"]
    streamed = [u for u in seen if isinstance(u, MessageDelta) and u.message_id == answer.id]
    assert streamed
    assert "".join(u.delta for u in streamed) == answer.parts[-1].text  # type: ignore[union-attr]
    # A watch that did not ask for deltas gets the same updates without them.
    assert [wire(u) for u in without_deltas] == [
        wire(u) for u in seen if not isinstance(u, MessageDelta)
    ]
    assert [u.item.value for u in seen if isinstance(u, ToolDataUpdated)] == [
        {"step": "upload 50%"},
        {"step": "upload 100%"},
    ]
    # The live state shows the transient item; what the server sends as state never does.
    [live_part] = tool_parts(live)
    assert [item.id for item in live_part.data["progress"]] == ["status", "upload"]
    assert wire(fresh) == wire(stored)
    [stored_part] = tool_parts(stored)
    assert [item.id for item in stored_part.data["progress"]] == ["status"]
    assert thread.get_pending_action(message, stored_part) is None


def drain(watch: Any) -> list[ThreadUpdate]:
    """Every update a runtime watch holds now."""
    updates = []
    while True:
        try:
            updates.append(watch.receive_nowait())
        except trio.WouldBlock:
            return updates


async def test_another_scope_through_the_client() -> None:
    with trio.fail_after(10):
        async with (
            serving() as s,
            open_client(s.url, token=ALICE) as alice,
            open_client(s.url, token=BOB) as bob,
        ):
            thread = await alice.create_thread()
            await thread.send("invoice ACME")
            await s.rt.wait_idle(thread.thread_id)
            [action] = await alice.pending_actions()
            with pytest.raises(ServerError) as not_found:
                await bob.thread(thread.thread_id)
            assert await bob.pending_actions() == []
            stolen = bob.action_view({"ref": action.ref.to_wire(), "input": None})
            result = await stolen.submit({"approved": True})
            assert [a.ref for a in await alice.pending_actions()] == [action.ref]
    assert not_found.value.code == "not-found"
    assert result.status == "rejected"
    assert "not in your scope" in (result.error or "")


@pytest.mark.usefixtures("collect_sockets")
async def test_a_refused_token_raises_authentication_failed() -> None:
    def broken(token: str) -> Identity | None:
        if token == "raise":
            raise RuntimeError("the identity provider is down")
        return authenticate(token)

    with trio.fail_after(10):
        async with serving(authenticate=broken) as s:
            with pytest.raises(AuthenticationFailed, match="refused the token"):
                async with open_client(s.url, token="mallory-token"):
                    pass  # pragma: no cover
            with pytest.raises(ConnectionRejected) as failed:
                async with open_client(s.url, token="raise"):
                    pass  # pragma: no cover
    assert failed.value.status_code == 500


# -- reconnecting -------------------------------------------------------------------------------


async def sever_at_relay(served: Served, relay: Relay) -> None:
    relay.sever()


async def close_at_server(served: Served, relay: Relay) -> None:
    for connection in list(served.server._connections):
        await connection.ws.aclose(1012, "restarting")


@pytest.mark.parametrize("cut", [sever_at_relay, close_at_server], ids=["severed", "closed"])
@pytest.mark.usefixtures("collect_sockets")
async def test_a_client_reconnects_mid_stream_without_loss_or_duplication(cut: Any) -> None:
    with trio.fail_after(15):
        async with (
            serving() as s,
            open_relay(s.server.port) as relay,
            open_client(relay.url, token=ALICE, min_backoff=0.01) as client,
        ):
            thread = await client.create_thread()
            seen: list[ThreadUpdate | ThreadResynced] = []
            async with s.rt.watch(thread.thread_id) as truth, thread.watch() as updates:
                await thread.send("tick 6")
                s.app.tick(2)
                await collect_until(updates, shows_item("t1"), seen)
                await cut(s, relay)
                s.app.tick(2)  # written while the client is away or coming back
                await wait_for(lambda: client.connections == 2)
                s.app.tick(2)  # written once it is back
                await collect_until(updates, completed, seen)
                expected = drain(truth)
            state = await s.rt.get_state(thread.thread_id)
            assert wire(thread.get_state()) == wire(state)
    assert not [u for u in seen if isinstance(u, ThreadResynced)]
    assert [wire(u) for u in seen] == [wire(u) for u in expected]
    assert relay.connections == 2


@asynccontextmanager
async def second_server(served: Served, relay: Relay) -> AsyncIterator[None]:
    """Point the relay at a new server on the same runtime (it has none of the old updates)."""
    async with open_server(served.rt, authenticate=authenticate, instance="second") as server:
        relay.target = server.port
        yield


@asynccontextmanager
async def old_feed_expired(served: Served, relay: Relay) -> AsyncIterator[None]:
    """Keep the client away until the server's feed of the thread expired (``linger=0``)."""
    await wait_for(lambda: served.server.statistics().feeds == 0)
    yield


@pytest.mark.parametrize("gone", [old_feed_expired, second_server], ids=["expired", "new-server"])
@pytest.mark.usefixtures("collect_sockets")
async def test_a_client_resyncs_when_the_server_lost_its_cursor(gone: Any) -> None:
    with trio.fail_after(15):
        async with (
            serving(linger=0) as s,
            open_relay(s.server.port) as relay,
            open_client(relay.url, token=ALICE, min_backoff=0.01) as client,
        ):
            thread = await client.create_thread()
            seen: list[ThreadUpdate | ThreadResynced] = []
            async with thread.watch() as updates:
                await thread.send("tick 3")
                s.app.tick()
                await collect_until(updates, shows_item("t0"), seen)
                relay.hold()
                relay.sever()
                async with gone(s, relay):
                    s.app.tick(2)
                    await s.rt.wait_idle(thread.thread_id)
                    relay.release()
                    await collect_until(updates, lambda u: isinstance(u, ThreadResynced), seen)
                    resynced = thread.get_state()
                    assert wire(resynced) == wire(await s.rt.get_state(thread.thread_id))
                    # The watch goes on, on the new stream.
                    await thread.send("hello")
                    await collect_until(updates, completed, seen)
                    state = await s.rt.get_state(thread.thread_id)
                    assert wire(thread.get_state()) == wire(state)
    [resync] = [u for u in seen if isinstance(u, ThreadResynced)]
    assert wire(resync.state) == wire(resynced)
    assert [run.status for run in state.runs] == ["completed", "completed"]
    assert client.connections == 2


@pytest.mark.usefixtures("collect_sockets")
async def test_a_watch_the_new_server_refuses_ends_with_its_error_and_the_client_goes_on() -> None:
    with trio.fail_after(10):
        async with (
            serving() as first,
            serving() as elsewhere,  # another runtime and store: the thread is not there
            open_relay(first.server.port) as relay,
            open_client(relay.url, token=ALICE, min_backoff=0.01) as client,
        ):
            thread = await client.create_thread()
            await elsewhere.rt.create_thread("tenant-x")  # ids differ: this one is taken
            async with thread.watch() as updates:
                relay.target = elsewhere.server.port
                relay.sever()
                with pytest.raises(ServerError) as gone:
                    await updates.receive()
            other = await client.create_thread()  # the client lives on, on the new server
            assert other.thread_id != thread.thread_id
            assert await elsewhere.rt.store.get_thread(other.thread_id) is not None
    assert gone.value.code == "not-found"
    assert client.connections == 2


# -- the server going away ----------------------------------------------------------------------


@pytest.mark.usefixtures("collect_sockets")
async def test_leaving_the_server_ends_a_client_that_does_not_reconnect() -> None:
    with trio.fail_after(10):
        async with serving() as s, AsyncExitStack() as watching:
            async with trio.open_nursery() as nursery:  # a client that outlives the server
                async with open_server(s.rt, authenticate=authenticate) as server:
                    client = await nursery.start(hold_client, server.url)
                    thread = await client.create_thread()
                    updates = await watching.enter_async_context(thread.watch())
                # The server closed the connection: the client gives up, and says so.
                with pytest.raises(ConnectionLost, match="was closed"):
                    await updates.receive()
                with pytest.raises(ConnectionLost):
                    await thread.refresh()
                nursery.cancel_scope.cancel()
    assert client.connections == 1


async def hold_client(
    url: str, *, task_status: trio.TaskStatus[Client] = trio.TASK_STATUS_IGNORED
) -> None:
    async with open_client(url, token=ALICE, reconnect=False) as client:
        task_status.started(client)
        await trio.sleep_forever()


async def test_a_watch_that_falls_behind_ends_with_watch_overflow() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_client(s.url, token=ALICE) as client:
            thread = await client.create_thread()
            async with thread.watch(capacity=2) as updates:
                await thread.send("hello")  # four updates: two messages, two run statuses
                await wait_for(lambda: [r.status for r in thread.get_state().runs] == ["completed"])
                first = [await updates.receive(), await updates.receive()]
                with pytest.raises(WatchOverflow, match="fell more than its capacity"):
                    await updates.receive()
            assert wire(thread.get_state()) == wire(await s.rt.get_state(thread.thread_id))
    assert [type(u) for u in first] == [MessageAppended, RunStatusChanged]


async def test_watches_keep_their_pending_actions_when_the_runtime_forgets_old_messages() -> None:
    """The runtime's message and agent indexes are bounded: with more threads busy than
    they hold, the server reads a forwarded update's message back from the store."""
    with trio.fail_after(20):
        async with serving() as s, open_client(s.url, token=ALICE) as client:
            s.rt._message_index._capacity = 1  # (private: no knob makes them this small)
            s.rt._thread_agents._capacity = 1
            threads = [await client.create_thread() for _ in range(4)]
            async with AsyncExitStack() as stack:
                watches = [await stack.enter_async_context(t.watch()) for t in threads]
                for thread in threads:
                    await thread.send("invoice ACME")
                for thread, updates in zip(threads, watches, strict=True):
                    await collect_until(updates, lambda _, t=thread: bool(t.pending_actions()), [])
                for thread in threads:
                    [action] = thread.pending_actions()
                    assert action.name == "approve.approval"
                    assert (await action.submit({"approved": True})).status == "accepted"
                for thread, updates in zip(threads, watches, strict=True):
                    await collect_until(updates, completed, [])
                    assert thread.get_state().runs[-1].status == "completed"
                    assert not thread.pending_actions()


async def test_a_client_forgets_the_threads_the_application_dropped() -> None:
    with trio.fail_after(10):
        async with serving() as s, open_client(s.url, token=ALICE) as client:
            kept = await client.create_thread()
            for _ in range(3):
                await client.create_thread()  # dropped at once
            gc.collect()
            assert list(client._threads) == [kept.thread_id]
            assert await client.thread(kept.thread_id) is kept


class GatedApp(App):
    """The protocol app, whose model writes ``Hel``, waits for ``gate``, then ``lo``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = trio.Event()

    def model(self) -> Any:
        gate = self.gate

        class Gated:
            async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
                yield TextDelta("Hel")
                await gate.wait()
                yield TextDelta("lo")
                yield Finish("stop")

        return Gated()


def is_delta(update: ThreadUpdate | ThreadResynced) -> bool:
    return isinstance(update, MessageDelta)


def is_answer(update: ThreadUpdate | ThreadResynced) -> bool:
    return isinstance(update, MessageAppended) and update.message.role == "assistant"


async def test_a_client_watching_mid_step_gets_the_text_so_far_then_the_rest() -> None:
    app = GatedApp()
    with trio.fail_after(10):
        async with (
            serving(app=app) as s,
            open_client(s.url, token=ALICE) as first,
            open_client(s.url, token=ALICE) as second,
        ):
            thread = await first.create_thread()
            early: list[ThreadUpdate | ThreadResynced] = []
            async with thread.watch(deltas=True) as updates:
                await thread.send("hello")
                await collect_until(updates, is_delta, early)
                late: list[ThreadUpdate | ThreadResynced] = []
                joined = await second.thread(thread.thread_id)
                async with joined.watch(deltas=True) as later:
                    app.gate.set()
                    await collect_until(later, is_answer, late)
                await collect_until(updates, is_answer, early)
    assert [u.delta for u in early if isinstance(u, MessageDelta)] == ["Hel", "lo"]
    assert [u.delta for u in late if isinstance(u, MessageDelta)] == ["Hel", "lo"]
    [answer] = [u for u in late if is_answer(u)]
    assert answer.message.parts[-1].text == "Hello"  # type: ignore[union-attr]
    assert "Hello" not in str(joined.get_state().messages[:-1])  # deltas are not state


async def test_a_client_sends_files_with_its_message() -> None:
    photo = FilePart(media_type="image/png", url="data:image/png;base64,iVBORw0KGgo=")
    with trio.fail_after(10):
        async with serving() as s, open_client(s.url, token=ALICE) as client:
            thread = await client.create_thread()
            await thread.send("look", files=[photo])
            await s.rt.wait_idle(thread.thread_id)
            stored = await s.rt.get_state(thread.thread_id)
    assert stored.messages[0].parts[1] == photo


class BurstApp(App):
    """The protocol app, whose model writes 2,000 fragments without a checkpoint."""

    def model(self) -> Any:
        class Burst:
            async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
                for i in range(2_000):
                    yield TextDelta(f"w{i} ")
                yield Finish("stop")

        return Burst()


async def test_a_fast_model_and_a_small_watch_lose_no_text_and_no_watch() -> None:
    expected = "".join(f"w{i} " for i in range(2_000))
    with trio.fail_after(20):
        async with serving(app=BurstApp()) as s, open_client(s.url, token=ALICE) as client:
            thread = await client.create_thread()
            seen: list[ThreadUpdate | ThreadResynced] = []
            async with thread.watch(deltas=True, capacity=8) as updates:
                await thread.send("go")
                await collect_until(updates, is_answer, seen)
    fragments = [u.delta for u in seen if isinstance(u, MessageDelta)]
    assert "".join(fragments) == expected
    [answer] = [u for u in seen if is_answer(u)]
    assert answer.message.parts[-1].text == expected  # type: ignore[union-attr]


async def test_a_client_picks_the_agent_that_runs_a_thread() -> None:
    def answering(name: str) -> Any:
        return define_agent(name=name, tools={}, model=ScriptedModel([text(f"{name} here")]))

    pai = create_pai({"billing": answering("billing"), "support": answering("support")})
    with trio.fail_after(10):
        async with (
            create_test_runtime(pai, model={}) as rt,
            open_server(rt, authenticate=authenticate) as server,
            open_client(server.url, token=ALICE) as client,
        ):
            default = await client.create_thread()
            picked = await client.create_thread(agent_id="support")
            for thread in (default, picked):
                await thread.send("who is there?")
                await rt.wait_idle(thread.thread_id)
            answers = [
                (await rt.get_state(t.thread_id)).messages[-1].parts[-1].text  # type: ignore[union-attr]
                for t in (default, picked)
            ]
            with pytest.raises(ServerError) as refused:
                await client.create_thread(agent_id="sales")
    assert answers == ["billing here", "support here"]  # the first agent by default
    assert refused.value.code == "invalid-request"
    assert "'sales'" in str(refused.value)
    assert "billing" in str(refused.value)  # the agents it hosts


async def test_a_client_sends_model_settings_with_its_message() -> None:
    asked = ModelSettings(temperature=0.2, max_tokens=64, stop=("END",), tool_choice="none")
    store = MemoryStore()
    with trio.fail_after(10):
        async with serving(store=store) as s, open_client(s.url, token=ALICE) as client:
            thread = await client.create_thread()
            run_id = await thread.send("hello", model_settings=asked)
            await s.rt.wait_idle(thread.thread_id)
            run = await store.get_run(run_id)
            with pytest.raises(ServerError) as refused:
                await client.request(
                    "send", threadId=thread.thread_id, text="x", modelSettings={"maxTokens": 0}
                )
    assert run is not None
    assert ModelSettings.from_json(run.model_settings) == asked
    assert refused.value.code == "invalid-request"


async def test_a_pending_actions_deadline_reaches_the_client() -> None:
    async def ask(ctx: ToolContext) -> Any:
        if isinstance(ctx.entry, ResumeEntry):
            return "ok"
        return ctx.suspend("approval", {}, deadline=timedelta(hours=1))

    point = SuspendPoint(
        suspend_schema=json_schema({"type": "object"}),
        resume_schema=json_schema({"type": "object"}),
    )
    asking = define_tool(
        id="test.ask.v1",
        description="Ask.",
        input_schema=json_schema({"type": "object"}),
        suspend={"approval": point},
        execute=ask,
    )
    model = ScriptedModel([tool_call("ask", {}), text("done")])
    agent = define_agent(name="asker", tools={"ask": asking})
    with trio.fail_after(10):
        async with (
            create_test_runtime(agent, model=model) as rt,
            open_server(rt, authenticate=authenticate) as server,
            open_client(server.url, token=ALICE) as client,
        ):
            thread = await client.create_thread()
            await thread.send("ask me")
            await rt.wait_idle(thread.thread_id)
            [here] = await rt.pending_actions(thread.thread_id)
            [there] = await client.pending_actions(thread.thread_id)
            listed = await client.request("listPendingActions", threadId=thread.thread_id)
    assert here.expires_at is not None
    assert there.expires_at == here.expires_at
    [wire] = listed["actions"]
    assert wire["expiresAt"] == here.expires_at.isoformat().replace("+00:00", "Z")


async def test_a_client_tools_deadline_crosses_the_wire() -> None:
    pick = ClientTool(
        "pickDate",
        "Ask the user for a date.",
        {"type": "object"},
        deadline=timedelta(minutes=5),
        on_deadline=ResolveAtDeadline("2026-01-01"),
    )
    model = ScriptedModel([tool_call("pickDate", {}), text("done")])
    agent = define_agent(name="planner", tools={})
    with trio.fail_after(10):
        async with (
            create_test_runtime(agent, model=model) as rt,
            open_server(rt, authenticate=authenticate) as server,
            open_client(server.url, token=ALICE) as client,
        ):
            thread = await client.create_thread()
            await thread.send("when?", client_tools=[pick])
            await rt.wait_idle(thread.thread_id)
            [action] = await rt.pending_actions(thread.thread_id)
            with pytest.raises(ServerError) as refused:
                await client.request(
                    "send",
                    threadId=thread.thread_id,
                    text="x",
                    clientTools=[{"name": "t", "deadline": 5, "onDeadline": {"kind": "later"}}],
                )
    assert action.expires_at is not None
    assert refused.value.code == "invalid-request"
    assert "not a deadline outcome" in str(refused.value)
