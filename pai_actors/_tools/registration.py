"""Registrations: a tool definition under a model-facing name, with its registration policy.

:class:`ToolRegistration` wraps a :class:`~pai_actors.ToolDefinition` with what one agent (or
one parent tool) decides about it: how its context is projected (``map_context``), whether
it is offered (``enabled``), who observes its output (``on_output``) and whether a call needs
approval. :class:`ClientTool` is a tool offered for one request only, executed by a client.
Both are checked at construction. :func:`check_tool_name` holds the model-facing name rules
that registration names and client tool names share.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn

from .._core.calls import APPROVAL_RESPONSE
from .._core.deadlines import CancelAtDeadline, OnDeadline, check_delay, check_on_deadline
from .._core.errors import DefinitionError
from .tool import ToolDefinition

ContextCallback = Callable[..., Any]
"""``map_context`` / ``enabled``: called as ``f(runtime_context=, identity=, client_data=)``,
sync or async."""

_CALLBACK_KEYWORDS = ("runtime_context", "identity", "client_data")
_CANCEL = CancelAtDeadline()
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60


@dataclass(frozen=True, slots=True, eq=False)
class ToolRegistration:
    """A tool definition as one agent or one parent tool registers it; immutable.

    ``map_context(*, runtime_context, identity, client_data)`` projects the agent's runtime
    context (for a child: the enclosing tool's context) to the context the tool needs;
    without it the tool receives that context as it is. ``enabled`` is a ``bool`` or a
    callback with the same keyword arguments returning one; a disabled tool is not offered
    to the model and takes no new calls. ``on_output`` observes each settled output.
    ``needs_approval`` asks for the user's approval before a call runs (agent registrations
    only). ``rerun_interrupted`` consents to running a call again when the process running
    it stopped before it finished (by default such a call ends in ``output-error`` and is
    never run twice: only opt in for an ``execute`` that is safe to repeat). Callbacks may be
    sync or async; ``identity`` is trusted, ``client_data`` is not.

    Deadlines (a positive ``timedelta`` from when the action opens, or ``None``: none):
    ``approval_deadline`` bounds the wait for an approval (with ``needs_approval``), and
    ``on_approval_deadline`` says what happens then: :class:`CancelAtDeadline` (the
    default), :class:`FailAtDeadline`, or :class:`ResolveAtDeadline` with the answer to give
    (``{"approved": False}`` denies the call). ``output_deadline`` and ``on_output_deadline``
    do the same for the output a client supplies to a tool without ``execute`` (a
    ``ResolveAtDeadline`` payload becomes the output, checked here against the tool's
    ``output_schema``).

    Every argument is checked here, and a misuse raises :class:`DefinitionError`. A
    registration compares by identity; the same definition may be registered many times,
    each registration with its own policy.
    """

    tool: ToolDefinition
    map_context: ContextCallback | None = field(default=None, kw_only=True)
    enabled: bool | ContextCallback = field(default=True, kw_only=True)
    on_output: Callable[..., Any] | None = field(default=None, kw_only=True)
    needs_approval: bool | Callable[..., Any] = field(default=False, kw_only=True)
    rerun_interrupted: bool = field(default=False, kw_only=True)
    approval_deadline: timedelta | None = field(default=None, kw_only=True)
    on_approval_deadline: OnDeadline = field(default_factory=CancelAtDeadline, kw_only=True)
    output_deadline: timedelta | None = field(default=None, kw_only=True)
    on_output_deadline: OnDeadline = field(default_factory=CancelAtDeadline, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.tool, ToolDefinition):
            _fail(
                "ToolRegistration(tool=...) takes a tool definition from define_tool, got "
                f"{_show(self.tool)}"
            )
        where = f"ToolRegistration of tool {self.tool.id!r}"
        if self.map_context is not None:
            _check_context_callback(self.map_context, f"{where}: map_context", "the context")
        if not isinstance(self.enabled, bool):
            if not callable(self.enabled):
                _fail(
                    f"{where}: enabled must be True, False or a function of runtime_context=, "
                    f"identity= and client_data= returning one, got {_show(self.enabled)}"
                )
            _check_context_callback(self.enabled, f"{where}: enabled", "True or False")
        if self.on_output is not None and not callable(self.on_output):
            _fail(
                f"{where}: on_output must be a function (sync or async) that observes each "
                f"settled output, got {_show(self.on_output)}"
            )
        if not isinstance(self.needs_approval, bool) and not callable(self.needs_approval):
            _fail(
                f"{where}: needs_approval must be True, False or a function returning one, "
                f"got {_show(self.needs_approval)}"
            )
        if not isinstance(self.rerun_interrupted, bool):
            _fail(
                f"{where}: rerun_interrupted must be True or False, got "
                f"{_show(self.rerun_interrupted)}"
            )
        if self.needs_approval is not False and not self.tool.has_execute:
            _fail(
                f"{where}: needs_approval asks a person before execute runs, but this tool "
                "has no execute (a client supplies its output, which is the decision already); "
                "drop needs_approval, or give the tool an execute"
            )
        self._check_deadlines(where)

    def _check_deadlines(self, where: str) -> None:
        check_delay(self.approval_deadline, where=f"{where}: approval_deadline")
        check_delay(self.output_deadline, where=f"{where}: output_deadline")
        check_on_deadline(
            self.on_approval_deadline,
            where=f"{where}: on_approval_deadline",
            schema=APPROVAL_RESPONSE,
            what="approval",
        )
        check_on_deadline(
            self.on_output_deadline,
            where=f"{where}: on_output_deadline",
            schema=self.tool._schemas.output,
            what="output",
        )
        if self.approval_deadline is not None and self.needs_approval is False:
            _fail(
                f"{where}: approval_deadline bounds the wait for an approval, but this "
                "registration asks for none; set needs_approval, or drop approval_deadline"
            )
        if self.output_deadline is not None and self.tool.has_execute:
            _fail(
                f"{where}: output_deadline bounds the wait for a client's output, but this "
                "tool has an execute (no client supplies its output); drop output_deadline, "
                "or give its suspend points a deadline"
            )
        for outcome, name, deadline in [
            (self.on_approval_deadline, "approval", self.approval_deadline),
            (self.on_output_deadline, "output", self.output_deadline),
        ]:
            if deadline is None and outcome != CancelAtDeadline():
                _fail(
                    f"{where}: on_{name}_deadline says what happens at {name}_deadline, which "
                    f"is not set; give {name}_deadline=timedelta(...), or drop on_{name}_deadline"
                )

    @property
    def has_dynamic_description(self) -> bool:
        """Whether the tool's description is a callback, resolved before each model step."""
        return not isinstance(self.tool.config.description, str)

    def __repr__(self) -> str:
        policy = [
            f"{name}={value!r}"
            for name, value, default in [
                ("map_context", self.map_context, None),
                ("enabled", self.enabled, True),
                ("on_output", self.on_output, None),
                ("needs_approval", self.needs_approval, False),
                ("rerun_interrupted", self.rerun_interrupted, False),
                ("approval_deadline", self.approval_deadline, None),
                ("on_approval_deadline", self.on_approval_deadline, _CANCEL),
                ("output_deadline", self.output_deadline, None),
                ("on_output_deadline", self.on_output_deadline, _CANCEL),
            ]
            if value is not default and value != default
        ]
        return f"ToolRegistration({', '.join([repr(self.tool), *policy])})"


