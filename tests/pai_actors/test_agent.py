"""define_agent, the manifest, create_pai, and the checks a runtime makes when it is created."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel

from pai_actors import (
    AgentDefinition,
    DefinitionError,
    Pai,
    RuntimeConfigError,
    ToolDefinition,
    ToolRegistration,
    capability,
    create_pai,
    define_agent,
    define_tool,
    json_schema,
)
from pai_actors._tools.agent import check_runtime
from pai_actors.testing import ScriptedModel


class Query(BaseModel):
    region: str


class Report(BaseModel):
    amount: int


def run(ctx: Any) -> Any:
    return {"amount": 1}


def backend(id: str = "example.report", **kwargs: Any) -> ToolDefinition:
    kwargs.setdefault("description", "Read a regional report.")
    kwargs.setdefault("input_schema", Query)
    kwargs.setdefault("execute", run)
    return define_tool(id=id, **kwargs)


def agent_error(**kwargs: Any) -> str:
    kwargs.setdefault("name", "support")
    kwargs.setdefault("tools", {})
    with pytest.raises(DefinitionError) as caught:
        define_agent(**kwargs)
    return str(caught.value)


def runtime_error(target: Any, capabilities: Any = None) -> str:
    with pytest.raises(RuntimeConfigError) as caught:
        check_runtime(target, capabilities=capabilities)
    return str(caught.value)


def binding(request: Any) -> Any:
    raise AssertionError("validation never acquires a capability")


# --- define_agent --------------------------------------------------------------------------


def test_a_bare_definition_is_registered_with_the_defaults() -> None:
    tool = backend()
    agent = define_agent(name="support", tools={"report": tool})
    [(name, registration)] = agent.tools.items()
    assert (name, registration.tool, registration.enabled) == ("report", tool, True)


def test_a_registration_is_kept_as_given() -> None:
    registration = ToolRegistration(backend(), enabled=False)
    agent = define_agent(name="support", tools={"report": registration})
    assert agent.tools["report"] is registration


def test_the_agent_keeps_its_arguments() -> None:
    model = ScriptedModel([])
    agent = define_agent(
        name="support", instructions="Be brief.", model=model, runtime_context={"a": 1}, tools={}
    )
    assert (agent.name, agent.instructions, agent.model, agent.runtime_context) == (
        "support",
        "Be brief.",
        model,
        {"a": 1},
    )


def test_an_agent_is_immutable() -> None:
    agent = define_agent(name="support", tools={"report": backend()})
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent.name = "other"  # type: ignore[misc]  # deliberately assigned
    with pytest.raises(TypeError):
        agent.tools["other"] = ToolRegistration(backend())  # type: ignore[index]  # read-only


def test_the_agent_tools_do_not_follow_the_given_mapping() -> None:
    tools: dict[str, Any] = {"report": backend()}
    agent = define_agent(name="support", tools=tools)
    tools["other"] = backend()
    assert list(agent.tools) == ["report"]


def test_one_definition_under_two_names() -> None:
    tool = backend()
    agent = define_agent(name="support", tools={"report": tool, "report_again": tool})
    assert agent.tools["report"].tool is agent.tools["report_again"].tool


def test_the_agent_name_must_not_be_padded() -> None:
    assert agent_error(name="support ") == (
        "agent name 'support ' has leading or trailing whitespace; use 'support'"
    )


def test_a_tool_name_with_a_dot() -> None:
    assert agent_error(tools={"crm.report": backend()}) == (
        "agent 'support': the tool name 'crm.report' is not a valid tool name: use 1 to 64 "
        "ASCII letters, digits, '_' or '-' (what model providers accept), such as 'crm_report'"
    )


def test_a_tool_name_longer_than_64_characters() -> None:
    assert "such as '" + "a" * 64 + "'" in agent_error(tools={"a" * 65: backend()})


def test_an_empty_tool_name() -> None:
    assert agent_error(tools={"": backend()}) == (
        "agent 'support': the tool name is empty; give it a name"
    )


def test_a_tool_that_is_not_a_definition() -> None:
    assert agent_error(tools={"report": run}) == (
        "agent 'support': tools['report'] must be a tool definition from define_tool or a "
        f"ToolRegistration(definition, ...), got {run!r} (function)"
    )


def test_tools_must_be_a_mapping() -> None:
    assert agent_error(tools=[backend()]).startswith(
        "agent 'support': tools must be a mapping of tool names to tool definitions, got ["
    )


def test_instructions_must_be_a_str() -> None:
    assert agent_error(instructions=["Be brief."]) == (
        "agent 'support': instructions must be a str or None, got ['Be brief.'] (list)"
    )


def test_a_model_needs_a_stream_method_or_is_a_spec_string() -> None:
    assert agent_error(model=["gpt"]) == (
        "agent 'support': model must be a spec string such as 'openai:gpt-4.1-mini' or have a "
        "stream(request) method (the Model protocol), got ['gpt'] (list); or leave it out and "
        "give the model at the runtime"
    )
    assert agent_error(model="gpt").startswith(
        "agent 'support': model spec 'gpt' is not '<provider>:<model>'"
    )


# --- manifest ------------------------------------------------------------------------------


def test_the_manifest_shape() -> None:
    agent = define_agent(
        name="support",
        tools={
            "report": backend(output_schema=Report),
            "ask": define_tool(
                id="example.ask",
                description=lambda ctx: f"Ask in {ctx.context}.",
                input_schema=json_schema({"type": "object"}),
            ),
        },
    )
    assert agent.manifest() == {
        "name": "support",
        "tools": {
            "report": {
                "id": "example.report",
                "description": "Read a regional report.",
                "inputSchema": {
                    "properties": {"region": {"title": "Region", "type": "string"}},
                    "required": ["region"],
                    "title": "Query",
                    "type": "object",
                },
                "outputSchema": {
                    "properties": {"amount": {"title": "Amount", "type": "integer"}},
                    "required": ["amount"],
                    "title": "Report",
                    "type": "object",
                },
            },
            "ask": {
                "id": "example.ask",
                "description": "",
                "inputSchema": {"type": "object"},
                "outputSchema": None,
            },
        },
    }


def test_the_manifest_calls_no_callback() -> None:
    def never(**kwargs: Any) -> Any:
        raise AssertionError("the manifest is static")

    tool = backend(description=lambda ctx: never())
    agent = define_agent(
        name="support",
        runtime_context=never,
        tools={"report": ToolRegistration(tool, map_context=never, enabled=never)},
    )
    assert agent.manifest()["tools"] == {
        "report": {
            "id": "example.report",
            "description": "",
            "inputSchema": tool.wire_spec().input_schema,
            "outputSchema": None,
        }
    }


def test_the_manifest_lists_disabled_registrations() -> None:
    agent = define_agent(
        name="support", tools={"report": ToolRegistration(backend(), enabled=False)}
    )
    assert list(agent.manifest()["tools"]) == ["report"]  # type: ignore[arg-type]


# --- create_pai ----------------------------------------------------------------------------


def test_create_pai_keeps_the_agents_by_id() -> None:
    agent = define_agent(name="support", tools={})
    pai = create_pai({"helpdesk": agent})
    assert isinstance(pai, Pai)
    assert dict(pai.agents) == {"helpdesk": agent}


def test_create_pai_needs_agent_definitions() -> None:
    with pytest.raises(DefinitionError) as caught:
        create_pai({"helpdesk": backend()})  # type: ignore[dict-item]  # deliberately wrong
    assert str(caught.value) == (
        "create_pai(): agents['helpdesk'] must be an agent definition from define_agent, "
        "got ToolDefinition(id='example.report', has_execute=True) (ToolDefinition)"
    )


def test_create_pai_checks_the_ids() -> None:
    with pytest.raises(DefinitionError) as caught:
        create_pai({"": define_agent(name="support", tools={})})
    assert str(caught.value).startswith("agent id is empty;")


# --- runtime creation: one id, one wire spec ------------------------------------------------


def test_one_definition_registered_twice_is_fine() -> None:
    tool = backend()
    agent = define_agent(name="support", tools={"a": tool, "b": ToolRegistration(tool)})
    assert check_runtime(agent) == {}


def test_two_definitions_with_one_id_and_one_spec_are_fine() -> None:
    agent = define_agent(
        name="support", tools={"a": backend(), "b": backend(description="Another text.")}
    )
    assert check_runtime(agent) == {}


def test_two_specs_under_one_id() -> None:
    agent = define_agent(
        name="support", tools={"report": backend(), "summary": backend(output_schema=Report)}
    )
    assert runtime_error(agent) == (
        "tool id 'example.report' names two different wire specs: agent 'support': "
        "tools['report'] and agent 'support': tools['summary'] differ in output_schema\n"
        "two incompatible specs must never share an id: give one of them a new or versioned id "
        "(such as 'crm.lookup-customer.v2'), or make the specs equal"
    )


def test_two_specs_under_one_id_across_agents_and_children() -> None:
    total = backend(id="example.total", tools={"report": backend(output_schema=Report)})
    pai = create_pai(
        {
            "a": define_agent(name="support", tools={"report": backend()}),
            "b": define_agent(name="sales", tools={"total": total}),
        }
    )
    assert runtime_error(pai).splitlines()[0] == (
        "tool id 'example.report' names two different wire specs: agents['a'].tools['report'] "
        "and agents['b'].tools['total'].tools['report'] differ in output_schema"
    )


def test_every_difference_is_named() -> None:
    client = define_tool(id="example.report", description="Report.", input_schema=Report)
    agent = define_agent(name="support", tools={"report": backend(), "manual": client})
    assert runtime_error(agent).splitlines()[0].endswith("differ in has_execute, input_schema")


# --- runtime creation: capability bindings -------------------------------------------------


sandbox = capability("acme.sandbox")
mailbox = capability("acme.mailbox")


def test_bindings_by_token_or_id() -> None:
    agent = define_agent(
        name="support",
        tools={"run": backend(capabilities={"box": sandbox, "mail": mailbox})},
    )
    bindings = check_runtime(agent, capabilities={sandbox: binding, "acme.mailbox": binding})
    assert bindings == {"acme.sandbox": binding, "acme.mailbox": binding}


def test_missing_bindings_are_listed_with_the_tools_that_need_them() -> None:
    child = backend(id="example.child", capabilities={"mail": mailbox})
    agent = define_agent(
        name="support",
        tools={
            "run": backend(capabilities={"box": sandbox}),
            "total": backend(id="example.total", tools={"child": ToolRegistration(child)}),
        },
    )
    assert runtime_error(agent) == (
        "missing capability bindings; give create_agent_runtime(capabilities={token: "
        "binding, ...}) a binding for each:\n"
        "  'acme.sandbox': needed by agent 'support': tools['run'] (as 'box')\n"
        "  'acme.mailbox': needed by agent 'support': tools['total'].tools['child'] (as 'mail')"
    )


def test_a_bound_capability_is_not_listed() -> None:
    agent = define_agent(
        name="support",
        tools={"run": backend(capabilities={"box": sandbox, "mail": mailbox})},
    )
    assert runtime_error(agent, {sandbox: binding}).splitlines()[1:] == [
        "  'acme.mailbox': needed by agent 'support': tools['run'] (as 'mail')"
    ]


def test_a_capability_bound_twice() -> None:
    agent = define_agent(name="support", tools={})
    assert runtime_error(agent, {sandbox: binding, "acme.sandbox": binding}) == (
        "capability 'acme.sandbox' is bound twice (by its token and by its id string); "
        "give one binding"
    )


def test_a_binding_must_be_callable() -> None:
    agent = define_agent(name="support", tools={})
    assert runtime_error(agent, {sandbox: "box"}) == (
        "the binding for capability 'acme.sandbox' must be a callable receiving a "
        "CapabilityRequest and returning an async context manager, got 'box' (str)"
    )


def test_a_binding_key_must_be_a_token_or_an_id() -> None:
    agent = define_agent(name="support", tools={})
    assert runtime_error(agent, {3: binding}) == (
        "capabilities keys must be capability tokens or their id strings, got 3 (int)"
    )


def test_the_runtime_needs_an_agent_or_a_registry() -> None:
    assert runtime_error(backend()) == (
        "a runtime runs an agent definition or a Pai registry, got "
        "ToolDefinition(id='example.report', has_execute=True) (ToolDefinition); use "
        "define_agent(...) or create_pai({...})"
    )


def test_the_agent_definition_is_the_one_exported() -> None:
    assert isinstance(define_agent(name="support", tools={}), AgentDefinition)
