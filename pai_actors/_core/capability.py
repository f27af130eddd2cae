"""Capability tokens: :func:`capability` names a runtime-bound service a tool declares."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import DefinitionError
from .ids import check_id


@dataclass(frozen=True, slots=True)
class Capability:
    """A token naming a runtime-bound service, made by :func:`capability`.

    A tool declares the capabilities it needs (``capabilities={"box": sandbox}``); the
    runtime is given a binding per token. Two tokens with the same ``id`` are equal and hash
    alike, so a binding keyed by one serves every token of that id.
    """

    id: str

    def __post_init__(self) -> None:
        checked = check_id(self.id, what="capability id", error=DefinitionError)
        object.__setattr__(self, "id", checked)  # a plain str, even if a subclass was given

    def __repr__(self) -> str:
        return f"capability({self.id!r})"


def capability(id: str) -> Capability:
    """Make the token for the capability ``id``, e.g. ``capability("acme.sandbox")``.

    ``id`` is the binding key at the runtime: a non-empty ``str`` without leading or trailing
    whitespace; anything else raises :class:`DefinitionError`. Namespace it to the package
    that owns the service.
    """
    return Capability(id)
