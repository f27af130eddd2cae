"""Supervisors on trio: asks, exit reasons, strategies, intensity, shutdown, cancellation."""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

from supervisors import (
    ActorExited,
    ActorRef,
    Cancelled,
    Crashed,
    DuplicateChild,
    Mailbox,
    MailboxClosed,
    Normal,
    Reply,
    ReplyAlreadySent,
    RestartIntensityExceeded,
    Shutdown,
    SupervisorClosed,
    open_supervisor,
)
from supervisors.testing import ExitLog


@dataclass(frozen=True)
class Ask:
    text: str
    reply: Reply[str]


async def echo(mailbox: Mailbox[Ask]) -> None:
    async for message in mailbox:
        if message.text == "crash":
            raise ValueError("asked to crash")
        if message.text == "fail":
            message.reply.fail(KeyError("no such thing"))
        else:
            message.reply.send(message.text.upper())


async def forever(mailbox: Mailbox[object]) -> None:
    async for _ in mailbox:
        pass


async def crash_on_message(mailbox: Mailbox[object]) -> None:
    await mailbox.receive()
    raise RuntimeError("boom")


# -- ask ------------------------------------------------------------------------------------


async def test_ask_returns_the_reply() -> None:
    async with open_supervisor() as sup:
        ref = sup.spawn(echo)
        assert await ref.ask(lambda reply: Ask("hi", reply)) == "HI"
        sup.cancel()


async def test_ask_raises_what_the_actor_failed_the_reply_with() -> None:
    async with open_supervisor() as sup:
        ref = sup.spawn(echo)
        with pytest.raises(KeyError, match="no such thing"):
            await ref.ask(lambda reply: Ask("fail", reply))
        sup.cancel()


async def test_ask_to_an_actor_that_crashes_while_handling_it_raises_actor_exited() -> None:
    async with open_supervisor() as sup:
        ref = sup.spawn(echo, name="echo", restart="temporary")
        with pytest.raises(ActorExited, match="actor 'echo' exited before replying") as info:
            await ref.ask(lambda reply: Ask("crash", reply))
        assert isinstance(info.value.reason, Crashed)
        assert isinstance(info.value.__cause__, ValueError)


async def test_asks_queued_behind_a_crash_also_fail() -> None:
    gate = trio.Event()

    async def gated_echo(mailbox: Mailbox[Ask]) -> None:
        await gate.wait()
        await echo(mailbox)

    async with open_supervisor() as sup:
        ref = sup.spawn(gated_echo, restart="temporary")
        errors: list[BaseException] = []

        async def ask(text: str) -> None:
            try:
                await ref.ask(lambda reply: Ask(text, reply))
            except ActorExited as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "crash")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(ask, "queued")
            await trio.testing.wait_all_tasks_blocked()
            assert ref.statistics().depth == 2
            gate.set()
    assert len(errors) == 2
    assert all(isinstance(error.reason, Crashed) for error in errors)


async def test_ask_to_an_exited_actor_raises_mailbox_closed() -> None:
    async with open_supervisor() as sup:
        ref = sup.spawn(echo, restart="temporary")
        ref.stop()
        await ref.wait_exit()
        with pytest.raises(MailboxClosed):
            await ref.ask(lambda reply: Ask("late", reply))


async def test_reply_resolves_once() -> None:
    reply: Reply[int] = Reply()
    reply.send(1)
    with pytest.raises(ReplyAlreadySent, match="a Reply resolves once"):
        reply.send(2)
    with pytest.raises(ReplyAlreadySent):
        reply.fail(ValueError())


# -- exit reasons ---------------------------------------------------------------------------


