"""A UI message stream as an ASGI response: the chunks of a
:class:`~pai_actors._http.turn.TurnFeed`, as server-sent events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .._server.feeds import FeedHub, Subscriber
from .turn import TurnFeed
from .ui_stream import STREAM_HEADERS, sse

Settle = Callable[[str], Awaitable[tuple[str, list[Any]]]]
"""Wait until a thread's tree of runs is idle; its run's status then, and its pending
actions with its sub-agents' (the protocol's wire)."""


class TurnResponse(Response):
    """A UI message stream: the chunks of a :class:`TurnFeed`, as server-sent events, until
    the turn's run stops, the client goes away, or the feed ends (the server shutting down,
    or the stream fell too far behind: the client resumes it). When the run waits on
    sub-agent runs, the stream waits for its tree to settle (``settle``) and shows their
    pending actions. Its scope is in ``streams`` while it streams (cancelled when the server
    shuts down); it unsubscribes from the feed when it ends. One task serves it."""

    def __init__(
        self,
        streams: set[trio.CancelScope],
        hub: FeedHub,
        turn: TurnFeed,
        subscriber: Subscriber,
        first: list[Any],
        settle: Settle,
    ) -> None:
        super().__init__(status_code=200)
        # no content-length: the body is streamed (chunked)
        self.raw_headers = [(k.encode(), v.encode()) for k, v in STREAM_HEADERS.items()]
        self._streams, self._hub, self._turn = streams, hub, turn
        self._subscriber, self._first, self._settle = subscriber, first, settle

    async def __call__(self, asgi: Scope, receive: Receive, send: Send) -> None:
        scope = trio.CancelScope()
        self._streams.add(scope)
        try:
            with scope:
                await send(
                    {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                )
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch_disconnect, receive, scope)
                    await self._pump(send)
                    nursery.cancel_scope.cancel()
        finally:
            self._streams.discard(scope)
            self._hub.unsubscribe(self._turn.thread_id, self._subscriber)

    async def _pump(self, send: Send) -> None:
        turn = self._turn

        async def emit(chunks: list[Any]) -> None:
            if chunks:
                body = b"".join(sse(chunk) for chunk in chunks)
                await send({"type": "http.response.body", "body": body, "more_body": True})

        await emit(turn.chunks())
        for frame in self._first:
            if not turn.done:
                await emit(turn.apply(frame))
        receive = self._subscriber.receive
        while not turn.done:
            if turn.needs_settling:
                await emit(turn.settle(*await self._settle(turn.thread_id)))
                continue
            try:
                frame = await receive.receive()
            except trio.EndOfChannel:
                reason = self._subscriber.reason or "overflow"
                await emit(
                    [
                        {
                            "type": "error",
                            "errorText": f"the stream ended ({reason}); resume it to go on",
                        }
                    ]
                )
                break
            self._subscriber.read_one()
            await emit(turn.apply(frame))
        await send({"type": "http.response.body", "body": sse(None), "more_body": False})

    @staticmethod
    async def _watch_disconnect(receive: Receive, done: trio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        done.cancel()
