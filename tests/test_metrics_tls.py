"""Metrics only Prometheus reads: TLS, client certificates and basic auth on ``/metrics``.

A real Prometheus scrapes two endpoints with the test CA's certificates and a
password file: one served by :func:`crawler.metrics.server.serve` (client
certificates required), one by the extension from its settings, found through
its file_sd target whose ``__scheme__`` label alone makes the scrape HTTPS.
Clients without the password, without a certificate or without TLS are
refused. Mistakes in the settings are one ERROR line and no server.
"""

from __future__ import annotations

import base64
import http.client
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import Counter
from prometheus_client.registry import CollectorRegistry
from scrapy.utils.test import get_crawler

from crawler.extensions.prometheus import PrometheusExtension
from crawler.metrics.access import Access, exposure_warning, is_loopback
from crawler.metrics.auth import Credentials
from crawler.metrics.server import serve, stop
from tests.prometheus_process import MISSING, PROMETHEUS, api, prometheus, query
from tests.realweb.tls import TestCA

USER = "prometheus"
PASSWORD = "metrics-pw-7f3a9c1e"  # a string no log line may ever contain
REALM = 'Basic realm="broadcrawl metrics"'
EXTENSION_LOG = "crawler.extensions.prometheus"


@dataclass
class Pki:
    folder: Path
    ca: TestCA
    cert: Path
    key: Path
    client: tuple[Path, Path]
    password_file: Path
    wrong_password_file: Path

    def settings(self, *, client_ca: bool = False) -> dict[str, str]:
        """The extension's settings for HTTPS and basic auth (and client certificates)."""
        settings = {"PROMETHEUS_TLS_CERT_FILE": str(self.cert),
                    "PROMETHEUS_TLS_KEY_FILE": str(self.key),
                    "PROMETHEUS_BASIC_AUTH_USER": USER,
                    "PROMETHEUS_BASIC_AUTH_PASSWORD_FILE": str(self.password_file)}
        if client_ca:
            settings["PROMETHEUS_TLS_CLIENT_CA_FILE"] = str(self.ca.cert_path)
        return settings


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("metrics-tls")
    ca = TestCA(folder / "ca")
    cert, key = ca.issue(["localhost"], ["127.0.0.1"])
    password_file = folder / "password"
    # One line, as Prometheus reads it too: it sends the whole file (trimmed), the
    # worker takes the first line (stripped).
    password_file.write_text(f"  {PASSWORD}\n")
    wrong = folder / "wrong-password"
    wrong.write_text("not-the-password\n")
    return Pki(folder, ca, cert, key, ca.issue_client("prometheus"), password_file, wrong)


@pytest.fixture(scope="module")
def mtls(pki: Pki) -> Iterator[int]:
    """An endpoint that wants a client certificate and the password; serves one counter."""
    registry = CollectorRegistry()
    Counter("crawler_test_scrapes", "A counter to find.", registry=registry).inc(7)
    access = Access.from_settings(pki.settings(client_ca=True))
    server, thread, port = serve(registry, "127.0.0.1", range(0, 1), tls=access.tls,
                                 credentials=access.credentials)
    yield port
    stop(server, thread)


def _extension(settings: dict[str, str]) -> PrometheusExtension:
    """The extension on a Crawler with ``settings`` (and PROMETHEUS_ENABLED, which
    get_crawler does not take from the project), built as Scrapy builds it."""
    crawler = get_crawler(settings_dict={"PROMETHEUS_ENABLED": True, **settings})
    return PrometheusExtension.from_crawler(crawler)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Started:
    ext: PrometheusExtension
    sd_dir: Path
    records: list[logging.LogRecord] = field(default_factory=list)

    @property
    def port(self) -> int:
        assert self.ext.port is not None
        return self.ext.port


@pytest.fixture(scope="module")
def extension(pki: Pki) -> Iterator[Started]:
    """The extension on loopback with HTTPS, basic auth and a file_sd folder, started as
    the engine starts it (a module fixture: caplog is per test, so a handler of its own)."""
    sd_dir = pki.folder / "sd"
    ext = _extension({**pki.settings(), "PROMETHEUS_PORT": "0",
                      "PROMETHEUS_FILE_SD_DIR": str(sd_dir), "FRONTIER_WORKER_ID": "tls-w0"})
    logger, handler = logging.getLogger(EXTENSION_LOG), _Records()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        ext.engine_started()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    yield Started(ext, sd_dir, handler.records)
    ext.engine_stopped()


