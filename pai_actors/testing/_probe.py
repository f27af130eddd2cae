"""What the tools saw: every ``execute`` of an agent's tools (and of their child tools),
instrumented without changing what it does.

:func:`instrument` returns the agent (or :class:`~pai_actors.Pai`) with each tool's
``execute`` wrapped: the wrapper records, in a :class:`Probe`, when an ``execute`` entered
and exited (virtual time and a global order), how (returned, raised, cancelled), what its
``ctx.signal`` said then, which entry it was (initial, or the resume of which action), and
the ``execute`` it runs inside (a child tool's parent). The invariants
(``testing._invariants``) read it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import itertools
import types
from collections import Counter
from collections.abc import Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import outcome
import trio

from .._tools.agent import AgentDefinition, Pai
from .._tools.context import ResumeEntry
from .._tools.registration import ToolRegistration
from .._tools.tool import ToolDefinition

Outcome = Literal["returned", "raised", "cancelled"]


@dataclass(frozen=True, slots=True)
class Execution:
    """One ``execute`` that exited. ``process``: the runtime it ran in (a simulation's
    first, second, ... after each crash); ``parent``: the execution (its ``key``) of the
    tool whose child it was, if any; ``cancel_delivered``: whether one of its awaits was
    resumed with ``trio.Cancelled`` (one aborted after its last checkpoint never is)."""

    key: int
    tool: str
    thread_id: str
    tool_call_id: str
    action_id: str | None  # the action whose resume it is (None: the initial entry)
    outcome: Outcome
    aborted: bool
    reason: str | None
    entered: float
    exited: float
    exit_order: int
    parent: int | None
    process: int
    cancel_delivered: bool = False  # trio delivered trio.Cancelled into it


_current: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "pai_actors_testing_execution", default=None
)


@dataclass
class Probe:
    """What the instrumented tools saw. ``process`` is set by whoever restarts the runtime
    (the executions after it are counted in the new process); ``crashed`` holds the
    processes that crashed (a graceful restart is not a crash); ``live``: the executes
    running now, child tools' too."""

    process: int = 1
    crashed: set[int] = field(default_factory=set)
    live: dict[int, tuple[str, str]] = field(default_factory=dict)  # key -> (thread, call)
    executions: list[Execution] = field(default_factory=list)
    resumed: Counter[tuple[str, str]] = field(default_factory=Counter)  # (thread, action)
    overlaps: list[str] = field(default_factory=list)
    _keys: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _exits: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def wrap(self, tool_name: str, execute: Callable[..., Any]) -> Callable[..., Any]:
        """``execute``, recording each of its runs."""

        async def probed(ctx: Any) -> Any:
            key = next(self._keys)
            thread_id, call_id = ctx.thread.thread_id, ctx.thread.tool_call_id
            process = _process_of(ctx, self.process)
            parent = _current.get()
            if parent is None and (thread_id, call_id) in self.live.values():
                self.overlaps.append(f"two executes of call {call_id!r} of {thread_id!r} overlap")
            action_id = None
            if isinstance(ctx.entry, ResumeEntry):
                action_id = ctx.entry.action.action_id
                self.resumed[(thread_id, action_id)] += 1
            self.live[key] = (thread_id, call_id)
            entered = trio.current_time()
            outcome: Outcome = "returned"
            token = _current.set(key)
            delivered = [False]
            try:
                result = execute(ctx)
                if inspect.iscoroutine(result):
                    result = await _watched(result, ctx.signal, delivered)
                elif inspect.isawaitable(result):
                    result = await result
                return result
            except BaseException as exc:
                outcome = "cancelled" if _only_cancelled(exc) else "raised"
                raise
            finally:
                _current.reset(token)
                self.live.pop(key, None)
                signal = ctx.signal
                self.executions.append(
                    Execution(
                        key=key,
                        tool=tool_name,
                        thread_id=thread_id,
                        tool_call_id=call_id,
                        action_id=action_id,
                        outcome=outcome,
                        aborted=bool(signal.aborted),
                        reason=signal.reason,
                        entered=entered,
                        exited=trio.current_time(),
                        exit_order=next(self._exits),
                        parent=parent,
                        process=process,
                        cancel_delivered=delivered[0],
                    )
                )

        return probed


@types.coroutine
def _watched(
    coroutine: Coroutine[Any, Any, Any], signal: Any, delivered: list[bool]
) -> Generator[Any, Any, Any]:
    """``await coroutine``, setting ``delivered[0]`` once trio resumes it with the
    ``trio.Cancelled`` of its call's cancellation: one that is not a deadline's (a
    ``trio.sleep`` ends by one), once ``signal`` is aborted. Trio sends a task the outcome
    its innermost await unwraps (an ``outcome.Error`` for an exception), or throws the
    exception in."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            yielded = coroutine.send(value) if error is None else coroutine.throw(error)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            value = yield yielded
        except GeneratorExit:
            coroutine.close()
            raise
        except BaseException as thrown:  # handed on to the coroutine, as await would
            error = thrown
        resumed_with = value.error if isinstance(value, outcome.Error) else error
        if (
            isinstance(resumed_with, trio.Cancelled)
            and resumed_with.source != "deadline"
            and signal.aborted
        ):
            delivered[0] = True


def _only_cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` lets a cancellation through: ``trio.Cancelled``, or a group of nothing
    else (an ``execute`` that runs tasks in a nursery raises its children's as one)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


def instrument(agents: AgentDefinition | Pai, probe: Probe) -> AgentDefinition | Pai:
    """The same agents, with every tool's ``execute`` (child tools' too) recorded by
    ``probe``. Tools without ``execute`` (a client supplies their output) are left as they
    are."""
    if isinstance(agents, Pai):
        wrapped = {name: _agent(agent, probe) for name, agent in agents.agents.items()}
        return dataclasses.replace(agents, agents=wrapped)
    return _agent(agents, probe)


def _agent(agent: AgentDefinition, probe: Probe) -> AgentDefinition:
    tools = {name: _registration(name, r, probe) for name, r in agent.tools.items()}
    return dataclasses.replace(agent, tools=tools)


def _registration(name: str, registration: ToolRegistration, probe: Probe) -> ToolRegistration:
    return dataclasses.replace(registration, tool=_tool(name, registration.tool, probe))


def _tool(name: str, tool: ToolDefinition, probe: Probe) -> ToolDefinition:
    children: Mapping[str, Any] = {
        child: (
            _registration(child, value, probe)
            if isinstance(value, ToolRegistration)
            else _tool(child, value, probe)
        )
        for child, value in tool.tools.items()
    }
    execute = None if tool.execute is None else probe.wrap(name, tool.execute)
    return dataclasses.replace(tool, execute=execute, tools=children)


def _process_of(ctx: Any, default: int) -> int:
    """The number of the simulated process whose runtime runs ``ctx``'s execute: its
    store's (a simulation gives each runtime a store of its own that knows its process).
    With several nodes, runtimes of different processes run at once, so the process
    opened last is not always the one running an execute. ``default`` for a runtime whose
    store says nothing (the state machine's)."""
    store = getattr(ctx.files, "_store", None)
    number = getattr(getattr(store, "process", None), "number", None)
    return number if isinstance(number, int) else default
