"""The sans-IO protocol core: :class:`UpdateLog` numbers a thread's updates, a
:class:`ThreadReplica` rebuilds the thread from a snapshot and the update frames after it.

The state machine plays a server and two clients over an unreliable transport: a "truth"
thread (the wire dicts the runtime would show) changes by realistic updates (each built with
the runtime's own wire models), the server numbers them in an ``UpdateLog`` of small capacity
and keeps a replica, and each client receives frames with rules for delivery, lost
connections, reconnecting from its cursor (a replay, or a snapshot of the server's replica),
duplicated and lost frames, and server restarts (a new epoch). Whenever a client has caught
up, its state is the truth's, its live view is the truth plus the transient tool data it
received since its snapshot (the latest write of each item winning), and its pending actions
are those the ``tool-part-updated`` frames said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from pai_actors import (
    Message,
    MessageAppended,
    MessageReplaced,
    PendingActionRef,
    RunState,
    RunStatusChanged,
    SuspensionView,
    TextPart,
    ToolApproval,
    ToolDataItem,
    ToolDataUpdated,
    ToolPart,
    ToolPartUpdated,
)
from pai_actors._core.parts import Role
from pai_actors._protocol.frames import Cursor, action_wire, snapshot_frame
from pai_actors._protocol.replica import ThreadReplica, UpdateLog

THREAD = "thread_1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHANNELS = ("progress", "log")
ITEM_IDS = ("a", "b", "c")
PartKind = Literal["executing", "suspended", "approval", "output", "error"]
PART_KINDS: tuple[PartKind, ...] = ("executing", "suspended", "approval", "output", "error")


def at(tick: int) -> datetime:
    return T0 + timedelta(seconds=tick)


@dataclass
class Call:
    """A tool call of the truth: what its part shows."""

    call_id: str
    message_id: str
    tool: str  # "ask" (type "tool-ask") or "pickColor" (a "dynamic-tool")
    kind: PartKind = "executing"
    data: dict[str, list[ToolDataItem]] = field(default_factory=dict)
    tick: int = 0

    def part(self) -> ToolPart:
        state: Any = "input-available"
        extra: dict[str, Any] = {}
        if self.kind == "suspended":
            view = SuspensionView(
                action_id=f"act_{self.call_id}",
                name="approval",
                input={"call": self.call_id},
                suspended_at=at(self.tick),
                state="pending",
            )
            extra = {"suspensions": (view,), "pending_suspension": view}
        elif self.kind == "approval":
            state = "approval-requested"
            extra = {"approval": ToolApproval(id=f"appr_{self.call_id}")}
        elif self.kind == "output":
            state = "output-available"
            extra = {"output": {"done": self.tick}}
        elif self.kind == "error":
            state = "output-error"
            extra = {"error_text": f"failed at {self.tick}"}
        return ToolPart(
            type="dynamic-tool" if self.tool == "pickColor" else f"tool-{self.tool}",
            tool_name=self.tool,
            tool_call_id=self.call_id,
            state=state,
            input={"n": 1},
            data={channel: tuple(items) for channel, items in self.data.items()},
            **extra,
        )

    def action(self) -> dict[str, Any] | None:
        """The pending action this part shows, as a ``tool-part-updated`` frame carries it."""
        if self.kind not in ("suspended", "approval"):
            return None
        suspend = "approval" if self.kind == "suspended" else None
        action_id = f"act_{self.call_id}" if suspend else f"appr_{self.call_id}"
        name = f"{self.tool}.{suspend}" if suspend else self.tool
        ref = PendingActionRef(
            thread_id=THREAD,
            tool_name=self.tool,
            suspend_name=suspend,
            message_id=self.message_id,
            tool_call_id=self.call_id,
            run_id="run_1",
            action_id=action_id,
            name=name,
        )
        return action_wire(name, {"call": self.call_id}, ref, {"type": "object"})


@dataclass
class Truth:
    """The thread as the runtime has it, plus the transient data it published."""

    # (message id, role, text, tool call ids), oldest first
    messages: list[tuple[str, Role, str, list[str]]] = field(default_factory=list)
    calls: dict[str, Call] = field(default_factory=dict)
    runs: list[RunState] = field(default_factory=list)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    g: int = 0  # updates published so far, over every epoch
    transient: list[tuple[int, str, str, dict[str, Any]]] = field(default_factory=list)
    durable_at: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def message(self, message_id: str) -> Message:
        for mid, role, text, call_ids in self.messages:
            if mid == message_id:
                parts: list[Any] = [TextPart(text=text)] if text else []
                parts += [self.calls[c].part() for c in call_ids]
                return Message(id=mid, role=role, parts=tuple(parts))
        raise AssertionError(message_id)

    def state_wire(self) -> dict[str, Any]:
        return {
            "version": 1,
            "threadId": THREAD,
            "messages": [self.message(m[0]).to_wire() for m in self.messages],
            "runs": [run.to_wire() for run in self.runs],
        }

    def pending_actions(self) -> list[dict[str, Any]]:
        return [
            self.pending[call_id]
            for _, _, _, call_ids in self.messages
            for call_id in call_ids
            if call_id in self.pending
        ]

    def live_wire(self, since: int) -> dict[str, Any]:
        """The state plus the transient items published after update ``since`` that no
        durable write of the same item followed (the latest write wins); items that are
        only transient come after the stored ones, in the order first written."""
        latest: dict[tuple[str, str, str], dict[str, Any]] = {}
        for g, call_id, channel, item in self.transient:
            key = (call_id, channel, item["id"])
            if g > since and g > self.durable_at.get(key, 0):
                latest[key] = item
        state = self.state_wire()
        for message in state["messages"]:
            parts = []
            for part in message["parts"]:
                mine = [
                    (ch, it) for (c, ch, _), it in latest.items() if c == part.get("toolCallId")
                ]
                if mine:
                    data = {ch: list(items) for ch, items in part["data"].items()}
                    for channel, item in mine:
                        items = data.setdefault(channel, [])
                        ids = [old["id"] for old in items]
                        if item["id"] in ids:
                            items[ids.index(item["id"])] = item
                        else:
                            items.append(item)
                    part = {**part, "data": data}
                parts.append(part)
            message["parts"] = parts
        return state


@dataclass
class Server:
    log: UpdateLog
    replica: ThreadReplica
    g0: int  # truth.g when this epoch began: seq s of this epoch is update g0 + s


Delivery = tuple[dict[str, Any], Literal["fresh", "copy"]]


@dataclass
class Client:
    replica: ThreadReplica | None = None
    connected: bool = False
    inbox: list[Delivery] = field(default_factory=list)
    lost: bool = False  # a frame of this connection was lost: the next one is a gap
    since: int = 0  # the update (g) its snapshot was taken at
    applied: list[dict[str, Any]] = field(default_factory=list)


def view(replica: ThreadReplica) -> tuple[Any, ...]:
    """Everything a replica shows, to check that a frame changed nothing."""
    return (
        replica.cursor,
        replica.state_wire(),
        replica.state_wire(live=True),
        replica.pending_actions(),
        dict(replica.pending),
    )


class ReplicaMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.truth = Truth()
        self.clients = [Client(), Client()]
        self.epochs = 0
        self.capacity = 1
        self.g0: dict[str, int] = {}
        self.published: dict[tuple[str, int], dict[str, Any]] = {}

    @initialize(capacity=st.integers(1, 6), tools=st.lists(st.just("ask"), max_size=2))
    def start(self, capacity: int, tools: list[str]) -> None:
        """A thread with an assistant message (and its calls, if any) before anyone watches;
        then both clients watch it."""
        self.capacity = capacity
        self.server = self.new_server()
        self.append_message("assistant", "", tools, "executing")
        for client in self.clients:
            self.subscribe(client)

    def new_server(self) -> Server:
        self.epochs += 1
        log = UpdateLog(THREAD, f"srv.{self.epochs}", self.capacity)
        self.g0[log.epoch] = self.truth.g
        frame = snapshot_frame(
            THREAD, log.cursor, self.truth.state_wire(), list(self.truth.pending_actions())
        )
        return Server(log, ThreadReplica.from_snapshot(frame), self.truth.g)

    # -- the truth changes ------------------------------------------------------------------

    def publish(self, update: dict[str, Any], action: dict[str, Any] | None = None) -> None:
        self.truth.g += 1
        actions: dict[str, Any] | None = None
        if update["type"] in ("message-appended", "message-replaced"):
            message_id = update["message"]["id"]
            [call_ids] = [m[3] for m in self.truth.messages if m[0] == message_id]
            actions = {call_id: self.truth.pending.get(call_id) for call_id in call_ids}
        frame = self.server.log.append(update, action, actions)
        assert frame["cursor"] == {"epoch": self.server.log.epoch, "seq": self.server.log.seq}
        self.published[(self.server.log.epoch, self.server.log.seq)] = frame
        assert self.server.replica.apply(frame) == "applied"
        for client in self.clients:
            if client.connected:
                client.inbox.append((frame, "fresh"))

    @rule(
        role=st.sampled_from(["user", "assistant"]),
        text=st.sampled_from(["", "hi", "é✓"]),
        tools=st.lists(st.sampled_from(["ask", "pickColor"]), max_size=2),
        kind=st.sampled_from(PART_KINDS),
    )
    def append_message(self, role: Role, text: str, tools: list[str], kind: PartKind) -> None:
        message_id = f"msg_{len(self.truth.messages) + 1}"
        call_ids = []
        for tool in tools if role == "assistant" else []:
            call_id = f"call_{len(self.truth.calls) + 1}"
            call = Call(call_id, message_id, tool, tick=self.truth.g)
            call.kind = kind  # a call may show a pending action from the message on
            self.truth.calls[call_id] = call
            action = call.action()
            if action is not None:
                self.truth.pending[call_id] = action
            call_ids.append(call_id)
        self.truth.messages.append((message_id, role, text, call_ids))
        message = self.truth.message(message_id)
        self.publish(MessageAppended(thread_id=THREAD, message=message).to_wire())

    @precondition(lambda self: self.truth.messages)
    @rule(data=st.data(), text=st.sampled_from(["", "more", "done."]), new_call=st.booleans())
    def replace_message(self, data: st.DataObject, text: str, new_call: bool) -> None:
        index = data.draw(st.integers(0, len(self.truth.messages) - 1), label="message")
        message_id, role, _, call_ids = self.truth.messages[index]
        if new_call and role == "assistant":  # a streamed step ends with its calls
            call_id = f"call_{len(self.truth.calls) + 1}"
            self.truth.calls[call_id] = Call(call_id, message_id, "ask", tick=self.truth.g)
            call_ids = [*call_ids, call_id]
        self.truth.messages[index] = (message_id, role, text, call_ids)
        message = self.truth.message(message_id)
        self.publish(MessageReplaced(thread_id=THREAD, message=message).to_wire())

    @precondition(lambda self: any(m[1] == "assistant" for m in self.truth.messages))
    @rule(data=st.data(), kind=st.sampled_from(PART_KINDS))
    def put_tool_part(self, data: st.DataObject, kind: PartKind) -> None:
        truth = self.truth
        choices = [*truth.calls, "new"]
        chosen = data.draw(st.sampled_from(choices), label="call")
        if chosen == "new":  # a part put into a message that did not show it yet
            assistant = [m for m in truth.messages if m[1] == "assistant"]
            message_id = data.draw(st.sampled_from([m[0] for m in assistant]), label="into")
            call_id = f"call_{len(truth.calls) + 1}"
            truth.calls[call_id] = Call(call_id, message_id, "ask")
            for index, (mid, role, text, call_ids) in enumerate(truth.messages):
                if mid == message_id:
                    truth.messages[index] = (mid, role, text, [*call_ids, call_id])
        else:
            call_id = chosen
        call = truth.calls[call_id]
        call.kind = kind
        call.tick = truth.g + 1
        # Often the durable write of an item the tool reported transiently before ("50%",
        # then "done" under the same id).
        reported = sorted({(ch, item["id"]) for _, c, ch, item in truth.transient if c == call_id})
        keys = st.tuples(st.sampled_from(CHANNELS), st.sampled_from(ITEM_IDS))
        write = data.draw(
            st.none() | keys | (st.sampled_from(reported) if reported else keys), label="write"
        )
        if write is not None:  # a durable tool-data write: replaces the item of its id
            channel, item_id = write
            item = ToolDataItem(id=item_id, value={"g": truth.g + 1}, updated_at=at(call.tick))
            items = call.data.setdefault(channel, [])
            ids = [old.id for old in items]
            if item_id in ids:
                items[ids.index(item_id)] = item
            else:
                items.append(item)
            truth.durable_at[(call_id, channel, item_id)] = truth.g + 1
        action = call.action()
        if action is None:
            truth.pending.pop(call_id, None)
        else:
            truth.pending[call_id] = action
        update = ToolPartUpdated(thread_id=THREAD, message_id=call.message_id, part=call.part())
        self.publish(update.to_wire(), action)

    @rule(
        data=st.data(),
        status=st.sampled_from(["running", "waiting", "completed", "failed", "cancelled"]),
    )
    def run_status(self, data: st.DataObject, status: Any) -> None:
        runs = self.truth.runs
        index = data.draw(st.integers(0, len(runs)), label="run")  # len(runs): a new run
        run_id = runs[index].run_id if index < len(runs) else f"run_{len(runs) + 1}"
        run = RunState(run_id=run_id, status=status, error="boom" if status == "failed" else None)
        if index < len(runs):
            runs[index] = run
        else:
            runs.append(run)
        self.publish(RunStatusChanged(thread_id=THREAD, run=run).to_wire())

    @precondition(lambda self: self.truth.calls)
    @rule(data=st.data(), channel=st.sampled_from(CHANNELS), item_id=st.sampled_from(ITEM_IDS))
    def transient_data(self, data: st.DataObject, channel: str, item_id: str) -> None:
        call_id = data.draw(st.sampled_from(sorted(self.truth.calls)), label="call")
        g = self.truth.g + 1
        item = ToolDataItem(id=item_id, value={"pct": g}, updated_at=at(g))
        update = ToolDataUpdated(
            thread_id=THREAD, tool_call_id=call_id, channel=channel, item=item
        ).to_wire()
        self.truth.transient.append((g, call_id, channel, item.to_wire()))
        self.publish(update)

    @rule()
    def restart_server(self) -> None:
        """A new server (a new epoch) from the stored thread: every connection is lost."""
        self.server = self.new_server()
        for client in self.clients:
            client.connected, client.inbox, client.lost = False, [], False

    # -- the clients ------------------------------------------------------------------------

    def client(self, data: st.DataObject) -> Client:
        return self.clients[data.draw(st.integers(0, len(self.clients) - 1), label="client")]

    @rule(data=st.data())
    def reconnect(self, data: st.DataObject) -> None:
        """Watch again from the client's cursor: the updates it missed, or a snapshot."""
        client = self.client(data)
        if client.connected:
            return
        self.subscribe(client)

    def subscribe(self, client: Client) -> None:
        log = self.server.log
        cursor = None if client.replica is None else client.replica.cursor
        frames = None if cursor is None else log.since(cursor)
        if cursor is not None:
            kept = min(log.seq, self.capacity)
            replayable = cursor.epoch == log.epoch and log.seq - kept <= cursor.seq <= log.seq
            assert (frames is not None) == replayable, (cursor, log.cursor, kept)
        if frames is not None:
            assert cursor is not None
            assert frames == [
                self.published[(log.epoch, seq)] for seq in range(cursor.seq + 1, log.seq + 1)
            ]
        else:
            state = self.server.replica.state_wire()
            assert state == self.truth.state_wire()  # never transient data in a snapshot
            actions = self.server.replica.pending_actions()
            frames = [snapshot_frame(THREAD, log.cursor, state, list(actions))]
        client.inbox = [(frame, "fresh") for frame in frames]
        client.connected, client.lost = True, False

    @rule(data=st.data())
    def drop_connection(self, data: st.DataObject) -> None:
        client = self.client(data)
        client.connected, client.inbox, client.lost = False, [], False

    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        client = self.client(data)
        if client.inbox:
            self.deliver_next(client)

    def deliver_next(self, client: Client) -> None:
        frame, tag = client.inbox.pop(0)
        if frame["type"] == "snapshot":
            client.replica = ThreadReplica.from_snapshot(frame)
            client.since = self.g0[frame["cursor"]["epoch"]] + frame["cursor"]["seq"]
            assert client.replica.state_wire() == client.replica.state_wire(live=True)
            return
        replica = client.replica
        assert replica is not None  # a connection without a replica begins with a snapshot
        before = view(replica)
        result = replica.apply(frame)
        expected = "gap" if client.lost else "duplicate" if tag == "copy" else "applied"
        assert result == expected, (frame["cursor"], before[0])
        if result == "applied":
            assert replica.cursor == Cursor.model_validate(frame["cursor"])
            client.applied.append(frame)
        else:
            assert view(replica) == before
        if result == "gap":  # the client watches again from its cursor
            client.connected, client.inbox, client.lost = False, [], False

    @rule(data=st.data())
    def duplicate_next_frame(self, data: st.DataObject) -> None:
        client = self.client(data)
        if client.inbox and client.inbox[0][0]["type"] == "update":
            client.inbox.insert(1, (client.inbox[0][0], "copy"))

    @rule(data=st.data())
    def redeliver_an_old_frame(self, data: st.DataObject) -> None:
        """A frame the client applied before arrives again (from an old connection)."""
        client = self.client(data)
        if client.replica is None or not client.applied:
            return
        frame = data.draw(st.sampled_from(client.applied), label="old frame")
        before = view(client.replica)
        same_epoch = frame["cursor"]["epoch"] == client.replica.cursor.epoch
        assert client.replica.apply(frame) == ("duplicate" if same_epoch else "gap")
        assert view(client.replica) == before

    @rule(data=st.data())
    def lose_a_frame(self, data: st.DataObject) -> None:
        """The next update frame is lost in transit, the connection stays up."""
        client = self.client(data)
        fresh = [frame for frame, tag in client.inbox if tag == "fresh"]
        # Only a loss that a later frame reveals: a client cannot know of any other.
        if len(fresh) < 2 or fresh[0] is not client.inbox[0][0] or fresh[0]["type"] != "update":
            return
        client.inbox = [d for d in client.inbox if d[0] is not fresh[0]]
        client.lost = True

    @rule(data=st.data())
    def catch_up(self, data: st.DataObject) -> None:
        client = self.client(data)
        while not (client.connected and not client.inbox):
            if not client.connected:
                self.subscribe(client)
            while client.inbox:
                self.deliver_next(client)
        self.check_caught_up(client)

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def server_replica_is_the_stored_thread(self) -> None:
        replica = self.server.replica
        assert replica.cursor == self.server.log.cursor
        assert replica.state_wire() == self.truth.state_wire()
        assert replica.pending_actions() == self.truth.pending_actions()

    @invariant()
    def a_caught_up_client_is_the_thread(self) -> None:
        for client in self.clients:
            if client.connected and not client.inbox and not client.lost:
                self.check_caught_up(client)

    def check_caught_up(self, client: Client) -> None:
        replica = client.replica
        assert replica is not None
        assert replica.cursor == self.server.log.cursor
        assert replica.state_wire() == self.truth.state_wire()
        assert replica.state_wire() == self.server.replica.state_wire()
        assert replica.state_wire(live=True) == self.truth.live_wire(client.since)
        assert replica.pending_actions() == self.truth.pending_actions()
        assert replica.pending == self.truth.pending


