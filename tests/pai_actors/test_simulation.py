"""The simulation kit (``pai_actors.testing.simulate``): determinism by seed, crashes and
failed writes at every commit of a recorded run, model faults and clock jumps, and a
planted cancellation bug found and reported with its replay command."""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing
from pydantic import BaseModel

from pai_actors import (
    PaiError,
    ResumeEntry,
    SuspendPoint,
    ToolContext,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors.testing import (
    Faults,
    Simulation,
    SimulationFailure,
    Workload,
    simulate,
    text,
    tool_call,
)
from pai_actors.testing._simulation import example


class Invoice(BaseModel):
    amount: int


class Confirm(BaseModel):
    ok: bool


def billing(*, swallow: bool = False) -> Any:
    """``pay`` needs an approval and works a second; ``ask`` suspends for a confirmation.
    ``swallow`` plants a bug: ``pay`` catches its cancellation and returns."""

    async def pay(ctx: ToolContext) -> Any:
        try:
            await trio.sleep(1)
        except trio.Cancelled:
            if swallow:
                return {"paid": 0}  # the planted bug: trio.Cancelled swallowed
            raise
        return {"paid": ctx.input.amount}

    async def ask(ctx: ToolContext) -> Any:
        if not isinstance(ctx.entry, ResumeEntry):
            return ctx.suspend("confirm", {"amount": ctx.input.amount})
        await trio.sleep(0.5)
        return {"confirmed": ctx.entry.resume.ok}

    confirm = SuspendPoint(suspend_schema=Invoice, resume_schema=Confirm)
    return define_agent(
        name="billing",
        tools={
            "pay": ToolRegistration(
                define_tool(id="sim.pay", description="Pay.", input_schema=Invoice, execute=pay),
                needs_approval=True,
            ),
            "ask": define_tool(
                id="sim.ask",
                description="Ask.",
                input_schema=Invoice,
                suspend={"confirm": confirm},
                execute=ask,
            ),
        },
    )


def step(request: Any) -> Any:
    if type(request.messages[-1]).__name__ == "ModelToolMessage":
        return text("done")
    return [tool_call("pay", {"amount": 5}), tool_call("ask", {"amount": 7})]


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """A crashed runtime logs what it could not write; that noise is expected here."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def test_the_same_seed_gives_the_same_bytes_with_100_agents_at_the_same_instants() -> None:
    workload = Workload(threads=100, think=(0.0, 1.0))
    first = simulate(billing(), model=step, workload=workload, seed=11)
    again = simulate(billing(), model=step, workload=workload, seed=11)
    first.raise_for_violations()
    assert first.dump() == again.dump()
    assert first.trace_text() == again.trace_text()
    assert len(first.trace) > 300
    # many conversations acted at the same virtual instants
    at_once = max(sum(1 for e in first.trace if e.at == at) for at in {e.at for e in first.trace})
    assert at_once >= 50
    # trio's scheduling order changes nothing of the result
    shuffled = simulate(billing(), model=step, workload=workload, seed=11, scheduler_seed=99)
    assert shuffled.dump() == first.dump()
    assert shuffled.trace_text() == first.trace_text()
    # another seed explores other choices
    other = simulate(billing(), model=step, workload=workload, seed=12)
    assert other.trace_text() != first.trace_text()


def test_a_crash_at_every_commit_of_a_recorded_run_keeps_every_invariant() -> None:
    workload = Workload(threads=3)
    recorded = simulate(billing(), model=step, workload=workload, seed=7)
    recorded.raise_for_violations()
    assert recorded.commits > 20
    for k in range(recorded.commits + 1):
        faults = Faults(crash_after_commits=frozenset({k}))
        result = simulate(billing(), model=step, workload=workload, seed=7, faults=faults)
        result.raise_for_violations()
        assert result.processes == 2, k  # a fresh runtime went on from the committed state
        assert f"crash after commit {k}" in result.faults[0]


def test_a_failed_write_at_every_commit_of_a_recorded_run_keeps_every_invariant() -> None:
    workload = Workload(threads=3)
    recorded = simulate(billing(), model=step, workload=workload, seed=7)
    for k in range(1, recorded.commits + 1):
        faults = Faults(fail_commits=frozenset({k}))
        result = simulate(billing(), model=step, workload=workload, seed=7, faults=faults)
        result.raise_for_violations()
        assert result.faults == (f"commit {k} failed",)


def test_random_faults_of_every_kind_keep_every_invariant() -> None:
    faults = Faults(
        crash_rate=0.01,
        commit_failure_rate=0.01,
        model_error_rate=0.1,
        model_stall_rate=0.1,
        clock_jumps=((2.0, 30.0),),
    )
    kinds: set[str] = set()
    for seed in range(8):
        result = simulate(
            billing(), model=step, workload=Workload(threads=20), seed=seed, faults=faults
        )
        result.raise_for_violations()
        kinds.update(f.split()[0] for f in result.faults)
        again = simulate(
            billing(), model=step, workload=Workload(threads=20), seed=seed, faults=faults
        )
        assert again.dump() == result.dump()
    assert {"crash", "commit", "model", "clock"} <= kinds


def test_a_planted_cancellation_bug_is_found_and_its_replay_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workload = Workload(threads=10, behaviours={"approve": 1.0, "cancel_run": 1.0})
    found = None
    for seed in range(10):
        result = simulate(billing(swallow=True), model=step, workload=workload, seed=seed)
        if result.violations:
            found = result
            break
    assert found is not None, "the planted bug went unnoticed"
    assert any("swallowed trio.Cancelled" in v for v in found.violations)
    with pytest.raises(SimulationFailure) as failure:
        found.raise_for_violations()
    message = str(failure.value)
    assert f"seed {found.seed}" in message
    assert f"PAI_SIM_SEED={found.seed} pytest " in message
    # the replay command's seed wins over the test's
    monkeypatch.setenv("PAI_SIM_SEED", str(found.seed))
    replayed = simulate(billing(swallow=True), model=step, workload=workload, seed=12345)
    assert replayed.seed == found.seed
    assert replayed.violations == found.violations
    # the same workload on the correct tool is clean
    monkeypatch.delenv("PAI_SIM_SEED")
    simulate(billing(), model=step, workload=workload, seed=found.seed).raise_for_violations()


async def test_a_simulation_runs_inside_a_test_under_the_autojump_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    result = await Simulation(billing(), model=step, workload=Workload(threads=5), seed=3).run()
    result.raise_for_violations()
    assert {e.what.split()[0] for e in result.trace} >= {"created", "sent", "idle:"}


async def test_a_simulation_needs_virtual_time() -> None:
    with pytest.raises(PaiError, match="MockClock"):
        await Simulation(billing(), model=step).run()


def test_workloads_refuse_what_cannot_run() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Workload(threads=0)
    with pytest.raises(ValueError, match="unknown behaviours"):
        Workload(behaviours={"dance": 1.0})  # type: ignore[dict-item]


def test_an_example_answer_satisfies_its_schema() -> None:
    rng = random.Random(1)
    schema = {
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "n": {"type": "integer", "minimum": 3},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "kind": {"enum": ["a", "b"]},
            "ref": {"$ref": "#/$defs/Ref"},
        },
        "required": ["ok", "n", "tags", "kind", "ref"],
        "$defs": {
            "Ref": {"type": "object", "properties": {"id": {"const": 9}}, "required": ["id"]}
        },
    }
    value = example(schema, rng)
    assert value["n"] == 3
    assert value["tags"] == ["x"]
    assert value["kind"] in ("a", "b")
    assert value["ref"] == {"id": 9}
    assert isinstance(value["ok"], bool)


def test_three_nodes_with_crashes_keep_every_invariant_and_replay_exactly() -> None:
    """Several runtimes on one store (``testing._cluster``: leases, fencing, requests handed
    to the owner, takeover after a lease): clients spread their requests over the nodes,
    nodes crash and restart; the invariants hold and a seed replays byte for byte."""
    faults = Faults(crash_rate=0.02, commit_failure_rate=0.01, model_error_rate=0.05)
    took_over = 0
    for seed in range(6):
        run = functools.partial(
            simulate,
            billing(),
            model=step,
            workload=Workload(threads=10),
            seed=seed,
            faults=faults,
            nodes=3,
            lease=2.0,
        )
        result, again = run(), run()
        result.raise_for_violations()
        assert (again.dump(), again.trace_text()) == (result.dump(), result.trace_text())
        took_over += sum(" on n" in f for f in result.faults if f.startswith("crash"))
    assert took_over > 0  # nodes did crash (their runs were taken over or resumed)


async def test_an_execute_is_counted_in_the_process_whose_runtime_runs_it() -> None:
    """With several nodes, runtimes of several simulated processes run at once: an execute
    belongs to the process whose store its runtime uses, not to the one opened last (a
    crash of an earlier node's process would otherwise not excuse its cancelled executes)."""
    from types import SimpleNamespace

    from pai_actors.testing._probe import Probe

    probe = Probe(process=5)  # the last process opened
    earlier = SimpleNamespace(number=2)
    ctx = SimpleNamespace(
        thread=SimpleNamespace(thread_id="t", tool_call_id="call_1"),
        entry=None,
        signal=SimpleNamespace(aborted=False, reason=None),
        files=SimpleNamespace(_store=SimpleNamespace(process=earlier)),
    )

    async def execute(_: Any) -> str:
        await trio.lowlevel.checkpoint()
        return "done"

    assert await probe.wrap("pay", execute)(ctx) == "done"
    without = SimpleNamespace(**{**vars(ctx), "files": None})  # a context made by hand
    await probe.wrap("pay", execute)(without)
    assert [e.process for e in probe.executions] == [2, 5]