async def test_each_way_of_ending_gives_its_exit_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def returns(mailbox: Mailbox[object]) -> None:
        return

    async def ignores_stop(mailbox: Mailbox[object]) -> None:
        await trio.sleep_forever()

    async with open_supervisor() as sup:
        normal = sup.spawn(returns, restart="temporary")
        crashed = sup.spawn(crash_on_message, restart="temporary")
        cancelled = sup.spawn(forever, restart="temporary")
        stopped = sup.spawn(forever, restart="temporary")
        forced = sup.spawn(ignores_stop, restart="temporary", grace=3)
        crashed.tell_nowait("go")
        cancelled.cancel("not needed")
        stopped.stop()
        forced.stop()
        start = trio.current_time()
        assert await forced.wait_exit() == Shutdown(forced=True)
        assert trio.current_time() - start == pytest.approx(3)
    assert normal.exit_reason == Normal()
    assert isinstance(crashed.exit_reason, Crashed)
    assert repr(crashed.exit_reason.exception) == "RuntimeError('boom')"
    assert cancelled.exit_reason == Cancelled("not needed")
    assert stopped.exit_reason == Shutdown(forced=False)


async def test_stop_with_explicit_grace_overrides_the_spawn_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def ignores_stop(mailbox: Mailbox[object]) -> None:
        await trio.sleep_forever()

    async with open_supervisor() as sup:
        ref = sup.spawn(ignores_stop, grace=100)
        start = trio.current_time()
        ref.stop(grace=1)
        assert await ref.wait_exit() == Shutdown(forced=True)
        assert trio.current_time() - start == pytest.approx(1)
        with pytest.raises(ValueError, match="grace must be a number of seconds >= 0"):
            ref.stop(grace=-1)


async def test_stop_during_a_group_restart_cancels_that_childs_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def ignores_stop(mailbox: Mailbox[object]) -> None:
        await trio.sleep_forever()

    async with open_supervisor(strategy="one_for_all") as sup:
        a = sup.spawn(ignores_stop, name="a", grace=10)
        b = sup.spawn(crash_on_message, name="b")
        b.tell_nowait("go")
        await b.wait_exit()
        assert a.exit_reason is None  # stopping for the group restart, until its grace ends
        a.stop()
        assert await a.wait_exit() == Shutdown(forced=True)
        await trio.testing.wait_all_tasks_blocked()
        assert set(sup.children()) == {"b"}
        sup.cancel()


async def test_a_stopped_permanent_child_is_not_restarted() -> None:
    async with open_supervisor() as sup:
        ref = sup.spawn(forever, name="worker")
        ref.stop()
        await ref.wait_exit()
        assert sup.children() == {}


# -- restart policies and strategies -------------------------------------------------------


@pytest.mark.parametrize(
    ("restart", "crash", "restarted"),
    [
        ("permanent", True, True),
        ("permanent", False, True),
        ("transient", True, True),
        ("transient", False, False),
        ("temporary", True, False),
        ("temporary", False, False),
    ],
)
async def test_restart_policy(restart: str, crash: bool, restarted: bool) -> None:
    async def child(mailbox: Mailbox[object]) -> None:
        await mailbox.receive()
        if crash:
            raise RuntimeError("crash")

    async with open_supervisor(intensity=10) as sup:
        first = sup.spawn(child, name="c", restart=restart)  # type: ignore[arg-type]
        first.tell_nowait("go")
        await first.wait_exit()
        if restarted:
            second = sup.child("c")
            assert second is not first
            assert second.info.id != first.info.id
            assert sup.snapshot().actors[1].restarts == 1
        else:
            assert sup.children() == {}
        sup.cancel()


async def _run_strategy(strategy: str) -> tuple[set[str], ExitLog]:
    async with open_supervisor(strategy=strategy) as sup:  # type: ignore[arg-type]
        log = ExitLog.attach(sup)
        refs = {name: sup.spawn(forever, name=name) for name in ("a", "b", "c")}
        temp = sup.spawn(forever, name="temp", restart="temporary")
        refs["b"].tell_nowait("ignored")
        refs["b"].cancel("simulated failure")  # abnormal exit of a permanent child
        await refs["b"].wait_exit()
        await trio.testing.wait_all_tasks_blocked()
        restarted = {name for name, ref in sup.children().items() if ref.info.id > temp.info.id}
        sup.cancel()
    return restarted, log


async def test_one_for_one_restarts_only_the_failed_child() -> None:
    restarted, log = await _run_strategy("one_for_one")
    assert restarted == {"b"}
    assert [r.actor.name for r in log.records[:1]] == ["b"]


