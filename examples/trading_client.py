"""A typed client of the trading desk: watch a thread live and approve what it waits for.

It serves ``trading_desk``'s runtime in-process (port 0: a free port) and connects to it
with ``pai_actors.client``, as a UI backend would connect to ``pai-actors serve``. Each
update a watch yields is one of the classes of :data:`pai_actors.ThreadUpdate`, or a
:class:`~pai_actors.client.ThreadResynced`; ``update.type == "..."`` tells them apart and
narrows the type, so ``show`` reads each one's own fields under ``mypy --strict``.
Run it: ``python examples/trading_client.py``.
"""

from __future__ import annotations

import trio
from trading_desk import open_runtime

from pai_actors import TextPart, ThreadUpdate
from pai_actors.client import ClientThread, ThreadResynced, open_client
from pai_actors.server import Identity, open_server

TOKENS = {"desk-token": Identity(scope_key="acme", user_key="dana")}


def authenticate(token: str) -> Identity | None:
    return TOKENS.get(token)


def show(update: ThreadUpdate | ThreadResynced) -> str:
    """One line per update."""
    if update.type == "run-status":
        return f"run {update.run.run_id} {update.run.status}"
    if update.type == "tool-part-updated":
        waiting = update.part.pending_suspension is not None
        return f"{update.part.type} {update.part.state} waiting={waiting}"
    if update.type == "tool-data":
        return f"data {update.channel} {update.item.value}"
    if update.type == "resynced":
        return f"resynced: {len(update.state.messages)} messages"
    return f"{update.type} {update.message.role}"  # message-appended or message-replaced


async def approve_waiting_order(thread: ClientThread) -> None:
    """Find the part that waits in the thread's local state, and approve it."""
    message = thread.get_state().messages[-1]
    for part in message.tool_parts:  # its ToolParts, in order
        action = thread.get_pending_action(message, part)
        if action is not None:
            print("approving", part.tool_call_id, action.input)
            print((await action.submit({"approved": True, "note": "within budget"})).status)


async def main() -> None:
    async with (
        open_runtime() as rt,
        open_server(rt, authenticate=authenticate) as server,
        open_client(server.url, token="desk-token") as client,
    ):
        thread = await client.create_thread()
        async with thread.watch() as updates:
            await thread.send("buy 10 ACME")
            async for update in updates:
                print(show(update))
                if update.type == "run-status" and update.run.status == "waiting":
                    await approve_waiting_order(thread)
                elif update.type == "run-status" and update.run.status == "completed":
                    break
        answer = thread.get_state().messages[-1].parts[-1]
        print(answer.text if isinstance(answer, TextPart) else answer)


if __name__ == "__main__":
    trio.run(main)