# ---------------------------------------------------------------- a real Prometheus


@pytest.mark.skipif(PROMETHEUS is None, reason=MISSING)
def test_a_real_prometheus_scrapes_over_tls_with_a_password(
        pki: Pki, mtls: int, extension: Started) -> None:
    client_tls = {"ca_file": str(pki.ca.cert_path), "cert_file": str(pki.client[0]),
                  "key_file": str(pki.client[1])}
    auth = {"username": USER, "password_file": str(pki.password_file)}
    static = {"static_configs": [{"targets": [f"127.0.0.1:{mtls}"]}]}
    config = {
        "global": {"scrape_interval": "500ms", "scrape_timeout": "500ms"},
        "scrape_configs": [
            {"job_name": "mtls", "scheme": "https", "tls_config": client_tls,
             "basic_auth": auth, **static},
            {"job_name": "wrong_password", "scheme": "https", "tls_config": client_tls,
             "basic_auth": {**auth, "password_file": str(pki.wrong_password_file)}, **static},
            # No scheme: the default, http, unless the target's __scheme__ label says https.
            {"job_name": "file_sd", "tls_config": {"ca_file": str(pki.ca.cert_path)},
             "basic_auth": auth, "file_sd_configs": [
                 {"files": [f"{extension.sd_dir}/*.json"], "refresh_interval": "1s"}]},
        ],
    }
    with prometheus(pki.folder / "prometheus", config) as port:
        up = _until(lambda: {r["metric"]["job"]: r["value"][1] for r in query(port, "up")},
                    lambda got: len(got) == 3 and got["mtls"] == got["file_sd"] == "1")
        counter = query(port, 'crawler_test_scrapes_total{job="mtls"}')
        histogram = query(port, 'crawler_download_latency_seconds_count{job="file_sd"}')
        targets = {t["labels"]["job"]: t for t in api(port, "targets")["activeTargets"]}
    errors = {job: (t["scrapeUrl"], t["lastError"]) for job, t in targets.items()}
    assert up == {"mtls": "1", "file_sd": "1", "wrong_password": "0"}, errors
    assert [r["value"][1] for r in counter] == ["7"]
    assert [r["value"][1] for r in histogram] == ["0"]
    assert targets["file_sd"]["scrapeUrl"] == f"https://127.0.0.1:{extension.port}/metrics"
    assert "401" in targets["wrong_password"]["lastError"]


