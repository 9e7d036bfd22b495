"""Who may read the metrics: TLS and basic auth, from the ``PROMETHEUS_*`` settings.

Metrics tell a lot about a crawl (what it fetches, how fast, from where), so
an endpoint off loopback should be readable by Prometheus only:

- ``PROMETHEUS_TLS_CERT_FILE`` and ``PROMETHEUS_TLS_KEY_FILE`` (both or
  neither) serve HTTPS; ``PROMETHEUS_TLS_CLIENT_CA_FILE`` also requires every
  client to present a certificate that CA signed;
- ``PROMETHEUS_BASIC_AUTH_USER`` and ``PROMETHEUS_BASIC_AUTH_PASSWORD_FILE``
  (both or neither) require that user and password. The password is read
  from a file (its first line, stripped) so that it is on no command line,
  in no ``ps`` listing and in no scrapyd job arguments.

Every mistake is an :class:`AccessError` whose message names the settings
and files involved, never a password or a key: the extension logs it on one
line and the crawl goes on without metrics.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawler.metrics.auth import Credentials

CERT, KEY, CLIENT_CA = ("PROMETHEUS_TLS_CERT_FILE", "PROMETHEUS_TLS_KEY_FILE",
                        "PROMETHEUS_TLS_CLIENT_CA_FILE")
USER, PASSWORD_FILE = "PROMETHEUS_BASIC_AUTH_USER", "PROMETHEUS_BASIC_AUTH_PASSWORD_FILE"


class AccessError(ValueError):
    """The access settings cannot be served as they are (the message says why)."""


@dataclass(frozen=True)
class Access:
    """How the endpoint is protected: a TLS context and credentials, each optional."""

    tls: ssl.SSLContext | None = None
    credentials: Credentials | None = None
    clients_verified: bool = False  # TLS with PROMETHEUS_TLS_CLIENT_CA_FILE

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Access:
        """Read, check and load the access settings (files are read here, once)."""

        def setting(name: str) -> str:
            return str(settings.get(name) or "").strip()

        cert, key, client_ca = setting(CERT), setting(KEY), setting(CLIENT_CA)
        user, password_file = setting(USER), setting(PASSWORD_FILE)
        _both_or_neither(CERT, cert, KEY, key, "for plain HTTP")
        _both_or_neither(USER, user, PASSWORD_FILE, password_file, "for no password")
        if client_ca and not cert:
            raise AccessError(f"{CLIENT_CA} needs {CERT} and {KEY}: clients present "
                              "certificates over TLS only")
        if ":" in user:
            raise AccessError(f"{USER} cannot contain ':' (basic auth splits on it)")
        tls = tls_context(cert, key, client_ca) if cert else None
        credentials = Credentials(user.encode(), read_password(password_file)) if user \
            else None
        return cls(tls, credentials, clients_verified=bool(client_ca))


def _both_or_neither(first: str, first_value: str, second: str, second_value: str,
                     neither_means: str) -> None:
    if bool(first_value) != bool(second_value):
        given, missing = (first, second) if first_value else (second, first)
        raise AccessError(f"{given} is set but {missing} is not: set both, "
                          f"or neither {neither_means}")


def tls_context(cert: str, key: str, client_ca: str = "") -> ssl.SSLContext:
    """A server context for ``cert``/``key``; with ``client_ca``, clients must
    present a certificate it signed. TLS 1.2 at least, as Prometheus does."""
    for name, path in ((CERT, cert), (KEY, key), (CLIENT_CA, client_ca)):
        if path:
            _readable(name, path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except OSError as exc:  # ssl.SSLError: OpenSSL's reason, never the key
        raise AccessError(f"{CERT} {cert} and {KEY} {key}: not a PEM certificate and "
                          f"its private key ({_why(exc)})") from None
    if client_ca:
        try:
            context.load_verify_locations(cafile=client_ca)
        except OSError as exc:
            raise AccessError(f"{CLIENT_CA} {client_ca}: not a PEM certificate "
                              f"({_why(exc)})") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _readable(name: str, path: str) -> bytes:
    """The file's bytes, or an :class:`AccessError` naming the setting and the file."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise AccessError(f"{name} {path}: cannot read it ({_why(exc)})") from None


def _why(exc: OSError) -> str:
    """A short reason: OpenSSL's (``KEY_VALUES_MISMATCH``) or the system's."""
    return str(getattr(exc, "reason", None) or exc.strerror or exc)


def read_password(path: str) -> bytes:
    """The first line of ``path``, stripped: a password never shown in any error."""
    lines = _readable(PASSWORD_FILE, path).splitlines()
    password = lines[0].strip() if lines else b""
    if not password:
        raise AccessError(f"{PASSWORD_FILE} {path} is empty: put the password on its "
                          "first line")
    return password


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the endpoint on this machine.

    Addresses are judged as such; of names, only ``localhost`` (any other is
    not resolved here, and counts as reachable from outside).
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, port: int, access: Access, *, what: str = "Metrics",
                     host_setting: str = "PROMETHEUS_HOST") -> str | None:
    """What an operator should hear about an endpoint off loopback, or None.

    TLS alone hides the metrics from the wire but still serves anyone who
    asks; basic auth alone sends its password in clear text. (``what``: the
    endpoint, as the message names it; ``host_setting``: where it is bound.)
    """
    if is_loopback(host):
        return None
    if access.credentials is None and not access.clients_verified:
        how = "over TLS, but " if access.tls is not None else ""
        return (f"{what}: readable by anyone who reaches {host}:{port} ({how}no password "
                f"and no client certificate asked): set {USER} and {PASSWORD_FILE}, and "
                f"{CERT} and {KEY} (or {CLIENT_CA}), or keep {host_setting} on loopback")
    if access.tls is None:
        return (f"{what}: the password of {USER} crosses the network in clear text to "
                f"{host}:{port}: set {CERT} and {KEY}")
    return None
