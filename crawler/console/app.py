"""The console's WSGI application: pages for people, JSON for tools, one set of views.

Routes (``GET`` unless said; every page has its JSON under ``/api``):

- ``/``, ``/api/status``: the crawl: counts, hosts, workers, pace, the last hour;
- ``/hosts?by=queued&top=50&q=TEXT``, ``/api/hosts``: hosts ranked and searched;
- ``/host?name=NAME``, ``/api/host?name=NAME``: one site, its limits and why;
- ``/dead?reason=R&host=H``, ``/api/dead``: dead letters by reason, with examples;
- ``/refused``, ``/api/refused``: refusals by reason, with examples;
- ``/crawls``, ``/api/crawls``: the spider's crawls;
- ``/report``, ``/api/report``: the crawl's report as ``scrapy frontier report``
  writes it (hosts, seeds, what changed in the latest run), built now;
- ``POST /host?name=NAME`` and ``POST /api/host?name=NAME``: pause, resume,
  slow, limit, reset or drop a site (or its domain);
- ``POST /requeue``, ``POST /api/requeue``: dead letters back to their queues.

Every ``POST`` needs the console's CSRF token: the hidden ``csrf`` field of
its forms, or an ``X-CSRF-Token`` header (``GET /api/csrf`` gives it to a
tool that may read the console); a browser on another site cannot read it.
A ``POST`` whose ``Origin`` names another site is refused as well. Pages are
rendered on the server (Jinja2, every value escaped: crawled URLs are
strangers' text); the charts are inline SVG; no script runs.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jinja2

from crawler.console.actions import HOST_ACTIONS, ActionError, Done, host_action, requeue
from crawler.console.history import sparkline
from crawler.console.views import BadQuery, NotFound, Views
from crawler.frontier.leftover import GROUPS
from crawler.frontier.status import HOST_STATES
from crawler.frontier.tophosts import RANKINGS
from crawler.reports.write import render as render_report

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

logger = logging.getLogger(__name__)

#: Bytes of a form or JSON body read at most.
BODY_MAX = 64 * 1024

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("crawler.console", "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_ENV.filters["sparkline"] = sparkline


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = float(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def _datetime(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(seconds)))


_ENV.filters["ago"] = _ago
_ENV.filters["datetime"] = _datetime


class Request:
    """What a handler needs of one WSGI request."""

    def __init__(self, environ: WSGIEnvironment) -> None:
        self.environ = environ
        self.method = environ.get("REQUEST_METHOD", "GET").upper()
        self.path = environ.get("PATH_INFO", "/") or "/"
        self.query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        self._form: dict[str, str] | None = None

    def arg(self, name: str, default: str = "") -> str:
        return self.query.get(name, default)

    def form(self) -> dict[str, str]:
        """The body: a form (urlencoded) or a JSON object, as text values."""
        if self._form is None:
            try:
                length = min(int(self.environ.get("CONTENT_LENGTH") or 0), BODY_MAX)
            except ValueError:
                length = 0
            raw = self.environ["wsgi.input"].read(length) if length > 0 else b""
            kind = self.environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
            if kind == "application/json":
                try:
                    data = json.loads(raw or b"{}")
                except ValueError:
                    raise ActionError("the body is not JSON") from None
                if not isinstance(data, dict):
                    raise ActionError("the body is not a JSON object")
                self._form = {str(k): str(v) for k, v in data.items()}
            else:
                self._form = {k: v[-1] for k, v in
                              parse_qs(raw.decode("utf-8", "replace")).items()}
        return self._form

    @property
    def who(self) -> str:
        """Who acts: the basic-auth user when there is one, else the client's address."""
        user = self.environ.get("REMOTE_USER")
        address = self.environ.get("REMOTE_ADDR", "?")
        return f"{user} (console, {address})" if user else f"console user at {address}"


class Reply:
    """A response: status, headers and body."""

    def __init__(self, status: str, body: bytes, kind: str = "text/html; charset=utf-8",
                 headers: Iterable[tuple[str, str]] = ()) -> None:
        self.status = status
        self.body = body
        self.headers = [("Content-Type", kind), ("Content-Length", str(len(body))),
                        ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
                        ("X-Frame-Options", "DENY"), ("Referrer-Policy", "same-origin"),
                        ("Content-Security-Policy",
                         "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
                         "form-action 'self'; frame-ancestors 'none'"),
                        *headers]


