"""Command line: ``python -m tests.simweb {serve,seeds} ...``.

``build_parser`` creates one sub-command per entry of ``COMMAND_MODULES``
plus the built-in ``serve`` and ``seeds``; each sub-command stores its
handler in ``func`` and ``main`` dispatches to it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import signal
import sys
from collections.abc import Sequence

from .model import MIXES, Web
from .server import serve

# ---------------------------------------------------------------------------
# EXTENSION POINT for more sub-commands (e.g. ``demo``).
# Each module listed here, when it exists, must define
#     def register(subparsers: argparse._SubParsersAction) -> None
# which adds its sub-parser and calls ``set_defaults(func=<handler>)``, where
# the handler takes the parsed ``argparse.Namespace`` and returns an exit
# code.  A module that does not exist (yet) is skipped silently.
COMMAND_MODULES: tuple[str, ...] = ("tests.simweb.demo",)
# ---------------------------------------------------------------------------


def parse_mix(text: str) -> str | dict[str, float]:
    """``--mix`` value: a named mix or a JSON object of weights."""
    if text.lstrip().startswith("{"):
        value = json.loads(text)
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError("--mix JSON must be an object")
        return {str(k): float(v) for k, v in value.items()}
    if text not in MIXES:
        raise argparse.ArgumentTypeError(f"unknown mix {text!r} (known: {sorted(MIXES)})")
    return text


def add_web_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that define a ``Web`` (shared by all sub-commands)."""
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hosts", type=int, default=1000, help="number of hosts")
    parser.add_argument(
        "--mix",
        type=parse_mix,
        default="default",
        help=f"one of {sorted(MIXES)} or a JSON object of 'robots:<mode>'/'page:<mode>' weights",
    )
    parser.add_argument("--validators", action="store_true",
                        help="pages carry ETag or Last-Modified; matching requests get 304")
    parser.add_argument("--epoch", type=int, default=0,
                        help="the web N changes later (each page changes with --change-rate)")
    parser.add_argument("--change-rate", type=float, default=0.1)
    parser.add_argument("--validator-share", type=float, default=0.8,
                        help="share of hosts that send a validator (with --validators)")
    parser.add_argument("--page-bytes", type=int, default=0,
                        help="pad HTML pages to about this many bytes (0: as generated)")
    parser.add_argument("--page-links", type=int, default=0,
                        help="links to pages of the same host in each padded page")
    parser.add_argument("--pin", type=parse_pin, action="append", default=[],
                        help="INDEX=SPEC: pin a host, e.g. 0=slow or "
                             "0=robots:rules,crawl-delay:2; repeatable")


def parse_pin(text: str) -> tuple[int, str]:
    """``--pin INDEX=MODE``: give host INDEX that page mode (e.g. ``0=slow``)."""
    index, _, mode = text.partition("=")
    if not index.isdigit() or not mode:
        raise argparse.ArgumentTypeError("--pin takes INDEX=MODE, e.g. 0=slow")
    return int(index), mode


def web_from_args(args: argparse.Namespace) -> Web:
    return Web(seed=args.seed, n_hosts=args.hosts, mix=args.mix, pinned=dict(args.pin),
               validators=args.validators, epoch=args.epoch, change_rate=args.change_rate,
               validator_share=args.validator_share, page_bytes=args.page_bytes,
               page_links=args.page_links)


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; exit 0 after a clean shutdown."""
    web = web_from_args(args)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(web, stop, port=args.port, hang_max=args.hang_max,
                    trickle_interval=args.trickle_interval)

    asyncio.run(run())
    return 0


def cmd_seeds(args: argparse.Namespace) -> int:
    for url in web_from_args(args).seed_urls(args.n):
        print(url)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.simweb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p_serve = sub.add_parser("serve", help="run the simulated web (HTTP proxy)")
    add_web_arguments(p_serve)
    p_serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p_serve.add_argument(
        "--hang-max", type=float, default=300.0, help="seconds a hang lasts at most"
    )
    p_serve.add_argument(
        "--trickle-interval", type=float, default=0.5,
        help="seconds between a trickled answer's 40 pieces (default 0.5: ~20 s a page)"
    )
    p_serve.set_defaults(func=cmd_serve)

    p_seeds = sub.add_parser("seeds", help="print seed URLs, one per line")
    add_web_arguments(p_seeds)
    p_seeds.add_argument("-n", type=int, default=None, help="first N hosts only")
    p_seeds.set_defaults(func=cmd_seeds)

    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
