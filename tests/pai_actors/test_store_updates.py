"""The updates a commit shows its watchers, as the JSON text a store logs for other nodes
(``_store.updates``): read back, they are the updates the committing runtime publishes."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from pai_actors import MemoryStore
from pai_actors._store.base import Write
from pai_actors._store.updates import decode_updates, encoded_updates, updates_of
from pai_actors.testing import create_test_runtime

from .watching import payer


class Recording(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.commits: list[Sequence[Write]] = []

    async def commit(self, writes: Sequence[Write]) -> None:
        await super().commit(writes)
        self.commits.append(list(writes))


async def test_the_logged_text_reads_back_as_the_updates_the_writes_show(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent, model = payer(calls=2)
    store = Recording()
    async with create_test_runtime(agent, model=model, store=store) as rt:
        one, two = await rt.create_thread("s"), await rt.create_thread("s")
        for thread_id in (one, two):
            await rt.send(thread_id, "pay")
            await rt.wait_idle(thread_id)
            for action in await rt.pending_actions(thread_id):
                await action.submit({"approved": True})
            await rt.wait_idle(thread_id)
    kinds: set[str] = set()
    for writes in store.commits:
        encoded = encoded_updates(writes)
        shown = updates_of(writes)
        assert set(encoded) == {u.thread_id for u in shown}
        for thread_id, body in encoded.items():
            assert decode_updates(body) == [u for u in shown if u.thread_id == thread_id]
        kinds.update(u.type for u in shown)
    assert kinds == {"message-appended", "message-replaced", "tool-part-updated", "run-status"}
