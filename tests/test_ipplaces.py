"""Places a worker keeps at a server address for its next request there.

The bounds of ``crawler/scheduling/ipplaces.py`` on a clock the test moves:
a place is reused only within its life from the gate's grant and goes back
at its end if it was not (a batch per address), and a closing worker gets
every kept place to give back. The gate's side (``spare``) is checked
against a real Redis in ``tests/test_frontier_ips.py``.
"""

from __future__ import annotations

import asyncio

from crawler.lease import AddressPlace
from crawler.scheduling.ipplaces import KeptPlaces


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _kept(clock: Clock) -> tuple[KeptPlaces, list[tuple[str, list[str]]]]:
    given: list[tuple[str, list[str]]] = []
    places = KeptPlaces(lambda address, members: given.append((address, members)),
                        clock=clock, life_s=1.0)
    return places, given


def _place(member: str, granted: float, address: str = "127.0.0.5") -> AddressPlace:
    return AddressPlace(address, 0, member, granted, True)


def test_a_kept_place_is_reused_at_its_address_only_while_it_is_young() -> None:
    async def run() -> None:
        clock = Clock()
        places, given = _kept(clock)
        assert places.keep(_place("a", clock.now))
        assert places.reuse("127.0.0.6") is None  # another address: nothing kept there
        reused = places.reuse("127.0.0.5")
        assert reused is not None and reused.member == "a"
        assert places.reuse("127.0.0.5") is None  # one request per place
        # Kept again by its second request, then found too old: given back, not reused.
        assert places.keep(reused)
        clock.now += 1.0
        assert places.reuse("127.0.0.5") is None
        assert given == [("127.0.0.5", ["a"])]
        # Too old to keep at all.
        assert not places.keep(_place("b", clock.now - 1.0))
        assert len(places) == 0

    asyncio.run(run())


def test_places_go_back_together_at_the_end_of_their_life() -> None:
    async def run() -> None:
        clock = Clock()
        places, given = _kept(clock)
        places.keep(_place("a", clock.now))
        places.keep(_place("b", clock.now))
        places.keep(_place("c", clock.now, address="::1"))
        clock.now += 0.5
        places.keep(_place("d", clock.now - 0.4))
        places.sweep()
        assert given == []
        clock.now += 0.5  # a, b, c granted 1 s ago; d 0.9 s
        places.sweep()
        assert sorted(given) == [("127.0.0.5", ["a", "b"]), ("::1", ["c"])]
        assert len(places) == 1
        given.clear()
        clock.now += 0.1
        places.sweep()
        assert given == [("127.0.0.5", ["d"])]
        assert len(places) == 0

    asyncio.run(run())


def test_the_sweep_runs_by_itself_on_the_event_loop() -> None:
    async def run() -> list[tuple[str, list[str]]]:
        given: list[tuple[str, list[str]]] = []
        places = KeptPlaces(lambda address, members: given.append((address, members)),
                            life_s=0.1)
        loop = asyncio.get_running_loop()
        places.keep(AddressPlace("127.0.0.5", 0, "a", loop.time(), True))
        await asyncio.sleep(0.05)
        assert given == []
        await asyncio.sleep(0.15)
        return given

    # (time.monotonic is the loop's clock too)
    assert asyncio.run(run()) == [("127.0.0.5", ["a"])]


def test_a_closing_worker_takes_every_kept_place_to_give_back() -> None:
    async def run() -> None:
        clock = Clock()
        places, given = _kept(clock)
        places.keep(_place("a", clock.now))
        places.keep(_place("b", clock.now, address="::1"))
        assert places.take_all() == {"127.0.0.5": ["a"], "::1": ["b"]}
        assert len(places) == 0
        clock.now += 1
        places.sweep()
        assert given == []

    asyncio.run(run())
