"""``pai-actors demo``: a server and a client, then the supervision tree underneath.

The first half (``_cli.protocol_demo``) serves a billing agent over the protocol and plays a
client: the tool's live progress, its pending approval, a server restart the client rides
out, the approval and the result. The second half shows the foundation: a
tree is spawned, a child crashes and its supervisor restarts it (with ``rest_for_one``, its
younger sibling too), and the whole tree is cancelled and drawn with each exit reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import trio

from supervisors import (
    ActorExited,
    ExitRecord,
    Mailbox,
    Reply,
    Supervisor,
    open_supervisor,
)
from supervisors.testing import ExitLog

from .console import Console


@dataclass(frozen=True)
class Parse:
    text: str
    reply: Reply[int]


@dataclass(frozen=True)
class GetPool:
    reply: Reply[Supervisor]


async def idle(mailbox: Mailbox[object]) -> None:
    """An actor that serves no one; it waits for messages until stopped or cancelled."""
    async for _ in mailbox:
        pass


async def parser(mailbox: Mailbox[Parse]) -> None:
    """Parses integers; malformed input crashes it (its supervisor restarts it)."""
    async for message in mailbox:
        message.reply.send(int(message.text))


async def workers(mailbox: Mailbox[GetPool]) -> None:
    """Owns a nested ``rest_for_one`` pool and hands it out on request."""
    async with open_supervisor(name="pool", strategy="rest_for_one") as pool:
        pool.spawn(idle, name="fetcher")
        pool.spawn(parser, name="parser")
        pool.spawn(idle, name="writer")
        async for message in mailbox:
            message.reply.send(pool)


async def run_demo(say: Callable[[str], None] = print) -> str:
    """Run the demo, narrating through ``say``; return the final tree as text."""

    def on_exit(record: ExitRecord) -> None:
        say(f"  exit  {record.actor.path}: {record.reason}")

    async with open_supervisor(name="app", strategy="one_for_one") as app:
        log = ExitLog.attach(app)
        app.add_exit_listener(on_exit)
        app.spawn(idle, name="cache")
        workers_ref = app.spawn(workers, name="workers")
        pool = await workers_ref.ask(GetPool)
        say("1. spawned the tree:")
        say(_indent(app.snapshot().render()))

        say("\n2. 'parser' gets malformed input and crashes:")
        old_writer = pool.child("writer")
        try:
            await pool.child("parser").ask(lambda reply: Parse("forty-two", reply))
        except ActorExited as exc:
            say(f"  the ask raised ActorExited: {exc}")
        await old_writer.wait_exit()
        answer: int = await pool.child("parser").ask(lambda reply: Parse("42", reply))
        say("  rest_for_one restarted 'parser' and the younger 'writer'; the new parser")
        say(f"  answers Parse('42') with {answer}:")
        say(_indent(app.snapshot().render()))

        say("\n3. cancelling the root with reason 'demo finished':")
        app.cancel("demo finished")
    tree = log.render()
    say("\n4. every actor's exit reason (children exit before their parents):")
    say(_indent(tree))
    return tree


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


async def run_both(say: Callable[[str], None] | None = None) -> None:
    from .protocol_demo import run_protocol_demo

    console = Console()
    say = console.say if say is None else say
    say("== A server, a client, and a tool call that waits for approval ==\n")
    await run_protocol_demo(say, console.progress if say == console.say else None)
    say("\n== The supervision tree underneath ==\n")
    await run_demo(say)


def main() -> None:
    trio.run(run_both)
