"""Passwords out of what is shown: URLs of services (Redis), and error messages.

A base utility, like :mod:`crawler.urls`: the runtime logs the Redis it uses
and ``scrapy frontier`` prints it, and an operator's terminal, log or cron
mail must never show a password.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"


def safe_url(url: str) -> str:
    """``url`` for display: any password (userinfo or ``?password=``) masked.

    A userinfo without ``:`` is masked whole, as some write the password there.
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hostport = netloc.rsplit("@", 1)
        user, sep, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{hostport}" if sep and user else f"{MASK}@{hostport}"
    query = urlencode([(k, MASK if k.lower() == "password" else v)
                       for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="*/")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_password(url: str) -> str | None:
    """The password in a URL (what :func:`safe_url` masks), to scrub it from messages."""
    parts = urlsplit(url)
    for key, value in parse_qsl(parts.query):
        if key.lower() == "password" and value:
            return value
    return parts.password or parts.username or None


def one_line(error: BaseException | str, secret: str | None = None) -> str:
    """An error as one line (its type if it says nothing), ``secret`` masked.

    Client libraries quote what they were given, password included, and
    multi-line messages break a one-line report.
    """
    message = " ".join(str(error).split())
    if not message and isinstance(error, BaseException):
        message = type(error).__name__
    return message.replace(secret, MASK) if secret else message
