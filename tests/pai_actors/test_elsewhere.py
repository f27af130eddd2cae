"""What a runtime's watchers are shown of other nodes' work (``_runtime.elsewhere``), on a
store stand-in: notices and live updates shown in the order they arrived, each notice with
the logged rows it stands for and no more."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from pai_actors import Message, TextPart
from pai_actors._core.state import ThreadState
from pai_actors._core.updates import MessageAppended, MessageDelta
from pai_actors._runtime.elsewhere import Elsewhere
from pai_actors._runtime.watch import WatchHub
from pai_actors._store.postgres_updates import LoggedCommit

T = "t1"


def appended(n: int) -> MessageAppended:
    message = Message(id=f"m{n}", role="user", parts=(TextPart(text=str(n)),))
    return MessageAppended(thread_id=T, message=message)


def delta(text: str) -> MessageDelta:
    return MessageDelta(thread_id=T, run_id="r", message_id="m9", part="text", delta=text)


class Logged:
    """A store stand-in whose log already holds rows 1 to 3 of node b."""

    node_id = "a"
    lease = 10.0

    def __init__(self) -> None:
        self.rows = [LoggedCommit(n, n - 1, "b", [appended(n)]) for n in (1, 2, 3)]
        self.sent: list[Any] = []

    async def logged_since(self, thread_id: str, seq: int) -> list[LoggedCommit]:
        await trio.lowlevel.checkpoint()
        return [row for row in self.rows if row.seq > seq]

    async def last_logged(self, thread_id: str) -> int:
        return self.rows[-1].seq

    async def send_live(self, updates: Any) -> None:
        await trio.lowlevel.checkpoint()
        self.sent.extend(updates)

    async def announce_watching(self, thread_ids: Any) -> None:
        pass


async def read_state(thread_id: str) -> ThreadState:
    raise AssertionError("not read: every row is in the log")


async def test_notices_and_live_updates_are_shown_in_the_order_they_arrived(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub = WatchHub()
    _, receive = hub.add(T, 64, deltas=True)
    hub.follow(ThreadState(thread_id=T, messages=(), runs=()), 0)
    async with trio.open_nursery() as nursery:
        elsewhere = Elsewhere(Logged(), hub, read_state, nursery)
        # Row 3 is in the log before the first notice is read: it is shown with its own.
        elsewhere.received(delta("a"))
        elsewhere.changed(T, 1)
        elsewhere.received(delta("b"))
        elsewhere.changed(T, 2)
        elsewhere.changed(T, 3)
        elsewhere.received(delta("c"))
    shown = []
    while True:
        try:
            shown.append(receive.receive_nowait())
        except trio.WouldBlock:
            break
    names = [
        u.delta if isinstance(u, MessageDelta) else u.message.id
        for u in shown
        if isinstance(u, MessageDelta | MessageAppended)
    ]
    assert len(names) == len(shown)
    assert names == ["a", "m1", "b", "m2", "m3", "c"]
    assert hub.logged(T) == 3


async def test_live_updates_go_only_to_threads_another_node_watches_and_before_a_commit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub = WatchHub()
    store = Logged()
    async with trio.open_nursery() as nursery:
        elsewhere = Elsewhere(store, hub, read_state, nursery)
        await nursery.start(elsewhere.run)
        elsewhere.offer(delta("unwatched"))
        assert elsewhere.flush() is None  # nothing waits: a commit goes on at once
        elsewhere.watching(T)
        elsewhere.offer(delta("x"))
        sent = elsewhere.flush()
        assert sent is not None
        await sent  # (what a commit of the thread waits for)
        assert [u.delta for u in store.sent] == ["x"]
        await trio.sleep(store.lease + 1)  # the notice ran out: no longer watched
        assert not elsewhere.watched(T)
        for n in range(1_500):  # notices that ran out are forgotten (as more arrive)
            elsewhere.watching(f"old{n}")
        await trio.sleep(store.lease + 1)
        for n in range(600):
            elsewhere.watching(f"new{n}")
        assert len(elsewhere._watched) <= 600
        nursery.cancel_scope.cancel()