async def test_one_for_all_restarts_every_child_but_not_temporary_ones() -> None:
    restarted, log = await _run_strategy("one_for_all")
    assert restarted == {"a", "b", "c"}
    first = {r.actor.name: r.reason for r in log.records[:4]}
    assert first == {
        "b": Cancelled("simulated failure"),
        "a": Shutdown(),
        "c": Shutdown(),
        "temp": Shutdown(),
    }


async def test_rest_for_one_restarts_the_failed_child_and_younger_siblings() -> None:
    restarted, log = await _run_strategy("rest_for_one")
    assert restarted == {"b", "c"}
    assert {r.actor.name for r in log.records[:3]} == {"b", "c", "temp"}


async def test_a_restarted_child_keeps_its_function_capacity_and_grace() -> None:
    started: list[int] = []

    async def counts(mailbox: Mailbox[object]) -> None:
        started.append(mailbox.statistics().capacity)
        async for _ in mailbox:
            pass

    async def stays(mailbox: Mailbox[object]) -> None:
        with trio.CancelScope(shield=True):
            await trio.sleep(0.05)  # a slow stop: the group restart waits for it

    async with open_supervisor(strategy="one_for_all") as sup:
        first = sup.spawn(counts, name="a", capacity=3, grace=0.5)
        slow = sup.spawn(stays, name="slow", grace=10.0)
        await trio.testing.wait_all_tasks_blocked()
        first.cancel("simulated failure")
        await first.wait_exit()
        # "a" waits for "slow" to stop before it is started again: no live child "a".
        assert "a" not in sup.children()
        assert set(sup.children()) == {"slow"}
        with pytest.raises(KeyError):
            sup.child("a")
        await slow.wait_exit()
        await trio.testing.wait_all_tasks_blocked()
        second = sup.child("a")
        assert second is not first
        assert second.info.id > first.info.id
        assert started == [3, 3]
        assert second._grace == 0.5
        assert sup.child("slow")._grace == 10.0
        sup.cancel()


# -- intensity and giving up ----------------------------------------------------------------


async def crash_at_once(mailbox: Mailbox[object]) -> None:
    raise RuntimeError("boom")


async def test_giving_up_cancels_siblings_and_raises_with_the_crash_as_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: dict[str, object] = {}

    async def scenario() -> None:
        async with open_supervisor(name="root", intensity=2, period=10) as sup:
            seen["log"] = ExitLog.attach(sup)
            seen["sibling"] = sup.spawn(forever, name="sibling")
            sup.spawn(crash_at_once, name="flaky")
            await trio.sleep_forever()

    with pytest.raises(RestartIntensityExceeded) as info:
        await scenario()
    log, sibling = seen["log"], seen["sibling"]
    assert isinstance(log, ExitLog)
    assert isinstance(sibling, ActorRef)
    error = info.value
    assert str(error) == (
        "supervisor 'root' gave up: child 'flaky' crashed, and restarting it would make "
        "3 restarts within 10s, more than its intensity of 2"
    )
    assert (error.supervisor, error.child) == ("root", "flaky")
    assert isinstance(error.__cause__, RuntimeError)
    assert isinstance(sibling.exit_reason, Cancelled)
    assert sibling.exit_reason.reason is not None
    assert "gave up" in sibling.exit_reason.reason
    assert log.records[-1].actor.name == "root"
    assert log.records[-1].reason == Crashed(error)


