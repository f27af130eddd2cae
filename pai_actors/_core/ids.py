"""Checks for stable identifiers (tool ids, capability ids) and declared names (map keys), and
the shape of the runtime's id makers (:data:`IdMaker`)."""

from __future__ import annotations

from collections.abc import Callable

from .errors import DefinitionError

IdMaker = Callable[..., str]
"""``new_id(prefix, *within) -> str``: a new id for a ``prefix`` (``"thread"``, ``"run"``,
``"msg"``, ``"data"``, ``"file"``), unique in the store. ``within`` names what the id is made
in, outermost first: nothing for a thread; the thread id for its runs and messages; the
thread and tool call ids for a call's tool data items and files. An id maker for tests
numbers ids within those (:func:`counter_ids`), so concurrent threads and calls draw from
sequences of their own and get the same ids whatever order trio runs them in."""

_EXAMPLE = "'crm.lookup-customer.v1'"


def check_id(value: object, *, what: str, error: type[DefinitionError]) -> str:
    """Return ``value`` if it is a usable id: a non-empty ``str`` without padding whitespace.

    An id is a stable identity, so it is never normalised silently: a padded id is an error
    whose message suggests the stripped one. ``what`` names it in messages (``"tool id"``).
    """
    if not isinstance(value, str):
        raise error(
            f"{what} must be a str, got {value!r} ({type(value).__name__}); use a stable, "
            f"namespaced string such as {_EXAMPLE}"
        )
    if not value.strip():
        shown = f"{what} is empty" if not value else f"{what} {value!r} is blank"
        raise error(f"{shown}; use a stable, namespaced id such as {_EXAMPLE}")
    if value != value.strip():
        raise error(f"{what} {value!r} has leading or trailing whitespace; use {value.strip()!r}")
    return str.__str__(value)


def check_name(value: object, *, what: str, error: type[DefinitionError]) -> str:
    """Return ``value`` if it is a usable declared name (a key of ``suspend``, ``tools``, ...).

    ``what`` says where the name was declared, e.g. ``"tool 'crm.report': a suspend name"``.
    """
    if not isinstance(value, str):
        raise error(f"{what} must be a str, got {value!r} ({type(value).__name__})")
    if not value.strip():
        raise error(f"{what} is {'empty' if not value else 'blank'}; give it a name")
    if value != value.strip():
        raise error(f"{what} {value!r} has leading or trailing whitespace; use {value.strip()!r}")
    return str.__str__(value)
