"""The URLs this worker offered lately: duplicates known without asking Redis.

Most links on a page name a page the crawl already knows (a site's menu,
its footer, the pages it links from everywhere). Each would cost the whole
intake (the trap rules, the address guard, a record built) and a seen-set
check in Redis, to learn what this worker already knew: it offered the same
URL a moment ago. The frontier's seen set only grows, so a URL offered once
is a duplicate for the rest of the crawl, and forgetting an offer here costs
only the Redis check it would have saved.

Two generations of hashes bound the memory (a few MB at the default size):
a URL seen again while in the older one moves to the newer, so a site's
menu stays known while one-off links age out. The hashes are Python's
64-bit string hashes: a false match among 2 x 65,536 entries is one lookup
in about 10^14.

The one offer the frontier does not remember is a URL of a dropped host
(``scrapy frontier host NAME --drop``): it is refused before the seen set is
touched, so that the host's URLs can come back when it is requeued. A batch
with such a refusal is forgotten here (:meth:`RecentOffers.forget`).
"""

from __future__ import annotations

from collections.abc import Iterable


class RecentOffers:
    """The canonical URLs offered lately, as hashes, in two generations of ``size``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._new: set[int] = set()
        self._old: set[int] = set()

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def known(self, canon: str) -> bool:
        """Whether ``canon`` was offered lately (and keep it known a while longer)."""
        key = hash(canon)
        if key in self._new:
            return True
        if key in self._old:
            self._keep(key)
            return True
        return False

    def offered(self, canon: str) -> None:
        if self.size > 0:
            self._keep(hash(canon))

    def forget(self, canons: Iterable[str]) -> None:
        for canon in canons:
            key = hash(canon)
            self._new.discard(key)
            self._old.discard(key)

    def _keep(self, key: int) -> None:
        self._new.add(key)
        if len(self._new) >= self.size:
            self._old, self._new = self._new, set()
