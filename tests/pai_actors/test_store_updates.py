"""The updates a commit shows its watchers, as the JSON text a store logs for other nodes
(``_store.updates``): read back, they are the updates the committing runtime publishes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from pai_actors import MemoryStore, ToolRegistration, define_agent, define_tool, json_schema
from pai_actors._store.base import Write
from pai_actors._store.updates import decode_updates, encoded_updates, updates_of
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


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
    def pay(ctx: Any) -> str:
        return "paid"

    tool = define_tool(
        id="test.pay.v1",
        description="Pay.",
        input_schema=json_schema({"type": "object"}),
        execute=pay,
    )
    agent = define_agent(name="payer", tools={"pay": ToolRegistration(tool, needs_approval=True)})

    def step(request: Any) -> Any:
        answered = type(request.messages[-1]).__name__ == "ModelToolMessage"
        return text("done") if answered else [tool_call("pay", {}), tool_call("pay", {})]

    store = Recording()
    async with create_test_runtime(
        agent, model=ScriptedModel([step], repeat_last=True), store=store
    ) as rt:
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
