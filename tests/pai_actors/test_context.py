"""AbortController and AbortSignal: what ctx.signal is made of."""

from __future__ import annotations

import trio
import trio.testing

from pai_actors import AbortController


async def test_an_abort_signal_fires_once_and_keeps_the_first_reason() -> None:
    controller = AbortController()
    signal = controller.signal
    assert (signal.aborted, signal.reason) == (False, None)
    woke: list[str | None] = []

    async def waiter() -> None:
        await signal.wait()
        woke.append(signal.reason)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == []
        controller.abort("user left")
        controller.abort("too late")  # changes nothing
    assert woke == ["user left"]
    assert (signal.aborted, signal.reason) == (True, "user left")
    await signal.wait()  # already aborted: returns at once


async def test_aborting_without_a_reason_leaves_it_none() -> None:
    controller = AbortController()
    controller.abort()
    assert (controller.signal.aborted, controller.signal.reason) == (True, None)


async def test_a_signal_first_waited_on_once_aborted_returns_at_once() -> None:
    controller = AbortController()
    controller.abort("gone")
    returned: list[str | None] = []

    async def waiter() -> None:
        await controller.signal.wait()
        returned.append(controller.signal.reason)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert returned == ["gone", "gone"]  # (else the nursery cancels them: a failure)


async def test_every_waiter_wakes_when_the_signal_is_aborted() -> None:
    controller = AbortController()
    woke: list[int] = []

    async def waiter(n: int) -> None:
        await controller.signal.wait()
        woke.append(n)

    async with trio.open_nursery() as nursery:
        for n in range(3):
            nursery.start_soon(waiter, n)
        await trio.testing.wait_all_tasks_blocked()
        controller.abort()
    assert sorted(woke) == [0, 1, 2]
