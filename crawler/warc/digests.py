"""The archive's digest index: payload digest -> the capture that holds the payload.

Identical payloads are archived once. Before writing a page, the writer
asks this index whether its payload digest was archived before; if so the
page becomes a ``revisit`` record pointing at that first capture (URL and
WARC-Date), which is how pywb and other replay tools find the bytes. A ``304
Not Modified`` to a revisit's conditional request is looked up the same way,
with the digest the frontier kept for the URL, but never recorded: it holds
no payload.

Keyed by the first characters of the digest (:func:`crawler.revisit.short_digest`,
50 bits: what a URL of a recurring crawl keeps of its last payload, so that a
304 finds its capture), with the whole digest in the value: a payload whose
short digest is taken by another is archived in full, never as a revisit of
the wrong bytes.

Kept in the frontier's Redis (one slot: every key shares the hash tag), so
that every worker and every run of a crawl id share it; on request
(``WARC_DIGEST_INDEX``) several crawl ids of one spider share one. Bounded
(``WARC_DIGEST_INDEX_MAX`` entries): two generations, ``KEY`` and
``KEY:old``; when the current one holds half the bound it becomes the old one
(replacing it), and a digest found in the old one is copied into the
current, so payloads that keep coming back stay while those not seen for a
generation are forgotten (and archived in full once more). A crawl without a
frontier keeps it in memory.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, NamedTuple

from crawler.revisit import short_digest

if TYPE_CHECKING:
    import redis


class Capture(NamedTuple):
    """Where a payload was archived first: its URI, WARC-Date and full digest."""

    url: str
    date: str
    digest: str = ""  # "": an entry written before the index kept it

# ARGV: half the bound (0: none), then (digest, capture JSON or "" to look up
# only) pairs. For each: the earlier capture's JSON, or "" (and this capture
# is recorded, unless it was a look-up). A digest twice in one call gets the
# first one back. A call reads the current generation once (HMGET), the old
# one once for what the current lacks, and writes what is new once (HSET):
# the same answers as a HSETNX per digest, a few commands per batch instead
# of one per page.
_FIRST_CAPTURES = """
local cur, old, half = KEYS[1], KEYS[2], tonumber(ARGV[1])
local digests = {}
for i = 2, #ARGV, 2 do digests[#digests + 1] = ARGV[i] end
local found = redis.call('HMGET', cur, unpack(digests))
local missing, where = {}, {}
for j, digest in ipairs(digests) do
  if not found[j] and not where[digest] then
    missing[#missing + 1] = digest
    where[digest] = #missing
  end
end
local earlier_old = {}
if #missing > 0 and redis.call('EXISTS', old) == 1 then
  local got = redis.call('HMGET', old, unpack(missing))
  for j, digest in ipairs(missing) do earlier_old[digest] = got[j] end
end
local known, writes, out = {}, {}, {}
for j, digest in ipairs(digests) do
  local capture = ARGV[2 * j + 1]
  local earlier = found[j] or known[digest] or earlier_old[digest]
  if earlier then
    if not found[j] and not known[digest] then  -- from the old generation: kept
      writes[#writes + 1] = digest
      writes[#writes + 1] = earlier
    end
  elseif capture ~= '' then
    writes[#writes + 1] = digest
    writes[#writes + 1] = capture
  end
  known[digest] = known[digest] or earlier or (capture ~= '' and capture) or nil
  out[j] = earlier or ''
end
if #writes > 0 then redis.call('HSET', cur, unpack(writes)) end
if half > 0 and redis.call('HLEN', cur) >= half then redis.call('RENAME', cur, old) end
return out
"""


class DigestIndex:
    """Payload digest -> first capture, shared through Redis (else in memory)."""

    def __init__(self, client: redis.Redis | None = None, key: str = "",
                 max_entries: int = 0) -> None:
        self.client = client
        self.keys = [key, f"{key}:old"]
        self.half = max(1, max_entries // 2) if max_entries > 0 else 0
        self._local: dict[str, Capture] = {}
        self._script = client.register_script(_FIRST_CAPTURES) if client is not None else None

    def first_captures(self, captures: list[tuple[str, str, str]]) -> list[Capture | None]:
        """For each ``(digest, url, date)``: the earlier capture of the payload, or
        ``None``; a capture not found is recorded, unless ``url`` is "" (a look-up
        by a short digest: a 304's)."""
        if not captures:
            return []
        if self._script is None:
            answers = [self._first_local(*capture) for capture in captures]
        else:
            args: list[str | int] = [self.half]
            for digest, url, date in captures:
                args += [short_digest(digest), json.dumps([url, date, digest]) if url else ""]
            answers = [Capture(*json.loads(a)) if a else None
                       for a in self._script(keys=self.keys, args=args)]
        return [_same_payload(answer, digest, url)
                for answer, (digest, url, _) in zip(answers, captures, strict=True)]

    def first_capture(self, digest: str, url: str, date: str) -> Capture | None:
        """The earlier capture of ``digest``, or ``None`` (and this one is recorded)."""
        return self.first_captures([(digest, url, date)])[0]

    def _first_local(self, digest: str, url: str, date: str) -> Capture | None:
        earlier = self._local.get(short_digest(digest))
        if earlier is None and url:
            self._local[short_digest(digest)] = Capture(url, date, digest)
        return earlier

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def _same_payload(found: Capture | None, digest: str, url: str) -> Capture | None:
    """``found`` unless it is another payload that shares the short digest (a
    capture looked up for a recorded one must hold these very bytes)."""
    if found is None or not url or not found.digest or found.digest == digest:
        return found
    return None
