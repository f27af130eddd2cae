"""Checks for stable identifiers (tool ids, capability ids) and declared names (map keys)."""

from __future__ import annotations

from ._errors import DefinitionError

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
