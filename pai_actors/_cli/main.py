"""The ``pai-actors`` command line: ``demo``, ``serve`` and ``actions``.

Every command prints a clear error and exits non-zero on bad input: 2 for a usage error
(argparse's convention), 1 for anything else that went wrong.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Sequence

import trio

from .. import __version__

DEFAULT_URL = "ws://127.0.0.1:8765/"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pai-actors",
        description="pai_actors: an actor runtime on trio for LLM tools that suspend and resume.",
    )
    parser.add_argument("--version", action="version", version=f"pai-actors {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = commands.add_parser(
        "demo",
        help="a server and a client: a tool's live progress, its approval, a restart, the result",
        description="Serve a billing agent over the protocol (SQLite), connect a client, and "
        "show the flow live: the tool's progress, the pending approval, a server restart the "
        "client rides out, the approval and the result; then the supervision tree underneath. "
        "A scripted model plays the LLM, offline. With --model, a real model does: the same "
        "agent and tool, the conversation printed as it goes, and you answer the approvals.",
    )
    demo.add_argument(
        "--model",
        metavar="SPEC",
        help="run the agent on a real model: openai:<model> (also any OpenAI-compatible "
        "server, with --base-url), openai-responses:<model> or anthropic:<model>; the key "
        "comes from $OPENAI_API_KEY or $ANTHROPIC_API_KEY",
    )
    demo.add_argument(
        "--base-url",
        metavar="URL",
        help="the model's server, e.g. http://localhost:11434/v1 for Ollama (default: "
        "$OPENAI_BASE_URL or $ANTHROPIC_BASE_URL, else the provider's)",
    )
    demo.add_argument(
        "--prompt",
        metavar="TEXT",
        help="what alice asks the real model (default: an invoice for ACME, as in the "
        "scripted demo)",
    )
    serve = commands.add_parser(
        "serve",
        help="serve an application's runtime over the protocol (WebSocket)",
        description="Serve the runtime that module:factory builds: factory(store) returns an "
        "Application(runtime=..., authenticate=...). Try pai_actors.demo_app:factory.",
    )
    serve.add_argument("factory", metavar="module:factory")
    serve.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free)")
    serve.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="port of the HTTP endpoint for the AI SDK's useChat (the UI message stream "
        "protocol; default: --port + 1, any free one with --port 0; 0: any free)",
    )
    serve.add_argument(
        "--no-http", action="store_true", help="serve the WebSocket protocol only, no HTTP"
    )
    serve.add_argument(
        "--db",
        default="pai-actors.db",
        help="a SQLite file (default pai-actors.db), or a postgresql:// URL",
    )
    serve.add_argument(
        "--node-id",
        help="this process's name among several serving one PostgreSQL database (each a "
        "different one): it owns the threads it drives by lease, and takes over the runs of "
        "a node that stopped",
    )
    serve.add_argument(
        "--lease",
        type=float,
        default=10.0,
        help="with --node-id: seconds a node's lease of a thread outlives its last renewal "
        "(default 10): how soon a stopped node's runs are taken over",
    )
    serve.add_argument(
        "--durability",
        choices=("normal", "full"),
        default="normal",
        help="normal: survives a process crash; full: also a power loss",
    )
    actions = commands.add_parser(
        "actions",
        help="list and resolve pending actions on a server (a terminal inbox)",
        description="List pending actions of your scope on a running server, and submit, "
        "cancel or fail them. submit asks for the answer and checks it against the action's "
        "schema before sending.",
    )
    verbs = actions.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name, text in (
        ("list", "list the pending actions of your scope"),
        ("submit", "answer a pending action (asks for the answer unless --payload)"),
        ("cancel", "cancel a pending action: its call ends cancelled"),
        ("fail", "fail a pending action: its call ends in an error"),
    ):
        verb = verbs.add_parser(name, help=text, description=text)
        _connection_options(verb)
        if name == "list":
            verb.add_argument("--thread", metavar="THREAD_ID", help="only this thread's actions")
            verb.add_argument("--json", action="store_true", help="print JSON")
        else:
            verb.add_argument("action_id", metavar="ACTION_ID", help="as `actions list` shows")
            verb.add_argument(
                "--thread",
                metavar="THREAD_ID",
                help="the action's thread (needed when several threads share the id)",
            )
        if name == "submit":
            verb.add_argument("--payload", help="the answer as JSON (else asked for)")
        elif name == "cancel":
            verb.add_argument("--reason", help="why (recorded on the call)")
        elif name == "fail":
            verb.add_argument("--error", required=True, help="the call's errorText")
    threads = commands.add_parser(
        "threads",
        help="create a thread on a server, with the agent that runs it, and send it text",
        description="Create a thread of your scope on a running server (--agent picks the "
        "agent that runs it; default: the server's first) and send it a message.",
    )
    thread_verbs = threads.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name, text in (
        ("create", "create a thread and print its id"),
        ("send", "send a thread a message and print the id of the run it starts"),
    ):
        verb = thread_verbs.add_parser(name, help=text, description=text)
        _connection_options(verb)
        if name == "create":
            verb.add_argument("--agent", metavar="AGENT_ID", help="the agent that runs it")
        else:
            verb.add_argument("thread_id", metavar="THREAD_ID", help="as `threads create` printed")
            verb.add_argument("text", metavar="TEXT", help="the user's message")
    return parser


def _connection_options(verb: argparse.ArgumentParser) -> None:
    verb.add_argument(
        "--url", default=os.environ.get("PAI_URL", DEFAULT_URL), help="server URL ($PAI_URL)"
    )
    verb.add_argument(
        "--token", default=os.environ.get("PAI_TOKEN"), help="bearer token ($PAI_TOKEN)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            return _demo(parser, args)
        if args.command == "serve":
            return _serve(args)
        if args.command == "threads":
            return _threads(args)
        return _actions(parser, args)
    except KeyboardInterrupt:
        return 130


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a nursery wrapped (nested groups of one unwrapped), else the group."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _fail(message: str) -> int:
    print(f"pai-actors: error: {message}", file=sys.stderr)
    return 1


def _demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.model is None:
        for option, value in (("--base-url", args.base_url), ("--prompt", args.prompt)):
            if value is not None:
                parser.error(f"{option} goes with --model SPEC (the scripted demo takes neither)")
        from .demo import main as demo

        demo()
        return 0
    from .._core.errors import DefinitionError
    from ..models import model_from_spec
    from .model_demo import main as model_demo

    options = {} if args.base_url is None else {"base_url": args.base_url}
    try:
        model = model_from_spec(args.model, **options)
    except DefinitionError as exc:
        parser.error(f"--model {args.model!r}: {exc}")
    try:
        try:
            status = model_demo(model, args.prompt)
        except BaseExceptionGroup as group:
            raise _single(group) from None
    except EOFError:
        return _fail("no answer (end of input): the demo asks you to answer each approval")
    return 0 if status == "completed" else 1


def _serve(args: argparse.Namespace) -> int:
    from .._core.errors import StoreError
    from .._server.application import ApplicationError
    from .serve import serve

    if not 0 <= args.port <= 65535:
        return _fail(f"--port {args.port} is not a port; use 0..65535")
    if not args.lease > 0:
        return _fail(f"--lease {args.lease} is no lease; give seconds > 0 (default 10)")
    http_port = args.http_port
    if http_port is None:
        http_port = args.port + 1 if 0 < args.port < 65535 else 0
    if not 0 <= http_port <= 65535:
        return _fail(f"--http-port {http_port} is not a port; use 0..65535")
    try:
        try:
            trio.run(
                lambda: serve(
                    args.factory,
                    host=args.host,
                    port=args.port,
                    http_port=None if args.no_http else http_port,
                    db=args.db,
                    durability=args.durability,
                    say=print,
                    node_id=args.node_id,
                    lease=args.lease,
                )
            )
        except BaseExceptionGroup as group:
            raise _single(group) from None
    except ApplicationError as exc:
        return _fail(str(exc))
    except sqlite3.Error as exc:
        return _fail(f"cannot use the database {args.db!r}: {exc}; pass --db with a SQLite file")
    except StoreError as exc:  # PostgreSQL unreachable, a refused schema (says what to do)
        return _fail(str(exc))
    except ImportError as exc:  # --db postgresql://... without the postgres extra
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}")
    return 0


def _threads(args: argparse.Namespace) -> int:
    from .threads import create_thread, send

    async def run() -> bool:
        if args.verb == "create":
            await create_thread(args.url, args.token, args.agent, say=print)
        else:
            await send(args.url, args.token, args.thread_id, args.text, say=print)
        return True

    return _connected(args, run)


def _actions(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .actions import list_actions, resolve

    async def run() -> bool:
        if args.verb == "list":
            await list_actions(args.url, args.token, args.thread, as_json=args.json, say=print)
            return True
        return await resolve(
            args.url,
            args.token,
            args.verb,
            args.action_id,
            thread_id=args.thread,
            payload=getattr(args, "payload", None),
            reason=getattr(args, "reason", None),
            error=getattr(args, "error", None),
            ask=input,
            say=print,
        )

    return _connected(args, run)


def _connected(args: argparse.Namespace, run: Callable[[], Awaitable[bool]]) -> int:
    """Run a command that connects to a server (``--url``, ``--token``); its errors as the
    command's, exit 0 when ``run`` returns true."""
    from trio_websocket import HandshakeError

    from .._client.errors import AuthenticationFailed, ClientError
    from .actions import CommandError

    if not args.token:
        return _fail("no token: pass --token or set $PAI_TOKEN")
    if not args.url.startswith(("ws://", "wss://")):
        return _fail(f"--url {args.url!r} is not a WebSocket URL; write ws://host:port/")
    try:
        try:
            accepted = trio.run(run)
        except BaseExceptionGroup as group:  # raised inside the client's nursery
            raise _single(group) from None
    except CommandError as exc:
        return _fail(str(exc))
    except AuthenticationFailed:
        return _fail(f"the server at {args.url} refused the token; check --token or $PAI_TOKEN")
    except ClientError as exc:
        return _fail(str(exc))
    except (OSError, HandshakeError) as exc:
        cause = exc.__cause__ or exc.__context__
        reason = str(exc) or (str(cause) if cause is not None else "") or type(exc).__name__
        return _fail(f"cannot connect to {args.url} ({reason}); is `pai-actors serve` running?")
    except EOFError:
        return _fail("no answer (end of input); pass --payload to answer without a prompt")
    return 0 if accepted else 1


if __name__ == "__main__":
    raise SystemExit(main())
