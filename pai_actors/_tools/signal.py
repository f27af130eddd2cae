"""Where a call runs and how it is aborted: :class:`ToolThread`, :class:`AbortSignal` and
:class:`AbortController`, and :func:`require_trio` (the error of an async ``ctx`` method
awaited from a plain ``def`` tool's worker thread).

The values every part of a call's context shares, in a module of their own so that
``ctx.tools`` and ``ctx.agents`` can use them without importing the context.

Concurrency: an :class:`AbortController` and its signal belong to one trio run; ``abort`` is
synchronous and idempotent (the first reason wins), and every waiter of ``wait`` wakes once.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

import trio


@dataclass(frozen=True, slots=True)
class ToolThread:
    """Where a call runs: its thread, run, ``tool_call_id`` and registration name."""

    thread_id: str
    run_id: str
    tool_call_id: str
    tool_name: str


def require_trio(what: str) -> None:
    """Raise a ``RuntimeError`` explaining the worker thread when not called from a trio task
    (a blocking tool calling an async method of ``ctx`` directly)."""
    if not trio.lowlevel.in_trio_task():
        raise RuntimeError(
            f"{what} was called outside the trio thread: this tool's execute is a plain def, "
            "so the runtime runs it in a worker thread, where the async methods of ctx cannot "
            f"be awaited; call it through trio (trio.from_thread.run({what.removesuffix('()')}"
            ", ...)), or make execute `async def`"
        )


class AbortSignal:
    """Whether a call was aborted, and why; made by an :class:`AbortController`.

    ``aborted`` turns ``True`` once; ``reason`` is the cancel reason (or ``None``);
    ``await wait()`` returns once it is aborted (at once if it already is).
    """

    def __init__(self) -> None:
        # The event is made by the first ``wait()``, the followers' list by the first
        # follower: most calls are never aborted nor waited on, and a call's signal lives
        # as long as the call, so each object less is one less for the garbage collector
        # to scan, a thousand times over with a thousand calls in flight.
        self._aborted = False
        self._reason: str | None = None
        self._event: trio.Event | None = None
        self._followers: list[AbortController] | None = None

    def _follow(self, controller: AbortController) -> None:
        """Abort ``controller`` (with this signal's reason) when this signal is aborted, at
        once if it already is: a child call's signal follows its parent's."""
        if self._aborted:
            controller.abort(self._reason)
        elif self._followers is None:
            self._followers = [controller]
        else:
            self._followers.append(controller)

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> str | None:
        return self._reason

    def wait(self) -> Awaitable[None]:
        """``await signal.wait()``: return once aborted (a trio method: from a blocking
        tool's worker thread, poll ``aborted`` instead)."""
        require_trio("ctx.signal.wait()")
        event = self._event
        if event is None:
            event = self._event = trio.Event()
            if self._aborted:
                event.set()
        return event.wait()

    def _abort(self, reason: str | None) -> None:
        """Abort this signal and its followers; later calls change nothing."""
        if not self._aborted:
            self._reason = reason  # (before ``aborted``: a thread polling it sees both)
            self._aborted = True
            if self._event is not None:
                self._event.set()
            followers, self._followers = self._followers, None
            for follower in followers or ():
                follower.abort(reason)

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self.aborted}, reason={self.reason!r})"


class AbortController:
    """Makes an :class:`AbortSignal` (``.signal``) and aborts it (``.abort(reason=None)``)."""

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: str | None = None) -> None:
        """Abort the signal; later calls change nothing (the first reason is kept)."""
        self.signal._abort(reason)