ReplicaMachine.TestCase.settings = settings(stateful_step_count=40)
TestReplicaMachine = ReplicaMachine.TestCase


# -- examples ---------------------------------------------------------------------------------


def run_update(run_id: str, status: Any = "running") -> dict[str, Any]:
    return RunStatusChanged(thread_id=THREAD, run=RunState(run_id=run_id, status=status)).to_wire()


def filled_log(appended: int, capacity: int) -> UpdateLog:
    log = UpdateLog(THREAD, "srv.1", capacity)
    for n in range(1, appended + 1):
        log.append(run_update(f"run_{n}"), None)
    return log


def cursor_of(frame: dict[str, Any]) -> Cursor:
    return Cursor.model_validate(frame["cursor"])


def seqs(frames: list[dict[str, Any]] | None) -> list[Any] | None:
    return None if frames is None else [cursor_of(f).seq for f in frames]


def test_since_replays_exactly_the_frames_after_the_cursor() -> None:
    log = filled_log(5, capacity=3)
    assert log.cursor == Cursor(epoch="srv.1", seq=5)
    assert seqs(log.since(Cursor(epoch="srv.1", seq=2))) == [3, 4, 5]
    assert seqs(log.since(Cursor(epoch="srv.1", seq=4))) == [5]
    assert log.since(Cursor(epoch="srv.1", seq=5)) == []
    frames = log.since(Cursor(epoch="srv.1", seq=3))
    assert frames is not None
    assert [f["update"] for f in frames] == [run_update("run_4"), run_update("run_5")]


