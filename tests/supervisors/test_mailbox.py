"""Mailboxes, tell/tell_nowait, backpressure, statistics, monitors."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import trio
import trio.testing

from supervisors import (
    ExitNotice,
    Mailbox,
    MailboxClosed,
    MailboxFull,
    Normal,
    Shutdown,
    open_supervisor,
)


def test_capacity_is_validated() -> None:
    with pytest.raises(ValueError, match="capacity must be an int >= 0, not -1"):
        Mailbox(-1)


async def test_messages_arrive_in_order_and_before_the_actor_runs() -> None:
    received: list[int] = []

    async def actor(mailbox: Mailbox[int]) -> None:
        async for message in mailbox:
            received.append(message)

    async with open_supervisor() as sup:
        ref = sup.spawn(actor, capacity=3)
        for i in range(3):
            ref.tell_nowait(i)  # accepted before the actor's task first runs
        for i in range(3, 10):
            await ref.tell(i)
        ref.stop()
    assert received == list(range(10))
    assert ref.exit_reason == Shutdown()


async def test_tell_nowait_on_full_mailbox_raises_mailbox_full() -> None:
    async def never_receives(mailbox: Mailbox[int]) -> None:
        await trio.sleep_forever()

    async with open_supervisor() as sup:
        ref = sup.spawn(never_receives, name="slow", capacity=2)
        ref.tell_nowait(1)
        ref.tell_nowait(2)
        with pytest.raises(MailboxFull, match=r"mailbox of actor 'slow' is full \(2 messages\)"):
            ref.tell_nowait(3)
        assert ref.statistics().depth == 2
        sup.cancel()


async def test_tell_blocks_when_full_until_the_actor_receives() -> None:
    gate = trio.Event()
    received: list[int] = []

    async def gated(mailbox: Mailbox[int]) -> None:
        await gate.wait()
        async for message in mailbox:
            received.append(message)

    async with open_supervisor() as sup:
        ref = sup.spawn(gated, capacity=1)
        ref.tell_nowait(1)
        sent_second = False

        async def send_second() -> None:
            nonlocal sent_second
            await ref.tell(2)
            sent_second = True

        sup_nursery_task_done = trio.Event()

        async def sender() -> None:
            await send_second()
            sup_nursery_task_done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender)
            await trio.testing.wait_all_tasks_blocked()
            assert not sent_second
            stats = ref.statistics()
            assert stats.waiting_senders == 1
            assert stats.depth == 1
            gate.set()
            await sup_nursery_task_done.wait()
        assert sent_second
        ref.stop()
    assert received == [1, 2]


async def test_cancelled_tell_enqueues_nothing(autojump_clock: trio.testing.MockClock) -> None:
    async def never_receives(mailbox: Mailbox[int]) -> None:
        await trio.sleep_forever()

    async with open_supervisor() as sup:
        ref = sup.spawn(never_receives, capacity=0)
        with trio.move_on_after(1) as scope:
            await ref.tell(1)
        assert scope.cancelled_caught
        stats = ref.statistics()
        assert (stats.depth, stats.sent, stats.waiting_senders) == (0, 0, 0)
        sup.cancel()


async def test_capacity_zero_is_a_rendezvous() -> None:
    received: list[str] = []

    async def actor(mailbox: Mailbox[str]) -> None:
        async for message in mailbox:
            received.append(message)

    async with open_supervisor() as sup:
        ref = sup.spawn(actor, capacity=0)
        await ref.tell("a")
        await ref.tell("b")
        ref.stop()
    assert received == ["a", "b"]


async def test_statistics_count_sent_and_received() -> None:
    async def actor(mailbox: Mailbox[int]) -> None:
        await mailbox.receive()
        await trio.sleep_forever()

    async with open_supervisor() as sup:
        ref = sup.spawn(actor, capacity=5)
        for i in range(4):
            ref.tell_nowait(i)
        await trio.testing.wait_all_tasks_blocked()
        stats = ref.statistics()
        assert (stats.capacity, stats.sent, stats.received, stats.depth) == (5, 4, 1, 3)
        assert not stats.closed
        sup.cancel()


async def test_receive_nowait_would_block_then_end_of_channel_after_stop() -> None:
    results: list[object] = []

    async def actor(mailbox: Mailbox[int]) -> None:
        with pytest.raises(trio.WouldBlock):
            mailbox.receive_nowait()
        results.append(await mailbox.receive())
        results.append(mailbox.stop_requested)
        with pytest.raises(trio.EndOfChannel):
            await mailbox.receive()
        results.append(mailbox.stop_requested)

    async with open_supervisor() as sup:
        ref = sup.spawn(actor)
        await trio.testing.wait_all_tasks_blocked()
        ref.tell_nowait(7)
        ref.stop()
    assert results == [7, True, True]
    assert ref.exit_reason == Shutdown(forced=False)


async def test_stop_drains_buffered_messages_then_refuses_new_ones() -> None:
    received: list[int] = []

    async def actor(mailbox: Mailbox[int]) -> None:
        async for message in mailbox:
            received.append(message)

    async with open_supervisor() as sup:
        ref = sup.spawn(actor, name="drain")
        ref.tell_nowait(1)
        ref.tell_nowait(2)
        ref.stop()
        with pytest.raises(MailboxClosed, match="actor 'drain' is not accepting messages"):
            ref.tell_nowait(3)
    assert received == [1, 2]


async def test_blocked_sender_gets_mailbox_closed_when_the_actor_exits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def exits_on_first(mailbox: Mailbox[int]) -> None:
        await trio.sleep(1)

    async with open_supervisor() as sup:
        ref = sup.spawn(exits_on_first, name="short", capacity=0, restart="temporary")
        with pytest.raises(MailboxClosed, match="actor 'short' stopped before taking"):
            await ref.tell(1)
    assert ref.exit_reason == Normal()


@dataclass(frozen=True)
class Down:
    notice: ExitNotice


async def test_monitor_delivers_exit_reason_even_to_a_full_mailbox(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[object] = []

    async def crasher(mailbox: Mailbox[str]) -> None:
        await mailbox.receive()
        raise RuntimeError("boom")

    async def watcher(mailbox: Mailbox[object]) -> None:
        await trio.sleep(1)  # let the mailbox fill up before reading it
        async for message in mailbox:
            seen.append(message)

    async with open_supervisor() as sup:
        target = sup.spawn(crasher, name="target", restart="temporary")
        watching = sup.spawn(watcher, name="watcher", capacity=1)
        watching.tell_nowait("filler")
        watching._mailbox.monitor(target, Down)
        target.tell_nowait("go")
        await target.wait_exit()
        await trio.sleep(2)
        watching.stop()
    first, second = seen
    assert isinstance(first, Down)
    assert first.notice.ref is target
    assert repr(first.notice.reason.exception) == "RuntimeError('boom')"  # type: ignore[union-attr]
    assert second == "filler"  # notices come first


async def test_monitor_of_an_exited_actor_delivers_at_once() -> None:
    seen: list[object] = []

    async def quick(mailbox: Mailbox[object]) -> None:
        return

    async def watcher(mailbox: Mailbox[object]) -> None:
        mailbox.monitor(target, Down)
        seen.append(await mailbox.receive())

    async with open_supervisor() as sup:
        target = sup.spawn(quick, restart="temporary")
        await target.wait_exit()
        sup.spawn(watcher, restart="temporary")
    [down] = seen
    assert isinstance(down, Down)
    assert down.notice.reason == Normal()


@pytest.fixture
def no_cycle_collector() -> Iterator[None]:
    """Only reference counting frees objects while the test runs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@pytest.mark.usefixtures("no_cycle_collector")
