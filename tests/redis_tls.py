"""A redis-server as a fleet runs it: TLS only, client certificates, ACL users,
the ``default`` user off.

The users are the crawler's own (:mod:`crawler.frontier.acl`) plus ``admin``,
which only the tests use (to look at and remove what a test wrote). Every
client reaches the server through a ``rediss://`` URL that carries its CA
and client certificate as redis-py's ``ssl_*`` query options, as a worker's
``$BROADCRAWL_REDIS_URL`` would.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import redis

from crawler.frontier.acl import acl_line, key_patterns
from tests.realweb.tls import TestCA
from tests.redis_server import answers, free_port, redis_server_binary

ADMIN_PASSWORD = "admin-Pw-5d0e"


@dataclass(frozen=True, slots=True)
class TlsRedis:
    """A running TLS-only server: URLs for its users."""

    port: int
    ca: Path
    cert: Path
    key: Path
    passwords: Mapping[str, str]

    def url(self, user: str, password: str | None = None, certificate: bool = True) -> str:
        """``rediss://`` for ``user`` (its password unless ``password`` is given),
        trusting the test CA, presenting the client certificate if asked."""
        secret = self.passwords[user] if password is None else password
        query = f"ssl_ca_certs={quote(str(self.ca))}"
        if certificate:
            query += f"&ssl_certfile={quote(str(self.cert))}&ssl_keyfile={quote(str(self.key))}"
        return f"rediss://{user}:{quote(secret)}@127.0.0.1:{self.port}/0?{query}"

    def admin(self) -> redis.Redis:
        return redis.Redis.from_url(self.url("admin"))


def crawler_users(namespace: str, start_urls_key: str, passwords: Mapping[str, str],
                  drop: Mapping[str, str] | None = None) -> list[str]:
    """The crawler's ACL line (:func:`crawler.frontier.acl.acl_line`) for each
    user of ``passwords``; a name's role is its part before any ``-``
    (``worker-noscripts`` is a worker). ``drop`` takes a command from a user."""
    patterns = key_patterns(namespace, start_urls_key)
    lines = []
    for name, password in passwords.items():
        role = name.split("-")[0]
        line = acl_line(name, role, patterns, password)
        if drop and name in drop:
            line += f" -{drop[name]}"
        lines.append(line)
    return lines


@contextmanager
def tls_redis(users: list[str], passwords: Mapping[str, str], client_certificates: bool = True,
              ) -> Iterator[TlsRedis]:
    """Start ``redis-server`` on a free loopback port, TLS only, with the ACL
    lines ``users`` (and ``admin``), ``default`` off; stop it afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="crawler-test-tls-redis-"))
    ca = TestCA(folder / "ca")
    server_cert, server_key = ca.issue(["localhost"], ["127.0.0.1"])
    client_cert, client_key = ca.issue_client("broadcrawl-worker")
    (folder / "users.acl").write_text("\n".join([
        "user default off",
        f"user admin on >{ADMIN_PASSWORD} ~* &* +@all",
        *users]) + "\n")
    port = free_port()
    with (folder / "redis.log").open("wb") as log:
        proc = subprocess.Popen(
            [redis_server_binary(), "--port", "0", "--tls-port", str(port),
             "--bind", "127.0.0.1",
             "--tls-cert-file", str(server_cert), "--tls-key-file", str(server_key),
             "--tls-ca-cert-file", str(ca.cert_path),
             "--tls-auth-clients", "yes" if client_certificates else "no",
             "--aclfile", str(folder / "users.acl"),
             "--save", "", "--appendonly", "no", "--dir", str(folder)],
            stdout=log, stderr=subprocess.STDOUT)
    server = TlsRedis(port, ca.cert_path, client_cert, client_key,
                      {"admin": ADMIN_PASSWORD, **passwords})
    try:
        deadline = time.monotonic() + 15
        while not answers(server.url("admin")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("TLS redis-server did not start: "
                                   + (folder / "redis.log").read_text()[-2000:])
            time.sleep(0.05)
        yield server
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
