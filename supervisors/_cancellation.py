"""How the tree records and passes on cancellation and errors raised while exiting.

Helpers shared by the actor wrapper and ``open_supervisor``: the reason text recorded for a
cancelled node, recognising exception groups that hold only ``trio.Cancelled``, and raising
listener errors without losing an exception already under way.
"""

from __future__ import annotations

import trio

from ._node import Node

_SOURCES = {
    "deadline": "deadline expired",
    "nursery": "a sibling task raised",
    "explicit": "cancelled explicitly",
    "KeyboardInterrupt": "KeyboardInterrupt",
}


def cancel_reason_text(exc: trio.Cancelled) -> str:
    """The reason recorded for an actor cancelled from above: the scope's reason, or why."""
    return exc.reason or _SOURCES.get(exc.source, exc.source)


def raise_with(inflight: BaseException | None, errors: list[BaseException]) -> None:
    """Raise ``inflight`` (if any) together with listener ``errors`` without losing either."""
    if errors:
        if inflight is None and len(errors) == 1:
            raise errors[0]
        group = [inflight, *errors] if inflight is not None else errors
        raise BaseExceptionGroup("exit listeners raised", group)
    if inflight is not None:
        raise inflight


def only_cancelled(exc: BaseException) -> bool:
    """Whether a (nested) group holds nothing but ``trio.Cancelled``; allocates nothing.

    ``BaseExceptionGroup.split`` copies the whole nested group, and a tree cancelled from
    the root sees one such group per level, each holding the groups of the level below: the
    answer is remembered on each group, so every level only looks at its own members.
    """
    if type(exc) is trio.Cancelled:  # final class: cheaper than isinstance via its ABC meta
        return True
    if isinstance(exc, BaseExceptionGroup):
        known: bool | None = getattr(exc, "_supervisors_only_cancelled", None)
        if known is None:
            known = all(only_cancelled(inner) for inner in exc.exceptions)
            exc._supervisors_only_cancelled = known  # type: ignore[attr-defined]
        return known
    return False


def reason_from_above(node: Node, fallback: str | None) -> str | None:
    """Why ``node`` was cancelled from above: the reason of the nearest ancestor we cancelled.

    ``exc.reason`` is not enough: when a scope inside the actor (a ``trio.sleep``, a
    ``move_on_after``) hits its deadline at the moment an ancestor is cancelled, the
    ``Cancelled`` that escapes carries the inner scope's "deadline expired". Ancestors whose
    scope trio cancelled by itself (a nursery whose body raised) carry no reason of ours and
    are passed over; ``fallback`` (trio's reason) is used when no ancestor has one.
    """
    parent = node.parent
    while parent is not None:
        # The flags first: ``cancel_called`` reads the clock, and most ancestors have neither.
        if (
            (parent.cancelled_explicitly or parent.cancel_reason is not None)
            and parent.scope is not None
            and parent.scope.cancel_called
        ):
            return parent.cancel_reason
        parent = parent.parent
    return fallback


def first_cancelled(group: BaseExceptionGroup[BaseException]) -> str | None:
    for exc in group.exceptions:
        if isinstance(exc, trio.Cancelled):
            return cancel_reason_text(exc)
        if isinstance(exc, BaseExceptionGroup):
            return first_cancelled(exc)
    return None