def _until(read: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    got = read()
    while not done(got) and time.monotonic() < deadline:
        time.sleep(0.1)
        got = read()
    return got


# ---------------------------------------------------------------- other clients


def _get(pki: Pki, port: int, authorization: str | None = None, *,
         certificate: bool = True) -> tuple[int, str | None, bytes]:
    """GET /metrics over TLS trusting the test CA: status, challenge, body."""
    context = pki.ca.client_context()
    if certificate:
        context.load_cert_chain(*pki.client)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        conn.request("GET", "/metrics",
                     headers={"Authorization": authorization} if authorization else {})
        answer = conn.getresponse()
        return answer.status, answer.getheader("WWW-Authenticate"), answer.read()
    finally:
        conn.close()


def _basic(user: str, password: str, scheme: str = "Basic") -> str:
    return f"{scheme} {base64.b64encode(f'{user}:{password}'.encode()).decode()}"


def test_the_extension_serves_https_to_the_password_only(pki: Pki, extension: Started) -> None:
    status, challenge, body = _get(pki, extension.port, certificate=False)
    assert (status, challenge) == (401, REALM)
    assert b"crawler_" not in body
    status, _, body = _get(pki, extension.port, _basic(USER, PASSWORD), certificate=False)
    assert status == 200
    assert b"crawler_download_latency_seconds_count 0.0" in body
    messages = [(r.levelname, r.getMessage()) for r in extension.records]
    assert ("INFO", f"Metrics: https://127.0.0.1:{extension.port}/metrics") in messages
    assert all(level == "INFO" for level, _ in messages), messages  # loopback: no warning
    assert not any(PASSWORD in message for _, message in messages)


@pytest.mark.parametrize("authorization", [
    _basic(USER, "not-the-password"), _basic("someone", PASSWORD), _basic(USER, ""),
    _basic(USER, PASSWORD + "x"), _basic(USER, PASSWORD, scheme="Bearer"),
    "Basic " + base64.b64encode(USER.encode()).decode(),  # no colon
    "Basic %%%not-base64", "Basic",
], ids=["wrong password", "wrong user", "empty password", "longer password", "not basic",
        "no colon", "not base64", "no token"])
def test_wrong_credentials_get_401_and_the_challenge(pki: Pki, mtls: int,
                                                     authorization: str) -> None:
    status, challenge, body = _get(pki, mtls, authorization)
    assert (status, challenge) == (401, REALM)
    assert b"crawler_test_scrapes" not in body


def test_the_password_and_a_client_certificate_get_the_metrics(pki: Pki, mtls: int) -> None:
    for scheme in ("Basic", "basic"):  # the scheme's case does not matter (RFC 9110)
        status, challenge, body = _get(pki, mtls, _basic(USER, PASSWORD, scheme))
        assert (status, challenge) == (200, None)
        assert b"crawler_test_scrapes_total 7.0" in body


def test_a_client_without_a_certificate_is_refused(pki: Pki, mtls: int) -> None:
    assert _get(pki, mtls, _basic(USER, PASSWORD))[0] == 200  # with one, it is served
    # The server's alert (TLS 1.3: "certificate required"), or a reset when it closes
    # the connection before the client has read the alert.
    with pytest.raises(OSError):
        _get(pki, mtls, _basic(USER, PASSWORD), certificate=False)


def test_a_client_stalled_in_the_handshake_holds_up_no_other(pki: Pki, mtls: int) -> None:
    """Handshakes run in each connection's thread, not in the loop that accepts."""
    with socket.create_connection(("127.0.0.1", mtls), timeout=5) as stalled:
        stalled.sendall(b"\x16\x03\x01")  # the start of a ClientHello, and no more
        started = time.monotonic()
        assert _get(pki, mtls, _basic(USER, PASSWORD))[0] == 200
        assert time.monotonic() - started < 2


def test_plain_http_to_the_tls_port_gets_no_answer(pki: Pki, mtls: int,
                                                   extension: Started) -> None:
    for port in (mtls, extension.port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", "/metrics", headers={"Authorization": _basic(USER, PASSWORD)})
            with pytest.raises((OSError, http.client.HTTPException)):
                conn.getresponse()
        finally:
            conn.close()
        # The server still answers those that speak TLS.
        assert _get(pki, port, _basic(USER, PASSWORD))[0] == 200


# ---------------------------------------------------------------- settings


def _misconfigured(pki: Pki, tmp: Path) -> dict[str, tuple[dict[str, str], str]]:
    """Settings that cannot be served, with what the ERROR line must say."""
    good = pki.settings()
    auth = {k: v for k, v in good.items() if "BASIC_AUTH" in k}
    tls = {k: v for k, v in good.items() if "_TLS_" in k}
    missing, empty, folder = tmp / "missing", tmp / "empty", tmp / "folder"
    empty.write_text("\n \n")
    folder.mkdir()
    cert, key = "PROMETHEUS_TLS_CERT_FILE", "PROMETHEUS_TLS_KEY_FILE"
    user, password = "PROMETHEUS_BASIC_AUTH_USER", "PROMETHEUS_BASIC_AUTH_PASSWORD_FILE"
    return {
        "cert without key": ({cert: good[cert]}, f"{cert} is set but {key} is not"),
        "key without cert": ({key: good[key]}, f"{key} is set but {cert} is not"),
        "client CA without TLS": ({"PROMETHEUS_TLS_CLIENT_CA_FILE": str(pki.ca.cert_path)},
                                  f"PROMETHEUS_TLS_CLIENT_CA_FILE needs {cert} and {key}"),
        "user without password": ({user: USER}, f"{user} is set but {password} is not"),
        "password without user": ({password: good[password]},
                                  f"{password} is set but {user} is not"),
        "missing password file": ({**tls, user: USER, password: str(missing)},
                                  f"{password} {missing}: cannot read it (No such file"),
        "empty password file": ({**auth, password: str(empty)}, f"{password} {empty} is empty"),
        "password file a folder": ({**auth, password: str(folder)},
                                   f"{password} {folder}: cannot read it (Is a directory)"),
        "missing cert file": ({**good, cert: str(missing)},
                              f"{cert} {missing}: cannot read it (No such file"),
        "a password file for a key": ({**good, key: str(pki.password_file)},
                                      f"{key} {pki.password_file}: not a PEM certificate"),
        "user with a colon": ({**good, user: "a:b"}, f"{user} cannot contain ':'"),
    }


CASES = ["cert without key", "key without cert", "client CA without TLS",
         "user without password", "password without user", "missing password file",
         "empty password file", "password file a folder", "missing cert file",
         "a password file for a key", "user with a colon"]


@pytest.mark.parametrize("case", CASES)
def test_a_mistake_is_one_error_line_and_no_server(
        pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str) -> None:
    settings, says = _misconfigured(pki, tmp_path)[case]
    sd_dir = tmp_path / "sd"
    with caplog.at_level(logging.INFO, logger=EXTENSION_LOG):
        ext = _extension({**settings, "PROMETHEUS_PORT": "0",
                          "PROMETHEUS_FILE_SD_DIR": str(sd_dir)})
        ext.engine_started()
        ext.engine_stopped()
    assert [(r.levelname, r.getMessage()[:len("Metrics: not served: ")])
            for r in caplog.records] == [("ERROR", "Metrics: not served: ")]
    assert says in caplog.records[0].getMessage()
    assert caplog.records[0].exc_info is None
    assert PASSWORD not in caplog.text
    assert ext.port is None
    assert not sd_dir.exists()


def test_an_endpoint_anyone_can_read_off_loopback_is_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    ext = _extension({"PROMETHEUS_HOST": "0.0.0.0", "PROMETHEUS_PORT": "0"})
    with caplog.at_level(logging.INFO, logger=EXTENSION_LOG):
        ext.engine_started()
    try:
        assert ext.port is not None
        conn = http.client.HTTPConnection("127.0.0.1", ext.port, timeout=5)
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 200  # served all the same
        conn.close()
    finally:
        ext.engine_stopped()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"readable by anyone who reaches 0.0.0.0:{ext.port}" in warnings[0]
    for setting in ("PROMETHEUS_BASIC_AUTH_USER", "PROMETHEUS_BASIC_AUTH_PASSWORD_FILE",
                    "PROMETHEUS_TLS_CERT_FILE", "PROMETHEUS_TLS_KEY_FILE", "PROMETHEUS_HOST"):
        assert setting in warnings[0]


@pytest.mark.parametrize(("host", "expected"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST", True), ("0.0.0.0", False), ("::", False),
    ("10.1.2.3", False), ("crawl-3.example", False), ("", False),
])
def test_loopback_hosts(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected


_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
_AUTH = Credentials(USER.encode(), PASSWORD.encode())


@pytest.mark.parametrize(("host", "access", "says"), [
    ("127.0.0.1", Access(), None),
    ("0.0.0.0", Access(), "readable by anyone who reaches 0.0.0.0:9410 (no password"),
    ("10.0.0.5", Access(tls=_TLS), "readable by anyone who reaches 10.0.0.5:9410 (over TLS"),
    ("0.0.0.0", Access(credentials=_AUTH), "crosses the network in clear text"),
    ("0.0.0.0", Access(tls=_TLS, credentials=_AUTH), None),
    ("0.0.0.0", Access(tls=_TLS, clients_verified=True), None),
], ids=["loopback", "open", "tls only", "password without tls", "tls and password",
        "client certificates"])
def test_what_an_exposed_endpoint_warns_about(host: str, access: Access,
                                               says: str | None) -> None:
    warning = exposure_warning(host, 9410, access)
    assert warning == says if says is None else says in (warning or "")


def test_credentials_never_show_the_password() -> None:
    assert PASSWORD not in repr(_AUTH) and PASSWORD not in str(_AUTH)