def as_registration(value: ToolDefinition | ToolRegistration) -> ToolRegistration:
    """``value`` as a registration: a bare definition is registered with the defaults.

    Registration maps (``define_agent(tools=...)``, a tool's ``tools``) accept either form.
    """
    return value if isinstance(value, ToolRegistration) else ToolRegistration(value)


async def call_callback(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call a user callback that may be sync or async, and return its result."""
    result = function(*args, **kwargs)
    if inspect.isawaitable(result):
        awaited: Awaitable[Any] = result
        result = await awaited
    return result


def _check_context_callback(function: object, where: str, returns: str) -> None:
    if not callable(function):
        _fail(
            f"{where} must be a function of runtime_context=, identity= and client_data= "
            f"(sync or async) returning {returns}, got {_show(function)}"
        )
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # some builtins have no signature: nothing to check
        return
    try:
        signature.bind(**dict.fromkeys(_CALLBACK_KEYWORDS))
    except TypeError as exc:
        _fail(
            f"{where} cannot be called as f(runtime_context=..., identity=..., "
            f"client_data=...) ({exc}); declare it as "
            f"def f(*, runtime_context, identity, client_data), or take **kwargs"
        )


def _fail(message: str) -> NoReturn:
    raise DefinitionError(message)


def _show(value: object) -> str:
    return f"{_repr.repr(value)} ({type(value).__name__})"
