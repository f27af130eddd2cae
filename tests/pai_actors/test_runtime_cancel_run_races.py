"""``cancel_run`` racing a resolution of one of its run's actions, at every store step.

The race of the outside review: a run waits on an approval; a client submits the approval
and cancels the run within milliseconds. With a store whose operations yield (SQLite's group
commit does), ``cancel_run`` read the run, the submission wrote it (``running``), and the
cancellation's write of the run failed on the revision: the call was recorded cancelled, the
run was not, and it went on to complete.

Here a store gates every operation (each read and each commit) of the two racing tasks, and
Hypothesis draws which of the two takes each next step (the runtime's own tasks, the
activated run among them, run freely). So the cancellation lands before, between and after
every store operation of the submission, and the other way round. Whatever the order:

- ``cancel_run`` returns the run's state and never raises; the run ends ``cancelled`` (every
  call done, those it cut off recorded with its reason), or it had already ended before the
  cancellation looked, and ``cancel_run`` says so (``completed``);
- the submission is accepted (and then cancelled with the run, or its work done before) or
  rejected; an accepted approval is never lost while the run goes on;
- a second ``cancel_run`` changes nothing and says what the first left.

Admission's part of it (a run ``cancel_run`` is at is not passivated, so a submission does not
record it ``running``; it takes no activation and never starts; two cancellations at once
are counted, one's end leaving the run cancelling) is a property of ``AdmissionMachine`` in
``test_admission.py`` (``run_queries_agree``, ``request_activation``, ``started``,
``cancel_ends``); what stays here is the store's part, revisions and judgement, in every order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    MemoryStore,
    ResumeEntry,
    SuspendPoint,
    ToolContext,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text, tool_call

CANCELLED = "The tool call was cancelled: stop"


class Summary(BaseModel):
    summary: str


class Decision(BaseModel):
    approved: bool


class GatedStore(MemoryStore):
    """A :class:`MemoryStore` on which each operation of a task given a name waits for its
    turn: :meth:`step` lets the named task's waiting operation through."""

    def __init__(self, backing: Any) -> None:
        super().__init__(backing)
        self.names: dict[trio.lowlevel.Task, str] = {}
        self.waiting: dict[str, trio.Event] = {}
        self.open = False

    async def enter(self, name: str) -> None:
        """Gate the calling task's store operations from now on, under ``name``, and wait
        for its first turn (the task's start is a step too)."""
        self.names[trio.lowlevel.current_task()] = name
        await self._turn()

    async def _turn(self) -> None:
        name = self.names.get(trio.lowlevel.current_task())
        if name is None or self.open:
            return
        event = self.waiting[name] = trio.Event()
        await event.wait()

    def step(self, name: str) -> bool:
        """Let ``name``'s waiting operation go on; ``False`` if it is not waiting."""
        event = self.waiting.pop(name, None)
        if event is None:
            return False
        event.set()
        return True

    def release(self) -> None:
        self.open = True
        for name in list(self.waiting):
            self.step(name)

    async def _read(self) -> Any:
        await self._turn()
        return await super()._read()

    async def commit(self, writes: Any) -> None:
        await self._turn()
        await super().commit(writes)


def _agent(resumed: list[str], kind: Literal["approval", "suspend"]) -> Any:
    async def execute(ctx: ToolContext) -> Any:
        if kind == "suspend" and not isinstance(ctx.entry, ResumeEntry):
            return ctx.suspend("approval", {"summary": ctx.input.summary})
        resumed.append(ctx.thread.tool_call_id)
        return "paid"

    tool = define_tool(
        id="t.pay.v1",
        description="Pay.",
        input_schema=Summary,
        suspend=(
            {"approval": SuspendPoint(suspend_schema=Summary, resume_schema=Decision)}
            if kind == "suspend"
            else None
        ),
        execute=execute,
    )
    return define_agent(
        name="a", tools={"pay": ToolRegistration(tool, needs_approval=kind == "approval")}
    )


Resolution = Literal["submit", "cancel_action", "fail_action"]


