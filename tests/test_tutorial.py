"""docs/tutorial.md, performed: the files it saves, the commands it runs, what they print.

The test saves the page's files (each block after "Save this as `NAME`:"), then runs the
page's commands as real processes in a temporary directory: ``pai-actors serve``,
``python ask.py ...`` and ``pai-actors actions ...``. What each prints is compared with the
page's ``console`` blocks, where ``...`` stands for an id. The page serves on the default
port, 8765; here the first server listens on port 0 (it prints the port it got) and the
second on that same port, so that ``ask.py`` reconnects to it as it does in the tutorial.

Every wait is bounded: a process's output is read line by line by a thread into a queue,
and taken from the queue with a timeout; every process is waited for with a timeout, and
killed if the test ends first. Nothing sleeps.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"
TIMEOUT = 60  # seconds for any one wait: a process starting, a line appearing, an exit
PAGE_PORT = "8765"
HTTP_PAGE_PORT = "8766"  # the page's HTTP endpoint (the WebSocket port + 1)

SERVE = "pai-actors serve deployer:factory --db deploy.db"
ASK_WEB = 'python ask.py "deploy web 2.1"'
ASK_API = 'python ask.py "deploy api 3.0"'
LIST = "pai-actors actions list"
SUBMIT = "pai-actors actions submit call_1.approval"
DENY = (
    "pai-actors actions submit call_1.approval "
    """--payload '{"approved": false, "reason": "not on a Friday"}'"""
)
TYPED = [  # what the reader types at submit's prompts
    ("approved [y/n]: ", "y"),
    ("reason [text, Enter to skip]: ", "checked the release notes"),
]


def _files(page: str) -> dict[str, str]:
    found = re.finditer(
        r"Save this as `([\w.]+)`:\n\n```(?:python|text)\n(.*?)^```$", page, re.M | re.S
    )
    return {match.group(1): match.group(2) for match in found}


def _sessions(page: str) -> list[tuple[str | None, list[str]]]:
    """Each command of the page's console blocks with the lines shown after it, in order;
    ``None`` for the lines of a block that starts with output (another terminal's)."""
    sessions: list[tuple[str | None, list[str]]] = []
    for block in re.findall(r"^```console\n(.*?)^```$", page, re.M | re.S):
        command: str | None = None
        output: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None or output:
                    sessions.append((command, output))
                command, output = line[2:], []
            else:
                output.append(line)
        sessions.append((command, output))
    return sessions


def _shown(page: str, command: str | None, *, first_line: str | None = None) -> list[list[str]]:
    """What the page shows after ``command`` (or after no command, starting with
    ``first_line``), each time it shows it."""
    shown = [
        output
        for found, output in _sessions(page)
        if found == command and (first_line is None or output[:1] == [first_line])
    ]
    assert shown, f"docs/tutorial.md no longer shows {command or first_line!r}"
    return shown


def _matches(shown: list[str], printed: list[str]) -> bool:
    """Whether the lines printed are the lines shown, where ``...`` stands for an id."""
    if len(shown) != len(printed):
        return False
    patterns = [re.escape(line).replace(re.escape("..."), r"\S+") for line in shown]
    return all(re.fullmatch(p, line) for p, line in zip(patterns, printed, strict=True))


class _Process:
    """A process of the tutorial, its output (stdout and stderr) read line by line."""

    def __init__(self, argv: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, done: Callable[[str], bool]) -> list[str]:
        """Read until a line for which ``done`` is true; return every line so far."""
        while True:
            try:
                line = self._queue.get(timeout=TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"no line came in {TIMEOUT} s; so far: {self.lines}") from None
            if line is None:
                code = self.process.wait(timeout=TIMEOUT)
                raise AssertionError(f"the process exited ({code}); it printed: {self.lines}")
            self.lines.append(line)
            if done(line):
                return self.lines

    def finish(self) -> list[str]:
        """Wait for the process to exit (0), and return everything it printed."""
        code = self.process.wait(timeout=TIMEOUT)
        self._reader.join(timeout=TIMEOUT)
        while (line := self._queue.get_nowait()) is not None:
            self.lines.append(line)
        assert code == 0, self.lines
        return self.lines

    def interrupt(self) -> list[str]:
        """Ctrl-C, as the reader presses it in the server's terminal."""
        self.process.send_signal(signal.SIGINT)
        return self.finish()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=TIMEOUT)
        self._reader.join(timeout=TIMEOUT)
        assert self.process.stdout is not None
        self.process.stdout.close()


def _argv(command: str) -> list[str]:
    argv = shlex.split(command)
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    assert argv[0] == "pai-actors", command
    script = Path(sys.executable).with_name("pai-actors")  # the installed console script
    prefix = [str(script)] if script.exists() else [sys.executable, "-m", "pai_actors._cli"]
    return [*prefix, *argv[1:]]


