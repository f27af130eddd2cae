"""Tool names and request-time client tools: :func:`check_tool_name` and :class:`ClientTool`.

Values of the core: a client builds a :class:`ClientTool` to offer the model a tool it
executes itself, and the runtime stores and offers it; neither needs the other to do so.
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import NoReturn

from .deadlines import CancelAtDeadline, OnDeadline, check_delay, check_on_deadline
from .errors import DefinitionError, SchemaError
from .ids import check_name
from .model import JsonSchema
from .schema import Schema, json_schema

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60


def check_tool_name(value: object, *, what: str) -> str:
    """Return ``value`` if the model may see it as a tool name, else raise DefinitionError.

    A tool name is 1 to 64 ASCII letters, digits, ``_`` or ``-``: what model providers accept
    for a function name. ``.`` is excluded also because pending action names are
    ``"<toolName>.<suspendName>"``. ``what`` says where the name was given.
    """
    name = check_name(value, what=what, error=DefinitionError)
    if _NAME.fullmatch(name) is None:
        suggestion = re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:64]
        raise DefinitionError(
            f"{what} {name!r} is not a valid tool name: use 1 to 64 ASCII letters, digits, "
            f"'_' or '-' (what model providers accept), such as {suggestion!r}"
        )
    return name


@dataclass(frozen=True, slots=True)
class ClientTool:
    """A tool offered to the model for one request only, executed by the client.

    ``name`` follows the tool name rules (see :func:`check_tool_name`), ``description`` is
    the text the model reads and ``input_schema`` a JSON Schema dict (draft 2020-12, checked
    here). Its calls are ``dynamic-tool`` parts whose output a client submits. ``deadline``
    (a positive ``timedelta``, or ``None``) bounds how long each call's output action waits
    from when it opens; ``on_deadline`` says what happens then (:class:`CancelAtDeadline`
    by default; a :class:`ResolveAtDeadline` payload becomes the output). A misuse raises
    :class:`DefinitionError` (with the :class:`SchemaError` as ``__cause__`` for a schema
    that cannot be used).
    """

    name: str
    description: str
    input_schema: JsonSchema
    deadline: timedelta | None = field(default=None, kw_only=True)
    on_deadline: OnDeadline = field(default_factory=CancelAtDeadline, kw_only=True)
    schema: Schema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = check_tool_name(self.name, what="ClientTool name")
        if not isinstance(self.description, str):
            _fail(f"ClientTool {name!r}: description must be a str, got {_show(self.description)}")
        try:
            schema = json_schema(self.input_schema)
        except SchemaError as exc:
            raise DefinitionError(
                f"ClientTool {name!r}: input_schema cannot be used: {exc}"
            ) from exc
        check_delay(self.deadline, where=f"ClientTool {name!r}: deadline")
        check_on_deadline(self.on_deadline, where=f"ClientTool {name!r}: on_deadline")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "input_schema", schema.json_schema)
        object.__setattr__(self, "schema", schema)


def _fail(message: str) -> NoReturn:
    raise DefinitionError(message)


def _show(value: object) -> str:
    return f"{_repr.repr(value)} ({type(value).__name__})"
