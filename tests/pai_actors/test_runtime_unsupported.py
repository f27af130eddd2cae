"""What this release defines but cannot run yet is refused when the runtime is created."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

import pytest
from pydantic import BaseModel

from pai_actors import (
    RuntimeConfigError,
    ToolRegistration,
    define_agent,
    define_tool,
)
from pai_actors.testing import ScriptedModel, create_test_runtime, text


class Empty(BaseModel):
    pass


def plain(**extra: Any) -> Any:
    return define_tool(
        id=f"test.plain.{len(extra)}", description="d", input_schema=Empty,
        execute=lambda ctx: None, **extra,
    )  # fmt: skip


@asynccontextmanager
async def binding(request: Any) -> Any:
    yield object()


def test_needs_approval_is_refused_rather_than_skipped() -> None:
    agent = define_agent(name="a", tools={"send": ToolRegistration(plain(), needs_approval=True)})
    with pytest.raises(RuntimeConfigError, match=r"tools\['send'\] sets needs_approval"):
        create_test_runtime(agent, model=ScriptedModel([text("hi")]))
