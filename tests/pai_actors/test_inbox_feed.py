"""The inbox's live feed of a scope (``pai_actors._inbox.feed``), under trio's mock clock."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from pai_actors import RuntimeClosed
from pai_actors._inbox.feed import ScopeActions, ScopePokes
from pai_actors.testing import ScriptedModel, create_test_runtime

from .inbox_support import _billing_step, _desk_step, make_pai


def _runtime() -> Any:
    models = {
        "desk": ScriptedModel([_desk_step] * 100),
        "billing": ScriptedModel([_billing_step] * 100),
    }
    return create_test_runtime(make_pai(), model=models)


async def _start(rt: Any, scope_key: str, command: str) -> str:
    thread_id: str = await rt.create_thread(scope_key)
    await rt.send(thread_id, command)
    await rt.wait_idle(thread_id)
    return thread_id


def _names(actions: list[Any]) -> list[tuple[str, str]]:
    return [(a["ref"]["threadId"], a["name"]) for a in actions]


async def test_a_reader_gets_the_actions_then_each_change_of_its_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with _runtime() as rt:
        first = await _start(rt, "tenant-a", "pay 500")
        actions = ScopeActions(rt, "tenant-a", ScopePokes(), interval=1.0)
        with trio.fail_after(1):
            assert _names(await actions.next()) == [(first, "pay")]

        await _start(rt, "tenant-b", "pay 300")  # another scope: nothing to show
        with trio.move_on_after(30) as waited:
            await actions.next()
        assert waited.cancelled_caught

        second = await _start(rt, "tenant-a", "delegate 900")  # a sub-agent's
        with trio.fail_after(5):
            shown = _names(await actions.next())
        assert shown[0] == (first, "pay")
        assert shown[1][0].startswith(f"{second}/call_1/billing-")
        assert len(shown) == 2


async def test_a_commit_that_writes_a_call_wakes_the_readers_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with _runtime() as rt:
        thread_id = await _start(rt, "tenant-a", "pick")
        actions = ScopeActions(rt, "tenant-a", ScopePokes(), interval=1000.0)
        assert _names(await actions.next()) == [(thread_id, "pick")]
        [view] = await rt.pending_actions(thread_id)
        with trio.fail_after(1):  # well before the next poll: the commit woke it
            async with trio.open_nursery() as nursery:
                nursery.start_soon(view.fail, "no option fits")
                assert await actions.next() == []


async def test_a_poke_wakes_the_waits_of_its_scope_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pokes = ScopePokes()
    seen = pokes.count("tenant-a")
    pokes.poke("tenant-b")
    with trio.move_on_after(0.01) as waited:
        await pokes.wait("tenant-a", seen)
    assert waited.cancelled_caught
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pokes.wait, "tenant-a", seen)
        await trio.testing.wait_all_tasks_blocked()
        pokes.poke("tenant-a")
    assert pokes.count("tenant-a") == seen + 1


async def test_a_reader_ends_when_the_runtime_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pokes = ScopePokes()
    async with _runtime() as rt:
        rt.close_with(pokes.close)
        actions = ScopeActions(rt, "tenant-a", pokes, interval=1000.0)
        assert await actions.next() == []
    with trio.fail_after(1), pytest.raises(RuntimeClosed):
        await actions.next()


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ScopeActions(None, "tenant-a", ScopePokes(), interval=0)  # type: ignore[arg-type]
