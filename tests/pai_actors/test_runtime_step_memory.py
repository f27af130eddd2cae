"""What a model step keeps while it is written: nothing of what it was asked with.

With thousands of runs in flight, whatever a step holds while its commit is written lives
across that wait; a request holds the whole history and every offered tool's JSON Schema.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence

import trio

from pai_actors import (
    Finish,
    MemoryStore,
    ModelEvent,
    ModelRequest,
    TextDelta,
    define_agent,
)
from pai_actors._store.base import AppendMessage, ReplaceMessage, Write
from pai_actors.testing import create_test_runtime


class RecordingModel:
    """Answers every step with text; keeps each request it was asked with."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        yield TextDelta("hello")
        yield Finish("stop")


async def test_a_step_is_written_with_its_request_no_longer_held_by_the_runtime(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = RecordingModel()
    held: list[int] = []

    class WatchingStore(MemoryStore):
        async def commit(self, writes: Sequence[Write]) -> None:
            for write in writes:
                if isinstance(write, (AppendMessage, ReplaceMessage)):
                    if write.message.role == "assistant" and model.requests:
                        # references: the model's list, and getrefcount's own argument
                        held.append(sys.getrefcount(model.requests[-1]) - 2)
            await super().commit(writes)

    agent = define_agent(name="a", tools={})
    async with create_test_runtime(agent, model=model, store=WatchingStore()) as rt:
        thread_id = await rt.create_thread("s")
        await rt.send(thread_id, "hi")
        await rt.wait_idle(thread_id)
        state = await rt.get_state(thread_id)
    assert [r.status for r in state.runs] == ["completed"]
    assert held == [0]  # the step's answer was written with nothing else holding its request
