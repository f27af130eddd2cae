"""The terminal the demos write to: whole lines, a progress line redrawn in place on a TTY,
and text written as it streams in (a line left open until the next line ends it)."""

from __future__ import annotations

import sys
from typing import Literal


class Console:
    """Lines for the terminal; on a TTY a progress line is redrawn in place.

    Concurrency contract: one writer at a time (the demos write from their trio task, and
    from a worker thread only while that task waits for it)."""

    def __init__(self) -> None:
        self._tty = sys.stdout.isatty()
        # what is on the screen's last line, without its newline: a progress line, or text
        self._open: Literal["progress", "text"] | None = None

    def say(self, line: str) -> None:
        """Write ``line`` on a line of its own."""
        if self._open is not None:
            sys.stdout.write("\n")
            self._open = None
        print(line, flush=True)

    def progress(self, line: str) -> None:
        """Write ``line``, which replaces the previous progress line on a TTY."""
        if not self._tty:
            self.say(line)
            return
        if self._open == "text":
            sys.stdout.write("\n")
        sys.stdout.write("\r" + line)
        sys.stdout.flush()
        self._open = "progress"

    def write(self, text: str) -> None:
        """Write ``text`` where the open text line ends (a new line after a progress line);
        a line it leaves open is ended by the next :meth:`say`."""
        if not text:
            return
        if self._open == "progress":
            sys.stdout.write("\n")
        sys.stdout.write(text)
        sys.stdout.flush()
        self._open = None if text.endswith("\n") else "text"
