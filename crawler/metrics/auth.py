"""HTTP basic authentication in front of the metrics WSGI app.

prometheus_client's own server takes TLS options but no WSGI app of ours, so
there is no public way to check credentials inside it. This module wraps
``prometheus_client.make_wsgi_app`` instead, and :mod:`crawler.metrics.server`
serves the result: public APIs only.

Prometheus sends the same credentials on every scrape (``basic_auth`` in its
scrape config), so a fixed user and password are all that is needed; both are
compared in constant time (:func:`hmac.compare_digest`) so that the time of a
refusal does not tell how much of a guess was right.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

#: Shown by browsers and curl when they ask for credentials.
REALM = "broadcrawl metrics"


@dataclass(frozen=True)
class Credentials:
    """The one user and password that may read the metrics (UTF-8 bytes, as on the wire)."""

    user: bytes
    password: bytes

    def __repr__(self) -> str:  # never the password, in a log or a traceback
        return f"Credentials(user={self.user!r}, password=<hidden>)"

    def accept(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries these credentials."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            # WSGI hands headers over as latin-1 text; base64 is ASCII.
            raw = base64.b64decode(token.strip().encode("ascii"), validate=True)
        except (UnicodeEncodeError, binascii.Error):
            return False
        user, colon, password = raw.partition(b":")
        # Both comparisons run whatever the first says: no early exit to time.
        same_user = hmac.compare_digest(user, self.user)
        same_password = hmac.compare_digest(password, self.password)
        return bool(colon) and same_user and same_password


def require_basic_auth(app: WSGIApplication, credentials: Credentials, *,
                       realm: str = REALM, what: str = "these metrics") -> WSGIApplication:
    """``app`` behind basic auth: any other request gets ``401`` and a challenge.
    The app sees the user as ``REMOTE_USER``, as behind a web server's auth."""
    body = f"401 Unauthorized: {what} need a user and password\n".encode()
    challenge = f'Basic realm="{realm}"'

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if credentials.accept(environ.get("HTTP_AUTHORIZATION")):
            environ["REMOTE_USER"] = credentials.user.decode("utf-8", "replace")
            return app(environ, start_response)
        start_response("401 Unauthorized", [
            ("WWW-Authenticate", challenge),
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
        ])
        return [body]

    return guarded
