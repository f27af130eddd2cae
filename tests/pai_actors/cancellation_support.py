"""What the two cancellation property tests (``test_runtime_cancellation_properties.py`` and
``test_runtime_nested_cancellation_properties.py``) check of their model's steps, beyond
the kit's invariants: each first step asked for its plan's calls (a call's input names its
plan and its index in it), a completed run ended with the text "done", and a step that saw
results saw one for every call of the step before it, each what its call's part shows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pai_actors import (
    ModelAssistantMessage,
    ModelRequest,
    ModelToolCallPart,
    ModelToolMessage,
    Store,
    message_steps,
)

DONE = [{"type": "step-start"}, {"type": "text", "text": "done"}]


async def step_problems(
    store: Store, thread_ids: Iterable[str], plans: Mapping[str, Sequence[str]]
) -> list[str]:
    """Each assistant message's calls are its plan's tools (``plans``: their names, by
    plan), all of them (none in a run stopped first: it has no such message); a completed
    run's last step is the text "done"."""
    problems: list[str] = []
    for thread_id in thread_ids:
        steps: dict[str, list[tuple[int, str]]] = {}
        plan_of: dict[str, str] = {}
        for call in await store.list_calls(thread_id):
            job = call.record.input
            index = job.get("index") if isinstance(job, dict) else None
            if not isinstance(job, dict) or not isinstance(index, int):
                problems.append(f"{thread_id}: a part the model did not ask for: {call.record}")
                continue
            steps.setdefault(call.message_id, []).append((index, call.record.name))
            plan_of[call.message_id] = str(job["plan"])
        for message_id, called in steps.items():
            expected = list(enumerate(plans[plan_of[message_id]]))
            if sorted(called) != expected:
                problems.append(f"{thread_id} {message_id}: calls {called}, not {expected}")
        messages = {m.id: m for m in await store.list_messages(thread_id)}
        message_of = {c.run_id: c.message_id for c in await store.list_calls(thread_id)}
        for run in await store.list_runs(thread_id):
            if run.status == "completed":
                parts = messages[message_of[run.run_id]].to_wire()["parts"]
                last = message_steps(parts)[-1]  # type: ignore[arg-type]
                if last != DONE:
                    problems.append(f"{thread_id} {run.run_id}: completed with {last}")
    return problems


async def finished_results(store: Store, thread_ids: Iterable[str]) -> dict[str, list[Any]]:
    """The tool result a model step is given for each finished call, by its call id and
    input (``result_key``): a list, as two threads may hold the same."""
    results: dict[str, list[Any]] = {}
    for thread_id in thread_ids:
        for call in await store.list_calls(thread_id):
            record = call.record
            if record.phase != "done":
                continue
            result: dict[str, Any] = (
                {"type": "json", "value": record.output}
                if record.error_text is None
                else {"type": "error-text", "value": record.error_text}
            )
            results.setdefault(result_key(record.tool_call_id, record.input), []).append(result)
    return results


def result_key(tool_call_id: str, input: Any) -> str:
    return f"{tool_call_id} {json.dumps(input, sort_keys=True)}"


def results_problems(
    requests: Iterable[ModelRequest], results: Mapping[str, list[Any]], *, match: bool = True
) -> list[str]:
    """A step that sees results sees one for every call of the step before it, and (with
    ``match``) each is what its call's part shows (``finished_results``: some thread's
    call of that id and input)."""
    problems: list[str] = []
    for request in requests:
        messages = list(request.messages)
        if not messages or not isinstance(messages[-1], ModelToolMessage):
            continue
        asked = next(m for m in reversed(messages) if isinstance(m, ModelAssistantMessage))
        calls = {p.tool_call_id: p for p in asked.parts if isinstance(p, ModelToolCallPart)}
        seen = [
            result
            for message in messages[messages.index(asked) + 1 :]
            if isinstance(message, ModelToolMessage)
            for result in message.parts
        ]
        where = f"a model step saw results for {sorted(r.tool_call_id for r in seen)}"
        if sorted(r.tool_call_id for r in seen) != sorted(calls):
            problems.append(f"{where}, its step called {sorted(calls)}")
            continue
        for result in seen if match else ():
            call = calls[result.tool_call_id]
            allowed = results.get(result_key(call.tool_call_id, call.input), [])
            if result.output not in allowed:
                problems.append(f"{where}: {result.output} for {call}, its part shows {allowed}")
    return problems
