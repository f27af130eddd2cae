"""Schema version 3: a store written with one assistant message per model step (version 2)
opens as one assistant message per turn, and its runs go on (``_store.sqlite_schema``).

``fixtures/store_v2.sqlite`` was written by the release with schema version 2
(``fixtures/make_store_v2.py`` says how).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import trio

from pai_actors import SqliteStore, StepStartPart, TextPart, ToolPart
from pai_actors.testing import create_test_runtime

from .fixtures.shop_agents import shop_model, shop_pai

FIXTURE = Path(__file__).with_name("fixtures") / "store_v2.sqlite"
SUB_THREAD = "thread_3/call_2/payer-2d0964b69a18"


def v2_copy(tmp_path: Path) -> str:
    path = tmp_path / "store.sqlite"
    shutil.copyfile(FIXTURE, path)
    return str(path)


def shape(parts: tuple[object, ...]) -> list[str]:
    out = []
    for part in parts:
        if isinstance(part, ToolPart):
            out.append(f"{part.type}:{part.state}")
        elif isinstance(part, TextPart):
            out.append(f"text:{part.text}")
        else:
            out.append(getattr(part, "type", "?"))
    return out


async def test_each_turn_becomes_one_message_with_its_steps(tmp_path: Path) -> None:
    path = v2_copy(tmp_path)
    store = SqliteStore(path)
    try:
        messages = {t: await store.list_messages(t) for t in ("thread_1", "thread_2", "thread_3")}
        buy = messages["thread_1"]
        assert [(m.id, m.role) for m in buy] == [("msg_1_1", "user"), ("msg_1_2", "assistant")]
        assert shape(buy[1].parts) == [
            "step-start",
            "text:Looking Oslo up.",
            "tool-lookup:output-available",
            "step-start",
            "tool-pay:approval-requested",
        ]
        assert isinstance(buy[1].parts[0], StepStartPart)
        assert buy[1].metadata == {
            "usage": {"inputTokens": 30, "outputTokens": 3, "totalTokens": 33}
        }
        chat = messages["thread_2"]
        assert shape(chat[1].parts)[-2:] == ["step-start", "text:done with Rome"]
        assert chat[1].metadata == {
            "usage": {"inputTokens": 40, "outputTokens": 4, "totalTokens": 44}
        }
        # the calls and the sub-agent's thread name the turn's message now
        calls = await store.list_calls("thread_1")
        assert [(c.record.tool_call_id, c.message_id) for c in calls] == [
            ("call_1", "msg_1_2"),
            ("call_2", "msg_1_2"),
        ]
        (pending,) = await store.list_pending_actions("thread_1")
        assert pending.ref.message_id == "msg_1_2"
        sub = await store.get_thread(SUB_THREAD)
        assert sub is not None
        assert sub.parent is not None
        assert sub.parent.message_id == "msg_3_2"
        (sub_message,) = [m for m in await store.list_messages(SUB_THREAD) if m.role != "user"]
        assert shape(sub_message.parts) == ["step-start", "tool-pay:approval-requested"]
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (3,)
        assert db.execute("SELECT count(*) FROM messages").fetchone() == (8,)


async def test_the_migrated_runs_go_on_where_they_waited(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = v2_copy(tmp_path)
    paid: list[str] = []
    with trio.fail_after(10):
        store = SqliteStore(path)
        async with create_test_runtime(shop_pai(paid), model=shop_model(), store=store) as rt:
            waiting = {
                "thread_1": "msg_1_2",  # the turn's message, which the approval's call names
                "thread_3": "msg_3/call_2/payer-2d0964b69a18_2",  # the sub-agent's
            }
            for thread_id, message_id in waiting.items():
                actions = await rt.pending_actions(thread_id)
                assert [a.ref.message_id for a in actions] == [message_id]
                for action in actions:
                    await action.submit({"approved": True})
                await rt.wait_idle(thread_id)
            states = {t: await rt.get_state(t) for t in ("thread_1", "thread_3", SUB_THREAD)}
        store.close()
        store = SqliteStore(path)  # opened again: already version 3, nothing to do
        again = await store.list_messages("thread_1")
        store.close()
    assert sorted(paid) == ["Lima", "Oslo"]
    buy = states["thread_1"]
    assert buy.runs[-1].status == "completed"
    assert [m.role for m in buy.messages] == ["user", "assistant"]
    assert shape(buy.messages[1].parts) == [
        "step-start",
        "text:Looking Oslo up.",
        "tool-lookup:output-available",
        "step-start",
        "tool-pay:output-available",
        "step-start",
        "text:done with Oslo",
    ]
    assert buy.messages[1].metadata == {
        "usage": {"inputTokens": 60, "outputTokens": 6, "totalTokens": 66}
    }
    assert again == list(buy.messages)
    plan = states["thread_3"]
    assert plan.runs[-1].status == "completed"
    assert shape(plan.messages[1].parts)[-4:] == [
        "step-start",
        "tool-ask:output-available",
        "step-start",
        "text:done with Lima",
    ]
    sub = states[SUB_THREAD]
    assert shape(sub.messages[1].parts) == [
        "step-start",
        "tool-pay:output-available",
        "step-start",
        "text:paid Lima",
    ]
