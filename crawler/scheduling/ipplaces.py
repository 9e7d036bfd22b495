"""Places at server addresses a worker keeps a moment for its next request there.

A place at an address's gate (:mod:`crawler.frontier.ipgates`) costs two
scripts: one to take it, one to give it back. A worker crawling a server
usually sends it its next request a few milliseconds after the last one
ended, so when a request that ends held a place taken with room to spare and
no delay in force, the worker keeps the place, and its next request to that
address starts in it without asking Redis. The address's count stays right
all along: the place is in its requests in flight, under the member that
took it, until it is given back.

Kept places are bounded so that the gate's other promises hold:

* a place is reused only within :data:`KEEP_LIFE_S` of the gate's grant, and
  goes back then if it was not: an operator's pause or slow-down of the
  address, and a delay set since, reach this worker within that time, and
  hosts that wait for the address are woken by its end at most that late;
* a place is kept only when the gate said at most half the address's places
  were taken (this one included: nobody waits for it) and no delay was in
  force (the gate's turns space starts; a reused place would skip them);
* a worker that closes gives its kept places back; one that dies leaves
  them to run out with their lease, as it leaves its requests'.

A second is longer than most sites' delay, so a worker's next request to a
server usually comes within a place's life, whichever of its names it is for.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable

from crawler.lease import AddressPlace

#: A place is reused only this long (s) after the gate granted it.
KEEP_LIFE_S = 1.0


class KeptPlaces:
    """One worker's kept places (see the module docstring). ``give_back`` ends
    places at one address in the frontier (a batch of members)."""

    def __init__(self, give_back: Callable[[str, list[str]], None],
                 clock: Callable[[], float] = time.monotonic,
                 life_s: float = KEEP_LIFE_S) -> None:
        self._give_back = give_back
        self._clock = clock
        self.life_s = life_s
        self._kept: dict[str, list[AddressPlace]] = defaultdict(list)
        self._sweep: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return sum(len(places) for places in self._kept.values())

    def reuse(self, address: str) -> AddressPlace | None:
        """A kept place at ``address`` still young enough to start a request in."""
        places = self._kept.get(address)
        now = self._clock()
        old = []
        found = None
        while places and found is None:
            place = places.pop()
            if now < place.granted + self.life_s:
                found = place
            else:
                old.append(place.member)
        if old:
            self._give_back(address, old)
        if not places:
            self._kept.pop(address, None)
        return found

    def keep(self, place: AddressPlace) -> bool:
        """Keep ``place`` for the next request to its address; False (nothing
        kept) if it is too old to be reused."""
        now = self._clock()
        if now >= place.granted + self.life_s:
            return False
        self._kept[place.address].append(place)
        self._arm(place.granted + self.life_s - now)
        return True

    def sweep(self) -> None:
        """Give back the places too old to reuse."""
        self._sweep = None
        now = self._clock()
        soonest = None
        for address in list(self._kept):
            stay = [place for place in self._kept[address] if now < place.granted + self.life_s]
            going = [place.member for place in self._kept[address]
                     if now >= place.granted + self.life_s]
            if going:
                self._give_back(address, going)
            if stay:
                self._kept[address] = stay
                end = min(place.granted for place in stay) + self.life_s
                soonest = end if soonest is None else min(soonest, end)
            else:
                del self._kept[address]
        if soonest is not None:
            self._arm(soonest - now)

    def take_all(self) -> dict[str, list[str]]:
        """Every kept place, by address, forgotten here (the worker closes)."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        out = {address: [place.member for place in places]
               for address, places in self._kept.items()}
        self._kept.clear()
        return out

    def _arm(self, delay_s: float) -> None:
        loop = asyncio.get_event_loop()
        at = loop.time() + max(delay_s, 0.0)
        if self._sweep is not None and self._sweep.when() <= at:
            return
        if self._sweep is not None:
            self._sweep.cancel()
        self._sweep = loop.call_at(at, self.sweep)