async def test_restarts_outside_the_period_do_not_count(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_supervisor(intensity=1, period=5) as sup:
        sup.spawn(crash_on_message, name="flaky")
        for _ in range(5):
            ref = sup.child("flaky")
            ref.tell_nowait("go")
            await ref.wait_exit()
            await trio.sleep(6)
        assert sup.snapshot().actors[1].restarts == 5
        sup.cancel()


async def test_a_nested_supervisor_giving_up_crashes_its_actor_and_the_parent_restarts_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    starts = 0

    async def owner(mailbox: Mailbox[object]) -> None:
        nonlocal starts
        starts += 1
        async with open_supervisor(name="inner", intensity=0) as inner:
            inner.spawn(crash_on_message, name="leaf").tell_nowait("go")
            await trio.sleep_forever()

    log = ExitLog()

    async def scenario() -> None:
        async with open_supervisor(name="outer", intensity=3, period=100) as outer:
            outer.add_exit_listener(log.records.append)
            outer.spawn(owner, name="owner", restart="transient")
            await trio.sleep_forever()

    with pytest.raises(RestartIntensityExceeded, match="'outer' gave up") as info:
        await scenario()
    assert starts == 4  # the first run and three restarts; the fourth crash is one too many
    owner_exits = [r.reason for r in log.records if r.actor.name == "owner"]
    assert len(owner_exits) == 4
    for reason in owner_exits:
        assert isinstance(reason, Crashed)
        assert isinstance(reason.exception, RestartIntensityExceeded)
        assert "'outer/owner/inner' gave up" in str(reason.exception)
    assert info.value.__cause__ is owner_exits[-1].exception
    assert log.records[-1].reason == Crashed(info.value)


# -- shutdown and cancellation --------------------------------------------------------------


async def test_shutdown_stops_every_child_and_exits_the_block() -> None:
    async with open_supervisor(name="root") as sup:
        log = ExitLog.attach(sup)
        for name in ("a", "b", "c"):
            sup.spawn(forever, name=name)
        sup.shutdown()
        with pytest.raises(SupervisorClosed, match="cannot spawn 'd': the supervisor is shutting"):
            sup.spawn(forever, name="d")
    assert {(r.actor.name, r.reason) for r in log.records[:3]} == {
        ("a", Shutdown()),
        ("b", Shutdown()),
        ("c", Shutdown()),
    }
    assert (log.records[3].actor.name, log.records[3].reason) == ("root", Shutdown())


async def test_cancel_reason_reaches_every_descendant_and_children_exit_first() -> None:
    async def owner(mailbox: Mailbox[object]) -> None:
        async with open_supervisor(name="inner") as inner:
            inner.spawn(forever, name="leaf-1")
            inner.spawn(forever, name="leaf-2")
            await trio.sleep_forever()

    async with open_supervisor(name="root") as sup:
        log = ExitLog.attach(sup)
        sup.spawn(owner, name="owner")
        await trio.testing.wait_all_tasks_blocked()
        assert len(sup.snapshot().actors) == 5
        sup.cancel("maintenance")
    reasons = log.reasons()
    assert set(reasons.values()) == {Cancelled("maintenance")}
    assert set(reasons) == {
        "root",
        "root/owner",
        "root/owner/inner",
        "root/owner/inner/leaf-1",
        "root/owner/inner/leaf-2",
    }
    order = [r.actor.path for r in log.records]
    for record in log.records:
        parent = next((r for r in log.records if r.actor.id == record.actor.parent_id), None)
        if parent is not None:
            assert order.index(parent.actor.path) > order.index(record.actor.path)


async def test_an_outer_cancel_scope_cancels_the_tree_and_nothing_keeps_running() -> None:
    running = 0

    async def tracked(mailbox: Mailbox[object]) -> None:
        nonlocal running
        running += 1
        try:
            await trio.sleep_forever()
        finally:
            running -= 1

    with trio.CancelScope() as scope:
        async with open_supervisor(name="root") as sup:
            log = ExitLog.attach(sup)
            for _ in range(5):
                sup.spawn(tracked)
            await trio.testing.wait_all_tasks_blocked()
            assert running == 5
            scope.cancel("outer")
            await trio.sleep_forever()
    assert running == 0
    assert scope.cancelled_caught
    assert set(log.reasons().values()) == {Cancelled("outer")}


async def test_body_exception_cancels_children_and_propagates_unwrapped() -> None:
    log = ExitLog()
    children: list[ActorRef[object]] = []

    async def scenario() -> None:
        async with open_supervisor(name="root") as sup:
            sup.add_exit_listener(log.records.append)
            children.append(sup.spawn(forever))
            await trio.testing.wait_all_tasks_blocked()
            1 / 0  # noqa: B018

    with pytest.raises(ZeroDivisionError):
        await scenario()
    [child] = children
    assert isinstance(child.exit_reason, Cancelled)
    assert isinstance(log.records[-1].reason, Crashed)


async def test_body_exit_waits_for_children_like_a_nursery() -> None:
    async def finishes(mailbox: Mailbox[int]) -> None:
        await mailbox.receive()

    async with open_supervisor() as sup:
        ref = sup.spawn(finishes, restart="temporary")
        ref.tell_nowait(1)
    assert ref.exit_reason == Normal()


# -- spawning errors and introspection ------------------------------------------------------


async def test_spawn_errors_are_clear() -> None:
    async with open_supervisor() as sup:
        sup.spawn(forever, name="x")
        with pytest.raises(DuplicateChild, match="a child named 'x' is already live"):
            sup.spawn(forever, name="x")
        with pytest.raises(ValueError, match="child name 'a/b' must be a non-empty str"):
            sup.spawn(forever, name="a/b")
        with pytest.raises(ValueError, match="unknown restart policy 'sometimes'"):
            sup.spawn(forever, name="y", restart="sometimes")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="an actor is an async function"):
            sup.spawn(42, name="z")  # type: ignore[arg-type]
        with pytest.raises(KeyError, match="has no live child named 'y'"):
            sup.child("y")
        sup.cancel()


