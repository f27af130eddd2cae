"""``ctx.tools``: a parent tool's declared children as :class:`BoundTool` values in a
:class:`ToolCallMap` (API §6).

A bound child runs through the :class:`ChildRunner` the runtime gives it (the runtime's
child calls of one parent invocation), so this module needs nothing of the runtime.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator, Mapping
from typing import Any, Protocol

from .._core.errors import ToolInvocationError
from .._core.json import JsonValue
from .signal import AbortSignal, require_trio


class ChildRunner(Protocol):
    """What runs the children of one parent invocation (the runtime's ``ChildCalls``):
    ``closed`` once the parent's ``execute`` returned, ``refuse`` builds the error of a call
    that cannot run, ``run`` runs one."""

    @property
    def closed(self) -> bool: ...

    def refuse(
        self, child: str, problem: str, *, aborted: bool = False, reason: str | None = None
    ) -> ToolInvocationError: ...

    async def run(
        self,
        child: str,
        registration: Any,
        raw_input: object,
        abort_signal: AbortSignal | None,
    ) -> Any: ...


class BoundTool:
    """One declared child of the running parent, as ``ctx.tools.<name>`` (API §6).

    ``enabled`` is fixed for this parent invocation; ``description`` is the child's resolved
    description (``""`` for a disabled child whose description is a callback);
    ``input_schema`` and ``output_schema`` are JSON Schema dicts (``None``: no output
    schema). ``await execute(raw_input, *, abort_signal=None)`` runs it and returns its
    output, or raises :class:`ToolInvocationError`.
    """

    def __init__(
        self,
        calls: ChildRunner,
        name: str,
        registration: object,
        *,
        enabled: bool,
        description: str,
        input_schema: dict[str, JsonValue],
        output_schema: dict[str, JsonValue] | None,
    ) -> None:
        self._calls = calls
        self._registration = registration  # the child's, handed back to ``calls.run``
        self.name = name
        self.enabled = enabled
        self.description = description
        self.input_schema = input_schema
        self.output_schema = output_schema

    def __repr__(self) -> str:
        return f"BoundTool({self.name!r}, enabled={self.enabled})"

    def execute(
        self, raw_input: object, *, abort_signal: AbortSignal | None = None
    ) -> Awaitable[Any]:
        """``await ctx.tools.<name>.execute(raw_input, *, abort_signal=None)``."""
        require_trio(f"ctx.tools.{self.name}.execute()")
        return self._execute(raw_input, abort_signal)

    async def _execute(self, raw_input: object, abort_signal: AbortSignal | None) -> Any:
        calls = self._calls
        if calls.closed:
            raise calls.refuse(
                self.name, "its parent's execute has returned; await child calls before returning"
            )
        if not self.enabled:
            raise calls.refuse(self.name, "it is disabled for this invocation (check .enabled)")
        if abort_signal is not None and not isinstance(abort_signal, AbortSignal):
            raise TypeError(
                f"abort_signal must be an AbortSignal (AbortController().signal), got "
                f"{abort_signal!r}"
            )
        if abort_signal is not None and abort_signal.aborted:  # never starts
            reason = abort_signal.reason
            raise calls.refuse(self.name, "it was aborted" + (f": {reason}" if reason else ""))
        return await calls.run(self.name, self._registration, raw_input, abort_signal)


class ToolCallMap(Mapping[str, BoundTool]):
    """``ctx.tools``: the parent's declared children by name, as :class:`BoundTool`
    (attribute and item access; every declared child is here, disabled ones included)."""

    def __init__(self, tools: Mapping[str, BoundTool]) -> None:
        self._tools = dict(tools)

    def __getitem__(self, name: str) -> BoundTool:
        try:
            return self._tools[name]
        except KeyError:
            raise KeyError(self._missing(name)) from None

    def __getattr__(self, name: str) -> BoundTool:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._tools[name]
        except KeyError:
            raise AttributeError(self._missing(name)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolCallMap({list(self._tools)!r})"

    def _missing(self, name: str) -> str:
        declared = ", ".join(map(repr, self._tools)) or "none"
        return (
            f"no child tool {name!r} is declared (declared: {declared}); declare it in "
            "define_tool(tools=...)"
        )
