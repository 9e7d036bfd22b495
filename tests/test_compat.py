"""crawler.compat: every private Scrapy and Twisted name, tried before a crawl starts.

The probes run on the real installed classes; a change a new release could
make is simulated by taking the name away from (or renaming it on) the real
class with ``monkeypatch``, never by mocking Scrapy. What Scrapy's download
slots do in a frontier crawl (nothing: the frontier paces) is pinned on a
real downloader here and, once the scheduler uses compat, in a real crawl.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_twisted
import scrapy
import twisted
from scrapy import Request, Spider, signals
from scrapy.commands import BaseRunSpiderCommand
from scrapy.core import engine as scrapy_engine
from scrapy.core.downloader import Downloader
from scrapy.core.downloader.handlers import http11
from scrapy.crawler import CrawlerRunner
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.test import get_crawler, get_reactor_settings
from twisted.internet import _newtls
from twisted.web import _newclient

from crawler import compat
from crawler import settings as project_settings
from crawler.addon import addon_settings
from crawler.compat import CompatibilityError
from tests.crawl_runner import proxy_env, run_crawl
from tests.simweb import SimWebProcess

REPO = Path(__file__).resolve().parent.parent
VERSIONS = rf"Scrapy {re.escape(scrapy.__version__)} / Twisted {re.escape(twisted.__version__)}"
CHECK = "crawler.compat.CompatibilityCheck"


def test_every_probe_passes_on_the_installed_versions() -> None:
    assert {probe.name: probe.problem() for probe in compat.PROBES} == {
        probe.name: None for probe in compat.PROBES}
    compat.check()


def _renamed_delay(self: Downloader, request: Request, spider: Spider | None = None) -> Any:
    """``_get_slot`` as a release that renamed ``_delay`` / ``_jitter`` would have it."""
    return self.slots.setdefault(self.get_slot_key(request), (self._base_delay, self._spread))


def _init_without_context_factory(self: http11.HTTP11DownloadHandler, crawler: Any) -> None:
    self._pool = None


def _delattr(target: object, name: str) -> Any:
    return lambda mp: mp.delattr(target, name)


#: What a release could change, made on the real class; and the probe that must say so.
CHANGES: dict[str, tuple[Any, str]] = {
    "engine slot without remove_request": (
        _delattr(scrapy_engine._Slot, "remove_request"), "ExecutionEngine._slot"),
    "downloader delay renamed": (
        lambda mp: mp.setattr(Downloader, "_get_slot", _renamed_delay), "Downloader._delay"),
    "agent without _get_agent": (
        _delattr(http11._ScrapyAgent, "_get_agent"), "_ScrapyAgent"),
    "handler attributes renamed": (
        lambda mp: mp.setattr(http11.HTTP11DownloadHandler, "__init__",
                              _init_without_context_factory), "_contextFactory"),
    "no private download utils": (
        lambda mp: mp.setattr(compat, "_SCRAPY_DOWNLOAD_UTILS", None),
        "no module scrapy.utils._download_handlers"),
    "crawl command without _create_crawler": (
        _delattr(BaseRunSpiderCommand, "_create_crawler"), "_create_crawler"),
    "idle connection state renamed": (
        lambda mp: mp.setattr(_newclient.HTTP11ClientProtocol, "_state", "IDLE"), "QUIESCENT"),
    "no _BypassTLS": (_delattr(_newtls, "_BypassTLS"), "_BypassTLS"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_private_name_fails_the_check_naming_the_versions(
        change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, named = CHANGES[change]
    make(monkeypatch)
    with pytest.raises(CompatibilityError, match=VERSIONS) as raised:
        compat.check()
    message = str(raised.value)
    assert named in message
    assert message.count("\n  - ") == 1, message  # only what changed is reported
    assert "Scrapy 2.19 and Twisted 26.10" in message  # what it was tested with


def test_every_change_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(scrapy_engine._Slot, "remove_request")
    monkeypatch.delattr(_newtls, "_BypassTLS")
    with pytest.raises(CompatibilityError) as raised:
        compat.check()
    assert str(raised.value).count("\n  - ") == 2


@pytest.mark.parametrize("use", [
    lambda: compat.pass_through_download_slots(SimpleNamespace(per_slot_settings={}, slots={})),
    lambda: compat.hook_request_done(SimpleNamespace(_slot=None), print),
    lambda: compat.engine_wakeup(SimpleNamespace(_slot=SimpleNamespace(remove_request=print))),
], ids=["downloader without _delay", "engine without slot", "slot without nextcall"])
def test_a_stand_in_without_the_private_attribute_fails_loudly(use: Any) -> None:
    """Used on an object that lacks the name, a compat function raises, never
    writes an attribute nothing reads (a second pacing, a hook never called)."""
    with pytest.raises(CompatibilityError, match=VERSIONS):
        use()


def test_the_project_and_the_addon_run_the_check_first() -> None:
    for extensions in (project_settings.EXTENSIONS, addon_settings()["EXTENSIONS"]):
        orders = {path: order for path, order in extensions.items() if order is not None}
        assert orders[CHECK] < min(o for p, o in orders.items() if p != CHECK)


class _Idle(Spider):
    name = "idle"


@pytest_twisted.ensureDeferred
async def test_the_crawl_does_not_start_when_a_name_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(_newtls, "_BypassTLS")
    runner = CrawlerRunner({**get_reactor_settings(), "TELNETCONSOLE_ENABLED": False,
                            "EXTENSIONS": project_settings.EXTENSIONS,
                            "PROMETHEUS_ENABLED": False})
    crawler = runner.create_crawler(_Idle)
    sent: list[object] = []
    for signal in (signals.engine_started, signals.spider_opened):
        crawler.signals.connect(lambda signal, **kw: sent.append(signal), signal=signal,
                                weak=False)
    with pytest.raises(CompatibilityError, match=rf"{VERSIONS}(.|\n)*_BypassTLS"):
        await maybe_deferred_to_future(runner.crawl(crawler))
    assert sent == []
    assert not crawler.crawling


#: ``scrapy crawl broad`` on a Twisted without ``_newtls._BypassTLS``.
_CRAWL_WITHOUT_BYPASS = """
import sys
from twisted.internet import _newtls
del _newtls._BypassTLS
from scrapy.cmdline import execute
sys.argv = ["scrapy", "crawl", "broad", *sys.argv[1:]]
execute()
"""


def test_scrapy_crawl_refuses_with_one_message_and_exit_code_1(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.test/\n")
    job = tmp_path / "job"
    done = subprocess.run(
        [sys.executable, "-c", _CRAWL_WITHOUT_BYPASS, "-a", f"seeds={seeds}",
         "-s", f"JOBDIR={job}", "-s", "LOG_LEVEL=INFO", "-s", "PROMETHEUS_ENABLED=False"],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr[-3000:]
    assert re.search(rf"ERROR: Cannot start the broad spider: crawler.compat: {VERSIONS}",
                     done.stderr), done.stderr[-3000:]
    assert "twisted.internet._newtls has no _BypassTLS" in done.stderr
    assert "Traceback" not in done.stderr
    assert not job.exists()  # no frontier was opened


# ------------------------------------------------------------ one module only

#: Attributes and strings only compat may use: Scrapy's and Twisted's private
#: names (not names this project gives its own attributes, such as ``_pool``).
PRIVATE_NAMES = frozenset({
    "_slot", "_delay", "_jitter", "_get_agent", "_ScrapyAgent", "_contextFactory",
    "_bind_address", "_default_maxsize", "_default_warnsize", "_fail_on_dataloss",
    "_fail_on_dataloss_warned", "_tls_verbose_logging", "_clientProtocol", "_aggregator",
    "_connection", "_BypassTLS", "_create_crawler", "QUIESCENT",
})


def _private_uses(path: Path) -> list[str]:
    """Private Scrapy / Twisted imports, attributes and attribute-name strings in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in {"scrapy", "twisted"}:
                names = [node.module, *(a.name for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] in {"scrapy", "twisted"}]
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_NAMES:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in PRIVATE_NAMES:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
        found += [f"{path.relative_to(REPO)}:{node.lineno}: import {name}" for name in names
                  if any(part.startswith("_") for part in name.split("."))]
    return found


