"""Reaching a frontier from a command (crawler/frontier/connection.py)."""

from __future__ import annotations

import pytest

from crawler.frontier.connection import RedisUnreachable, connect


def test_an_unreachable_redis_is_named_without_its_password() -> None:
    error = RedisUnreachable("redis://:hunter2@h/0", OSError("auth hunter2\nfailed"), "hunter2")
    assert str(error) == "cannot reach Redis at redis://***@h/0: auth *** failed"
    assert str(RedisUnreachable("redis://h/0", OSError())) == (
        "cannot reach Redis at redis://h/0: OSError")


def test_connect_names_the_url_without_password() -> None:
    with pytest.raises(RedisUnreachable, match=r"^cannot reach Redis at redis://\*\*\*@"), \
            connect("redis://:hunter2@127.0.0.1:1/0", None):
        pass