class ConsoleApp:
    """The WSGI application over one frontier's :class:`Views`."""

    def __init__(self, views: Views, *, title: str) -> None:
        self.views = views
        self.title = title
        self.csrf = secrets.token_urlsafe(32)
        get: dict[str, Callable[[Request], Reply]] = {
            "/": self._overview, "/hosts": self._hosts, "/host": self._host,
            "/dead": self._dead, "/refused": self._refused, "/crawls": self._crawls,
            "/api/status": lambda r: _json(self.views.overview()),
            "/api/hosts": lambda r: _json(self.views.hosts(*_host_args(r))),
            "/api/host": lambda r: _json(self.views.host(r.arg("name"))),
            "/api/dead": lambda r: _json(self.views.dead(*_dead_args(r))),
            "/api/refused": lambda r: _json(self.views.refused()),
            "/api/crawls": lambda r: _json(self.views.crawls()),
            "/report": lambda r: Reply("200 OK", render_report(self.views.report()).encode()),
            "/api/report": lambda r: _json(self.views.report()),
            "/api/csrf": lambda r: _json({"csrf": self.csrf}),
        }
        post: dict[str, Callable[[Request], Reply]] = {
            "/host": self._post_host, "/api/host": self._post_host,
            "/requeue": self._post_requeue, "/api/requeue": self._post_requeue,
        }
        self.routes = {"GET": get, "HEAD": get, "POST": post}

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse
                 ) -> Iterable[bytes]:
        request = Request(environ)
        reply = self._reply(request)
        start_response(reply.status, reply.headers)
        return [] if request.method == "HEAD" else [reply.body]

    def _reply(self, request: Request) -> Reply:
        api = request.path.startswith("/api/")
        handler = self.routes.get(request.method, {}).get(request.path)
        if handler is None:
            allowed = [m for m, routes in self.routes.items() if request.path in routes]
            if allowed:
                return self._error(request, "405 Method Not Allowed",
                                   f"{request.method} is not allowed here",
                                   [("Allow", ", ".join(allowed))])
            return self._error(request, "404 Not Found", f"no page {request.path}")
        if request.method == "POST" and (why := self._forged(request)):
            logger.warning("Console: refused a POST to %s from %s: %s", request.path,
                           request.environ.get("REMOTE_ADDR", "?"), why)
            return self._error(request, "403 Forbidden", why)
        try:
            return handler(request)
        except (BadQuery, ActionError) as exc:
            return self._error(request, "400 Bad Request", str(exc))
        except NotFound as exc:
            return self._error(request, "404 Not Found", str(exc))
        except Exception as exc:  # Redis away, a script's refusal: the page says so
            logger.exception("Console: %s %s failed", request.method, request.path)
            return self._error(request, "503 Service Unavailable",
                               f"the frontier could not answer: {type(exc).__name__}"
                               if api else f"the frontier could not answer ({exc})")

    def _forged(self, request: Request) -> str | None:
        """Why a POST is not the console's own (None: it is)."""
        origin = request.environ.get("HTTP_ORIGIN")
        host = request.environ.get("HTTP_HOST", "")
        if origin and origin != "null" and urlsplit(origin).netloc != host:
            return f"a request from another site ({origin})"
        try:
            token = request.environ.get("HTTP_X_CSRF_TOKEN") or request.form().get("csrf", "")
        except ActionError as exc:
            return str(exc)
        if not hmac.compare_digest(token.encode(), self.csrf.encode()):
            return "no valid CSRF token: send the form of a page of this console"
        return None

    # --- pages

    def _page(self, template: str, **values: Any) -> Reply:
        body = _ENV.get_template(template).render(
            title=self.title, csrf=self.csrf, redis=self.views.redis, **values)
        return Reply("200 OK", body.encode())

    def _overview(self, request: Request) -> Reply:
        return self._page("overview.html", st=self.views.overview(), host_states=HOST_STATES)

    def _hosts(self, request: Request) -> Reply:
        by, top, query, group = _host_args(request)
        return self._page("hosts.html", rows=self.views.hosts(by, top, query, group), by=by,
                          top=top, q=query, rankings=RANKINGS, state=group, groups=GROUPS)

    def _host(self, request: Request) -> Reply:
        name = request.arg("name")
        return self._page("host.html", name=name, view=self.views.host(name),
                          actions=HOST_ACTIONS, done=request.arg("done"))

    def _dead(self, request: Request) -> Reply:
        reason, host, limit = _dead_args(request)
        return self._page("dead.html", dead=self.views.dead(reason, host, limit),
                          done=request.arg("done"))

    def _refused(self, request: Request) -> Reply:
        return self._page("refused.html", refused=self.views.refused())

    def _crawls(self, request: Request) -> Reply:
        return self._page("crawls.html", crawls=self.views.crawls())

    # --- changes

    def _post_host(self, request: Request) -> Reply:
        name = request.arg("name") or request.form().get("name", "")
        done = host_action(self.views.admin, self.views.control, name, request.form(),
                           request.who)
        return self._done(request, done, "/host?" + urlencode({"name": name}))

    def _post_requeue(self, request: Request) -> Reply:
        done = requeue(self.views.admin, self.views.control, request.form(), request.who)
        return self._done(request, done, "/dead")

    def _done(self, request: Request, done: Done, page: str) -> Reply:
        if request.path.startswith("/api/"):
            return _json({"target": done.target, "done": done.what, "by": request.who})
        # Post/redirect/get: a reload does not repeat the change.
        separator = "&" if "?" in page else "?"
        location = f"{page}{separator}{urlencode({'done': done.what})}"
        return Reply("303 See Other", b"", headers=[("Location", location)])

    def _error(self, request: Request, status: str, message: str,
               headers: Iterable[tuple[str, str]] = ()) -> Reply:
        if request.path.startswith("/api/"):
            return _json({"error": message}, status, headers)
        body = _ENV.get_template("error.html").render(
            title=self.title, redis=self.views.redis, status=status, message=message)
        return Reply(status, body.encode(), headers=headers)


def _json(data: Any, status: str = "200 OK", headers: Iterable[tuple[str, str]] = ()
          ) -> Reply:
    return Reply(status, json.dumps(data, default=str).encode(), "application/json",
                 headers)


def _host_args(request: Request) -> tuple[str, int, str, str]:
    try:
        top = int(request.arg("top", "50"))
    except ValueError:
        raise BadQuery(f"top takes a number, not {request.arg('top')!r}") from None
    return request.arg("by", "queued"), top, request.arg("q"), request.arg("state")


def _dead_args(request: Request) -> tuple[str | None, str | None, int]:
    try:
        limit = int(request.arg("limit", "50"))
    except ValueError:
        raise BadQuery(f"limit takes a number, not {request.arg('limit')!r}") from None
    if not 1 <= limit <= 1000:
        raise BadQuery(f"limit takes 1 to 1000, not {limit}")
    return request.arg("reason") or None, request.arg("host") or None, limit