@pytest.mark.parametrize(
    ("cursor", "why"),
    [
        (Cursor(epoch="srv.0", seq=5), "another epoch"),
        (Cursor(epoch="srv.1", seq=6), "a seq this stream never reached"),
        (Cursor(epoch="srv.1", seq=1), "frames no longer kept"),
        (Cursor(epoch="srv.1", seq=0), "frames no longer kept"),
    ],
)
def test_since_asks_for_a_snapshot_when_it_cannot_replay(cursor: Cursor, why: str) -> None:
    assert filled_log(5, capacity=3).since(cursor) is None, why


def test_a_new_log_replays_from_its_start_until_it_trims() -> None:
    log = UpdateLog(THREAD, "e", capacity=2)
    assert log.cursor == Cursor(epoch="e", seq=0)
    assert log.since(log.cursor) == []
    log.append(run_update("r"), None)
    log.append(run_update("r", "completed"), None)
    assert seqs(log.since(Cursor(epoch="e", seq=0))) == [1, 2]
    log.append(run_update("s"), None)
    assert log.since(Cursor(epoch="e", seq=0)) is None
    assert seqs(log.since(Cursor(epoch="e", seq=1))) == [2, 3]


def empty_replica(epoch: str = "e", seq: int = 0) -> ThreadReplica:
    state: dict[str, Any] = {"version": 1, "threadId": THREAD, "messages": [], "runs": []}
    return ThreadReplica.from_snapshot(
        snapshot_frame(THREAD, Cursor(epoch=epoch, seq=seq), state, [])
    )


