"""What each adapter sends: the request body the local server received for a whole
conversation, the spec strings, the environment, and keys kept out of reprs."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import trio

from pai_actors import (
    DefinitionError,
    ModelAssistantMessage,
    ModelFilePart,
    ModelProtocolError,
    ModelProviderError,
    ModelReasoningPart,
    ModelRequest,
    ModelSettings,
    ModelSystemMessage,
    ModelTextPart,
    ModelTool,
    ModelToolCallPart,
    ModelToolMessage,
    ModelToolResultPart,
    ModelUserMessage,
)
from pai_actors._models.sse import SSEDecoder
from pai_actors.models import (
    AnthropicModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    model_from_spec,
)

from .providers import API_KEY, PROVIDERS, events_of
from .sse_server import Reply, open_provider_server

SCHEMA = {"type": "object", "properties": {"location": {"type": "string"}}}
SIGNATURE = {"anthropic": {"signature": "sig-1"}}
CONVERSATION = ModelRequest(
    "Be brief.",
    [
        ModelUserMessage("Weather in Paris?"),
        ModelAssistantMessage(
            [
                ModelReasoningPart("Look it up.", SIGNATURE),
                ModelTextPart("Checking."),
                ModelToolCallPart("call_1", "get_weather", {"location": "Paris"}),
            ]
        ),
        ModelToolMessage(
            [ModelToolResultPart("call_1", "get_weather", {"type": "json", "value": {"c": 21}})]
        ),
        ModelSystemMessage("The user is away."),
    ],
    {"get_weather": ModelTool("The weather in a city.", SCHEMA)},
)


async def sent_body(name: str) -> dict[str, object]:
    [provider] = [p for p in PROVIDERS if p.name == name]
    with trio.fail_after(20):
        async with open_provider_server() as server:
            server.reply(Reply(provider.fixture("text")))
            await events_of(provider.make(server.url), CONVERSATION)
            [request] = server.requests
    assert request.path == provider.path
    assert API_KEY in (
        request.headers.get("authorization", "") + request.headers.get("x-api-key", "")
    )
    body: dict[str, object] = request.body
    return body


async def test_chat_completions_request() -> None:
    body = await sent_body("openai_chat")
    assert body["model"] == "gpt-4o-mini"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"c":21}'},
        {"role": "system", "content": "The user is away."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": SCHEMA,
            },
        }
    ]


async def test_responses_request() -> None:
    body = await sent_body("openai_responses")
    assert (body["model"], body["stream"], body["store"]) == ("gpt-4o-mini", True, False)
    assert body["instructions"] == "Be brief."
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"location": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": '{"c":21}'},
        {"role": "system", "content": "The user is away."},
    ]  # the reasoning is Anthropic's: left out
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": SCHEMA,
            "strict": False,
        }
    ]


async def test_anthropic_request() -> None:
    body = await sent_body("anthropic")
    assert (body["model"], body["stream"], body["max_tokens"]) == (
        "claude-sonnet-4-20250514",
        True,
        4096,
    )
    assert body["system"] == "Be brief."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Look it up.", "signature": "sig-1"},
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "get_weather",
                    "input": {"location": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": '{"c":21}',
                    "is_error": False,
                }
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "The user is away."}]},
    ]
    assert body["tools"] == [
        {"name": "get_weather", "description": "The weather in a city.", "input_schema": SCHEMA}
    ]


async def test_settings_are_sent() -> None:
    [chat] = [p for p in PROVIDERS if p.name == "openai_chat"]
    with trio.fail_after(20):
        async with open_provider_server() as server:
            server.reply(Reply(chat.fixture("text")))
            model = chat.make(server.url, temperature=0.2, max_tokens=64, extra_body={"seed": 7})
            await events_of(model, CONVERSATION)
    body = server.requests[0].body
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.2, 64, 7)


REQUEST_SETTINGS = ModelSettings(
    temperature=0.5, top_p=0.9, max_tokens=32, tool_choice="get_weather", parallel_tool_calls=False
)


async def body_with(name: str, settings: ModelSettings, **options: Any) -> dict[str, Any]:
    [provider] = [p for p in PROVIDERS if p.name == name]
    request = dataclasses.replace(CONVERSATION, settings=settings)
    with trio.fail_after(20):
        async with open_provider_server() as server:
            server.reply(Reply(provider.fixture("text")))
            await events_of(provider.make(server.url, **options), request)
    body: dict[str, Any] = server.requests[0].body
    return body


async def test_request_settings_reach_each_provider_in_its_own_words() -> None:
    chat = await body_with("openai_chat", REQUEST_SETTINGS, temperature=0.1, max_tokens=64)
    assert {k: chat[k] for k in ("temperature", "top_p", "max_tokens", "parallel_tool_calls")} == {
        "temperature": 0.5,
        "top_p": 0.9,
        "max_tokens": 32,
        "parallel_tool_calls": False,
    }
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    responses = await body_with("openai_responses", REQUEST_SETTINGS)
    assert (responses["max_output_tokens"], responses["temperature"]) == (32, 0.5)
    assert responses["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert responses["parallel_tool_calls"] is False
    anthropic_settings = dataclasses.replace(REQUEST_SETTINGS, temperature=None, top_p=None)
    anthropic = await body_with("anthropic", anthropic_settings)
    assert anthropic["max_tokens"] == 32
    assert anthropic["tool_choice"] == {
        "type": "tool",
        "name": "get_weather",
        "disable_parallel_tool_use": True,
    }


async def test_unset_request_settings_leave_the_adapters_own() -> None:
    chat = await body_with("openai_chat", ModelSettings(stop=("END",), seed=3), temperature=0.1)
    assert (chat["temperature"], chat["stop"], chat["seed"]) == (0.1, ["END"], 3)
    assert "tool_choice" not in chat
    assert "parallel_tool_calls" not in chat
    anthropic = await body_with("anthropic", ModelSettings(tool_choice="required", stop=("X",)))
    assert anthropic["tool_choice"] == {"type": "any"}
    assert anthropic["stop_sequences"] == ["X"]


@pytest.mark.parametrize(
    ("name", "settings", "missing"),
    [
        ("openai_responses", ModelSettings(stop=("END",)), "stop"),
        ("openai_responses", ModelSettings(seed=1), "seed"),
        ("anthropic", ModelSettings(seed=1), "seed"),
        ("anthropic", ModelSettings(temperature=0.3), "temperature"),
    ],
)
async def test_a_setting_the_api_has_not_is_a_clear_error(
    name: str, settings: ModelSettings, missing: str
) -> None:
    [provider] = [p for p in PROVIDERS if p.name == name]
    request = dataclasses.replace(CONVERSATION, settings=settings)
    with trio.fail_after(20):
        async with open_provider_server() as server:
            with pytest.raises(ModelProviderError, match=f"has no '{missing}' setting"):
                await events_of(provider.make(server.url), request)
    assert server.requests == []  # refused before anything was sent


def test_model_settings_check_their_values_and_merge() -> None:
    with pytest.raises(ModelProtocolError, match="max_tokens"):
        ModelSettings(max_tokens=0)
    with pytest.raises(ModelProtocolError, match="stop"):
        ModelSettings(stop="END")  # type: ignore[arg-type]
    merged = ModelSettings(temperature=0.2).over(ModelSettings(temperature=0.9, max_tokens=5))
    assert merged == ModelSettings(temperature=0.2, max_tokens=5)
    assert ModelSettings.from_json(merged.to_json()) == merged
    assert ModelSettings(tool_choice="required").forced_tool is None
    assert ModelSettings(tool_choice="lookup").forced_tool == "lookup"


# -- specs, environment, keys ------------------------------------------------------------------


def test_model_from_spec() -> None:
    assert type(model_from_spec("openai:gpt-4.1-mini")) is OpenAIChatModel
    assert type(model_from_spec("openai-responses:gpt-5")) is OpenAIResponsesModel
    claude = model_from_spec("anthropic:claude-sonnet-4-5", max_tokens=1000)
    assert type(claude) is AnthropicModel
    assert claude.model == "claude-sonnet-4-5"
    assert claude.max_tokens == 1000
    local = model_from_spec("openai:llama3.2", base_url="http://127.0.0.1:11434/v1")
    assert local.base_url == "http://127.0.0.1:11434/v1"


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("gpt-4.1-mini", "is not '<provider>:<model>'"),
        ("gemini:pro", "names the unknown provider 'gemini'"),
        ("openai:", "has no model name"),
    ],
)
def test_a_bad_spec_says_what_to_write(spec: str, problem: str) -> None:
    with pytest.raises(DefinitionError, match=problem):
        model_from_spec(spec)


def test_keys_stay_out_of_reprs_and_definition_errors() -> None:
    model = OpenAIChatModel("gpt-4.1-mini", api_key=API_KEY, base_url="http://127.0.0.1:1/v1")
    assert repr(model) == "OpenAIChatModel(model='gpt-4.1-mini', base_url='http://127.0.0.1:1/v1')"
    assert API_KEY not in repr(vars(model) if hasattr(model, "__dict__") else model)
    with pytest.raises(DefinitionError) as info:
        AnthropicModel("claude", api_key="")  # an empty key is a mistake
    assert "<hidden>" in str(info.value)


async def test_the_environment_configures_the_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    [chat] = [p for p in PROVIDERS if p.name == "openai_chat"]
    with trio.fail_after(20):
        async with open_provider_server() as server:
            server.reply(Reply(chat.fixture("text")))
            monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
            model = model_from_spec("openai:gpt-4.1-mini", max_retries=0)
            await events_of(model, CONVERSATION)
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-the-environment"


async def test_no_key_for_a_hosted_provider_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    model = AnthropicModel("claude-sonnet-4-5")  # made without a key: a step needs one
    with pytest.raises(ModelProviderError, match="set ANTHROPIC_API_KEY") as info:
        await events_of(model, CONVERSATION)
    assert info.value.code == "missing_api_key"


def test_bad_arguments_fail_at_construction() -> None:
    with pytest.raises(DefinitionError, match="model must be a model name"):
        OpenAIChatModel(" gpt")
    with pytest.raises(DefinitionError, match="max_retries"):
        OpenAIChatModel("gpt", max_retries=-1)
    with pytest.raises(DefinitionError, match="extra_body must be JSON"):
        OpenAIChatModel("gpt", extra_body={"x": {1, 2}})


# -- server-sent events ------------------------------------------------------------------------


def test_sse_decoder_reassembles_events_split_anywhere() -> None:
    body = b'event: a\r\ndata: {"x":\r\ndata: 1}\r\n\r\n: comment\nid: 3\ndata: [DONE]\n\n'
    for cut in range(len(body) + 1):
        decoder = SSEDecoder()
        events = decoder.feed(body[:cut]) + decoder.feed(body[cut:]) + decoder.flush()
        assert events == [("a", '{"x":\n1}'), (None, "[DONE]")], cut


def test_sse_decoder_keeps_multibyte_characters_split_across_chunks() -> None:
    body = "data: Olá\n\n".encode()
    decoder = SSEDecoder()
    events = [e for i in range(len(body)) for e in decoder.feed(body[i : i + 1])]
    assert events == [(None, "Olá")]


PNG = "data:image/png;base64,iVBORw0KGgo="
PDF = "data:application/pdf;base64,JVBERi0xLjQ="
WITH_FILES = ModelRequest(
    None,
    [
        ModelUserMessage(
            "What is in these?",
            [
                ModelFilePart("image/png", PNG),
                ModelFilePart("application/pdf", PDF, "terms.pdf"),
                ModelFilePart("image/jpeg", "https://example.com/cat.jpg"),
            ],
        )
    ],
)


async def body_for(name: str, request: ModelRequest) -> dict[str, Any]:
    [provider] = [p for p in PROVIDERS if p.name == name]
    with trio.fail_after(20):
        async with open_provider_server() as server:
            server.reply(Reply(provider.fixture("text")))
            await events_of(provider.make(server.url), request)
    body: dict[str, Any] = server.requests[0].body
    return body


async def test_a_users_files_reach_each_provider_in_its_own_shape() -> None:
    chat = await body_for("openai_chat", WITH_FILES)
    assert chat["messages"][-1]["content"] == [
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": PNG}},
        {"type": "file", "file": {"file_data": PDF, "filename": "terms.pdf"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]
    responses = await body_for("openai_responses", WITH_FILES)
    assert responses["input"][-1]["content"] == [
        {"type": "input_text", "text": "What is in these?"},
        {"type": "input_image", "image_url": PNG},
        {"type": "input_file", "file_data": PDF, "filename": "terms.pdf"},
        {"type": "input_image", "image_url": "https://example.com/cat.jpg"},
    ]
    anthropic = await body_for("anthropic", WITH_FILES)
    assert anthropic["messages"][-1]["content"] == [
        {"type": "text", "text": "What is in these?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="},
            "title": "terms.pdf",
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


@pytest.mark.parametrize(
    ("name", "file", "problem"),
    [
        ("openai_chat", ModelFilePart("application/pdf", "https://example.com/a.pdf"), "by URL"),
        ("anthropic", ModelFilePart("audio/wav", "data:audio/wav;base64,UklGRg=="), "images"),
    ],
)
async def test_a_file_the_api_cannot_take_is_a_clear_error(
    name: str, file: ModelFilePart, problem: str
) -> None:
    [provider] = [p for p in PROVIDERS if p.name == name]
    request = ModelRequest(None, [ModelUserMessage("look", [file])])
    with trio.fail_after(20):
        async with open_provider_server() as server:
            with pytest.raises(ModelProviderError, match=problem):
                await events_of(provider.make(server.url), request)
    assert server.requests == []


def test_sse_decoder_splits_only_at_sse_line_endings() -> None:
    # U+2028, U+2029 and U+0085 may stand unescaped in JSON strings: not line endings here
    body = 'data: {"t": "a\u2028b\u2029c\u0085d"}\r\n\r\ndata: x\rdata: y\r\r'.encode()
    decoder = SSEDecoder()
    events = [e for i in range(len(body)) for e in decoder.feed(body[i : i + 1])]
    events += decoder.flush()  # a last "\r" may be half of a "\r\n" until the body ends
    assert events == [(None, '{"t": "a\u2028b\u2029c\u0085d"}'), (None, "x\ny")]


async def test_reasoning_goes_back_to_responses_with_its_item_id() -> None:
    metadata = {"openai": {"itemId": "rs_1", "encryptedContent": "enc"}}
    request = ModelRequest(
        None,
        [
            ModelUserMessage("hi"),
            ModelAssistantMessage([ModelReasoningPart("Think.", metadata), ModelTextPart("ok")]),
            ModelUserMessage("again"),
        ],
    )
    body = await body_for("openai_responses", request)
    [reasoning] = [item for item in body["input"] if item.get("type") == "reasoning"]
    assert reasoning == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Think."}],
        "encrypted_content": "enc",
    }


async def test_anthropic_gets_no_empty_text_block() -> None:
    request = ModelRequest(
        None,
        [
            ModelUserMessage("", [ModelFilePart("image/png", PNG)]),
            ModelAssistantMessage([ModelTextPart("A cat.")]),
            ModelSystemMessage(""),
        ],
    )
    body = await body_for("anthropic", request)
    [first, _, notice] = body["messages"]
    assert [block["type"] for block in first["content"]] == ["image"]
    assert notice["content"] == []


def test_openais_own_api_gets_max_completion_tokens() -> None:
    request = dataclasses.replace(WITH_FILES, settings=ModelSettings(max_tokens=50))
    own = OpenAIChatModel("gpt-test", api_key="k")._params(request)
    compatible = OpenAIChatModel("llama", base_url="http://127.0.0.1:1/v1")._params(request)
    assert (own.get("max_completion_tokens"), "max_tokens" in own) == (50, False)
    assert (compatible.get("max_tokens"), "max_completion_tokens" in compatible) == (50, False)
