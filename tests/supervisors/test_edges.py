"""Edge cases found in review: misuse, callbacks that raise, fatal exceptions, forwarding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

from supervisors import (
    ActorRef,
    Cancelled,
    Crashed,
    ExitNotice,
    ExitRecord,
    Mailbox,
    MailboxFull,
    Normal,
    Reply,
    ReplyAlreadySent,
    RestartIntensityExceeded,
    Shutdown,
    SupervisorClosed,
    open_supervisor,
)


async def idle(mailbox: Mailbox[Any]) -> None:
    async for _ in mailbox:
        pass


async def test_spawn_after_the_supervisor_exited_raises_and_changes_nothing() -> None:
    async with open_supervisor(name="s") as sup:
        pass
    with pytest.raises(SupervisorClosed, match="cannot spawn 'late': supervisor 's' has exited"):
        sup.spawn(idle, name="late")
    assert sup.children() == {}
    assert len(sup.decision_state.children) == 0


async def test_spawn_after_cancel_raises() -> None:
    async with open_supervisor(name="s") as sup:
        sup.cancel("bye")
        with pytest.raises(SupervisorClosed, match="supervisor 's' was cancelled"):
            sup.spawn(idle, name="late")
        assert sup.snapshot().actors[0].state == "stopping"


async def test_spawning_a_plain_function_fails_at_spawn_and_changes_nothing() -> None:
    def not_async(mailbox: Mailbox[Any]) -> None:
        return None

    async with open_supervisor() as sup:
        with pytest.raises(TypeError, match="not a coroutine; an actor is an 'async def'"):
            sup.spawn(not_async, name="sync")  # type: ignore[arg-type]
        assert sup.children() == {}
        assert "sync" not in sup.decision_state.children
        assert len(sup.snapshot().actors) == 1
        sup.spawn(idle, name="sync").stop()  # the name is free again


async def test_bad_capacity_types_raise_value_error() -> None:
    async with open_supervisor() as sup:
        with pytest.raises(ValueError, match="capacity must be an int >= 0, not '3'"):
            sup.spawn(idle, capacity="3")  # type: ignore[arg-type]


async def test_capacity_zero_error_explains_the_rendezvous() -> None:
    async def never_receives(mailbox: Mailbox[int]) -> None:
        await trio.sleep_forever()

    async with open_supervisor() as sup:
        ref = sup.spawn(never_receives, name="r", capacity=0)
        with pytest.raises(MailboxFull, match="capacity 0 \\(a rendezvous\\)"):
            ref.tell_nowait(1)
        sup.cancel()


@dataclass(frozen=True)
class Down:
    notice: ExitNotice


async def test_a_failing_monitor_message_raises_in_the_watcher_not_the_target() -> None:
    class Boom(Exception):
        pass

    def bad_message(notice: ExitNotice) -> object:
        raise Boom("bad factory")

    seen: list[BaseException] = []

    async def watcher(mailbox: Mailbox[object]) -> None:
        try:
            await mailbox.receive()
        except Boom as exc:
            seen.append(exc)

    async def returns(mailbox: Mailbox[object]) -> None:
        await mailbox.receive()

    async with open_supervisor(intensity=5) as sup:
        records: list[ExitRecord] = []
        sup.add_exit_listener(records.append)
        target = sup.spawn(returns, name="target")
        watching = sup.spawn(watcher, name="watcher", restart="temporary")
        watching._mailbox.monitor(target, bad_message)
        target.tell_nowait("go")
        await watching.wait_exit()
        assert sup.child("target") is not target  # the target was restarted as usual
        sup.cancel()
    assert [type(e) for e in seen] == [Boom]
    assert watching.exit_reason == Normal()
    assert [r.actor.name for r in records[:2]] == ["target", "watcher"]


async def test_monitors_end_when_the_watcher_exits_or_are_cancelled() -> None:
    async with open_supervisor() as sup:
        server = sup.spawn(idle, name="server")
        for _ in range(50):
            watcher = sup.spawn(idle, restart="temporary")
            watcher._mailbox.monitor(server, Down)
            watcher.stop()
            await watcher.wait_exit()
        assert not server._node.monitors

        seen: list[object] = []

        async def watching(mailbox: Mailbox[object]) -> None:
            monitor = mailbox.monitor(server, Down)
            assert monitor.active
            monitor.cancel()
            assert not monitor.active
            async for message in mailbox:
                seen.append(message)

        w = sup.spawn(watching, name="w")
        await trio.testing.wait_all_tasks_blocked()
        sup.stop_child("server")
        await server.wait_exit()
        w.stop()
    assert seen == []


async def test_a_child_raising_system_exit_is_not_restarted_and_it_propagates() -> None:
    starts = 0

    async def exits_program(mailbox: Mailbox[object]) -> None:
        nonlocal starts
        starts += 1
        raise SystemExit(3)

    async def scenario() -> None:
        async with open_supervisor(intensity=3) as sup:
            sup.spawn(exits_program, name="x")
            await trio.sleep_forever()

    with pytest.raises(SystemExit):
        await scenario()
    assert starts == 1


def test_system_exit_grouped_with_a_cancellation_is_not_dropped() -> None:
    async def actor(mailbox: Mailbox[object]) -> None:
        async def dies_on_cancel() -> None:
            try:
                await trio.sleep_forever()
            finally:
                raise SystemExit(3)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(dies_on_cancel)
            await trio.sleep_forever()

    async def main() -> None:
        with trio.move_on_after(1):
            async with open_supervisor() as sup:
                sup.spawn(actor, name="a")
                await trio.sleep_forever()

    with pytest.raises(BaseExceptionGroup) as info:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert info.group_contains(SystemExit)


async def test_give_up_after_a_normal_exit_names_it_and_has_no_stale_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def crash_on_message(mailbox: Mailbox[object]) -> None:
        await mailbox.receive()
        raise ValueError("old crash")

    async def return_on_message(mailbox: Mailbox[object]) -> None:
        await mailbox.receive()

    async def scenario() -> None:
        async with open_supervisor(name="s", intensity=1, period=10) as sup:
            a = sup.spawn(crash_on_message, name="a")
            b = sup.spawn(return_on_message, name="b")
            a.tell_nowait("go")
            await a.wait_exit()  # restarted: one restart in the window
            b.tell_nowait("go")  # a permanent child returning needs a second one
            await trio.sleep_forever()

    with pytest.raises(RestartIntensityExceeded) as info:
        await scenario()
    assert str(info.value) == (
        "supervisor 's' gave up: child 'b' exited, and restarting it would make 2 restarts "
        "within 10s, more than its intensity of 1"
    )
    assert info.value.__cause__ is None  # not a's old crash


async def test_a_forwarded_reply_is_answered_by_the_worker_after_the_router_stops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @dataclass(frozen=True)
    class Get:
        reply: Reply[str]

    async def worker(mailbox: Mailbox[Get]) -> None:
        async for message in mailbox:
            await trio.sleep(1)
            message.reply.send("from worker")

    async def router(mailbox: Mailbox[Get]) -> None:
        async for message in mailbox:
            message.reply.hand_off(worker_ref)
            await worker_ref.tell(message)

    async with open_supervisor() as sup:
        worker_ref: ActorRef[Get] = sup.spawn(worker, name="worker")
        router_ref = sup.spawn(router, name="router")

        async def stop_router_soon() -> None:
            await trio.testing.wait_all_tasks_blocked()
            router_ref.stop()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_router_soon)
            assert await router_ref.ask(Get) == "from worker"
        assert router_ref.exit_reason == Shutdown()
        sup.cancel()


async def test_a_reply_that_failed_because_its_actor_exited_says_so() -> None:
    kept: list[Reply[int]] = []

    async def keeps_reply(mailbox: Mailbox[Reply[int]]) -> None:
        kept.append(await mailbox.receive())

    async with open_supervisor() as sup:
        ref = sup.spawn(keeps_reply, name="k", restart="temporary")
        with pytest.raises(Exception, match="actor 'k' exited before replying"):
            await ref.ask(lambda reply: reply)
    with pytest.raises(ReplyAlreadySent, match="this ask already failed: actor 'k' exited"):
        kept[0].send(1)


async def test_stop_again_with_a_shorter_grace_shortens_the_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def ignores_stop(mailbox: Mailbox[object]) -> None:
        await trio.sleep_forever()

    async with open_supervisor() as sup:
        ref = sup.spawn(ignores_stop, grace=10_000)
        start = trio.current_time()
        ref.stop()
        ref.stop(grace=1)
        assert await ref.wait_exit() == Shutdown(forced=True)
        assert trio.current_time() - start == pytest.approx(1)


async def test_a_raising_exit_listener_crashes_the_supervisor_after_the_bookkeeping() -> None:
    class ListenerBug(Exception):
        pass

    records: list[ExitRecord] = []

    def bad_listener(record: ExitRecord) -> None:
        raise ListenerBug(record.actor.name)

    async def returns(mailbox: Mailbox[object]) -> None:
        return

    async def scenario() -> ActorRef[object]:
        async with open_supervisor(name="s") as sup:
            sup.add_exit_listener(bad_listener)
            sup.add_exit_listener(records.append)  # still called
            ref = sup.spawn(returns, name="r", restart="temporary")
            await trio.sleep_forever()
        return ref

    with pytest.raises(BaseExceptionGroup) as info:
        await scenario()
    assert info.group_contains(ListenerBug, match="^r$")
    assert [r.actor.name for r in records] == ["r", "s"]
    assert isinstance(records[-1].reason, Crashed)
    assert isinstance(records[0].reason, Normal)


async def test_cancelled_without_a_reason_records_none() -> None:
    async with open_supervisor() as sup:
        ref = sup.spawn(idle)
        ref.cancel()
        assert await ref.wait_exit() == Cancelled(None)
        sup.cancel()


async def test_no_task_bookkeeping_outlives_the_tree() -> None:
    from supervisors._node import _task_nodes

    async def owner(mailbox: Mailbox[object]) -> None:
        async with open_supervisor(name="inner") as inner:
            inner.spawn(idle, name="leaf")
            await trio.sleep_forever()

    before = dict(_task_nodes)
    async with open_supervisor(name="root") as sup:
        sup.spawn(owner, name="owner")
        sup.spawn(idle, name="other", restart="temporary").stop()
        await trio.testing.wait_all_tasks_blocked()
        assert len(_task_nodes) == len(before) + 3  # root's body, owner (as inner's body), leaf
        sup.cancel()
    assert _task_nodes == before
