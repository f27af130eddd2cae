"""A model given as a spec string: ``define_agent(model="openai:gpt-4.1-mini")`` and
``create_agent_runtime(..., model=...)`` make the adapter ``model_from_spec`` makes; a bad
spec, or an adapter whose SDK is missing, raises a DefinitionError naming the agent."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import trio

from pai_actors import (
    DefinitionError,
    TextPart,
    create_agent_runtime,
    create_pai,
    define_agent,
)
from pai_actors.models import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from pai_actors.testing import ScriptedModel, text

from .providers import API_KEY
from .sse_server import Reply, fixture, open_provider_server

KNOWN = "use one of 'openai:<model>', 'openai-responses:<model>', 'anthropic:<model>'"


@pytest.mark.parametrize(
    ("spec", "adapter", "name"),
    [
        ("openai:gpt-4.1-mini", OpenAIChatModel, "gpt-4.1-mini"),
        ("openai-responses:gpt-5-mini", OpenAIResponsesModel, "gpt-5-mini"),
        ("anthropic:claude-sonnet-4-5", AnthropicModel, "claude-sonnet-4-5"),
    ],
)
def test_define_agent_makes_the_adapter_a_spec_names(
    spec: str, adapter: type[Any], name: str
) -> None:
    agent = define_agent(name="assistant", model=spec, tools={})
    assert type(agent.model) is adapter
    assert agent.model.model == name


def agent_error(model: Any) -> str:
    with pytest.raises(DefinitionError) as caught:
        define_agent(name="assistant", model=model, tools={})
    return str(caught.value)


def test_a_spec_that_is_not_provider_colon_model_names_the_agent() -> None:
    assert agent_error("gpt-4.1-mini") == (
        f"agent 'assistant': model spec 'gpt-4.1-mini' is not '<provider>:<model>'; {KNOWN}"
    )


def test_an_unknown_provider_and_a_missing_model_name_name_the_agent() -> None:
    assert agent_error("gemini:pro") == (
        f"agent 'assistant': model spec 'gemini:pro' names the unknown provider 'gemini'; "
        f"{KNOWN} (an OpenAI-compatible server is 'openai:<model>' with base_url=...)"
    )
    assert agent_error("openai: ") == (
        "agent 'assistant': model spec 'openai: ' has no model name after 'openai:'"
    )


def test_a_model_that_is_neither_a_spec_nor_a_model_names_the_agent() -> None:
    assert agent_error(42) == (
        "agent 'assistant': model must be a spec string such as 'openai:gpt-4.1-mini' or "
        "have a stream(request) method (the Model protocol), got 42 (int); or leave it out "
        "and give the model at the runtime"
    )


def test_a_spec_whose_sdk_is_missing_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if it were not installed
    message = agent_error("anthropic:claude-sonnet-4-5")
    assert message.startswith("agent 'assistant': AnthropicModel needs the 'anthropic' package")
    assert message.endswith("install it with pip install 'pai-actors[anthropic]'")


async def test_an_agent_defined_with_a_spec_runs_on_the_environment_s_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the adapter reads the environment when a step runs, not when the agent is defined
    agent = define_agent(
        name="assistant", instructions="Be brief.", model="openai:gpt-4o-mini", tools={}
    )
    with trio.fail_after(30):
        async with open_provider_server() as server:
            monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
            server.reply(Reply(fixture("openai_chat_text.sse")))
            async with create_agent_runtime(agent) as rt:
                thread_id = await rt.create_thread(scope_key="tenant-a")
                await rt.send(thread_id, "Hello?")
                await rt.wait_idle(thread_id)
                state = await rt.get_state(thread_id)
    assert [run.status for run in state.runs] == ["completed"]
    assert state.messages[-1].parts[-1] == TextPart(text="Hello there!")
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body["model"] == "gpt-4o-mini"
    assert request.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello?"},
    ]


async def test_the_runtime_takes_a_spec_for_every_agent_or_by_agent_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scripted = ScriptedModel([text("scripted")], repeat_last=True)
    pai = create_pai(
        {
            "triage": define_agent(name="triage", model=scripted, tools={}),
            "writer": define_agent(name="writer", model=scripted, tools={}),
        }
    )
    answers: dict[str, list[str]] = {}
    with trio.fail_after(30):
        async with open_provider_server() as server:
            monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
            server.reply(*[Reply(fixture("openai_chat_text.sse")) for _ in range(3)])
            for name, model in [
                ("all", "openai:gpt-4o-mini"),
                ("writer only", {"writer": "openai:gpt-4.1-mini"}),
            ]:
                async with create_agent_runtime(pai, model=model) as rt:
                    for agent_id in ("triage", "writer"):
                        thread_id = await rt.create_thread(scope_key="t", agent_id=agent_id)
                        await rt.send(thread_id, "Hello?")
                        await rt.wait_idle(thread_id)
                        part = (await rt.get_state(thread_id)).messages[-1].parts[-1]
                        assert isinstance(part, TextPart)
                        answers.setdefault(name, []).append(part.text)
    assert answers == {
        "all": ["Hello there!", "Hello there!"],
        "writer only": ["scripted", "Hello there!"],
    }
    assert [r.body["model"] for r in server.requests] == [
        "gpt-4o-mini",
        "gpt-4o-mini",
        "gpt-4.1-mini",
    ]


def runtime_error(agent_or_pai: Any, model: Any) -> str:
    with pytest.raises(DefinitionError) as caught:
        create_agent_runtime(agent_or_pai, model=model)
    return str(caught.value)


def test_a_bad_spec_at_the_runtime_names_the_agents_it_was_for() -> None:
    agent = define_agent(name="assistant", tools={})
    assert runtime_error(agent, "gpt-4.1-mini") == (
        "create_agent_runtime(model=...) for agent 'assistant': model spec 'gpt-4.1-mini' "
        f"is not '<provider>:<model>'; {KNOWN}"
    )
    pai = create_pai({"triage": agent, "writer": agent})
    assert runtime_error(pai, "gemini:pro").startswith(
        "create_agent_runtime(model=...) for agents 'triage', 'writer': model spec "
        "'gemini:pro' names the unknown provider 'gemini'"
    )
    assert runtime_error(pai, {"writer": "openai:"}) == (
        "create_agent_runtime(model={'writer': ...}) for agent 'writer': model spec "
        "'openai:' has no model name after 'openai:'"
    )


def test_the_runtime_checks_a_model_object_too() -> None:
    agent = define_agent(name="assistant", tools={})
    message = runtime_error(agent, object())
    assert message.startswith(
        "create_agent_runtime(model=...) for agent 'assistant': model must be a spec string "
        "such as 'openai:gpt-4.1-mini' or have a stream(request) method (the Model protocol), "
        "got <object object at "
    )
