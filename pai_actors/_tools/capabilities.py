"""Capability acquisition: enter a tool call's capability facades around its ``execute``.

A tool declares capability tokens under ctx names (``capabilities={"box": sandbox}``); the
runtime holds one *binding* per token id (:func:`pai_actors._tools.agent.check_runtime` checks them
at runtime creation). A binding is a callable receiving a :class:`CapabilityRequest` and
returning an async context manager whose value is the facade, typically an
``@asynccontextmanager`` function::

    @asynccontextmanager
    async def sandbox_binding(request: CapabilityRequest) -> AsyncIterator[Sandbox]:
        box = await pool.lease(request.scope_key, request.thread_id)
        try:
            yield box
        finally:
            await pool.release(box)

:func:`acquire_capabilities` is the one place facades are entered and exited:

- **Entering.** For each declared ctx name, in declaration order, the binding of its token
  is called and its context manager entered. Two ctx names aliasing one token are two
  acquisitions. An error while entering (the binding raising, its ``__aenter__`` raising or
  being cancelled, or a binding returning something that is not an async context manager,
  reported as :exc:`TypeError`) propagates out of :func:`acquire_capabilities` unchanged,
  after the facades entered before it were exited; the block (``execute``) does not run. A
  facade whose ``__aenter__`` failed is not exited. A declared token without a binding is a
  programming error here (the runtime checked the bindings when it was created) and raises
  :exc:`RuntimeError` naming the capability ids before anything is entered.
- **Exiting.** Every entered facade is exited exactly once, in reverse order, when the block
  ends: normally, by an exception, or by cancellation. Each ``__aexit__`` receives the
  exception pending at that point. If one raises, the rest are still exited and the last
  exception raised propagates, chained to the one before it (:class:`contextlib.AsyncExitStack`
  semantics). One deliberate difference: a facade cannot suppress the block's exception (a
  true return from ``__aexit__`` is ignored), so neither an ``execute`` error nor
  :exc:`trio.Cancelled` is ever swallowed by a binding.
- **Cleanup under cancellation (the decision).** The exits run in a cancel scope that is
  *shielded* from outside cancellation and *bounded* by ``cleanup_timeout`` seconds
  (:data:`DEFAULT_CLEANUP_TIMEOUT`), measured from the start of the unwinding, whatever
  ended the block. So a binding may ``await`` in its cleanup (release a lease, close a
  connection) even when the tool call is being cancelled, without shielding it itself; a
  binding whose cleanup hangs is cut off by :exc:`trio.Cancelled` when the bound expires,
  and the facades after it are still exited (their awaits are then cancelled at once). A
  cut-off cleanup does not hide the block's outcome: the exception the block (or an earlier
  exit) raised still propagates, and the outside cancellation is still delivered; when the
  block had ended normally, :exc:`trio.TooSlowError` is raised instead. This is the house
  rule "cleanup is shielded and bounded": cancelling a call waits at most
  ``cleanup_timeout`` for its facades to be released.

The facades are handed to the block as :class:`Capabilities`, the ``ctx.capabilities``
object: read-only, by attribute (``caps.box``) or item (``caps["box"]``).

Concurrency contract: one :func:`acquire_capabilities` block belongs to one tool call in one
task; entering and exiting happen in that task. Bindings are called once per acquisition and
may be called concurrently for different calls.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeAlias

import trio

from .._core.capability import Capability

__all__ = [
    "DEFAULT_CLEANUP_TIMEOUT",
    "Binding",
    "Capabilities",
    "CapabilityRequest",
    "acquire_capabilities",
]

DEFAULT_CLEANUP_TIMEOUT = 10.0
"""Seconds the exits of one acquisition may take in total, shielded from cancellation."""


@dataclass(frozen=True, slots=True)
class CapabilityRequest:
    """What a binding receives: which capability, and the tool call it is acquired for.

    ``scope_key`` is the thread's trusted tenancy key; combine it with ``thread_id`` to key
    per-conversation resources. ``run_id`` and ``tool_call_id`` make good idempotency keys.
    """

    capability_id: str
    scope_key: str
    thread_id: str
    run_id: str
    tool_call_id: str
    tool_name: str


Binding: TypeAlias = Callable[[CapabilityRequest], AbstractAsyncContextManager[Any]]
"""A capability binding: ``binding(request)`` returns an async context manager of a facade."""


class Capabilities:
    """The acquired facades of one tool call (``ctx.capabilities``), by declared ctx name.

    Read-only. ``caps.box`` and ``caps["box"]`` give the facade; ``"box" in caps``,
    ``len(caps)`` and iteration (over the ctx names, in declaration order) work as on a
    mapping. An unknown name raises :exc:`AttributeError` or :exc:`KeyError` listing the
    declared names. There are no public methods, so any ctx name is reachable by attribute
    unless it is a dunder or ``_facades``; item access always works.
    """

    __slots__ = ("_facades",)
    _facades: dict[str, Any]

    def __init__(self, facades: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_facades", dict(facades or {}))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_facades":
            raise AttributeError(name)
        try:
            return self._facades[name]
        except KeyError:
            raise AttributeError(self._unknown(name)) from None

    def __getitem__(self, name: str) -> Any:
        try:
            return self._facades[name]
        except KeyError:
            raise KeyError(self._unknown(name)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._facades

    def __iter__(self) -> Iterator[str]:
        return iter(self._facades)

    def __len__(self) -> int:
        return len(self._facades)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *(n for n in self._facades if n.isidentifier())})

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"ctx.capabilities is read-only; cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"ctx.capabilities is read-only; cannot delete {name!r}")

    def __repr__(self) -> str:
        return f"Capabilities({self._facades!r})"

    def _unknown(self, name: str) -> str:
        if not self._facades:
            return f"no capability {name!r}: this tool declares no capabilities"
        declared = ", ".join(repr(n) for n in self._facades)
        return (
            f"no capability {name!r}: this tool declares {declared}; declare it in "
            "define_tool(capabilities={...}) to use it"
        )


_Exit = Callable[[Any, type[BaseException] | None, BaseException | None, Any], Any]


@asynccontextmanager
async def acquire_capabilities(
    declared: Mapping[str, Capability],
    bindings: Mapping[str, Binding],
    *,
    scope_key: str,
    thread_id: str,
    run_id: str,
    tool_call_id: str,
    tool_name: str,
    cleanup_timeout: float = DEFAULT_CLEANUP_TIMEOUT,
) -> AsyncIterator[Capabilities]:
    """Enter the facades ``declared`` needs, yield them as :class:`Capabilities`, exit them.

    ``declared`` maps ctx names to tokens (the tool's ``capabilities``); ``bindings`` maps
    token ids to bindings (as :func:`~pai_actors._tools.agent.check_runtime` returns them). The
    enter, exit, error and cancellation rules are in the module docstring.
    """
    missing = sorted({token.id for token in declared.values() if token.id not in bindings})
    if missing:
        raise RuntimeError(
            f"no binding for capability {', '.join(map(repr, missing))} "
            f"(declared by tool {tool_name!r}); the runtime must be given one per declared "
            "capability, and check_runtime should have refused it"
        )
    entered: list[tuple[Any, _Exit]] = []
    facades: dict[str, Any] = {}
    try:
        for name, token in declared.items():
            request = CapabilityRequest(
                capability_id=token.id,
                scope_key=scope_key,
                thread_id=thread_id,
                run_id=run_id,
                tool_call_id=tool_call_id,
                tool_name=tool_name,
            )
            manager = bindings[token.id](request)
            aenter, aexit = _async_cm_methods(manager, name=name, capability_id=token.id)
            facades[name] = await aenter(manager)
            entered.append((manager, aexit))
        yield Capabilities(facades)
    except BaseException as exc:
        raised = await _unwind(entered, exc, cleanup_timeout)
        if raised is None or raised is exc:  # never None: an exit cannot clear ``exc``
            raise
        raise raised  # noqa: B904 -- chained to exc through __context__, as AsyncExitStack does
    else:
        raised = await _unwind(entered, None, cleanup_timeout)
        if raised is not None:
            raise raised


def _async_cm_methods(manager: object, *, name: str, capability_id: str) -> tuple[Any, _Exit]:
    cls = type(manager)
    aenter = getattr(cls, "__aenter__", None)
    aexit = getattr(cls, "__aexit__", None)
    if aenter is not None and aexit is not None:
        return aenter, aexit
    hint = ""
    if inspect.iscoroutine(manager):
        manager.close()  # it will never be awaited; closing it avoids the RuntimeWarning
        hint = " (a coroutine: the binding is an 'async def' function, which is not awaited)"
    raise TypeError(
        f"the binding for capability {capability_id!r} (ctx name {name!r}) returned "
        f"{reprlib.repr(manager)}{hint}; a binding must return an async context manager whose "
        "value is the facade, e.g. the result of calling an @asynccontextmanager function"
    )


async def _unwind(
    entered: list[tuple[Any, _Exit]], exc: BaseException | None, bound: float
) -> BaseException | None:
    """Exit ``entered`` in reverse, shielded and bounded; return what should propagate.

    Returns ``exc`` unless an exit raised (then the last exception an exit raised, its
    ``__context__`` chained to the one pending before it), or ``TooSlowError`` when ``bound``
    cut a cleanup off and nothing else is pending. Never raises itself.
    """
    pending = exc
    cut_off = False
    with trio.CancelScope(shield=True, deadline=trio.current_time() + bound) as cleanup:
        while entered:
            manager, aexit = entered.pop()
            try:
                await aexit(
                    manager,
                    None if pending is None else type(pending),
                    pending,
                    None if pending is None else pending.__traceback__,
                )
            except BaseException as raised:
                if raised is pending:
                    continue
                if isinstance(raised, trio.Cancelled) and cleanup.cancel_called:
                    # Only this shielded scope can cancel in here: the bound expired. The
                    # block's outcome (or an earlier exit's error) stays what propagates.
                    cut_off = True
                    continue
                if pending is not None and raised.__context__ is None:
                    raised.__context__ = pending
                pending = raised
    if cut_off and pending is None:
        return trio.TooSlowError(
            f"releasing capabilities did not finish within {bound}s; a binding's cleanup "
            "was cancelled"
        )
    return pending