async def test_supervisor_configuration_is_validated() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'one_for_some'"):
        async with open_supervisor(strategy="one_for_some"):  # type: ignore[arg-type]
            pass
    with pytest.raises(ValueError, match="intensity must be an int >= 0"):
        async with open_supervisor(intensity=-1):
            pass


async def test_snapshot_shows_the_live_tree_with_mailbox_depths() -> None:
    async def owner(mailbox: Mailbox[object]) -> None:
        async with open_supervisor(name="pool") as pool:
            pool.spawn(forever, name="worker")
            await trio.sleep_forever()

    async def blocked(mailbox: Mailbox[object]) -> None:
        await trio.sleep_forever()

    async with open_supervisor(name="app") as sup:
        sup.spawn(owner, name="owner")
        busy = sup.spawn(blocked, name="busy", capacity=8)
        busy.tell_nowait(1)
        busy.tell_nowait(2)
        await trio.testing.wait_all_tasks_blocked()
        snapshot = sup.snapshot()
        by_path = {a.actor.path: a for a in snapshot.actors}
        assert list(by_path) == ["app", "app/owner", "app/owner/pool", "app/owner/pool/worker",
                                 "app/busy"]  # fmt: skip
        assert by_path["app/busy"].mailbox_depth == 2
        assert by_path["app/busy"].mailbox_capacity == 8
        assert by_path["app/owner/pool"].mailbox_depth is None
        assert by_path["app/owner/pool"].actor.parent_id == by_path["app/owner"].actor.id
        assert {a.state for a in snapshot.actors} == {"running"}
        assert snapshot.render().splitlines() == [
            "supervisor app [running]",
            "├── actor owner [running] mailbox 0/64",
            "│   └── supervisor pool [running]",
            "│       └── actor worker [running] mailbox 0/64",
            "└── actor busy [running] mailbox 2/8",
        ]
        sup.cancel()
    assert sup.snapshot().actors[0].state == "exited"


async def test_the_ref_of_a_child_that_is_gone_keeps_nothing_of_its_function_alive() -> None:
    # A ref carries its actor's function for restarts; once no incarnation will start
    # again, whatever the function holds (a closure's state) must not live as long as
    # somebody keeps the ref.
    class State:
        pass

    state = State()
    alive = weakref.ref(state)

    def actor_holding(held: State) -> Any:
        async def actor(mailbox: Mailbox[object]) -> None:
            assert held is not None

        return actor

    async with open_supervisor() as sup:  # its block waits for the child to exit
        ref = sup.spawn(actor_holding(state), restart="temporary")
        del state
    gc.collect()
    assert alive() is None
    assert isinstance(ref.exit_reason, Normal)
