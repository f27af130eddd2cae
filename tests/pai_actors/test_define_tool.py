"""define_tool: each construction-time misuse is a ToolDefinitionError; definitions are frozen."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
from pydantic import BaseModel, computed_field

from pai_actors import (
    Capability,
    ChildToolInfo,
    DefinitionError,
    DescriptionContext,
    SchemaError,
    SuspendPoint,
    ToolDefinition,
    ToolDefinitionError,
    ToolWireSpec,
    capability,
    define_tool,
    json_schema,
)


class Query(BaseModel):
    region: str


class Report(BaseModel):
    amount: int


class Approval(BaseModel):
    approved: bool


def run(ctx: Any) -> Any:
    return {"amount": 1}


def backend(id: str = "example.report", **kwargs: Any) -> ToolDefinition:
    kwargs.setdefault("description", "Read a regional report.")
    kwargs.setdefault("input_schema", Query)
    kwargs.setdefault("execute", run)
    return define_tool(id=id, **kwargs)


def client(id: str = "example.browser-check", **kwargs: Any) -> ToolDefinition:
    return define_tool(id=id, description="Check a page.", input_schema=Query, **kwargs)


def error(**kwargs: Any) -> str:
    with pytest.raises(ToolDefinitionError) as caught:
        define_tool(**kwargs)
    return str(caught.value)


def backend_error(**kwargs: Any) -> str:
    with pytest.raises(ToolDefinitionError) as caught:
        backend(**kwargs)
    return str(caught.value)


# --- the definition -----------------------------------------------------------------------


def test_a_backend_definition() -> None:
    tool = backend(output_schema=Report)
    assert tool.kind == "tool"
    assert tool.id == "example.report"
    assert tool.has_execute
    assert tool.execute is run
    assert tool.config.input_schema is Query
    assert tool.config.output_schema is Report
    assert tool.config.description == "Read a regional report."
    assert tool.capabilities == {}
    assert tool.tools == {}
    assert tool.config.suspend == {}
    assert tool.config.data_schemas == {}


def test_a_client_executed_definition() -> None:
    tool = client(output_schema=Report)
    assert not tool.has_execute
    assert tool.execute is None


def test_config_has_no_execute() -> None:
    fields = {f.name for f in dataclasses.fields(backend().config)}
    assert fields == {
        "description",
        "input_schema",
        "output_schema",
        "to_model_output",
        "context_schema",
        "suspend",
        "data_schemas",
    }


def test_a_definition_is_immutable() -> None:
    tool = backend()
    with pytest.raises(dataclasses.FrozenInstanceError):
        tool.id = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tool.config.input_schema = Report  # type: ignore[misc]


def test_declared_maps_are_read_only_copies() -> None:
    box = capability("acme.sandbox")
    capabilities = {"box": box}
    suspend = {"approval": SuspendPoint(Approval, Approval)}
    tool = backend(capabilities=capabilities, suspend=suspend)
    capabilities["other"] = box
    suspend.clear()
    assert dict(tool.capabilities) == {"box": box}
    assert list(tool.config.suspend) == ["approval"]
    with pytest.raises(TypeError):
        tool.capabilities["x"] = box  # type: ignore[index]


def test_a_definition_compares_by_identity_and_is_hashable() -> None:
    first, second = backend(), backend()
    assert first != second
    assert len({first, second, first}) == 2


def test_repr() -> None:
    assert repr(backend()) == "ToolDefinition(id='example.report', has_execute=True)"


def test_context_schema_is_stored_unchecked() -> None:
    class Store:  # a live object: no JSON Schema, and the runtime never parses context
        pass

    assert backend(context_schema=Store).config.context_schema is Store


def test_a_description_callback_is_kept() -> None:
    def describe(ctx: DescriptionContext) -> str:
        return f"Report in {ctx.context['currency']}."

    tool = backend(description=describe)
    assert callable(tool.config.description)
    assert tool.config.description(DescriptionContext({"currency": "EUR"})) == "Report in EUR."


def test_children_are_kept_by_declared_name() -> None:
    child = backend()
    parent = backend(id="example.total", tools={"report": child})
    assert parent.tools["report"] is child


def test_a_child_may_declare_capabilities() -> None:
    child = backend(capabilities={"box": capability("acme.sandbox")})
    assert backend(id="example.total", tools={"report": child}).tools["report"] is child


# --- id -------------------------------------------------------------------------------


def test_missing_id() -> None:
    assert error(description="x", input_schema=Query) == (
        "define_tool() needs id=..., the stable identity of the tool's wire spec; use a "
        "namespaced string such as 'crm.lookup-customer.v1'"
    )


def test_id_not_a_str() -> None:
    assert backend_error(id=7) == (
        "tool id must be a str, got 7 (int); use a stable, namespaced string such as "
        "'crm.lookup-customer.v1'"
    )


def test_empty_id() -> None:
    assert backend_error(id="") == (
        "tool id is empty; use a stable, namespaced id such as 'crm.lookup-customer.v1'"
    )


def test_blank_id() -> None:
    assert backend_error(id="  ") == (
        "tool id '  ' is blank; use a stable, namespaced id such as 'crm.lookup-customer.v1'"
    )


def test_padded_id_suggests_the_stripped_one() -> None:
    assert backend_error(id=" crm.lookup ") == (
        "tool id ' crm.lookup ' has leading or trailing whitespace; use 'crm.lookup'"
    )


def test_id_is_a_plain_str() -> None:
    class Name(str):
        pass

    assert type(backend(id=Name("example.report")).id) is str


# --- description, execute, to_model_output ----------------------------------------------


def test_missing_description() -> None:
    assert error(id="example.x", input_schema=Query) == (
        "tool 'example.x': description is required: a str, or a function of "
        "DescriptionContext returning one"
    )


def test_async_description() -> None:
    async def describe(ctx: DescriptionContext) -> str:
        return ""

    assert backend_error(description=describe) == (
        "tool 'example.report': description is an async function "
        "(test_async_description.<locals>.describe); descriptions are synchronous: make it a "
        "plain def returning a str, and load what it needs in the registration's map_context, "
        "which may be async"
    )


def test_async_description_in_a_partial_or_callable_object() -> None:
    async def describe(ctx: DescriptionContext, prefix: str) -> str:
        return prefix

    class Describer:
        async def __call__(self, ctx: DescriptionContext) -> str:
            return ""

    for value in (functools.partial(describe, prefix="x"), Describer()):
        assert "description is an async function" in backend_error(description=value)


def test_description_of_the_wrong_type() -> None:
    assert backend_error(description=3) == (
        "tool 'example.report': description must be a str or a function of "
        "DescriptionContext returning a str, got 3 (int)"
    )


def test_execute_must_be_callable() -> None:
    assert backend_error(execute="run") == (
        "tool 'example.report': execute must be a function of the ToolContext (sync or "
        "async), got 'run' (str)"
    )


def test_async_execute_is_fine() -> None:
    async def execute(ctx: Any) -> int:
        return 1

    assert backend(execute=execute).execute is execute


def test_to_model_output_must_be_callable() -> None:
    assert backend_error(to_model_output="text") == (
        "tool 'example.report': to_model_output must be a function (sync or async) called "
        "with output=, input= and tool_call_id=, got 'text' (str)"
    )


# --- schemas --------------------------------------------------------------------------


def test_missing_input_schema() -> None:
    assert error(id="example.x", description="x") == (
        "tool 'example.x': input_schema is required: a pydantic model class, a type, or "
        "json_schema({...}); for a tool that takes no input, use a model with no fields"
    )


def test_input_schema_none_is_missing() -> None:
    assert "input_schema is required" in backend_error(input_schema=None)


def test_an_unusable_schema_names_the_tool_and_argument() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        backend(input_schema={"type": "object"})
    assert str(caught.value) == (
        "tool 'example.report': input_schema cannot be used: a dict is not a schema type; "
        "to use a raw JSON Schema, wrap it: json_schema({...})"
    )
    assert isinstance(caught.value.__cause__, SchemaError)


def test_an_unusable_output_schema() -> None:
    assert backend_error(output_schema="int").startswith(
        "tool 'example.report': output_schema cannot be used: the string 'int'"
    )


def test_an_unusable_suspend_schema_names_the_point() -> None:
    point = SuspendPoint(suspend_schema=Approval, resume_schema=None)
    assert backend_error(suspend={"approval": point}) == (
        "tool 'example.report': suspend['approval'].resume_schema cannot be used: None is "
        "not a schema; for a schema that accepts only null, write type(None)"
    )


def test_an_unusable_data_schema_names_the_channel() -> None:
    assert backend_error(data_schemas={"progress": "x"}).startswith(
        "tool 'example.report': data_schemas['progress'] cannot be used: the string 'x'"
    )


def test_a_suspend_point_must_be_a_suspend_point() -> None:
    value = {"suspend_schema": Approval, "resume_schema": Approval}
    assert backend_error(suspend={"approval": value}).startswith(
        "tool 'example.report': suspend['approval'] must be a "
        "SuspendPoint(suspend_schema=..., resume_schema=...), got {"
    )


def test_a_json_schema_is_a_tool_schema() -> None:
    tool = backend(input_schema=json_schema({"type": "object"}))
    assert tool.wire_spec().input_schema == {"type": "object"}


# --- declared maps -------------------------------------------------------------------------


def test_a_declared_map_must_be_a_mapping() -> None:
    assert backend_error(data_schemas=[Report]) == (
        "tool 'example.report': data_schemas must be a mapping of names to a schema, got "
        "[<class 'tests.pai_actors.test_define_tool.Report'>] (list)"
    )


def test_declared_names_are_checked() -> None:
    assert backend_error(data_schemas={" progress": Report}) == (
        "tool 'example.report': the data_schemas key ' progress' has leading or trailing "
        "whitespace; use 'progress'"
    )
    assert backend_error(data_schemas={1: Report}) == (
        "tool 'example.report': the data_schemas key must be a str, got 1 (int)"
    )
    assert backend_error(data_schemas={"": Report}) == (
        "tool 'example.report': the data_schemas key is empty; give it a name"
    )


def test_suspend_without_execute() -> None:
    point = SuspendPoint(Approval, Approval)
    with pytest.raises(ToolDefinitionError) as caught:
        client(suspend={"approval": point})
    assert str(caught.value) == (
        "tool 'example.browser-check': declares suspend points ('approval') but has no "
        "execute; only execute can suspend: give the tool an execute function, or drop them"
    )


def test_capabilities_without_execute() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        client(capabilities={"box": capability("acme.sandbox")})
    assert str(caught.value) == (
        "tool 'example.browser-check': declares capabilities ('box') but has no execute; "
        "capabilities are acquired for execute: give the tool an execute function, or drop "
        "them"
    )


def test_tools_without_execute() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        client(tools={"report": backend()})
    assert str(caught.value) == (
        "tool 'example.browser-check': declares child tools ('report') but has no execute; "
        "children are called from execute through ctx.tools: give the tool an execute "
        "function, or drop them"
    )


def test_empty_declarations_need_no_execute() -> None:
    tool = client(suspend={}, capabilities={}, tools={}, data_schemas={})
    assert not tool.has_execute


def test_a_capability_must_be_a_token() -> None:
    assert backend_error(capabilities={"box": "acme.sandbox"}) == (
        "tool 'example.report': capabilities['box'] must be a capability token such as "
        "capability('acme.sandbox'), got 'acme.sandbox' (str)"
    )


# --- children ------------------------------------------------------------------------------


def test_a_child_must_be_a_definition() -> None:
    assert backend_error(tools={"report": run}).startswith(
        "tool 'example.report': tools['report'] must be a tool definition from define_tool, "
        "got <function run"
    )


def test_a_client_executed_child() -> None:
    assert backend_error(id="example.total", tools={"check": client()}) == (
        "tool 'example.total': tools['check'] is tool 'example.browser-check', which has no "
        "execute (a client submits its output); children must execute in the backend: give "
        "it an execute function, or register it on the agent instead"
    )


def test_a_child_that_suspends() -> None:
    child = backend(suspend={"approval": SuspendPoint(Approval, Approval)})
    assert backend_error(id="example.total", tools={"report": child}) == (
        "tool 'example.total': tools['report'] is tool 'example.report', which declares "
        "suspend points ('approval'); children cannot suspend: register it on the agent "
        "instead"
    )


def test_a_child_with_tool_data() -> None:
    child = backend(data_schemas={"progress": Report})
    assert backend_error(id="example.total", tools={"report": child}) == (
        "tool 'example.total': tools['report'] is tool 'example.report', which declares "
        "data_schemas ('progress'); children cannot write tool data: register it on the "
        "agent instead"
    )


def test_a_child_with_children() -> None:
    child = backend(id="example.middle", tools={"leaf": backend()})
    assert backend_error(id="example.total", tools={"middle": child}) == (
        "tool 'example.total': tools['middle'] is tool 'example.middle', which declares "
        "child tools of its own ('leaf'); tools nest one level only: register it on the "
        "agent instead"
    )


# --- capabilities, description records -------------------------------------------------------


def test_capability_tokens() -> None:
    box = capability("acme.sandbox")
    assert box == Capability("acme.sandbox")
    assert hash(box) == hash(capability("acme.sandbox"))
    assert box.id == "acme.sandbox"
    assert repr(box) == "capability('acme.sandbox')"


def test_capability_ids_are_checked_like_tool_ids() -> None:
    with pytest.raises(DefinitionError) as caught:
        capability(" acme.sandbox")
    assert str(caught.value) == (
        "capability id ' acme.sandbox' has leading or trailing whitespace; use 'acme.sandbox'"
    )
    assert not isinstance(caught.value, ToolDefinitionError)


def test_description_context_tools_are_read_only() -> None:
    info = ChildToolInfo("Read a report.", {"type": "object"})
    children = {"report": info}
    ctx = DescriptionContext(context=None, tools=children)
    children.clear()
    assert ctx.tools == {"report": info}
    assert info.output_schema is None
    with pytest.raises(TypeError):
        ctx.tools["x"] = info  # type: ignore[index]


def test_description_context_defaults_to_no_children() -> None:
    assert DescriptionContext(context={"a": 1}).tools == {}


# --- wire spec -----------------------------------------------------------------------------


def test_wire_spec_of_a_backend_tool() -> None:
    tool = backend(
        output_schema=Report,
        suspend={"approval": SuspendPoint(Approval, Approval)},
        data_schemas={"progress": json_schema({"type": "string"})},
    )
    report = {
        "properties": {"amount": {"title": "Amount", "type": "integer"}},
        "required": ["amount"],
        "title": "Report",
        "type": "object",
    }
    approval = {
        "properties": {"approved": {"title": "Approved", "type": "boolean"}},
        "required": ["approved"],
        "title": "Approval",
        "type": "object",
    }
    assert tool.wire_spec().to_json() == {
        "id": "example.report",
        "hasExecute": True,
        "inputSchema": {
            "properties": {"region": {"title": "Region", "type": "string"}},
            "required": ["region"],
            "title": "Query",
            "type": "object",
        },
        "outputSchema": report,
        "dataSchemas": {"progress": {"type": "string"}},
        "suspend": {"approval": {"suspendSchema": approval, "resumeSchema": approval}},
    }


def test_the_same_declaration_has_the_same_wire_spec() -> None:
    first = backend(output_schema=Report).wire_spec()
    second = backend(output_schema=Report, description="Other words.").wire_spec()
    assert first == second
    assert hash(first) == hash(second)
    assert first.differences(second) == ()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"input_schema": Report}, "input_schema"),
        ({"output_schema": Query}, "output_schema"),
        ({"data_schemas": {"progress": Report}}, "data_schemas"),
        ({"suspend": {"approval": SuspendPoint(Approval, Report)}}, "suspend"),
    ],
)
def test_a_changed_schema_changes_the_wire_spec(change: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {
        "output_schema": Report,
        "data_schemas": {"progress": Query},
        "suspend": {"approval": SuspendPoint(Approval, Approval)},
    }
    first = backend(**base).wire_spec()
    second = backend(**{**base, **change}).wire_spec()
    assert first != second
    assert first.differences(second) == (field,)


def test_the_execution_mode_is_part_of_the_wire_spec() -> None:
    spec = client(id="example.report").wire_spec()
    other = backend().wire_spec()
    assert spec.differences(other) == ("has_execute",)
    assert isinstance(spec, ToolWireSpec)


def test_outputs_of_executing_tools_are_described_as_dumped() -> None:
    class Box(BaseModel):
        width: int

        @computed_field  # type: ignore[prop-decorator]  # pydantic's documented idiom
        @property
        def area(self) -> int:
            return self.width**2

    produced = backend(output_schema=Box).wire_spec().output_schema
    submitted = client(output_schema=Box).wire_spec().output_schema
    assert produced is not None
    assert "area" in produced["properties"]  # type: ignore[operator]
    assert submitted is not None
    assert "area" not in submitted["properties"]  # type: ignore[operator]


def test_wire_spec_returns_fresh_copies() -> None:
    tool = backend()
    tool.wire_spec().input_schema["title"] = "changed"
    assert tool.wire_spec().input_schema["title"] == "Query"
