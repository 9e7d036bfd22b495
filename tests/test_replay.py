"""The replay window (crawler/scheduling/replay.py): what a worker admits again
after Redis was away."""

from __future__ import annotations

from crawler.frontier.values import Admission
from crawler.scheduling.replay import ReplayWindow


def _admissions(*names: str) -> list[Admission]:
    return [Admission(f"http://a.test/{n}", "http://a.test:80", n.encode().ljust(16, b"-"),
                      f'{{"u":"/{n}"}}') for n in names]


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_window_keeps_the_last_seconds_and_empties_when_taken() -> None:
    clock = _Clock()
    window = ReplayWindow(10, clock=clock)
    window.sent(_admissions("a", "b"))
    clock.now += 6
    window.sent(_admissions("c"))
    clock.now += 5  # "a" and "b" were sent 11 s ago
    assert [a.url for a in window.take()] == ["http://a.test/c"]
    assert len(window) == 0 and window.take() == []


def test_the_window_holds_at_most_its_limit_dropping_the_oldest() -> None:
    window = ReplayWindow(10, limit=3, clock=_Clock())
    for name in "abcde":
        window.sent(_admissions(name))
    assert [a.url[-1] for a in window.take()] == ["c", "d", "e"]


def test_zero_seconds_keeps_nothing() -> None:
    window = ReplayWindow(0, clock=_Clock())
    window.sent(_admissions("a"))
    assert len(window) == 0 and window.take() == []
