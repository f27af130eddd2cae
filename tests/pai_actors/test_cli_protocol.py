"""``pai-actors demo``, ``serve`` and ``actions``.

``serve`` runs as a real process on loopback (``--port 0``; it prints its URL), and the
``actions`` commands talk to it through ``main()`` in this process, so these tests use the
real clock, each under ``trio.fail_after`` (sockets and the autojump MockClock don't mix).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from pai_actors._cli import main
from pai_actors._cli.protocol_demo import run_protocol_demo
from pai_actors._server.application import ApplicationError, load_factory
from pai_actors.client import open_client


async def test_protocol_demo_shows_progress_approval_restart_and_result() -> None:
    lines: list[str] = []
    with trio.fail_after(30):
        statuses = await run_protocol_demo(lines.append)
    text = "\n".join(lines)
    assert statuses == ["completed"]
    assert "[live] drafting  [##########..........]  50%" in text
    assert "The pending action 'sendInvoice.approval' (id 'call_1.1')" in text
    assert "answer: {approved: boolean, note?: string}" in text
    assert "an invalid answer is rejected; the action stays pending" in text
    assert "finds the action still pending: 'call_1.1'" in text
    step_4 = text.index("4. alice approves")
    assert "[live] sending   [####################] 100%" in text[step_4:]
    assert "[live] run completed" in text[step_4:]
    assert "assistant: 'Done: the invoice to ACME is sent.'" in text


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """``pai-actors serve pai_actors.demo_app:factory`` on a free port; yields its URL."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pai_actors._cli",
            "serve",
            "pai_actors.demo_app:factory",
            "--port",
            "0",
            "--db",
            str(tmp_path / "served.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    found = re.search(r"on (ws://\S+) ", first)
    assert found, (first, process.stderr.read() if process.poll() is not None else "")
    try:
        yield found.group(1)
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
        assert process.returncode == 0, err
        assert "stopped; suspended calls stay in the database" in out


async def _pending_invoice(url: str) -> str:
    with trio.fail_after(20):
        async with open_client(url, token="alice-token") as client:
            thread = await client.create_thread()
            async with thread.watch() as updates:
                await thread.send("Please invoice Initech for 80")
                async for _ in updates:
                    if thread.pending_actions():
                        break
            return thread.pending_actions()[0].ref.action_id


async def test_serve_and_the_actions_inbox(
    server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    action_id = await _pending_invoice(server)
    capsys.readouterr()

    assert (
        await trio.to_thread.run_sync(
            main, ["actions", "list", "--url", server, "--token", "alice-token"]
        )
        == 0
    )
    listed = capsys.readouterr().out
    assert f"{action_id}  sendInvoice.approval" in listed
    assert '"customer": "Initech", "amount": 80.0' in listed
    assert "answer: {approved: boolean, note?: string}" in listed

    # another scope sees nothing, and cannot resolve it
    assert (
        await trio.to_thread.run_sync(
            main, ["actions", "list", "--url", server, "--token", "bob-token"]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == "no pending actions"
    code = await trio.to_thread.run_sync(
        main,
        [
            "actions",
            "submit",
            action_id,
            "--url",
            server,
            "--token",
            "bob-token",
            "--payload",
            '{"approved": true}',
        ],
    )
    assert code == 1
    assert f"no pending action {action_id!r} in your scope" in capsys.readouterr().err

    # a payload that does not match the resume schema is refused before it is sent
    code = await trio.to_thread.run_sync(
        main,
        [
            "actions",
            "submit",
            action_id,
            "--url",
            server,
            "--token",
            "alice-token",
            "--payload",
            '{"approved": "yes"}',
        ],
    )
    assert code == 1
    assert "the payload does not match the action's schema" in capsys.readouterr().err

    # prompted: a wrong answer is asked again, then the answer is sent
    answers = iter(["maybe", "y", "looks right"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    code = await trio.to_thread.run_sync(
        main, ["actions", "submit", action_id, "--url", server, "--token", "alice-token"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "'maybe' is not y/n" in out
    assert out.rstrip().endswith("submit: accepted")

    # resolved once: it is gone from the inbox
    assert (
        await trio.to_thread.run_sync(
            main, ["actions", "list", "--url", server, "--token", "alice-token", "--json"]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == "[]"


async def test_cancel_and_fail_from_the_inbox(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = await _pending_invoice(server)
    code = await trio.to_thread.run_sync(
        main,
        [
            "actions",
            "cancel",
            first,
            "--url",
            server,
            "--token",
            "alice-token",
            "--reason",
            "duplicate",
        ],
    )
    assert code == 0
    assert capsys.readouterr().out.rstrip().endswith("cancel: accepted")
    second = await _pending_invoice(server)
    code = await trio.to_thread.run_sync(
        main,
        [
            "actions",
            "fail",
            second,
            "--url",
            server,
            "--token",
            "alice-token",
            "--error",
            "customer unknown",
        ],
    )
    assert code == 0
    assert capsys.readouterr().out.rstrip().endswith("fail: accepted")


def test_a_file_that_is_not_a_database_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "notes.db"
    path.write_text("{}")
    assert main(["serve", "pai_actors.demo_app:factory", "--port", "0", "--db", str(path)]) == 1
    assert "file is not a database" in capsys.readouterr().err


def test_bad_input_exits_non_zero_with_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PAI_TOKEN", raising=False)
    assert main(["actions", "list", "--url", "ws://127.0.0.1:9/"]) == 1
    assert "no token: pass --token or set $PAI_TOKEN" in capsys.readouterr().err
    assert main(["actions", "list", "--url", "ws://127.0.0.1:9/", "--token", "t"]) == 1
    assert "cannot connect to ws://127.0.0.1:9/" in capsys.readouterr().err
    assert main(["actions", "list", "--url", "http://127.0.0.1:9/", "--token", "t"]) == 1
    assert "is not a WebSocket URL" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["actions", "fail", "call_1.1", "--token", "t"])  # --error is required
    assert usage.value.code == 2
    assert main(["serve", "no_such_module_xyz:factory", "--port", "0"]) == 1
    assert "no module 'no_such_module_xyz'" in capsys.readouterr().err
    assert main(["serve", "pai_actors.demo_app", "--port", "0"]) == 1
    assert "is not of the form module:factory" in capsys.readouterr().err
    assert main(["serve", "pai_actors.demo_app:nothing", "--port", "0"]) == 1
    assert "has no attribute 'nothing'" in capsys.readouterr().err
    assert main(["serve", "pai_actors.demo_app:TOKENS", "--port", "0"]) == 1
    assert "not a callable" in capsys.readouterr().err
    db = ["--port", "0", "--db"]
    assert main(["serve", "pai_actors.demo_app:factory", *db, "/nonexistent/dir/x.db"]) == 1
    assert "cannot use the database '/nonexistent/dir/x.db'" in capsys.readouterr().err
    assert main(["serve", "pai_actors.demo_app:factory", "--port", "70000"]) == 1
    assert "--port 70000 is not a port" in capsys.readouterr().err


def test_a_factory_must_return_an_application() -> None:
    assert callable(load_factory("pai_actors.demo_app:factory"))
    with pytest.raises(ApplicationError, match="returned dict, not an Application"):
        trio.run(_build_dict)


async def _build_dict() -> None:
    from pai_actors import MemoryStore
    from pai_actors._server.application import build_application

    await build_application(lambda store: {}, MemoryStore(), "x:y")


async def _pending_invoice_in(url: str) -> tuple[str, str]:
    with trio.fail_after(20):
        async with open_client(url, token="alice-token") as client:
            thread = await client.create_thread()
            async with thread.watch() as updates:
                await thread.send("Please invoice Hooli for 99")
                async for _ in updates:
                    if thread.pending_actions():
                        break
            return thread.thread_id, thread.pending_actions()[0].ref.action_id


async def test_an_action_id_two_threads_share_needs_thread(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first_thread, first = await _pending_invoice_in(server)
    second_thread, second = await _pending_invoice_in(server)
    assert first == second  # ids are per conversation
    capsys.readouterr()
    argv = ["actions", "cancel", first, "--url", server, "--token", "alice-token"]
    assert await trio.to_thread.run_sync(main, argv) == 1
    err = capsys.readouterr().err
    assert f"2 threads have a pending action {first!r} ({first_thread}, {second_thread})" in err
    assert "--thread THREAD_ID" in err
    assert await trio.to_thread.run_sync(main, [*argv, "--thread", second_thread]) == 0
    out = capsys.readouterr().out
    assert f"(thread {second_thread}," in out
    assert out.rstrip().endswith("cancel: accepted")
    assert await trio.to_thread.run_sync(main, argv) == 0  # only one is left now


async def test_threads_create_and_send_from_the_command_line(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    connection = ["--url", server, "--token", "alice-token"]
    create = ["threads", "create", *connection]
    assert await trio.to_thread.run_sync(main, create) == 0
    thread_id = capsys.readouterr().out.strip()
    send = ["threads", "send", thread_id, "Please invoice ACME for 5", *connection]
    assert await trio.to_thread.run_sync(main, send) == 0
    assert capsys.readouterr().out.strip().startswith("run_")
    with trio.fail_after(20):
        async with open_client(server, token="alice-token") as client:
            thread = await client.thread(thread_id)
            assert thread.get_state().messages[0].parts[0].text == "Please invoice ACME for 5"  # type: ignore[union-attr]

    assert await trio.to_thread.run_sync(main, [*create, "--agent", "nobody"]) == 1
    error = capsys.readouterr().err
    assert "'nobody'" in error
    assert error.startswith("pai-actors: error:")