#: Being moved to crawler.compat by the frontier's split (issue 18).
def test_no_module_but_compat_touches_private_scrapy_or_twisted_names() -> None:
    modules = [p for p in sorted((REPO / "crawler").rglob("*.py"))
               if p != REPO / "crawler" / "compat.py"]
    assert [use for path in modules for use in _private_uses(path)] == []


# ------------------------------------------------------------ download slots

SLOW = "slow.test"


@pytest.fixture
def downloader() -> Any:
    crawler = get_crawler(Spider, {
        "DOWNLOAD_DELAY": 2.0, "DOWNLOAD_DELAY_JITTER": 0.5,
        "DOWNLOAD_SLOTS": {SLOW: {"concurrency": 1, "delay": 5.0, "jitter": 0.3}},
    })
    made = Downloader(crawler)
    yield made
    made.close()


def _slot(downloader: Downloader, url: str) -> Any:
    return downloader._get_slot(Request(url))[1]  # how Scrapy makes a request's slot


def test_scrapy_s_download_slots_add_no_delay_in_a_frontier_crawl(downloader: Downloader) -> None:
    """The frontier paces every host for all workers; a delay in Scrapy's slot
    would hold a request whose turn has come (it leaves late, close to another
    worker's next turn), and a DOWNLOAD_SLOTS delay would pace its host twice."""
    before = _slot(downloader, "http://a.test/")  # a slot that exists already
    assert (before.delay, before.jitter) == (2.0, 0.5)  # Scrapy's own, without the frontier
    compat.pass_through_download_slots(downloader)
    fresh, slow = _slot(downloader, "http://b.test/"), _slot(downloader, f"http://{SLOW}/")
    for slot in (before, fresh, slow):
        assert (slot.delay, slot.jitter, slot.download_delay()) == (0.0, 0.0, 0.0)
    assert slow.concurrency == 1  # DOWNLOAD_SLOTS concurrency stays: a local cap
    assert downloader.settings.getdict("DOWNLOAD_SLOTS")[SLOW]["delay"] == 5.0  # untouched


