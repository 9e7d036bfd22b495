"""Command line: ``python -m tests.realweb serve --spec FILE --ca-dir DIR``.

Runs the whole web in this one process: the DNS server (threads), every
host's HTTP and HTTPS listeners and the control endpoint (one asyncio loop).
Once all of them listen it prints one line,
``READY dns=127.0.0.1:PORT control=127.0.0.1:PORT``, which
:class:`~tests.realweb.process.RealWebProcess` waits for. It stops on
SIGTERM or SIGINT, and when its standard input ends: the test that started
it holds the other end, so the web goes away with the test process even when
that one is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .control import ControlServer
from .dns import TestDNS
from .layout import zone
from .listen import bind_web
from .server import RealWebServer
from .spec import Web
from .tls import TestCA


def _quiet_transport_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Failed handshakes and dropped clients are what tests do on purpose: no tracebacks."""
    if isinstance(context.get("exception"), ssl.SSLError | ConnectionError | TimeoutError):
        return
    loop.default_exception_handler(context)


def _stop_when_stdin_ends(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    def wait() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=wait, name="stdin-watch", daemon=True).start()


async def serve(web: Web, ca_dir: Path, stop: asyncio.Event) -> None:
    """Run the web until ``stop`` is set; print READY once everything listens."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_quiet_transport_errors)
    layout, sockets = bind_web(web)
    server = RealWebServer(web, layout, sockets, TestCA(ca_dir))
    dns = TestDNS(zone(web, layout)).start()
    control = ControlServer(server, dns)
    try:
        await server.start()
        port = await control.start()
        print(f"READY dns={dns.nameserver} control=127.0.0.1:{port}", flush=True)
        await stop.wait()
    finally:
        await control.close()
        await server.close()
        dns.stop()
        for sock in sockets.values():
            sock.close()


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        web = Web.from_json(Path(args.spec).read_text())
    except ValueError as exc:
        print(f"realweb: error: {exc}", file=sys.stderr, flush=True)
        return 2

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if args.stdin_stop:
            _stop_when_stdin_ends(loop, stop)
        await serve(web, Path(args.ca_dir), stop)

    try:
        asyncio.run(run())
    except (ValueError, RuntimeError, PermissionError) as exc:  # a refused spec, a busy port
        print(f"realweb: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.realweb", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="run a web described by a JSON spec (Web.to_json)")
    p_serve.add_argument("--spec", required=True, help="file holding Web.to_json()")
    p_serve.add_argument("--ca-dir", required=True, help="folder for the test CA (ca.pem)")
    p_serve.add_argument("--stdin-stop", action="store_true",
                         help="stop when standard input reaches its end")
    p_serve.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
