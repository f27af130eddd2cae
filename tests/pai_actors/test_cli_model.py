"""``pai-actors demo --model``: the demo's agent on a real model, against the local
OpenAI-compatible server of ``tests/models`` (offline, loopback, port 0).

The server plays recorded Chat Completions streams: a call of the demo's ``sendInvoice``
(derived from ``openai_chat_refund.sse``: the same chunks, the demo's tool name and
arguments), then a text answer. The demo runs in this trio run (``run_model_demo``) or as
the installed command in a child process (``python -m pai_actors._cli``).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pytest
import trio

from pai_actors._cli import main
from pai_actors._cli.console import Console
from pai_actors._cli.model_demo import PROMPT, run_model_demo
from pai_actors._cli.protocol_demo import bar
from pai_actors.models import OpenAIChatModel

from ..models.providers import API_KEY
from ..models.sse_server import Reply, fixture, open_provider_server

INVOICE_CALL = (
    fixture("openai_chat_refund.sse")
    .replace('"name":"refund"', '"name":"sendInvoice"')
    .replace('{\\"order\\": 7,', '{\\"customer\\": \\"ACME\\",')
    .replace(' \\"cents\\": 1200}', ' \\"amount\\": 120}')
)
TEXT = fixture("openai_chat_text.sse")  # "Hello there!"


class Person:
    """Answers the demo's prompts with ``answers``, in order (from the worker thread the
    demo asks in); keeps the prompts."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []
        self.thread: threading.Thread | None = None

    def ask(self, prompt: str) -> str:
        self.prompts.append(prompt)
        self.thread = threading.current_thread()
        return self.answers.pop(0)


def _model(url: str) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", base_url=f"{url}/v1", api_key=API_KEY, max_retries=0)


async def test_the_model_calls_the_tool_the_person_approves_and_the_run_completes() -> None:
    lines: list[str] = []
    person = Person("y", "")
    with trio.fail_after(30):
        async with open_provider_server() as server:
            server.reply(Reply(INVOICE_CALL), Reply(TEXT))
            status = await run_model_demo(_model(server.url), ask=person.ask, say=lines.append)
    assert status == "completed"
    assert person.prompts == [
        "   approved (whether to send the invoice) [y/n]: ",
        "   note (a note for the record, e.g. why it was declined) [text, Enter to skip]: ",
    ]
    assert person.thread is not threading.main_thread()  # the server kept serving meanwhile
    # the conversation, without the run's statuses (whose order among the parts' updates is
    # the runtime's business) and the tool's progress (checked below)
    conversation = [line for line in lines if not line.startswith(("   [run ", "   drafting"))]
    start = conversation.index(f"   alice: {PROMPT}")
    assert [line.strip() for line in conversation[start:]] == [
        f"alice: {PROMPT}",
        'assistant calls sendInvoice {"customer": "ACME", "amount": 120}',
        "sendInvoice waits at 'approval'",
        "",
        "the pending action 'sendInvoice.approval' waits for your answer:",
        'input:  {"customer": "ACME", "amount": 120.0}',
        "answer: {approved: boolean, note?: string}",
        "the answer is accepted",
        "",
        "sendInvoice resumes",
        "sending   [....................]   0%",
        "sending   [#####...............]  25%",
        "sending   [##########..........]  50%",
        "sending   [###############.....]  75%",
        "sending   [####################] 100%",
        'sendInvoice returned {"sent": true, "customer": "ACME", "amount": 120.0}',
        "assistant: Hello there!",
    ]
    assert lines[lines.index("   [run waiting]") + 1 :][:2] == [
        "",
        "   the pending action 'sendInvoice.approval' waits for your answer:",
    ]
    assert [line for line in lines if line.startswith("   drafting")] == [
        f"   drafting  {bar(percent)}" for percent in (0, 25, 50, 75, 100)
    ]
    assert lines[-1] == "   [run completed]"
    # the real model was offered the demo's own tool, and got its result back
    first, second = (request.body for request in server.requests)
    assert first["model"] == "gpt-4o-mini"
    assert first["messages"] == [
        {"role": "system", "content": "Send invoices when asked; a person approves each one."},
        {"role": "user", "content": PROMPT},
    ]
    [tool] = first["tools"]
    assert tool["function"]["name"] == "sendInvoice"
    assert set(tool["function"]["parameters"]["properties"]) == {"customer", "amount"}
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_cclGbjTQkZDEnnHrRiU0n7NO",
        "content": '{"sent":true,"customer":"ACME","amount":120.0}',
    }


class Screen:
    """A terminal as the demo writes to it: ``say`` writes a line of its own (ending a line
    that streamed text left open), ``write`` a fragment where the text stands; keeps the
    fragments written."""

    def __init__(self) -> None:
        self.text = ""
        self.fragments: list[str] = []

    def say(self, line: str) -> None:
        if self.text and not self.text.endswith("\n"):
            self.text += "\n"
        self.text += line + "\n"

    def write(self, fragment: str) -> None:
        self.fragments.append(fragment)
        self.text += fragment

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