@pytest.mark.crawl
def test_in_a_real_crawl_requests_meet_slots_without_delay(tmp_path: Path) -> None:
    """What Scrapy's download slots did to the requests of a real frontier crawl
    (tests/slot_delays.py), DOWNLOAD_SLOTS host included; and the frontier
    alone still spaces every host's requests."""
    delay = 0.2
    with SimWebProcess(seed=7, n_hosts=3, mix="clean") as sim:
        slow = sim.web.hosts[0].name
        settings = {
            "DOWNLOAD_DELAY": delay, "DOWNLOAD_DELAY_JITTER": 0.5, "ROBOTSTXT_OBEY": False,
            "DEPTH_LIMIT": 0, "CLOSESPIDER_PAGECOUNT": 30,
            "DOWNLOAD_SLOTS": {slow: {"delay": 2 * delay}},
            "EXTENSIONS": {**project_settings.EXTENSIONS, "tests.slot_delays.SlotDelays": 0},
        }
        result = run_crawl(sim.proxy_url, sim.web.seed_urls(), tmp_path, settings)
        ledger = sim.ledger()
    assert result.returncode == 0, result.log[-3000:]
    assert int(result.stat("test/slot_probes")) >= 10
    assert (result.stat("test/slot_delay_ms/max"), result.stat("test/slot_jitter_pct/max")) \
        == ("0", "0")
    lag = 0.05  # the server loop's stamping lag on a busy machine
    for host in ledger.hosts():
        floor = (2 * delay if host == slow else delay) * 0.5  # delay x (1 - jitter)
        gap = ledger.min_gap(host)
        assert gap is None or gap >= floor - lag, (host, gap)
