"""A loopback server that streams an OpenAI Chat Completions answer, for the streaming
figures (:mod:`._streaming`).

Standard library only (``http.server``), bound to 127.0.0.1 on port 0, serving from a daemon
thread of the process that runs the figure (``python -m benchmarks``): every measured side
is a fresh process of its own (:func:`._harness.fresh`), so none of the server's CPU is
charged to a side, and both sides read the same stream from the same server.

Every ``POST`` is answered as OpenAI answers ``POST /v1/chat/completions`` with
``stream: true`` and ``stream_options: {"include_usage": true}``: ``200``,
``text/event-stream``, chunked, one ``chat.completion.chunk`` event per HTTP chunk in the
shape of ``tests/models/fixtures/openai_chat_text.sse`` (recorded from OpenAI): a first
chunk with the assistant role and empty content, ``n`` chunks whose content is one short
word each (:func:`token`), a chunk with ``finish_reason: "stop"``, a chunk with no choices
and the usage, then ``data: [DONE]``. ``n`` is the request's last message content, an
integer (the prompt says how many tokens to stream). Each event is one ``send`` (Nagle
off), ``interval`` seconds after the previous one (``time.sleep``): with an interval longer
than a client's work per event every token reaches the client on its own, as a model's
tokens do; with ``0`` the events go as fast as the client takes them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
_ID = "chatcmpl-bench"
_CREATED = 1782321910
MODEL = "gpt-4o-mini-2024-07-18"


def token(i: int) -> str:
    """The ``i``-th streamed token: a space and a short word."""
    return " " + _WORDS[i % len(_WORDS)]


def answer(n: int) -> str:
    """The whole text of an answer of ``n`` tokens."""
    return "".join(token(i) for i in range(n))


def _chunk(delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    return {
        "id": _ID,
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": MODEL,
        "service_tier": "default",
        "system_fingerprint": "fp_59e007eafa",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        "usage": None,
        "obfuscation": "x",
    }


def events(n: int) -> list[bytes]:
    """The server-sent events of an answer of ``n`` tokens, each with its blank line."""
    chunks = [_chunk({"role": "assistant", "content": "", "refusal": None}, None)]
    chunks += [_chunk({"content": token(i)}, None) for i in range(n)]
    chunks.append(_chunk({}, "stop"))
    usage = _chunk({}, None)
    usage["choices"] = []
    usage["usage"] = {
        "prompt_tokens": 20,
        "completion_tokens": n,
        "total_tokens": 20 + n,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    chunks.append(usage)
    lines = [f"data: {json.dumps(c, separators=(',', ':'))}\n\n" for c in chunks]
    lines.append("data: [DONE]\n\n")
    return [line.encode() for line in lines]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client's steps reuse its connection
    disable_nagle_algorithm = True  # each event leaves at once, on its own
    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        n = int(body["messages"][-1]["content"])
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for i, event in enumerate(events(n)):
            if i and self.server.interval:
                time.sleep(self.server.interval)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per request on stderr


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    interval = 0.0


@contextmanager
def serving(interval: float) -> Iterator[str]:
    """Run the server for the ``with`` block; yields its base URL (``http://127.0.0.1:PORT/v1``)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.interval = interval
    thread = threading.Thread(target=server.serve_forever, name="bench-sse-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
