"""Passwords masked in what is shown (crawler/redaction.py)."""

from __future__ import annotations

from crawler.redaction import one_line, safe_url, url_password


def test_safe_url_never_shows_a_password() -> None:
    assert safe_url("redis://:hunter2@h:6379/0") == "redis://***@h:6379/0"
    assert safe_url("redis://bob:hunter2@h/1") == "redis://bob:***@h/1"
    assert safe_url("redis://hunter2@h/1") == "redis://***@h/1"
    assert "hunter2" not in safe_url("unix:///tmp/r.sock?db=0&password=hunter2")
    assert safe_url("redis://127.0.0.1:1/0") == "redis://127.0.0.1:1/0"


def test_the_password_is_found_wherever_the_url_puts_it() -> None:
    assert url_password("redis://:hunter2@h/0") == "hunter2"
    assert url_password("redis://hunter2@h/0") == "hunter2"  # a userinfo without ':'
    assert url_password("unix:///tmp/r.sock?password=hunter2") == "hunter2"
    assert url_password("redis://h:6379/0") is None


def test_an_error_becomes_one_line_without_the_secret() -> None:
    assert one_line(OSError("auth hunter2\n  failed"), "hunter2") == "auth *** failed"
    assert one_line(TimeoutError()) == "TimeoutError"
