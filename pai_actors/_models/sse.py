"""Server-sent events, sans-IO: :class:`SSEDecoder` turns bytes into ``(event, data)`` pairs.

The HTML Living Standard's event stream format, as the providers send it: lines end with
``\\r\\n``, ``\\n`` or ``\\r``; ``event:`` names the event, ``data:`` lines (joined by
``\\n``) are its data, a blank line dispatches it; ``id:``, ``retry:`` and comments (``:``)
are ignored. The adapters read the body themselves, rather than through the SDKs' stream
iterators, so that every async generator of a step is closed when the step ends (trio warns
of one that is garbage collected unfinished: the SDKs' iterators leave theirs so).
"""

from __future__ import annotations

import codecs
import re


class SSEDecoder:
    """Feed it the body's bytes as they arrive; it returns the complete events."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")()
        self._pending = ""
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        """The events ``chunk`` completes, in order."""
        text = self._pending + self._text.decode(chunk)
        lines = _lines(text)
        self._pending = ""
        if lines and not lines[-1].endswith(("\n", "\r")):
            self._pending = lines.pop()
        elif lines and lines[-1].endswith("\r"):  # a "\r\n" may be split across chunks
            self._pending = lines.pop()
        events: list[tuple[str | None, str]] = []
        for line in lines:
            self._line(line.rstrip("\r\n"), events)
        return events

    def flush(self) -> list[tuple[str | None, str]]:
        """The last event, if the body ended without its blank line."""
        events: list[tuple[str | None, str]] = []
        rest = self._pending + self._text.decode(b"", final=True)
        self._pending = ""
        for line in _lines(rest):
            self._line(line.rstrip("\r\n"), events)
        self._line("", events)
        return events

    def _line(self, line: str, events: list[tuple[str | None, str]]) -> None:
        if not line:
            if self._data:
                events.append((self._event, "\n".join(self._data)))
            self._event, self._data = None, []
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)


_LINE_END = re.compile(r"(?<=\r\n)|(?<=\r)(?!\n)|(?<=\n)")


def _lines(text: str) -> list[str]:
    """``text`` split after each SSE line ending (``\r\n``, ``\r`` or ``\n``), the endings
    kept. Not ``str.splitlines``: it also splits at U+2028, U+2029, U+0085 and others, which
    JSON holds unescaped inside strings (a model's text may contain them)."""
    return [line for line in _LINE_END.split(text) if line]
