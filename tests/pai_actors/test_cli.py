"""The ``pai-actors`` command and its demo."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pai_actors import __version__
from pai_actors._cli import main
from pai_actors._demo import run_demo


async def test_demo_crashes_restarts_and_cancels_the_whole_tree() -> None:
    lines: list[str] = []
    tree = await run_demo(lines.append)
    text = "\n".join(lines)
    assert "the ask raised ActorExited: actor 'parser' exited before replying" in text
    assert "exit  app/workers/pool/writer: shutdown" in text  # rest_for_one stopped it
    assert "answers Parse('42') with 42" in text
    assert tree.splitlines() == [
        "supervisor app: cancelled: demo finished",
        "├── actor cache: cancelled: demo finished",
        "└── actor workers: cancelled: demo finished",
        "    └── supervisor pool: cancelled: demo finished",
        "        ├── actor fetcher: cancelled: demo finished",
        "        ├── actor parser: cancelled: demo finished (after 1 restart)",
        "        └── actor writer: cancelled: demo finished (after 1 restart)",
    ]
    exits = [line for line in lines if line.startswith("  exit  ")]
    assert exits[-1] == "  exit  app: cancelled: demo finished"


def test_the_installed_command_runs_the_demo() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pai_actors._cli", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "every actor's exit reason" in result.stdout


def test_version_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"pai-actors {__version__}"
    with pytest.raises(SystemExit) as info:
        main(["dance"])
    assert info.value.code == 2
    assert "invalid choice: 'dance'" in capsys.readouterr().err


async def test_demo_approval_flow_suspends_rejects_then_resumes() -> None:
    from pai_actors._approval_demo import run_approval_demo

    lines: list[str] = []
    statuses = await run_approval_demo(lines.append)
    text = "\n".join(lines)
    step_3 = text.index("4. A valid submission is accepted")
    # live updates: progress, the suspension, the run waiting, before the approval
    assert "[live] part tool-sendInvoice input-available data.progress: status={'step': " in text
    assert "pendingSuspension='approval' suspensions: [approval pending]" in text[:step_3]
    assert text.index("[live] run waiting") < step_3
    assert "The pending action: 'sendInvoice.approval'" in text
    assert "An invalid submission is rejected; the action stays pending" in text
    assert "resume['approved']" in text
    # the process stops; a new runtime on the same SQLite file finds the call waiting
    assert "3. The process stops. Nothing runs now; the call waits in demo.db" in text
    assert "lists the pending actions: [('sendInvoice.approval', 'call_1.1')]" in text
    # after it: transient progress reaches the watcher only, then the output
    assert "[live] transient data progress['upload'] = {'step': 'uploading 100%'}" in text[step_3:]
    transcript = text[text.index("5. The transcript") :]
    assert "uploading" not in transcript
    assert (
        "assistant: tool-sendInvoice output-available output={'sent': True, 'customer': 'ACME'}"
        " data.progress: status={'step': 'sent'} suspensions: [approval submitted]" in transcript
    )
    assert '"toolCallId": "call_1"' in transcript
    assert statuses == ["completed"]
