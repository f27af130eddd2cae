"""ctx.trigger (and AgentRuntime.trigger): server notifications that continue generation."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    Finish,
    MemoryStore,
    ModelSystemMessage,
    OutputNotJSON,
    RuntimeClosed,
    TextDelta,
    ThreadBusy,
    ToolContext,
    define_agent,
    define_tool,
    message_steps,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call


class Job(BaseModel):
    job: str


def saw_notification(request: Any) -> list[str]:
    return [m.text for m in request.messages if isinstance(m, ModelSystemMessage)]


async def test_a_background_task_triggers_after_its_call_finished(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.Event()

    async def execute(ctx: ToolContext) -> Any:
        async def later() -> None:  # outlives the call that started it
            await trio.sleep(60)
            await ctx.trigger("Export finished.", data={"job": ctx.input.job}, hidden=True)

        nursery.start_soon(later)
        started.set()
        return "started"

    tool = define_tool(id="t.export.v1", description="Export.", input_schema=Job, execute=execute)
    agent = define_agent(name="a", tools={"export": tool})
    model = ScriptedModel(
        [[tool_call("export", {"job": "j1"})], text("Export started."), text("It is done.")]
    )
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            async with create_test_runtime(agent, model=model) as rt:
                thread_id = await rt.create_thread("s")
                await rt.send(thread_id, "export please")
                await rt.wait_idle(thread_id)
                assert len(model.requests) == 2
                await trio.sleep(61)  # the background work triggers with no client around
                await rt.wait_idle(thread_id)
                state = await rt.get_state(thread_id)
    roles = [m.role for m in state.messages]
    assert roles == ["user", "assistant", "system", "assistant"]  # the first turn: two steps
    assert len(message_steps(state.messages[1].parts)) == 2
    notification = state.messages[2]
    assert notification.to_wire() == {
        "id": notification.id,
        "role": "system",
        "parts": [{"type": "text", "text": "Export finished."}],
        "metadata": {"notification": {"hidden": True, "data": {"job": "j1"}}},
    }
    assert [r.status for r in state.runs] == ["completed", "completed"]
    assert saw_notification(model.requests[2]) == ["Export finished."]  # hidden: model sees it


async def test_a_trigger_during_a_run_continues_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def execute(ctx: ToolContext) -> Any:
        await ctx.trigger("A webhook arrived.")
        await release.wait()
        return "done"

    tool = define_tool(id="t.work.v1", description="Work.", input_schema=Job, execute=execute)
    agent = define_agent(name="a", tools={"work": tool})

    def answer(request: Any) -> Any:
        return text(f"saw {saw_notification(request)}")

    model = ScriptedModel([[tool_call("work", {"job": "j"})], answer, answer])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "go")
            await trio.testing.wait_all_tasks_blocked()
            assert [r.status for r in (await rt.get_state(thread_id)).runs] == ["running"]
            release.set()
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    # The run it arrived during saw it in its next step, and answered it: no second run.
    assert [r.status for r in state.runs] == ["completed"]
    assert state.messages[-1].parts[-1].to_wire() == {
        "type": "text",
        "text": "saw ['A webhook arrived.']",
    }
    assert len(model.requests) == 2


async def test_a_trigger_on_an_idle_thread_starts_a_run_and_one_left_is_continued(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={})
    store = MemoryStore()
    model = ScriptedModel([text("Noted."), text("Noted again.")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model, store=store) as rt:
            thread_id = await rt.create_thread("s")
            await rt.trigger(thread_id, "Nightly report ready.", data={"rows": 3})
            await rt.wait_idle(thread_id)
            assert [m.role for m in (await rt.get_state(thread_id)).messages] == [
                "system",
                "assistant",
            ]
            # Stored, then the runtime closes before a run could answer it ...
            await rt.trigger(thread_id, "Second report ready.")
        # ... so the next runtime that loads the thread goes on with it.
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [m.role for m in state.messages] == ["system", "assistant", "system", "assistant"]
    assert [r.status for r in state.runs] == ["completed", "completed"]


async def test_trigger_refuses_what_is_not_a_notification(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = define_agent(name="a", tools={})
    async with create_test_runtime(agent, model=ScriptedModel([])) as rt:
        thread_id = await rt.create_thread("s")
        with pytest.raises(TypeError, match="non-empty str"):
            await rt.trigger(thread_id, "")
        with pytest.raises(TypeError, match="True or False"):
            await rt.trigger(thread_id, "x", hidden="yes")  # type: ignore[arg-type]
        assert (await rt.get_state(thread_id)).messages == ()
    with pytest.raises(RuntimeClosed):
        await rt.trigger(thread_id, "too late")


async def test_a_notification_during_the_final_model_step_is_answered_in_the_same_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Slow:
        def __init__(self) -> None:
            self.seen: list[list[str]] = []

        async def stream(self, request: Any) -> Any:
            self.seen.append(saw_notification(request))
            yield TextDelta(f"answer {len(self.seen)}")
            await trio.sleep(10)
            yield Finish("stop")

    model = Slow()
    agent = define_agent(name="a", tools={})
    with trio.fail_after(100):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.send(thread_id, "hi")
            await trio.sleep(5)  # the model is streaming its answer
            await rt.trigger(thread_id, "ping")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert model.seen == [[], ["ping"]]
    # the step that did not see it and the one that answered it: one turn, two steps
    assert [m.role for m in state.messages] == ["user", "system", "assistant"]
    assert len(message_steps(state.messages[-1].parts)) == 2
    assert [r.status for r in state.runs] == ["completed"]


class _HeldLoad(MemoryStore):
    """Holds the next load of a thread's calls (``list_calls``) until ``release``."""

    def __init__(self, backing: Any) -> None:
        super().__init__(backing)
        self.held = trio.Event()
        self.release = trio.Event()

    async def list_calls(self, thread_id: str) -> Any:
        if not self.held.is_set():
            self.held.set()
            await self.release.wait()
        return await super().list_calls(thread_id)