def test_apply_takes_the_next_seq_and_reports_duplicates_and_gaps() -> None:
    log = UpdateLog(THREAD, "e", capacity=8)
    frames = [log.append(run_update(f"run_{n}"), None) for n in range(1, 4)]
    replica = empty_replica()
    assert replica.apply(frames[0]) == "applied"
    assert replica.apply(frames[0]) == "duplicate"
    assert replica.apply(frames[2]) == "gap"
    assert replica.cursor == Cursor(epoch="e", seq=1)
    assert replica.apply(frames[1]) == "applied"
    other = UpdateLog(THREAD, "f").append(run_update("run_9"), None)
    assert replica.apply(other) == "gap"  # another epoch, even at the next seq
    runs: Any = replica.state_wire()["runs"]
    assert [run["runId"] for run in runs] == ["run_1", "run_2"]


def part_update(call: Call) -> dict[str, Any]:
    return ToolPartUpdated(thread_id=THREAD, message_id=call.message_id, part=call.part()).to_wire()


def test_pending_actions_follow_the_tool_part_frames() -> None:
    log = UpdateLog(THREAD, "e")
    replica = empty_replica()
    call = Call("call_1", "msg_1", "ask", kind="suspended")
    message = Message(id="msg_1", role="assistant", parts=())
    replica.apply(log.append(MessageAppended(thread_id=THREAD, message=message).to_wire(), None))
    replica.apply(log.append(part_update(call), call.action()))
    assert replica.pending_actions() == [call.action()]
    wire: Any = replica.state_wire()
    assert wire["messages"][0]["parts"] == [call.part().to_wire()]
    call.kind = "output"
    replica.apply(log.append(part_update(call), None))
    assert replica.pending_actions() == []
    assert replica.pending == {}