async def test_an_exited_actor_is_freed_when_its_last_ref_is_dropped() -> None:
    # While it runs, an actor's mailbox, ref and node refer to one another; once it exited
    # they must not, or every exited actor (with its supervisor and trio tasks) waits for
    # the cyclic garbage collector, which is what a busy runtime spends its time in.
    mailboxes: list[weakref.ref[Mailbox[str]]] = []

    async def one_message(mailbox: Mailbox[str]) -> None:
        mailboxes.append(weakref.ref(mailbox))
        await mailbox.receive()

    async with open_supervisor() as sup:
        ref = sup.spawn(one_message, restart="temporary")
        ref.tell_nowait("go")
        assert await ref.wait_exit() == Normal()
        assert mailboxes[0]() is not None  # the ref still reaches it
        del ref
        assert mailboxes[0]() is None


async def test_mailbox_ref_after_exit_is_one_ref_while_it_is_held() -> None:
    kept: list[Mailbox[str]] = []

    async def quick(mailbox: Mailbox[str]) -> None:
        kept.append(mailbox)

    async with open_supervisor() as sup:
        ref = sup.spawn(quick, name="quick", restart="temporary")
        await ref.wait_exit()
        [mailbox] = kept
        assert mailbox.ref is ref  # while something holds the ref, the same object
        info = ref.info
        del ref
        gc.collect()
        again = mailbox.ref  # nothing held it: another address of the same exited actor
        assert again.info == info
        assert again.exit_reason == Normal()
        assert mailbox.ref is again  # and the same one from then on, while it is held
        assert {again: "x"}.get(mailbox.ref) == "x"
        with pytest.raises(MailboxClosed, match="actor 'quick' is not accepting messages"):
            again.tell_nowait("late")
