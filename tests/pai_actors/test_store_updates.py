"""The updates a commit shows its watchers, as the JSON text a store logs for other nodes
(``_store.updates``): read back, they are the updates the committing runtime publishes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio

from pai_actors import MemoryStore, Message, TextPart
from pai_actors._store.base import AppendMessage, ReplaceMessage, Write
from pai_actors._store.postgres_group import Commit
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


def test_a_node_commit_encodes_each_part_once_for_its_row_and_its_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A message with metadata, text no JSON encoder writes as is (a lone surrogate), and a
    tool part: its log reads back as the updates it shows, each part encoded once."""
    message = Message(
        id="m1",
        role="assistant",
        parts=(TextPart(text="bad \udc80 text"), TextPart(text="ünïcode")),
        metadata={"k": [1, "v"]},
    )
    replaced = message.model_copy(update={"parts": (*message.parts, TextPart(text="more"))})
    writes: list[Write] = [
        AppendMessage("t1", message),
        ReplaceMessage("t1", replaced),
        AppendMessage("t2", Message(id="m2", role="user", parts=(TextPart(text="hi"),))),
    ]
    encoded: list[object] = []
    to_wire = TextPart.to_wire

    def counted(self: TextPart) -> Any:
        encoded.append(self)
        return to_wire(self)

    monkeypatch.setattr(TextPart, "to_wire", counted)
    commit = Commit(writes, pipelined=True, log_as="node-1")
    assert len(encoded) == len({id(p) for w in writes for p in w.message.parts})  # type: ignore[attr-defined]
    assert commit.statements is not None
    logged = {params[0]: params[2] for _, params in commit.log}
    shown = updates_of(writes)
    for thread_id, body in logged.items():
        assert decode_updates(str(body)) == [u for u in shown if u.thread_id == thread_id]
    assert set(logged) == {"t1", "t2"}