def test_transient_data_shows_live_only_until_a_durable_write_of_the_item() -> None:
    log = UpdateLog(THREAD, "e")
    replica = empty_replica()
    call = Call("call_1", "msg_1", "ask")
    message = Message(id="msg_1", role="assistant", parts=(call.part(),))
    replica.apply(log.append(MessageAppended(thread_id=THREAD, message=message).to_wire(), None))

    def transient(item_id: str, value: int) -> dict[str, Any]:
        item = ToolDataItem(id=item_id, value=value, updated_at=at(value))
        update = ToolDataUpdated(thread_id=THREAD, tool_call_id="call_1", channel="p", item=item)
        return update.to_wire()

    def data(live: bool) -> Any:
        wire: Any = replica.state_wire(live=live)
        return wire["messages"][0]["parts"][0]["data"]

    replica.apply(log.append(transient("x", 1), None))
    replica.apply(log.append(transient("y", 2), None))
    replica.apply(log.append(transient("x", 3), None))
    assert data(live=False) == {}
    assert [(i["id"], i["value"]) for i in data(live=True)["p"]] == [("x", 3), ("y", 2)]
    # A durable write of "x" comes after the transient ones: it wins, "y" stays live.
    call.data["p"] = [ToolDataItem(id="x", value=4, updated_at=at(4))]
    replica.apply(log.append(part_update(call), None))
    assert [(i["id"], i["value"]) for i in data(live=False)["p"]] == [("x", 4)]
    assert [(i["id"], i["value"]) for i in data(live=True)["p"]] == [("x", 4), ("y", 2)]
    # A part update that leaves "x" as it was does not bring the old transient value back,
    # and a later transient write of "x" shows over the stored one again.
    call.kind = "suspended"
    replica.apply(log.append(part_update(call), call.action()))
    assert [(i["id"], i["value"]) for i in data(live=True)["p"]] == [("x", 4), ("y", 2)]
    replica.apply(log.append(transient("x", 5), None))
    assert [(i["id"], i["value"]) for i in data(live=True)["p"]] == [("x", 5), ("y", 2)]
    assert [(i["id"], i["value"]) for i in data(live=False)["p"]] == [("x", 4)]
    # A snapshot of this replica holds no transient data.
    snapshot = snapshot_frame(
        THREAD, replica.cursor, replica.state_wire(), list(replica.pending_actions())
    )
    again = ThreadReplica.from_snapshot(snapshot)
    assert again.state_wire(live=True) == replica.state_wire()
    assert again.pending_actions() == [call.action()]
