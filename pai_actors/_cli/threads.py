"""``pai-actors threads``: create a thread on a running server (with the agent that runs it)
and send it a message, through the Python client."""

from __future__ import annotations

from collections.abc import Callable

from .._client.client import open_client


async def create_thread(
    url: str, token: str, agent_id: str | None, *, say: Callable[[str], object]
) -> None:
    """Create a thread in the token's scope, run by ``agent_id`` (default: the server's
    first agent), and print its id."""
    async with open_client(url, token=token, reconnect=False) as client:
        thread = await client.create_thread(agent_id=agent_id)
        say(thread.thread_id)


async def send(
    url: str, token: str, thread_id: str, text: str, *, say: Callable[[str], object]
) -> None:
    """Send ``text`` to the thread and print the id of the run it starts."""
    async with open_client(url, token=token, reconnect=False) as client:
        thread = await client.thread(thread_id)
        say(await thread.send(text))
