"""The README's real-model program runs as written: extracted from the README and run in a
fresh interpreter against the local OpenAI-compatible server of ``tests/models`` (offline,
loopback, port 0), configured only by the environment variables the README names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from .models.sse_server import Reply, fixture, open_provider_server

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Run it against a real model"
DUMMY_KEY = "sk-dummy-readme-key"


def readme_program() -> str:
    """The one ```python block of the README's real-model section."""
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, f"the README has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    [program] = re.findall(r"^```python\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    return program


def _environment(**variables: str) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OPENAI_", "ANTHROPIC_"))
    }
    return {**env, **variables}


async def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = await trio.run_process(
        [sys.executable, "-c", readme_program()],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env,
    )
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
    )


def test_the_section_shows_the_demo_on_a_real_model_and_the_program() -> None:
    section = README.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    assert ".venv/bin/pai-actors demo --model openai:gpt-4.1-mini" in section
    assert 'model="openai:gpt-4.1-mini"' in readme_program()


@pytest.mark.parametrize(
    ("key", "authorization"),
    [(DUMMY_KEY, f"Bearer {DUMMY_KEY}"), (None, "Bearer none")],
    ids=["with-a-key", "a-local-server-without-a-key"],
)
async def test_the_readme_program_runs_as_written_against_a_local_server(
    key: str | None, authorization: str
) -> None:
    with trio.fail_after(60):
        async with open_provider_server() as server:
            server.reply(Reply(fixture("openai_chat_text.sse")))
            variables = {"OPENAI_BASE_URL": f"{server.url}/v1"}
            if key is not None:
                variables["OPENAI_API_KEY"] = key
            result = await _run(_environment(**variables))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello there!\n"
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == authorization
    assert request.body["model"] == "gpt-4.1-mini"
    assert request.body["messages"] == [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "What is an actor?"},
    ]


async def test_without_a_key_or_a_server_the_program_says_what_to_set() -> None:
    with trio.fail_after(60):
        result = await _run(_environment())  # fails before it connects anywhere
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "openai has no API key: set OPENAI_API_KEY or give OpenAIChatModel(..., api_key=...); "
        "a local server takes base_url=... and no key\n"
    )
