"""ToolRegistration and ClientTool: checked at construction, immutable, children accepted."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel

from pai_actors import (
    ClientTool,
    DefinitionError,
    SchemaError,
    ToolDefinition,
    ToolDefinitionError,
    ToolRegistration,
    define_tool,
)


class Query(BaseModel):
    region: str


def run(ctx: Any) -> Any:
    return 1


def backend(id: str = "example.report", **kwargs: Any) -> ToolDefinition:
    kwargs.setdefault("description", "Read a regional report.")
    return define_tool(id=id, input_schema=Query, execute=run, **kwargs)


def registration_error(*args: Any, **kwargs: Any) -> str:
    with pytest.raises(DefinitionError) as caught:
        ToolRegistration(*args, **kwargs)
    return str(caught.value)


def allowed(*, runtime_context: Any, identity: Any, client_data: Any) -> bool:
    return True


# --- ToolRegistration ----------------------------------------------------------------------


def test_defaults() -> None:
    tool = backend()
    registration = ToolRegistration(tool)
    assert registration.tool is tool
    assert registration.map_context is None
    assert registration.enabled is True
    assert registration.on_output is None
    assert registration.needs_approval is False


def test_policy_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        ToolRegistration(backend(), None)  # type: ignore[misc]  # deliberately positional


def test_a_registration_is_immutable() -> None:
    registration = ToolRegistration(backend())
    with pytest.raises(dataclasses.FrozenInstanceError):
        registration.enabled = False  # type: ignore[misc]  # deliberately assigned


def test_sync_and_async_callbacks_are_accepted() -> None:
    async def mapper(*, runtime_context: Any, identity: Any, client_data: Any) -> Any:
        return runtime_context

    registration = ToolRegistration(
        backend(), map_context=mapper, enabled=allowed, on_output=print, needs_approval=True
    )
    assert registration.map_context is mapper
    assert registration.enabled is allowed


def test_a_callback_taking_kwargs_is_accepted() -> None:
    registration = ToolRegistration(backend(), enabled=lambda **kwargs: True)
    assert callable(registration.enabled)


def test_the_tool_must_be_a_definition() -> None:
    assert registration_error(run) == (
        "ToolRegistration(tool=...) takes a tool definition from define_tool, got "
        f"{run!r} (function)"
    )


def test_enabled_must_be_a_bool_or_a_function() -> None:
    assert registration_error(backend(), enabled=1) == (
        "ToolRegistration of tool 'example.report': enabled must be True, False or a function "
        "of runtime_context=, identity= and client_data= returning one, got 1 (int)"
    )


def test_needs_approval_needs_a_tool_with_execute() -> None:
    external = define_tool(id="example.ask", description="A client answers.", input_schema=Query)
    assert registration_error(external, needs_approval=True) == (
        "ToolRegistration of tool 'example.ask': needs_approval asks a person before execute "
        "runs, but this tool has no execute (a client supplies its output, which is the "
        "decision already); drop needs_approval, or give the tool an execute"
    )
    assert ToolRegistration(backend(), needs_approval=True).needs_approval is True


def test_map_context_must_be_a_function() -> None:
    assert registration_error(backend(), map_context={"region": "north"}) == (
        "ToolRegistration of tool 'example.report': map_context must be a function of "
        "runtime_context=, identity= and client_data= (sync or async) returning the context, "
        "got {'region': 'north'} (dict)"
    )


def test_a_callback_that_cannot_take_the_keywords() -> None:
    assert registration_error(backend(), map_context=lambda ctx: ctx) == (
        "ToolRegistration of tool 'example.report': map_context cannot be called as "
        "f(runtime_context=..., identity=..., client_data=...) (missing a required argument: "
        "'ctx'); declare it as def f(*, runtime_context, identity, client_data), or take "
        "**kwargs"
    )


def test_an_enabled_callback_that_cannot_take_the_keywords() -> None:
    assert "enabled cannot be called as f(runtime_context=..." in registration_error(
        backend(), enabled=lambda *, runtime_context: True
    )


def test_on_output_must_be_a_function() -> None:
    assert registration_error(backend(), on_output="log") == (
        "ToolRegistration of tool 'example.report': on_output must be a function (sync or "
        "async) that observes each settled output, got 'log' (str)"
    )


def test_needs_approval_must_be_a_bool_or_a_function() -> None:
    assert registration_error(backend(), needs_approval="yes") == (
        "ToolRegistration of tool 'example.report': needs_approval must be True, False or a "
        "function returning one, got 'yes' (str)"
    )


def test_repr_shows_only_the_policy_that_was_given() -> None:
    assert repr(ToolRegistration(backend(), enabled=False)) == (
        "ToolRegistration(ToolDefinition(id='example.report', has_execute=True), enabled=False)"
    )


# --- children ------------------------------------------------------------------------------


def test_a_child_registration_is_kept_as_given() -> None:
    child = ToolRegistration(backend(), enabled=allowed)
    parent = backend(id="example.total", tools={"report": child})
    assert parent.tools["report"] is child


def test_a_child_registration_is_checked_like_a_child_definition() -> None:
    client = define_tool(id="example.browser-check", description="Check.", input_schema=Query)
    with pytest.raises(ToolDefinitionError) as caught:
        backend(id="example.total", tools={"check": ToolRegistration(client)})
    assert str(caught.value).startswith(
        "tool 'example.total': tools['check'] is tool 'example.browser-check', which has no "
        "execute (a client submits its output)"
    )


def test_a_child_registration_cannot_need_approval() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        backend(
            id="example.total", tools={"report": ToolRegistration(backend(), needs_approval=True)}
        )
    assert str(caught.value) == (
        "tool 'example.total': tools['report'] is a registration with needs_approval; approval "
        "applies to a call the model makes, not to a child the parent's execute calls: drop "
        "needs_approval, or register the tool on the agent instead"
    )


def test_a_child_that_is_neither_mentions_registrations() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        backend(id="example.total", tools={"report": 3})
    assert str(caught.value) == (
        "tool 'example.total': tools['report'] must be a tool definition from define_tool, "
        "got 3 (int); or a ToolRegistration(definition, ...) to give the child its own policy"
    )


# --- ClientTool ----------------------------------------------------------------------------


def test_a_client_tool_keeps_its_schema() -> None:
    schema = {"type": "object", "properties": {"url": {"type": "string"}}}
    tool = ClientTool("openUrl", "Open a page in the user's browser.", schema)
    assert tool.input_schema == schema
    assert tool.schema.parse({"url": "https://example.com"}) == {"url": "https://example.com"}


def test_a_client_tool_copies_its_schema() -> None:
    schema: dict[str, Any] = {"type": "object"}
    tool = ClientTool("openUrl", "Open a page.", schema)
    schema["type"] = "string"
    assert tool.input_schema == {"type": "object"}


def test_a_client_tool_name_follows_the_tool_name_rules() -> None:
    with pytest.raises(DefinitionError) as caught:
        ClientTool("open.url", "Open a page.", {})
    assert str(caught.value) == (
        "ClientTool name 'open.url' is not a valid tool name: use 1 to 64 ASCII letters, "
        "digits, '_' or '-' (what model providers accept), such as 'open_url'"
    )


def test_a_client_tool_name_must_not_be_padded() -> None:
    with pytest.raises(DefinitionError) as caught:
        ClientTool(" openUrl", "Open a page.", {})
    assert str(caught.value) == (
        "ClientTool name ' openUrl' has leading or trailing whitespace; use 'openUrl'"
    )


def test_a_client_tool_description_must_be_a_str() -> None:
    with pytest.raises(DefinitionError) as caught:
        ClientTool("openUrl", None, {})  # type: ignore[arg-type]  # deliberately wrong
    assert (
        str(caught.value) == "ClientTool 'openUrl': description must be a str, got None (NoneType)"
    )


def test_a_client_tool_schema_is_checked_as_draft_2020_12() -> None:
    with pytest.raises(DefinitionError) as caught:
        ClientTool("openUrl", "Open a page.", {"type": "page"})
    assert str(caught.value).startswith(
        "ClientTool 'openUrl': input_schema cannot be used: json_schema() got an invalid JSON "
        "Schema (draft 2020-12): at schema['type']"
    )
    assert isinstance(caught.value.__cause__, SchemaError)