async def _race(
    kind: Literal["approval", "suspend"],
    resolution: Resolution,
    schedule: Sequence[bool],
) -> list[tuple[bool, bool]]:
    """Race the two, giving each next step to the cancellation when ``schedule`` says
    ``True`` there (past its end: to the resolution), whenever both wait for one. Returns
    each step's choice and whether the other task was waiting too (a branch point)."""
    resumed: list[str] = []
    agent = _agent(resumed, kind)
    backing = MemoryStore().backing
    model = ScriptedModel([[tool_call("pay", {"summary": "s"})], text("paid it")])
    store = GatedStore(backing)
    async with create_test_runtime(agent, model=model, store=store) as rt:
        tid = await rt.create_thread("s")
        run_id = await rt.send(tid, "go")
        await rt.wait_idle(tid)
        [action] = await rt.pending_actions(tid)
        results: dict[str, Any] = {}
        taken: list[tuple[bool, bool]] = []

        async def resolve() -> None:
            await store.enter("resolve")
            payload = {"approved": True}
            how: dict[Resolution, Callable[[], Awaitable[Any]]] = {
                "submit": lambda: action.submit(payload),
                "cancel_action": lambda: action.cancel("no"),
                "fail_action": lambda: action.fail("broken"),
            }
            results["resolve"] = (await how[resolution]()).status

        async def cancel() -> None:
            await store.enter("cancel")
            results["cancel"] = await rt.cancel_run(run_id, "stop")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resolve)
            nursery.start_soon(cancel)
            while True:
                await trio.testing.wait_all_tasks_blocked()
                waiting = set(store.waiting)
                if not waiting:
                    break
                i = len(taken)
                cancel_first = schedule[i] if i < len(schedule) else False
                if len(waiting) == 1:
                    cancel_first = "cancel" in waiting
                taken.append((cancel_first, len(waiting) == 2))
                store.step("cancel" if cancel_first else "resolve")
        await rt.wait_idle(tid)

        state = await rt.get_state(tid)
        [run] = state.runs
        [part] = [
            p for m in state.messages for p in m.parts if p.type not in ("text", "step-start")
        ]
        assert results["resolve"] in ("accepted", "rejected")
        assert run.status in ("cancelled", "completed"), run
        # cancel_run says what it left: cancelled, or the run had already ended.
        assert results["cancel"].status == run.status, (results, run)
        if run.status == "completed":  # everything happened before the cancel looked
            assert results["resolve"] == "accepted"
        if results["resolve"] == "rejected":  # the cancellation came first
            assert (part.state, part.error_text) == ("output-error", CANCELLED)
        if part.state == "output-available":  # the approved work ran, before the cancel
            assert results["resolve"] == "accepted"
            assert resolution == "submit"
            assert resumed == [part.tool_call_id]
        else:
            assert part.state == "output-error", part
            if part.error_text == CANCELLED:
                assert part.cancelled is not None
                assert part.cancelled.reason == "stop"
            else:  # failed or cancelled by the action, accepted before the cancel
                assert results["resolve"] == "accepted"
                assert resolution != "submit"
        assert await rt.pending_actions(tid) == []
        assert all(c.record.phase == "done" for c in await rt.store.list_calls(tid))
        assert await rt.store.get_active_run(tid) is None
        # A second cancel changes nothing and says the same.
        again = await rt.cancel_run(run_id, "again")
        assert again.status == run.status
        assert await rt.get_state(tid) == state
    return taken


def _explore(kind: Literal["approval", "suspend"], resolution: Resolution) -> int:
    """Run the race in every order of the two tasks' steps (each order once: a schedule's
    prefix is replayed, and each branch point past it is taken the other way); return how
    many orders there were."""
    todo: list[tuple[bool, ...]] = [()]
    orders = 0
    while todo:
        schedule = todo.pop()

        async def main(schedule: tuple[bool, ...] = schedule) -> list[tuple[bool, bool]]:
            with trio.fail_after(1_000):
                return await _race(kind, resolution, schedule)

        taken = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        orders += 1
        choices = tuple(choice for choice, _ in taken)
        assert choices[: len(schedule)] == schedule  # the replay is exact
        for i in range(len(schedule), len(taken)):
            if taken[i][1]:
                todo.append((*choices[:i], not choices[i]))
    return orders


@pytest.mark.parametrize("resolution", ["submit", "cancel_action", "fail_action"])
@pytest.mark.parametrize("kind", ["approval", "suspend"])
def test_cancel_run_racing_a_resolution_in_every_order_cancels_the_run_or_finds_it_ended(
    kind: Literal["approval", "suspend"], resolution: Resolution
) -> None:
    assert _explore(kind, resolution) > 20  # the two tasks' steps do interleave
