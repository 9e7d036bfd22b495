"""``scrapy frontier serve``: the operator's console over the frontier (crawler/console/).

The console runs here, in the command's process, and reads the frontier as
``scrapy frontier status`` does: a crawl's workers never serve it. The main
thread samples the counts for the charts of the last hour until Ctrl-C (or
SIGTERM); the server answers in threads of its own.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

import redis

from crawler.commands.frontier_output import note
from crawler.console.app import ConsoleApp
from crawler.console.history import History
from crawler.console.views import Views
from crawler.frontier.admin import AdminError, FrontierAdmin
from crawler.frontier.control import HostControl
from crawler.frontier.crawls import CrawlInfo
from crawler.frontier.values import Limits
from crawler.metrics.access import Access, AccessError, exposure_warning
from crawler.metrics.auth import require_basic_auth
from crawler.metrics.server import parse_ports, serve_app, stop
from crawler.middlewares.scope import scope_from_settings

logger = logging.getLogger(__name__)


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--bind", metavar="ADDRESS",
                       help="serve: the address to listen on (default CONSOLE_HOST, "
                            "127.0.0.1)")
    group.add_argument("--port", metavar="PORT",
                       help="serve: a port or a range, the first free one is taken (default "
                            "CONSOLE_PORT, 9440-9449)")


def run(admin: FrontierAdmin, redis_shown: str, settings: Any, opts: argparse.Namespace,
        crawls_of: Callable[[], list[CrawlInfo]]) -> None:
    """Serve the console until interrupted."""
    try:
        access = Access.from_settings(settings)
        ports = parse_ports(opts.port or settings.get("CONSOLE_PORT", "9440-9449"))
    except (AccessError, ValueError) as exc:
        raise AdminError(str(exc).replace("PROMETHEUS_PORT", "the console's port")) from None
    host = opts.bind or settings.get("CONSOLE_HOST", "127.0.0.1")
    history = History()
    control = HostControl(admin.client, admin.keys, Limits.from_settings(settings))
    views = Views(admin, control, history, redis_shown, crawls_of,
                  scope_from_settings(settings).rules())
    app = ConsoleApp(views, title=f"broadcrawl {admin.keys.namespace}")
    served = app if access.credentials is None else require_basic_auth(
        app, access.credentials, realm="broadcrawl console", what="this console")
    try:
        server, thread, port = serve_app(served, host, ports, tls=access.tls, name="console")
    except OSError as exc:
        raise AdminError(f"cannot serve the console on {host}: {exc}") from None
    warning = exposure_warning(host, port, access, what="Console", host_setting="CONSOLE_HOST")
    if warning:
        note(warning)
    shown = f"[{host}]" if ":" in host else host
    note(f"console of {admin.keys.namespace} at {access.scheme}://{shown}:{port}/ "
         "(Ctrl-C to stop)")
    stopping = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stopping.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        _sample(admin, history, settings.getfloat("CONSOLE_SAMPLE_SECONDS", 10.0), stopping)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        stop(server, thread)
    raise KeyboardInterrupt  # (the command's exit status for Ctrl-C, 130)


def _sample(admin: FrontierAdmin, history: History, every_s: float,
            stopping: threading.Event) -> None:
    """Add the frontier's counts to the history every ``every_s`` seconds until
    ``stopping`` is set. Ctrl-C and SIGTERM only set it: an interrupt raised in
    the middle of a Redis call could leave the connection pool's lock taken,
    which the server's threads and the command's exit then wait for."""
    while not stopping.is_set():
        try:
            history.add(admin.status(oldest=False).counts)
        except (redis.RedisError, OSError) as exc:  # the page says so; sampling goes on
            logger.warning("Console: could not read the frontier's counts: %s", exc)
        stopping.wait(max(every_s, 0.5))
