"""The ``pai-actors`` command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pai-actors",
        description="pai_actors: an actor runtime on trio for LLM tools that suspend and resume.",
    )
    parser.add_argument("--version", action="version", version=f"pai-actors {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser(
        "demo",
        help="a tool call that waits for approval, then the supervision tree underneath",
        description="Run a tool call that suspends until a (scripted) person approves it, "
        "then spawn a supervision tree, crash and restart a child, cancel the tree, and print "
        "each actor's exit reason.",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from ._demo import main as demo

        demo()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
