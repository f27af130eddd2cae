"""``SqliteStore`` refuses every conflicting write as ``MemoryStore`` does: same key, same words.

The conformance suite checks that each conflict is refused; this checks the refusals' text
against the reference store's, write by write, after the same setup on both.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pai_actors import (
    MemoryStore,
    Message,
    SqliteStore,
    Store,
    StoreConflict,
    TextPart,
    ToolPart,
    UploadedFile,
)
from pai_actors.testing._store_check import _call, _external, _run, _suspended, _text, _thread

PART = ToolPart(type="tool-lookup", tool_name="lookup", tool_call_id="c1", state="input-available")
FILE = UploadedFile(
    file_id="f1",
    filename="a.txt",
    media_type="text/plain",
    size=1,
    scope_key="scope-a",
    user_key="user-1",
    thread_id="t1",
    created_at=datetime(2026, 1, 1, tzinfo=UTC),
)


async def _setup(store: Store) -> dict[str, Any]:
    """Threads t1 and t2; in t1 a message m1, a running run r1 and a call c1."""
    async with store.transaction() as tx:
        tx.create_thread(_thread("t1"))
        tx.create_thread(_thread("t2"))
        tx.append_message("t1", _text("m1", "one"))
        run = tx.put_run(_run("t1", "r1"))
        call = tx.put_call(_call(_suspended("c1", "a1")))
        tx.save_file(FILE, b"x")
    return {"run": run, "call": call}


Conflict = Callable[[Any, dict[str, Any]], object]

CONFLICTS: dict[str, Conflict] = {
    "a thread created twice": lambda tx, _: tx.create_thread(_thread("t1")),
    "a message appended twice": lambda tx, _: tx.append_message("t1", _text("m1", "again")),
    "a message in an unknown thread": lambda tx, _: tx.append_message("t9", _text("m2", "x")),
    "a missing message replaced": lambda tx, _: tx.replace_message("t1", _text("m9", "x")),
    "a message replaced in an unknown thread": lambda tx, _: tx.replace_message(
        "t9", _text("m1", "x")
    ),
    "a part in a missing message": lambda tx, _: tx.put_tool_part("t1", "m9", PART),
    "a part in an unknown thread": lambda tx, _: tx.put_tool_part("t9", "m1", PART),
    "a second active run": lambda tx, _: tx.put_run(_run("t1", "r2")),
    "a run created twice": lambda tx, _: tx.put_run(_run("t1", "r1", "failed")),
    "a stale run revision": lambda tx, s: tx.put_run(
        s["run"].model_copy(update={"revision": 5, "status": "failed"})
    ),
    "a missing run with a revision": lambda tx, _: tx.put_run(
        _run("t1", "r9", "failed").model_copy(update={"revision": 3})
    ),
    "a run of an unknown thread": lambda tx, _: tx.put_run(_run("t9", "r9")),
    "a run moved to another thread": lambda tx, s: tx.put_run(
        s["run"].model_copy(update={"thread_id": "t2", "status": "failed"})
    ),
    "a call created twice": lambda tx, _: tx.put_call(_call(_external("c1"))),
    "a stale call revision": lambda tx, s: tx.put_call(
        s["call"].model_copy(update={"revision": 7})
    ),
    "a missing call with a revision": lambda tx, _: tx.put_call(
        _call(_external("c9")).model_copy(update={"revision": 2})
    ),
    "a call of an unknown thread": lambda tx, _: tx.put_call(_call(_external("c9"), "t9")),
    "a file saved twice": lambda tx, _: tx.save_file(FILE, b"y"),
    "a later write of a refused batch": lambda tx, _: (
        tx.append_message("t2", Message(id="m5", role="user", parts=(TextPart(text="x"),))),
        tx.create_thread(_thread("t2")),
    ),
}


async def _refusal(store: Store, conflict: Conflict) -> tuple[str, str, list[Message]]:
    state = await _setup(store)
    with pytest.raises(StoreConflict) as info:
        async with store.transaction() as tx:
            conflict(tx, state)
    return info.value.key, str(info.value), await store.list_messages("t2")


@pytest.mark.parametrize("what", list(CONFLICTS))
async def test_sqlite_refuses_like_memory_store(what: str, tmp_path: Path) -> None:
    expected = await _refusal(MemoryStore(), CONFLICTS[what])
    with SqliteStore(tmp_path / "c.db") as store:
        assert await _refusal(store, CONFLICTS[what]) == expected
        assert await store.get_run("r9") is None  # nothing of a refused batch is written
        assert await store.get_call("t1", "c9") is None
