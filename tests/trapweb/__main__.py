"""Command line: ``python -m tests.trapweb {serve,seeds} --seed S --per-kind N``.

``serve`` runs the simulated web's server (``tests.simweb.server.serve``) on a
``TrapWeb``: it prints ``READY 127.0.0.1:PORT`` once listening and serves until
SIGTERM/SIGINT. ``seeds`` prints each host's root URL, one per line.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import signal
import sys
from collections.abc import Sequence

from tests.simweb.server import serve

from .model import TrapWeb


def add_web_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that define a ``TrapWeb`` (shared by both sub-commands)."""
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-kind", type=int, default=2, help="hosts of each kind")
    parser.add_argument("--today", type=dt.date.fromisoformat, default=None,
                        help="YYYY-MM-DD that places the calendar trap (default: UTC today); "
                             "a test passes its own so that server and test agree at midnight")


def web_from_args(args: argparse.Namespace) -> TrapWeb:
    return TrapWeb(seed=args.seed, per_kind=args.per_kind, today=args.today)


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; exit 0 after a clean shutdown."""
    web = web_from_args(args)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        # The server only calls resource() and reads seed, n_hosts and mix:
        # TrapWeb has them all, so it stands in for a simweb Web.
        await serve(web, stop, port=args.port)  # type: ignore[arg-type]

    asyncio.run(run())
    return 0


def cmd_seeds(args: argparse.Namespace) -> int:
    for url in web_from_args(args).seed_urls():
        print(url)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.trapweb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="run the trap web (HTTP proxy on loopback)")
    add_web_arguments(p_serve)
    p_serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p_serve.set_defaults(func=cmd_serve)
    p_seeds = sub.add_parser("seeds", help="print seed URLs, one per line")
    add_web_arguments(p_seeds)
    p_seeds.set_defaults(func=cmd_seeds)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
