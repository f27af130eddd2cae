"""What ``pai-actors serve module:factory`` hosts: :class:`Application`, and loading it.

A module of its own so that the CLI can load an application without the server importing
the CLI's concerns (module paths, factories), and the server needs no application type.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._core.errors import PaiError
from .._runtime.runtime import AgentRuntime
from .._store.base import Store
from .server import Authenticate


@dataclass(frozen=True)
class Application:
    """An application to serve: its ``runtime`` (made by ``create_agent_runtime``, not yet
    opened: the server opens and closes it) and the ``authenticate`` hook that turns a
    connection's bearer token into a trusted :class:`~pai_actors.server.Identity`."""

    runtime: AgentRuntime
    authenticate: Authenticate

    def __post_init__(self) -> None:
        if not isinstance(self.runtime, AgentRuntime):
            raise TypeError(
                f"Application(runtime=...) must be an AgentRuntime from create_agent_runtime(), "
                f"got {type(self.runtime).__name__}"
            )
        if not callable(self.authenticate):
            raise TypeError(
                "Application(authenticate=...) must be a callable token -> Identity | None, "
                f"got {type(self.authenticate).__name__}"
            )


class ApplicationError(PaiError):
    """``module:factory`` does not name a factory that returns an :class:`Application`."""


def load_factory(spec: str) -> Any:
    """The callable ``spec`` (``"package.module:factory"``) names; the current directory is
    searched first, as ``python -m`` does."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ApplicationError(
            f"{spec!r} is not of the form module:factory; write e.g. 'myapp.server:factory' "
            "(or 'pai_actors.demo_app:factory' to try the demo application)"
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ApplicationError(
                f"no module {module_name!r} (looked in {cwd} and the installed packages); "
                "check the module path, or run from the directory that holds it"
            ) from None
        raise
    factory = getattr(module, attribute, None)
    if factory is None:
        raise ApplicationError(
            f"module {module_name!r} has no attribute {attribute!r}; define "
            f"`def {attribute}(store): return Application(...)` there"
        )
    if not callable(factory):
        raise ApplicationError(
            f"{spec} is a {type(factory).__name__}, not a callable; it must be a function "
            "store -> Application"
        )
    return factory


async def build_application(factory: Any, store: Store, spec: str) -> Application:
    """Call ``factory(store)`` (sync or async) and check that it made an :class:`Application`."""
    made = factory(store)
    if inspect.isawaitable(made):
        made = await made
    if not isinstance(made, Application):
        raise ApplicationError(
            f"{spec}(store) returned {type(made).__name__}, not an Application; return "
            "Application(runtime=create_agent_runtime(..., store=store), authenticate=...)"
        )
    return made