class Terminal(io.StringIO):
    """Standard output on a TTY."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_the_console_keeps_streamed_text_and_progress_lines_apart(
    tty: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    console = Console()
    for fragment in ("   assistant: ", "Hel", "lo", ""):
        console.write(fragment)
    console.progress("   50%")
    console.progress("   100%")
    console.write("   thinking: x")
    console.write("\n")
    console.write("   assistant: y")
    console.say("   [run completed]")
    drawn = "\r   50%\r   100%\n" if tty else "   50%\n   100%\n"
    assert out.getvalue() == (
        f"   assistant: Hello\n{drawn}   thinking: x\n   assistant: y\n   [run completed]\n"
    )


def never_asked(prompt: str) -> str:
    raise AssertionError(f"nothing to approve, yet the demo asked {prompt!r}")


async def test_a_model_that_only_answers_asks_nothing() -> None:
    lines: list[str] = []
    with trio.fail_after(30):
        async with open_provider_server() as server:
            server.reply(Reply(TEXT))
            status = await run_model_demo(
                _model(server.url), "Hello?", ask=never_asked, say=lines.append
            )
    assert status == "completed"
    assert lines[-4:] == [
        "   alice: Hello?",
        "   [run running]",
        "   assistant: Hello there!",
        "   [run completed]",
    ]


async def test_text_and_reasoning_are_written_as_they_stream_in() -> None:
    screen = Screen()
    with trio.fail_after(30):
        async with open_provider_server() as server:
            server.reply(Reply(fixture("openai_chat_reasoning.sse")))
            status = await run_model_demo(
                _model(server.url), "Hi", ask=never_asked, say=screen.say, write=screen.write
            )
    assert status == "completed"
    # each fragment as the model sent it, under its label; none said again once stored
    assert screen.fragments == [
        "   assistant (thinking): ",
        "The user",
        " greets me.",
        "\n",
        "   assistant: ",
        "Hello",
        " there!",
    ]
    assert screen.lines[-5:] == [
        "   alice: Hi",
        "   [run running]",
        "   assistant (thinking): The user greets me.",
        "   assistant: Hello there!",
        "   [run completed]",
    ]


async def test_a_provider_error_fails_the_run_and_says_why() -> None:
    lines: list[str] = []
    body = {"error": {"message": "Incorrect API key provided.", "code": "invalid_api_key"}}
    with trio.fail_after(30):
        async with open_provider_server() as server:
            server.reply(Reply.error(401, body))
            status = await run_model_demo(_model(server.url), ask=input, say=lines.append)
    assert status == "failed"
    assert lines[-1].startswith(
        "   [run failed: openai answered HTTP 401 (invalid_api_key): Incorrect API key provided."
    )
    assert API_KEY not in "\n".join(lines)


# -- the command --------------------------------------------------------------------------------


async def _demo(url: str, answers: str, *options: str) -> subprocess.CompletedProcess[bytes]:
    """``pai-actors demo --model openai:gpt-4o-mini --base-url <url>/v1`` in a child process,
    its standard input ``answers``."""
    env = {**os.environ, "OPENAI_API_KEY": API_KEY}
    env.pop("OPENAI_BASE_URL", None)
    command = [sys.executable, "-m", "pai_actors._cli", "demo", "--model", "openai:gpt-4o-mini"]
    result: subprocess.CompletedProcess[bytes] = await trio.run_process(
        [*command, "--base-url", f"{url}/v1", *options],
        stdin=answers.encode(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env,
    )
    return result


async def test_the_command_runs_the_agent_on_the_model_and_a_person_declines() -> None:
    with trio.fail_after(60):
        async with open_provider_server() as server:
            server.reply(Reply(INVOICE_CALL), Reply(TEXT))
            result = await _demo(server.url, "n\nnot this month\n", "--prompt", "Invoice ACME 120")
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "OpenAIChatModel(model='gpt-4o-mini', base_url=" in out
    assert "alice: Invoice ACME 120" in out
    assert 'assistant calls sendInvoice {"customer": "ACME", "amount": 120}' in out
    assert "sendInvoice failed: A person declined the invoice: not this month." in out
    assert out.rstrip().endswith("assistant: Hello there!\n   [run completed]")
    assert "the supervision tree" not in out  # --model runs the agent only
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert API_KEY not in out


async def test_the_command_says_when_no_one_answers() -> None:
    with trio.fail_after(60):
        async with open_provider_server() as server:
            server.reply(Reply(INVOICE_CALL))
            result = await _demo(server.url, "")
    assert result.returncode == 1
    assert result.stderr.decode().splitlines()[-1] == (
        "pai-actors: error: no answer (end of input): the demo asks you to answer each approval"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "gemini:pro"], "names the unknown provider 'gemini'"),
        (["--model", "gpt-4.1-mini"], "is not '<provider>:<model>'"),
        (["--base-url", "http://127.0.0.1:11434/v1"], "--base-url goes with --model SPEC"),
        (["--prompt", "Hi"], "--prompt goes with --model SPEC"),
    ],
)
def test_demo_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
