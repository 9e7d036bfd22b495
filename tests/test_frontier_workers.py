"""Heartbeats and the one rule for "a worker is alive" (crawler/frontier/workers.py)."""

from __future__ import annotations

import json

import pytest

from crawler.frontier.workers import (
    ALIVE_FLOOR_SECONDS,
    Heartbeat,
    alive_window,
    beat_interval,
    is_alive,
)


def test_a_heartbeat_survives_the_round_trip() -> None:
    beat = Heartbeat(seen=1_700_000_000.25, held=4, pid=123, host="box", lease=30.0)
    assert Heartbeat.parse(beat.to_json()) == beat
    assert Heartbeat.parse(beat.to_json().encode()) == beat


def test_unknown_fields_are_left_out_of_the_wire_form() -> None:
    assert json.loads(Heartbeat(5.0).to_json()) == {"seen": 5.0}


def test_a_beat_of_an_older_worker_reads_without_its_lease() -> None:
    raw = json.dumps({"seen": 10, "held": "3", "pid": 7, "host": "box"})
    assert Heartbeat.parse(raw) == Heartbeat(10.0, 3, 7, "box", None)


@pytest.mark.parametrize("raw", [None, b"", b"{", b"[]", b'{"held": 1}', b'{"seen": "x"}',
                                 b'{"seen": null}', b'{"seen": NaN}'])
def test_an_unreadable_beat_is_none_and_never_alive(raw: bytes | None) -> None:
    assert Heartbeat.parse(raw) is None
    assert not is_alive(raw, now=0.0)


def test_odd_optional_fields_do_not_hide_the_worker() -> None:
    beat = Heartbeat.parse(b'{"seen": 1, "held": "many", "pid": true, "host": 5, "lease": -1}')
    assert beat == Heartbeat(1.0)


def test_a_worker_beats_three_times_a_lease() -> None:
    assert beat_interval(60) == 20
    assert beat_interval(0.1) == 0.2  # tiny leases do not hammer Redis


@pytest.mark.parametrize(("lease", "window"), [
    (60, 60.0),  # the default: three missed 20 s beats
    (600, 600.0),
    (3, ALIVE_FLOOR_SECONDS),  # short leases (tests) have a floor: beats run late
])
def test_gone_after_three_missed_beats_with_a_floor(lease: float, window: float) -> None:
    assert alive_window(lease) == window


def test_alive_is_judged_by_the_lease_the_beat_states() -> None:
    now = 1000.0
    assert Heartbeat(now - 59).alive(now, lease_seconds=60)
    assert not Heartbeat(now - 60).alive(now, lease_seconds=60)
    # its own lease wins over the reader's setting
    assert Heartbeat(now - 100, lease=300).alive(now, lease_seconds=60)
    assert not Heartbeat(now - 100, lease=30).alive(now, lease_seconds=600)
    # the floor: a 1 s lease is not gone after 5 s of silence
    assert Heartbeat(now - 5, lease=1).alive(now)
    assert not Heartbeat(now - ALIVE_FLOOR_SECONDS, lease=1).alive(now)


def test_a_clock_ahead_of_the_readers_is_age_zero() -> None:
    beat = Heartbeat(seen=2000.0)
    assert beat.age(1000.0) == 0.0 and beat.alive(1000.0)
