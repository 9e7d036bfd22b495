"""The ``/metrics`` HTTP endpoint, on the first free port of a range.

Several workers on one machine (scrapyd runs one process per job) share one
``PROMETHEUS_PORT`` setting; a range such as ``9410-9430`` gives each the
first port nobody holds, and the worker logs (and, if asked, writes into a
file-based service discovery folder) where it listens.
"""

from __future__ import annotations

import errno
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry


class NoFreePort(OSError):
    """Every port of the range is taken."""


def parse_ports(value: str | int) -> range:
    """``9410`` or ``"9410-9430"`` (inclusive) as a range; ``0``: any free port."""
    text = str(value).strip()
    first, _, last = text.partition("-")
    try:
        low = int(first)
        high = int(last) if last else low
    except ValueError:
        raise ValueError(f"PROMETHEUS_PORT must be a port or a range like 9410-9430: {value!r}"
                         ) from None
    if not (0 <= low <= high <= 65535):
        raise ValueError(f"PROMETHEUS_PORT out of range: {value!r}")
    return range(low, high + 1)


def serve(registry: CollectorRegistry, host: str, ports: range
          ) -> tuple[WSGIServer, threading.Thread, int]:
    """Serve ``registry`` on the first free port of ``ports``; return the server,
    its thread and the port."""
    for port in ports:
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                continue
            raise
        return server, thread, server.server_address[1]
    raise NoFreePort(errno.EADDRINUSE,
                     f"no free port for metrics on {host} in {ports.start}-{ports.stop - 1}")


def stop(server: WSGIServer, thread: threading.Thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join(5)
