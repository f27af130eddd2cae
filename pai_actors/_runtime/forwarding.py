"""Requests for a thread another node drives, when several runtimes share a database.

A runtime on a store with a ``node_id`` (several processes, one PostgreSQL database) may be
asked to resolve an action, cancel a run or settle a sub-agent's caller on a thread whose
run another node is running: it cannot write that thread (the store refuses it with
:class:`~pai_actors.ThreadOwnedElsewhere`: fencing). So it **asks the owner**
(:meth:`Forwarding.ask`): the request is stored, the owner is woken and applies it as its
own client's, and the answer comes back, as if the asking node had done it. A request
outlives the owner: if the owner stops, or lets the thread go, before it answered, the
asking node takes the thread over (the takeover recovers it as a restart does) and applies
the requests left for it (:meth:`Forwarding.serve`), as does any node that takes the
thread over.

Each request is applied at most once in effect: its changes go through the store's
resolutions, which accept an action once and a cancellation of an ended run as a no-op.
Its answer is the first one written: a request applied by an owner that stopped before
it answered is applied again by the next owner, and then answered with what that second
application found (an action already resolved is rejected so).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from .._core.errors import (
    PaiError,
    RuntimeClosed,
    StoreError,
    ThreadBusy,
    ThreadNotFound,
    ThreadOwnedElsewhere,
)

_log = logging.getLogger("pai_actors.runtime")

Request = dict[str, Any]
Answer = dict[str, Any]


class SharedStore(Protocol):
    """What forwarding needs of a store shared by several nodes (:class:`PostgresStore`
    with a ``node_id``)."""

    @property
    def node_id(self) -> str | None: ...

    @property
    def lease(self) -> float: ...

    def holds(self, thread_id: str) -> bool: ...

    async def take(self, thread_id: str) -> bool: ...

    async def forward(self, thread_id: str, request: Request) -> int: ...

    async def open_requests(self, thread_id: str) -> list[tuple[int, Request]]: ...

    async def answer(self, request_id: int, answer: Answer) -> None: ...

    async def take_answer(self, request_id: int) -> Answer | None: ...

    async def withdraw(self, request_id: int) -> None: ...


class Forwarding:
    """The requests this node asks of other nodes, and those it serves as an owner.

    ``apply(request)`` applies a request here and returns its answer (a JSON object); it
    raises :class:`~pai_actors.ThreadOwnedElsewhere` when this node does not own the
    thread (then another node serves it)."""

    def __init__(
        self,
        store: SharedStore,
        apply: Callable[[Request], Awaitable[Answer]],
        *,
        patience: float | None = None,
    ) -> None:
        self._store = store
        self._apply = apply
        # How long an asker waits between two looks at the owner (has it stopped, or let
        # the thread go?), and in all before it gives up on an owner that lives but does
        # not answer.
        self._poll = store.lease / 3
        self._patience = 2 * store.lease + 5 if patience is None else patience
        self._answers: dict[int, trio.Event] = {}
        self._serving: dict[str, trio.Lock] = {}

    def answered(self, request_id: int) -> None:
        """A node answered the request ``request_id`` (the store's ``answered``)."""
        event = self._answers.get(request_id)
        if event is not None:
            event.set()

    def requested(self, thread_id: str, nursery: trio.Nursery) -> None:
        """Another node stored a request for ``thread_id`` (the store's ``requested``): serve
        it in ``nursery`` if this node owns the thread."""
        if self._store.holds(thread_id):
            nursery.start_soon(self.serve, thread_id)

    async def ask(self, thread_id: str, request: Request, refused: ThreadOwnedElsewhere) -> Answer:
        """Have the node that owns ``thread_id`` apply ``request``, and return its answer:
        store the request and wait for the answer; meanwhile, every third of a lease, take
        the thread if its owner stopped or let it go, and serve it here. ``refused`` is
        the store's refusal that made this node ask: raised again, with what happened, for
        a request that cannot be stored (not JSON) or an owner that lives but did not
        answer within the patience (the request is withdrawn then)."""
        try:
            json.dumps(request)
        except (TypeError, ValueError):
            raise ThreadOwnedElsewhere(
                refused.key,
                f"{refused.problem}; it could not be handed to that node either (its "
                "payload is not JSON)",
            ) from refused
        request_id = await self._store.forward(thread_id, request)
        woken = self._answers[request_id] = trio.Event()
        try:
            with trio.move_on_after(self._patience):
                while True:
                    found = await self._store.take_answer(request_id)
                    if found is not None:
                        return found
                    with trio.move_on_after(self._poll):
                        await woken.wait()
                    if woken.is_set():
                        woken = self._answers[request_id] = trio.Event()
                    elif await self._store.take(thread_id):  # its owner stopped or let it go
                        await self.serve(thread_id)
            with trio.CancelScope(shield=True):
                found = await self._store.take_answer(request_id)  # at the last moment?
                if found is None:
                    await self._store.withdraw(request_id)
        finally:
            del self._answers[request_id]
        if found is not None:
            return found
        raise ThreadOwnedElsewhere(
            refused.key,
            f"{refused.problem}; it was handed to that node, which did not answer within "
            f"{self._patience:g} s: the request was withdrawn (unless that node was applying "
            "it at that moment, it was not applied); look at the thread, then try again",
        ) from refused

    async def serve(self, thread_id: str) -> None:
        """Apply the requests other nodes stored for ``thread_id``, oldest first, and answer
        each; stop at the first this node cannot apply because it does not own the thread
        (its owner serves the rest). One server per thread at a time."""
        lock = self._serving.setdefault(thread_id, trio.Lock())
        try:
            async with lock:
                for request_id, request in await self._store.open_requests(thread_id):
                    try:
                        answer = await self._apply(request)
                    except ThreadOwnedElsewhere:
                        return
                    except PaiError as exc:
                        answer = error_answer(exc)
                    await self._store.answer(request_id, answer)
        except PaiError:  # the store failed: the asker, or the next owner, serves it
            _log.exception("serving the requests of thread %r failed", thread_id)
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._serving.pop(thread_id, None)


def error_answer(exc: PaiError) -> Answer:
    """The answer of a request whose application raised ``exc``."""
    return {"error": str(exc), "type": type(exc).__name__}


def raise_error(answer: Answer) -> None:
    """Raise, on the asking node, the error an answer carries, if it carries one: of the
    owner's error type where that type takes a message alone (a failed commit is a
    :class:`StoreError` on either node, which a client may retry), else a
    :class:`PaiError`; its message names the owner's error type."""
    if "error" in answer:
        kind = answer.get("type", "an error")
        raise _FORWARDED_TYPES.get(kind, PaiError)(
            f"{answer['error']} ({kind} raised by the node that owns the thread)"
        )


_FORWARDED_TYPES: dict[str, type[PaiError]] = {
    kind.__name__: kind for kind in (StoreError, ThreadNotFound, ThreadBusy, RuntimeClosed)
}
"""The owner's errors the asker raises as their own type (each is built from a message)."""