async def test_a_notification_during_a_send_that_fails_before_its_commit_is_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The send holds the thread, so the notification waits for it; the send then fails
    # before it commits a run (here: an identity that is not JSON), and no run's end is
    # left to answer it. Admission answers it as the send ends (a lost wake-up before; the
    # property: ``send_ends`` and ``no_notification_is_lost`` of ``AdmissionMachine``).
    agent = define_agent(name="a", tools={})
    store = MemoryStore()
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=ScriptedModel([]), store=store) as rt:
            thread_id = await rt.create_thread("s")
        held = _HeldLoad(store.backing)  # the next runtime loads the thread from the store
        model = ScriptedModel([text("Noted.")])
        async with create_test_runtime(agent, model=model, store=held) as rt:
            async with trio.open_nursery() as nursery:

                async def send() -> None:
                    with pytest.raises(OutputNotJSON):
                        await rt.send(thread_id, "hi", identity=object())

                nursery.start_soon(send)
                await held.held.wait()  # the send holds the thread, loading it
                await rt.trigger(thread_id, "Report ready.")
                held.release.set()
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [m.role for m in state.messages] == ["system", "assistant"]
    assert [r.status for r in state.runs] == ["completed"]
    assert saw_notification(model.requests[0]) == ["Report ready."]


async def test_a_send_right_after_a_trigger_finds_the_thread_busy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The continuation answering the notification holds the thread from the moment it is
    # scheduled, as it does once its task runs: a send cannot slip in between and share the
    # thread's reservation with it (one owner at a time; the property: ``send_begins`` and
    # ``table_agrees_with_the_shell`` of ``AdmissionMachine``).
    agent = define_agent(name="a", tools={})
    model = ScriptedModel([text("Noted."), text("Hello.")])
    with trio.fail_after(10):
        async with create_test_runtime(agent, model=model) as rt:
            thread_id = await rt.create_thread("s")
            await rt.trigger(thread_id, "Report ready.")
            with pytest.raises(ThreadBusy, match="continuation"):
                await rt.send(thread_id, "hi")
            await rt.wait_idle(thread_id)
            await rt.send(thread_id, "hi")
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [m.role for m in state.messages] == ["system", "assistant", "user", "assistant"]
    assert [r.status for r in state.runs] == ["completed", "completed"]
    assert saw_notification(model.requests[0]) == ["Report ready."]


class _HeldAfterCommit(MemoryStore):
    """Once ``armed``, the next commit applies, then returns only at ``release`` (shielded,
    as a commit in a worker thread finishes whatever happens to the task meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.committed = trio.Event()
        self.release = trio.Event()

    async def commit(self, writes: Any) -> None:
        await super().commit(writes)
        if self.armed:
            self.armed = False
            with trio.CancelScope(shield=True):
                self.committed.set()
                await self.release.wait()


async def test_a_close_as_a_continuation_commits_its_run_leaves_it_waiting_not_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # (The property: ``continuation_ends`` of ``AdmissionMachine``, a run created while the
    # runtime closes is left unstarted, for the close to park.)
    agent = define_agent(name="a", tools={})
    store = _HeldAfterCommit()
    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            async with create_test_runtime(agent, model=ScriptedModel([]), store=store) as rt:
                thread_id = await rt.create_thread("s")
                await rt.trigger(thread_id, "Report ready.")
                store.armed = True  # the next commit: the continuation's run
                await store.committed.wait()

                async def release_once_closing() -> None:
                    await trio.testing.wait_all_tasks_blocked()  # the close waits on it
                    store.release.set()

                outer.start_soon(release_once_closing)
            # Leaving the block closes the runtime while the continuation's commit returns.
        # The run never started here: parked, as a queued run is (no run is left said to be
        # running by a closed runtime) ...
        assert [r.status for r in await store.list_runs(thread_id)] == ["waiting"]
        # ... and the next runtime that loads the thread answers the notification with it.
        model = ScriptedModel([text("Noted.")])
        async with create_test_runtime(agent, model=model, store=store.reopen()) as rt:
            await rt.wait_idle(thread_id)
            state = await rt.get_state(thread_id)
    assert [m.role for m in state.messages] == ["system", "assistant"]
    assert [r.status for r in state.runs] == ["completed"]
    assert saw_notification(model.requests[0]) == ["Report ready."]