@pytest.fixture
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., _Process]]:
    """Start a process in ``tmp_path``; every one started is killed if the test ends first."""
    started: list[_Process] = []

    def start_process(argv: list[str], env: dict[str, str]) -> _Process:
        started.append(_Process(argv, cwd=tmp_path, env=env))
        return started[-1]

    try:
        yield start_process
    finally:
        for process in started:
            process.close()


def test_the_files_are_the_pages_and_the_app_only_defines_things(page: str) -> None:
    files = _files(page)
    assert sorted(files) == ["ask.py", "deployer.py"]
    assert "def factory(store):" in files["deployer.py"]
    assert "needs_approval=True" in files["deployer.py"]
    # test_docs runs deployer.py as a program; ask.py needs a server, so it is a text block
    assert "```python\n" + files["deployer.py"] in page
    assert "```text\n" + files["ask.py"] in page


def test_the_tutorial_runs_as_the_page_shows(
    page: str, tmp_path: Path, start: Callable[..., _Process]
) -> None:
    for name, source in _files(page).items():
        (tmp_path / name).write_text(source, encoding="utf-8")
    assert "$ export PAI_TOKEN=dev-token\n" in page
    env = {**os.environ, "PAI_TOKEN": "dev-token", "PYTHONUNBUFFERED": "1"}

    def run(command: str, *, typed: str = "") -> list[str]:
        result = subprocess.run(
            _argv(command),
            cwd=tmp_path,
            env=env,
            input=typed,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, (command, result.stdout, result.stderr)
        return result.stdout.splitlines()

    def by_port(lines: list[str], port: str) -> list[str]:
        return [line.replace(f":{PAGE_PORT}/", f":{port}/") for line in lines]

    def http_lines(server: _Process, shown: str, inbox_shown: str) -> None:
        """The second and third lines: the HTTP endpoint and the inbox, on a free port
        (``--http-port 0``)."""
        line = server.expect(lambda line: line.startswith("the AI SDK"))[-1]
        found = re.search(r":(\d+)/api/chat$", line)
        assert found, line
        assert line == shown.replace(f":{HTTP_PAGE_PORT}/", f":{found.group(1)}/")
        inbox = server.expect(lambda line: line.startswith("the inbox"))[-1]
        assert inbox == inbox_shown.replace(f":{HTTP_PAGE_PORT}/", f":{found.group(1)}/")

    # 3. serve it (on free ports)
    [serving, endpoint, inbox] = _shown(page, SERVE)[0]
    first = start([*_argv(SERVE), "--port", "0", "--http-port", "0"], env)
    [line] = first.expect(lambda line: line.startswith("serving "))
    found = re.search(r" on (ws://127\.0\.0\.1:(\d+)/) ", line)
    assert found, line
    url, port = found.groups()
    assert line == by_port([serving], port)[0]
    http_lines(first, endpoint, inbox)
    env["PAI_URL"] = url  # for ask.py and the actions commands: the page's port is the default

    # 4. a message, and a pending approval
    ask_web = _shown(page, ASK_WEB)
    ask = start(_argv(ASK_WEB), env)
    printed = ask.expect(lambda line: line.startswith("waiting for approval:"))
    assert printed == ask_web[0]

    # 5. stop the server, and start it again on the same file and port
    [stop] = _shown(page, None, first_line="^C")
    assert first.interrupt()[3:] == stop[1:]  # "^C" is the terminal's echo
    second = start([*_argv(SERVE), "--port", port, "--http-port", "0"], env)
    [line] = second.expect(lambda line: line.startswith("serving "))
    assert line == by_port([serving], port)[0]
    http_lines(second, endpoint, inbox)
    ask.expect(lambda line: line == "reconnected")
    printed = ask.expect(lambda line: line.startswith("waiting for approval:"))
    assert printed == ask_web[1]

    # 6. approve the call from the terminal; the run finishes
    listed, nothing = _shown(page, LIST)
    printed = run(LIST)
    assert _matches(listed, printed), printed
    [submitted] = _shown(page, SUBMIT)
    at_a_pipe = "\n".join(submitted)
    for prompt, typed in TYPED:  # the terminal echoes what the reader types; a pipe does not
        assert f"{prompt}{typed}" in submitted
        at_a_pipe = at_a_pipe.replace(f"{prompt}{typed}\n", prompt)
    printed = run(SUBMIT, typed="".join(f"{typed}\n" for _, typed in TYPED))
    at_a_pipe = at_a_pipe.splitlines()
    assert _matches(at_a_pipe, printed), printed
    assert ask.finish() == ask_web[-1]
    assert run(LIST) == nothing

    # 7. say no
    ask_api = _shown(page, ASK_API)
    ask = start(_argv(ASK_API), env)
    assert ask.expect(lambda line: line.startswith("waiting for approval:")) == ask_api[0]
    [denied] = _shown(page, DENY)
    printed = run(DENY)
    assert _matches(denied, printed), printed
    assert ask.finish() == ask_api[-1]

    # the second server ran the approved call, and not the denied one
    [deploying] = _shown(page, None, first_line="deploying web 2.1")
    printed = second.interrupt()
    assert printed[3:] == deploying + stop[1:], printed
