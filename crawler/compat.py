"""Every private Scrapy and Twisted name the crawler relies on, and a start-up check of them.

Scrapy and Twisted give no public hook for a few things a broad crawler
needs: the moment the engine is done with a request (a frontier lease ends
there), a way to wake the engine, download slots that add no delay of their
own (the frontier paces hosts for every worker), a connect timeout shorter
than the download timeout, and sending a request the moment it is written
(through Twisted's TLS layers). Each is reached through names that either
project may rename in any release. They are all here, each behind a small
function that says what it is for, so an upgrade is reviewed in one file;
no other module of ``crawler/`` imports a private module or touches a
private attribute of a Scrapy or Twisted object (``tests/test_compat.py``
looks for private imports, and for the names used here, everywhere else).

A rename must never go unnoticed: writing ``downloader._delay`` on a Scrapy
that renamed it creates a new attribute and changes nothing, and Scrapy's
slots would pace every host a second time; a hook that is never called
leaves every lease held. So :func:`check` tries every name on the installed
versions before the crawl starts (:class:`CompatibilityCheck`, in
``EXTENSIONS``; the download handler calls it too) and raises
:class:`CompatibilityError`, naming the Scrapy and Twisted versions and each
name that changed. The crawl does not start.

Private lookups never fail at import time (``optional_module``): a missing name
is reported by :func:`check` with all the others, not as a bare ImportError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import scrapy
import twisted
from scrapy.commands import BaseRunSpiderCommand
from scrapy.core.downloader import Downloader
from scrapy.core.downloader.handlers import http11
from scrapy.core.engine import ExecutionEngine
from scrapy.exceptions import ResponseDataLossError
from twisted.internet import tcp as tcp_transports
from twisted.internet.abstract import FileDescriptor
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from zope.interface import implementer

from crawler import probes
from crawler.probes import Probe
from crawler.wiretap import RecordingTransport, read_through

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred
    from twisted.web._newclient import HTTP11ClientProtocol as ClientProtocol
    from twisted.web._newclient import Request as TxRequest
    from twisted.web._newclient import Response as TxResponse
    from twisted.web.client import Agent, HTTPConnectionPool

    from crawler.wiretap import WireTap

logger = logging.getLogger(__name__)

#: The versions every name here was checked against (the test suite's).
TESTED_WITH = "Scrapy 2.19 and Twisted 26.10"


class CompatibilityError(RuntimeError):
    """The installed Scrapy or Twisted lacks a private name the crawler relies on."""


def _report(problems: list[str]) -> str:
    lines = "\n".join(f"  - {problem}" for problem in problems)
    return (f"crawler.compat: Scrapy {scrapy.__version__} / Twisted {twisted.__version__} "
            f"changed private names this crawler relies on (it was tested with "
            f"{TESTED_WITH}):\n{lines}\nThe crawl does not start: see crawler/compat.py, "
            "what each name is for, before running on these versions.")


def _fail(problem: str) -> NoReturn:
    raise CompatibilityError(_report([problem]))


_NEWTLS = probes.optional_module("twisted.internet._newtls")
_NEWCLIENT = probes.optional_module("twisted.web._newclient")
_SCRAPY_DOWNLOAD_UTILS = probes.optional_module("scrapy.utils._download_handlers")
_SCRAPY_AGENT: Any = getattr(http11, "_ScrapyAgent", object)


# --- The engine: the end of a request, and waking it up ----------------------
# ExecutionEngine._slot (an engine._Slot, set while a spider is open) counts the
# requests in progress; the engine calls _slot.remove_request(request) once per
# request, after its response or failure went through the spider, and
# _slot.nextcall.schedule() makes it look for requests again (else its
# heartbeat does, every 5 s).


def _engine_slot(engine: ExecutionEngine) -> Any:
    slot = getattr(engine, "_slot", None)
    if slot is None or not callable(getattr(slot, "remove_request", None)) \
            or not callable(getattr(getattr(slot, "nextcall", None), "schedule", None)):
        _fail("ExecutionEngine._slot (with remove_request and nextcall.schedule): "
              "missing, or the spider is not open")
    return slot


def hook_request_done(engine: ExecutionEngine, callback: Callable[[Request], None]) -> None:
    """Call ``callback(request)`` each time the engine is done with a request.

    For a request the scheduler handed out: once, after its response or
    failure was fully processed (callbacks run, their requests enqueued), the
    moment a frontier lease can end. For one downloaded directly
    (``engine.download_async``, a robots.txt fetch): once it is downloaded.
    """
    slot = _engine_slot(engine)
    original = slot.remove_request

    def remove_request(request: Request) -> None:
        original(request)
        callback(request)

    slot.remove_request = remove_request


def engine_closing(engine: ExecutionEngine) -> bool:
    """Whether the engine is closing its spider: waiting for the requests in progress."""
    return getattr(getattr(engine, "_slot", None), "closing", None) is not None


def engine_wakeup(engine: ExecutionEngine) -> Callable[[], None]:
    """What makes the open engine ask its scheduler for requests on its next
    turn, not at its heartbeat (for requests that arrive later: claimed ones)."""
    schedule: Callable[[], None] = _engine_slot(engine).nextcall.schedule
    return schedule


# --- The downloader: slots that pass requests through --------------------------
# Downloader._get_slot builds each new download slot with delay
# DOWNLOAD_SLOTS[key]["delay"] or Downloader._delay, and jitter
# DOWNLOAD_SLOTS[key]["jitter"] or Downloader._jitter (both read from the
# settings in Downloader.__init__; AutoThrottle writes _delay too).


def pass_through_download_slots(downloader: Downloader) -> None:
    """Make Scrapy's download slots add no delay: the frontier paces every host
    (why: ``FrontierScheduler._install_engine_hooks``). Every slot, new or
    existing, gets delay 0 and no jitter, a ``DOWNLOAD_SLOTS`` entry's too (it
    would pace its host a second time); an entry keeps its concurrency (a local
    cap the frontier's own, across workers, never exceeds)."""
    for name in ("_delay", "_jitter"):
        if not isinstance(getattr(downloader, name, None), int | float):
            _fail(f"Downloader.{name}: not set on this downloader (renamed?); writing it "
                  "would leave Scrapy's own slot delay in place, pacing every host twice")
    downloader._delay = 0.0
    downloader._jitter = 0.0
    downloader.per_slot_settings = {  # new dictionaries: the settings' own stay as they are
        key: {**entry, "delay": 0.0, "jitter": 0.0}
        for key, entry in downloader.per_slot_settings.items()}
    for slot in downloader.slots.values():
        slot.delay = slot.jitter = 0.0


# --- The HTTP/1.1 download handler: Scrapy's agent with a connect timeout ----
# HTTP11DownloadHandler.download_request builds a _ScrapyAgent per request from
# the handler's private attributes, and _ScrapyAgent._get_agent(request,
# timeout) passes the download timeout to Twisted's endpoint as the connect
# timeout. wrap_twisted_exceptions and get_dataloss_msg are the helpers it
# uses (scrapy.utils._download_handlers).


class ConnectTimeoutAgent(_SCRAPY_AGENT):  # type: ignore[misc]
    """Scrapy's agent, connecting within ``connect_timeout`` at most.

    A host whose SYNs go unanswered would otherwise hold a download slot for
    the whole ``DOWNLOAD_TIMEOUT``; a slow but working page keeps it all.
    """

    def __init__(self, *, connect_timeout: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connect_cap = connect_timeout

    def _get_agent(self, request: Request, timeout: float) -> Agent:  # Scrapy's private hook
        agent: Agent = super()._get_agent(request, min(timeout, self.connect_cap))
        return agent


def handler_pool(handler: http11.HTTP11DownloadHandler) -> HTTPConnectionPool:
    """The connection pool an HTTP/1.1 handler shares between its requests."""
    pool: HTTPConnectionPool = handler._pool
    return pool


def scrapy_agent(handler: http11.HTTP11DownloadHandler, *, pool: object,
                 connect_timeout: float) -> ConnectTimeoutAgent:
    """The agent for one request, as ``HTTP11DownloadHandler`` builds it, but
    with ``pool`` in place of the handler's and connecting within ``connect_timeout``."""
    return ConnectTimeoutAgent(
        connect_timeout=connect_timeout,
        contextFactory=handler._contextFactory,
        bindAddress=handler._bind_address,
        pool=pool,
        maxsize=handler._default_maxsize,
        warnsize=handler._default_warnsize,
        fail_on_dataloss=handler._fail_on_dataloss,
        crawler=handler.crawler,
        tls_verbose_logging=handler._tls_verbose_logging,
    )


@contextmanager
def scrapy_download_errors(handler: http11.HTTP11DownloadHandler,
                           request: Request) -> Iterator[None]:
    """Twisted's download errors raised as Scrapy's, and the warning Scrapy
    logs on a handler's first response cut short (``DOWNLOAD_FAIL_ON_DATALOSS``)."""
    assert _SCRAPY_DOWNLOAD_UTILS is not None, "check() reports it"
    try:
        with _SCRAPY_DOWNLOAD_UTILS.wrap_twisted_exceptions():
            yield
    except ResponseDataLossError:
        if not handler._fail_on_dataloss_warned:
            logger.warning(_SCRAPY_DOWNLOAD_UTILS.get_dataloss_msg(request.url))
            handler._fail_on_dataloss_warned = True
        raise


# --- Twisted's connections: idle, wrapped, and the TLS layers below them ----
# HTTP11ClientProtocol.state is "QUIESCENT" while a connection waits for a
# request. A pool with retryAutomatically wraps each protocol it hands out in
# a _RetryingHTTP11ClientProtocol (._clientProtocol). As of Twisted 26.10 a
# protocol's transport is, for
#   http:                        tcp.Client (a FileDescriptor)
#   https (wrapClientTLS):       BufferingTLSTransport, whose transport is the tcp.Client
#   https through a CONNECT      the tunnel's tcp.Client itself, with TLS = True: its
#   proxy (startTLS):            .protocol is a BufferingTLSTransport writing through a
#                                _newtls._BypassTLS straight to that tcp.Client (_connection)
# BufferingTLSTransport keeps small writes in ._aggregator (_AggregateSmallWrites)
# until reactor.callLater(0); its flush() encrypts them into the transport below.


def connection_is_idle(proto: ClientProtocol) -> bool:
    """Whether a pooled HTTP/1.1 connection is open and waiting for a request."""
    return bool(proto.state == "QUIESCENT")


def unwrap_client_protocol(proto: ClientProtocol) -> ClientProtocol:
    """The protocol inside the wrapper a pool with ``retryAutomatically`` hands out."""
    inner: ClientProtocol = getattr(proto, "_clientProtocol", proto)
    return inner


def tapped_request(proto: ClientProtocol, request: TxRequest, tap: WireTap
                   ) -> Deferred[TxResponse]:
    """``proto.request(request)``, with ``tap`` keeping the request head as
    written and the response head as received (:mod:`crawler.wiretap`).

    ``HTTP11ClientProtocol.request`` writes the request head at once through
    ``proto.transport`` (``request.writeTo(self.transport)``): a recording
    transport stands in for that call. The tap reads the answer's first
    chunks as they come in (:func:`~crawler.wiretap.read_through`).
    """
    real = proto.transport
    proto.transport = RecordingTransport(real, tap.wrote)
    try:
        answer: Deferred[TxResponse] = proto.request(request)
    finally:
        proto.transport = real
        tap.seal()
    read_through(proto, tap)
    return answer


#: TLS layers between a protocol and its TCP transport, at most (HTTPS needs one).
_MAX_LAYERS = 4


def flush_tls_layers(transport: object) -> FileDescriptor | None:
    """Flush every TLS layer from ``transport`` down; the TCP transport below them.

    Twisted's TLS layer holds small writes for one reactor turn before it
    encrypts them; flushed, the ciphertext is in the TCP transport's buffer,
    ready for its ``doWrite``. None for a transport of a kind not known here.
    Each layer is recognised by its class, never by attributes: a TLS layer
    answers for its transport's attributes (``ProtocolWrapper.__getattr__``),
    so ``hasattr(tls, "doWrite")`` is true of a layer that cannot write.
    """
    layer = transport
    for _ in range(_MAX_LAYERS):
        if isinstance(layer, TLSMemoryBIOProtocol):  # HTTPS, or a layer startTLS added
            _flush_small_writes(layer)
            layer = layer.transport
        elif (tcp := _bypassed(layer)) is not None:  # below a layer startTLS added
            return tcp
        elif isinstance(layer, FileDescriptor):
            tls = _started_tls(layer)  # through a CONNECT tunnel: TLS above this transport
            if tls is None:
                return layer
            layer = tls
        else:
            return None
    return None


def _flush_small_writes(tls: TLSMemoryBIOProtocol) -> None:
    """Encrypt what the TLS layer held back, into the transport below it."""
    aggregator = vars(tls).get("_aggregator")  # none on a TLS layer that does not aggregate
    if aggregator is not None:
        aggregator.flush()


def _bypassed(layer: object) -> FileDescriptor | None:
    """The TCP transport under the TLS layer ``startTLS`` added, if ``layer`` is its link to it.

    That TCP transport's TLS layer is the one just flushed: the walk ends here.
    """
    bypass = getattr(_NEWTLS, "_BypassTLS", None)
    if bypass is not None and isinstance(layer, bypass):
        tcp = vars(layer).get("_connection")
        return tcp if isinstance(tcp, FileDescriptor) else None
    return None


def _started_tls(tcp: FileDescriptor) -> TLSMemoryBIOProtocol | None:
    """The TLS layer ``startTLS`` put on ``tcp`` (its protocol now), if any."""
    if vars(tcp).get("TLS", False):
        protocol = vars(tcp).get("protocol")
        if isinstance(protocol, TLSMemoryBIOProtocol):
            return protocol
    return None


# --- Scrapy's crawl command ---------------------------------------------------


def command_crawler(command: BaseRunSpiderCommand, spider: str) -> Crawler:
    """The crawler ``scrapy crawl`` makes for ``spider``: the process's, with
    Scrapy's warning when feeds are set but the feed exporter is off."""
    crawler: Crawler = command._create_crawler(spider)
    return crawler


# --- The start-up check ---------------------------------------------------------


def check() -> None:
    """Raise :class:`CompatibilityError` unless every probe passes on the installed versions."""
    problems = [p for probe in PROBES if (p := probe.problem()) is not None]
    if problems:
        raise CompatibilityError(_report(problems))


class CompatibilityCheck:
    """``EXTENSIONS`` entry: the crawl does not start on a Scrapy or Twisted
    whose private names changed (:func:`check`, raised from ``from_crawler``
    while the crawler builds its extensions, before the engine exists)."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CompatibilityCheck:
        check()
        logger.debug("Scrapy %s and Twisted %s have every private name crawler.compat uses",
                     scrapy.__version__, twisted.__version__)
        return cls()


def _probe_scrapy_agent() -> None:
    agent = probes.attribute(http11, "scrapy.core.downloader.handlers.http11", "_ScrapyAgent")
    if not issubclass(ConnectTimeoutAgent, agent):
        raise TypeError("ConnectTimeoutAgent was built on another class")
    probes.accepts(agent, "contextFactory", "bindAddress", "pool", "maxsize", "warnsize",
                   "fail_on_dataloss", "crawler", "tls_verbose_logging")
    probes.takes(agent._get_agent, "self", "request", "timeout")
    probes.reads(agent.download_request, "_get_agent")


def _probe_engine() -> None:
    from scrapy.core import engine

    slot = probes.attribute(engine, "scrapy.core.engine", "_Slot")
    probes.takes(slot.remove_request, "self", "request")
    probes.sets_in_init(slot, "nextcall", "closing")
    probes.sets_in_init(ExecutionEngine, "_slot")
    if not probes.a_method_reads(ExecutionEngine, "_slot", "remove_request"):
        raise AttributeError("the engine never calls _slot.remove_request")


def _probe_client_protocol() -> None:
    protocol = probes.attribute(_NEWCLIENT, "twisted.web._newclient", "HTTP11ClientProtocol")
    inner = protocol()
    if not connection_is_idle(inner):
        raise ValueError("a new connection's state is not QUIESCENT")
    from twisted.web import client

    retrying = probes.attribute(client, "twisted.web.client", "_RetryingHTTP11ClientProtocol")
    if unwrap_client_protocol(retrying(inner, None)) is not inner:
        raise AttributeError("_RetryingHTTP11ClientProtocol keeps no _clientProtocol")
    # (tapped_request: the request is written through self.transport)
    probes.reads(protocol.request, "writeTo", "transport")


def _probe_tls() -> None:
    clock = Clock()  # nothing is scheduled; and the reactor is not imported (installed) here
    factory = TLSMemoryBIOFactory(_NoTLSConnections(), True, Factory(), clock)
    tls = factory.protocol(factory, Protocol())  # what wrapClientTLS and startTLS build
    if not isinstance(tls, TLSMemoryBIOProtocol):
        raise TypeError(f"the TLS factory builds {type(tls).__name__}")
    if not callable(getattr(vars(tls).get("_aggregator"), "flush", None)):
        raise AttributeError("the TLS layer has no _aggregator.flush()")
    tcp = FileDescriptor(clock)
    bypass = probes.attribute(_NEWTLS, "twisted.internet._newtls", "_BypassTLS")
    if _bypassed(bypass(FileDescriptor, tcp)) is not tcp:
        raise AttributeError("_BypassTLS keeps no _connection")
    if not (callable(getattr(tcp_transports.Client, "startTLS", None))
            and tcp_transports.Client.TLS is False):
        raise AttributeError("a TCP transport has no TLS flag for startTLS")


@implementer(IOpenSSLClientConnectionCreator)
class _NoTLSConnections:
    """For a TLS factory whose layers never connect (:func:`_probe_tls`)."""

    def clientConnectionForTLS(self, tlsProtocol: TLSMemoryBIOProtocol) -> NoReturn:  # Twisted's
        raise RuntimeError("never connected")


#: What :func:`check` tries, one entry per function or section above.
PROBES: tuple[Probe, ...] = (
    Probe("scrapy.core.downloader.handlers.http11._ScrapyAgent(...)._get_agent(request, timeout)",
          _probe_scrapy_agent),
    Probe("scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler's private attributes",
          lambda: probes.sets_in_init(
              http11.HTTP11DownloadHandler, "_pool", "_contextFactory", "_bind_address",
              "_default_maxsize", "_default_warnsize", "_fail_on_dataloss",
              "_tls_verbose_logging", "_fail_on_dataloss_warned")),
    Probe("scrapy.utils._download_handlers", lambda: probes.callables(
        _SCRAPY_DOWNLOAD_UTILS, "scrapy.utils._download_handlers",
        "wrap_twisted_exceptions", "get_dataloss_msg")),
    Probe("scrapy.core.engine.ExecutionEngine._slot.remove_request / .nextcall", _probe_engine),
    Probe("scrapy.core.downloader.Downloader._delay / ._jitter",
          lambda: probes.sets_in_init(Downloader, "_delay", "_jitter", "per_slot_settings",
                                      "slots"),
          lambda: probes.reads(Downloader._get_slot, "_delay", "_jitter", "per_slot_settings")),
    Probe("scrapy.commands.BaseRunSpiderCommand._create_crawler(spidercls)",
          lambda: probes.takes(BaseRunSpiderCommand._create_crawler, "self", "spidercls")),
    Probe("twisted.web._newclient.HTTP11ClientProtocol state / _clientProtocol",
          _probe_client_protocol),
    Probe("twisted TLS transports (_aggregator, _newtls._BypassTLS._connection, TLS)",
          _probe_tls),
)
