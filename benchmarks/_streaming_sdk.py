"""The baseline side of ``stream_cpu_per_token``: the ``openai`` SDK alone reading the stream.

The plain way a user reads a streamed answer: one ``openai.AsyncOpenAI(base_url=...)`` at
its defaults, ``await client.chat.completions.create(..., stream=True,
stream_options={"include_usage": True})`` and ``async for chunk in stream`` inside
``async with stream``, keeping every chunk's ``choices[0].delta.content``; under trio, as the
runtime runs (the SDK runs on anyio). The process imports the SDK and trio, never
``pai_actors``.
"""

from __future__ import annotations

import time

import trio
from openai import AsyncOpenAI

from ._sse_server import answer

MODEL = "gpt-4o-mini"
WARM_UP_TOKENS = 20
"""The answer read once, untimed, before the timed one (both sides do the same)."""


async def _read(client: AsyncOpenAI, n: int) -> str:
    parts: list[str] = []
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": str(n)}],
        stream=True,
        stream_options={"include_usage": True},
    )
    async with stream:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
    if len(parts) != n:
        raise AssertionError(f"asked for {n} tokens, read {len(parts)}")
    return "".join(parts)


def read_stream(url: str, n: int) -> float:
    """Process CPU seconds per token to read an answer of ``n`` tokens from ``url``, after
    reading one of :data:`WARM_UP_TOKENS` untimed."""

    async def main() -> float:
        client = AsyncOpenAI(base_url=url, api_key="none")
        async with client:
            await _read(client, WARM_UP_TOKENS)
            start = time.process_time()
            text = await _read(client, n)
            cpu = time.process_time() - start
        if text != answer(n):
            raise AssertionError("the stream's text is not the server's answer")
        return cpu / n

    return trio.run(main)
