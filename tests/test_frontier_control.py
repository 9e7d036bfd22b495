"""Live control (``scrapy frontier host``): an operator's override of a site's or
domain's limits, read by every claim and start gate at once.

Against a real Redis under a private namespace: the overrides through
:class:`crawler.frontier.control.HostControl` as the command uses it, their
effect through the frontier's own claims and start gates, and the command
itself in this process. What a server sees from two workers is in
``test_realweb_politeness.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from crawler.frontier.control import Change, HostControl, UnknownTarget
from crawler.frontier.ipgates import FULL, DnsNote, IpGates
from crawler.frontier.values import Limits, Release
from tests.frontier_harness import Harness, admission, frontier_command


@pytest.fixture
def control_of(redis_url: str) -> Callable[..., HostControl]:
    """``control_of(harness, delay_ms=...)``: the command's HostControl on the harness's
    frontier, with the settings it would read."""

    def make(h: Harness, *, delay_ms: int = 0, **limits: int) -> HostControl:
        return HostControl(redis.Redis.from_url(redis_url), h.keys,
                           Limits(concurrency=4, delay_ms=delay_ms, **limits))

    return make


def _done(h: Harness, worker: str, leases: list) -> None:
    h.run(h.frontier.release([Release(x.host, x.fingerprint, "done") for x in leases], worker))


def test_pause_and_resume_a_site(make_harness: Callable[..., Harness],
                                 control_of: Callable[..., HostControl]) -> None:
    h = make_harness("cp", concurrency=4, delay_ms=0)
    f = h.frontier
    control = control_of(h)
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(6)]
                  + [admission("http://b.test/1")]))
    (claimed,) = h.run(f.claim(1, "w")).leases
    assert control.change("a.test", Change(pause=True)) == "a.test"
    # claimed before the pause: it may not start; nothing more is handed out
    assert h.run(f.start_gate("http://a.test:80")) == -1
    rest = h.run(f.claim(10, "w")).leases
    assert {x.host for x in rest} <= {"http://b.test:80"}
    view = control.view("a.test")
    assert view is not None and view.site_gate.paused
    assert view.authorities[0].queued == 6 - (claimed.host == "http://a.test:80")
    assert control.change("a.test", Change(pause=False))
    assert h.run(f.start_gate("http://a.test:80")) == 0
    assert len(h.run(f.claim(10, "w")).leases) == 4 - (claimed.host == "http://a.test:80")
    assert [e["change"] for e in control.view("a.test").log] == ["resume", "pause"]


def test_delay_and_concurrency_overrides_and_reset(
        make_harness: Callable[..., Harness], control_of: Callable[..., HostControl]) -> None:
    """On the server's clock (the command's scripts run on it): a 5 s delay
    overridden to 0.2 s applies at once, not after the 5 s turn already given."""
    h = make_harness("cd", concurrency=4, delay_ms=5000, jitter=0)
    f = h.frontier
    control = control_of(h, delay_ms=5000)
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(8)]))
    assert len(h.run(f.claim(10, "w")).leases) == 1  # then 5 s to wait
    assert control.change("a.test", Change(delay_ms=200, concurrency=2))
    time.sleep(0.25)
    assert len(h.run(f.claim(10, "w")).leases) == 1
    time.sleep(0.25)
    assert len(h.run(f.claim(10, "w")).leases) == 0  # two in flight: the override's limit
    view = control.view("a.test")
    assert view is not None
    assert (view.site_gate.concurrency, view.site_gate.concurrency_from) == (2, "operator")
    assert (view.site_gate.delay_s, view.site_gate.delay_from) == (0.2, "operator")
    assert control.change("a.test", Change(reset=True))
    view = control.view("a.test")
    assert view is not None
    assert (view.site_gate.concurrency, view.site_gate.delay_s) == (4, 5.0)
    assert view.site_gate.delay_from == "setting DOWNLOAD_DELAY"


def test_a_domain_paused_then_limited(make_harness: Callable[..., Harness],
                                      control_of: Callable[..., HostControl]) -> None:
    h = make_harness("cm", concurrency=4, delay_ms=0)
    f = h.frontier
    control = control_of(h)
    h.run(f.admit([admission(f"http://s{i}.a.test/{j}") for i in range(5) for j in range(2)]
                  + [admission("http://other.test/1")]))
    assert control.change("s0.a.test", Change(pause=True), scope="domain")
    assert [x.host for x in h.run(f.claim(50, "w")).leases] == ["http://other.test:80"]
    assert h.run(f.start_gate("http://s3.a.test:80")) == -1
    assert control.change("s0.a.test", Change(pause=False, concurrency=3), scope="domain")
    first = h.run(f.claim(50, "w")).leases
    assert len(first) == 3  # the override, with the domain scope off in the settings
    _done(h, "w", first[:1])
    assert len(h.run(f.claim(50, "w")).leases) == 1
    view = control.view("s4.a.test")
    assert view is not None and view.domain == "a.test"
    assert (view.domain_gate.concurrency, view.domain_gate.in_flight) == (3, 3)


def test_an_unknown_site_is_refused(make_harness: Callable[..., Harness],
                                    control_of: Callable[..., HostControl]) -> None:
    h = make_harness("cu", concurrency=4, delay_ms=0)
    control = control_of(h)
    with pytest.raises(UnknownTarget, match=r"no site nowhere\.test"):
        control.change("nowhere.test", Change(pause=True))
    with pytest.raises(UnknownTarget, match=r"no address known for nowhere\.test"):
        control.change("nowhere.test", Change(pause=True), scope="ip")
    assert control.view("nowhere.test") is None


def test_pause_and_resume_a_server_address(make_harness: Callable[..., Harness],
                                           control_of: Callable[..., HostControl]) -> None:
    """An address paused by an operator parks every host that comes to it; the
    resume wakes the first waiting hosts at once, as many as it has room for."""
    h = make_harness("ci", concurrency=4, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    control = control_of(h, ip_concurrency=1)
    gates = IpGates(h.client, h.keys, f.limits, f.due)
    addr = "127.0.6.1"
    h.run(f.admit([admission(f"http://n{i}.test/") for i in range(3)]))
    hosts = sorted(h.run(f.claim(10, "w")).dns_jobs)  # their names are looked up first
    assert control.change(addr, Change(pause=True), scope="ip") == addr
    # ... and all three wait for the paused address, parked.
    assert h.run(gates.join(addr, [(f.partition(x), x) for x in hosts])).go == [False] * 3
    for host in hosts:
        h.run(gates.note(f.partition(host), [DnsNote(host, addr, 600_000, False, 600_000)]))
    assert h.run(f.claim(10, "w")).leases == []
    view = control.view("n0.test")
    assert view is not None and view.address is not None
    assert (view.address.address, view.address.gate.paused) == (addr, True)
    assert view.address.waiting_hosts == 3
    assert control.change("n1.test", Change(pause=False), scope="ip") == addr  # by a name
    (woken,) = h.run(f.claim(10, "w")).leases  # room for one: the first that came
    assert woken.host == hosts[0]
    assert h.run(gates.take(addr, woken.token, f.partition(woken.host), woken.host)).wait_ms == 0
    assert h.run(gates.take(addr, "other", 0, "http://x.test:80")).wait_ms == FULL
    alone = control.view_address(addr)
    assert (alone.gate.in_flight, alone.gate.concurrency_from) == (
        1, "setting FRONTIER_IP_CONCURRENCY")
    assert [e["change"] for e in alone.log] == ["resume", "pause"]


def test_the_command(make_harness: Callable[..., Harness], redis_url: str,
                     monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    h = make_harness("cc", concurrency=4, delay_ms=0)
    h.run(h.frontier.admit([admission("http://www.a.test/1"), admission("https://www.a.test/2")]))
    opts = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": h.keys.namespace,
            "FRONTIER_PARTITIONS": h.keys.partitions}
    code, out, err = frontier_command(monkeypatch, capsys, "host", "www.a.test", "--delay", "2.5",
                             "--pause", **opts)
    assert code == 0, err
    assert "site www.a.test: delay 2.5 s, pause, for every worker" in err
    assert "site www.a.test (domain a.test," in out
    assert "http://www.a.test:80: 1 queued" in out and "https://www.a.test:443: 1 queued" in out
    assert "site: PAUSED by an operator; concurrency 4" in out and "delay 2.5 s (operator)" in out
    assert "server address: not known yet" in out
    code, out, err = frontier_command(monkeypatch, capsys, "host", "www.a.test", "--domain",
                             "--concurrency", "1", **opts)
    assert code == 0 and "domain a.test: concurrency 1" in err
    assert "domain: concurrency 1 (operator)" in out
    code, out, err = frontier_command(monkeypatch, capsys, "host", "www.a.test", "--pause",
                                      "--resume", **opts)
    assert code == 2 and "--pause or --resume, not both" in out + err
    code, _, err = frontier_command(monkeypatch, capsys, "host", "nowhere.test", "--pause", **opts)
    assert code == 1 and "no site nowhere.test" in err
    code, out, err = frontier_command(monkeypatch, capsys, "host", "127.0.6.2", "--ip",
                             "--concurrency", "3", **opts)
    assert code == 0 and "server address 127.0.6.2: concurrency 3" in err, err
    assert "address: concurrency 3 (operator), delay 0 s (setting FRONTIER_IP_DELAY)" in out
    code, out, err = frontier_command(monkeypatch, capsys, "host", "www.a.test", "--ip", "--pause",
                             **opts)
    assert code == 1 and "no address known for www.a.test" in err
    code, out, err = frontier_command(monkeypatch, capsys, "host", "www.a.test", "--ip", "--domain",
                             "--pause", **opts)
    assert code == 2 and "--domain or --ip, not both" in out + err
    code, out, err = frontier_command(monkeypatch, capsys, "status", "--pause", **opts)
    assert code == 2 and "apply to host" in out + err


def test_a_domain_of_one_site_paused(make_harness: Callable[..., Harness],
                                     control_of: Callable[..., HostControl]) -> None:
    """A site alone in its domain is not gated by the domain (its own turns
    suffice) until an operator's override of the domain: then it is."""
    h = make_harness("c1", concurrency=4, delay_ms=0, domain_concurrency=8)
    f = h.frontier
    control = control_of(h, domain_concurrency=8)
    h.run(f.admit([admission(f"http://www.b.test/{j}") for j in range(4)]
                  + [admission("http://other.test/1")]))
    view = control.view("www.b.test")
    assert view is not None and "not in force" in view.domain_gate.concurrency_from
    assert control.change("www.b.test", Change(pause=True), scope="domain")
    view = control.view("www.b.test")
    assert view is not None and "not in force" not in view.domain_gate.concurrency_from
    assert [x.host for x in h.run(f.claim(50, "w")).leases] == ["http://other.test:80"]
    assert control.change("www.b.test", Change(pause=False, concurrency=2), scope="domain")
    assert len(h.run(f.claim(50, "w")).leases) == 2
