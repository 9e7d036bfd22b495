"""How long to wait before trying again: ``Retry-After`` values and jittered backoff.

Pure functions shared by the retry middleware (pages) and the robots policy
(robots.txt answering 429 or 503): a server that names its wait gets it,
whichever request it answered.
"""

from __future__ import annotations

import email.utils
import random


def retry_after_seconds(value: bytes | str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` value asks to wait (None: absent or garbage).

    RFC 9110 10.2.3: delta-seconds or an HTTP date; a date in the past means
    now (0).
    """
    if value is None:
        return None
    text = (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
    if text.isascii() and text.isdigit():  # "²".isdigit() is True, int("²") is not
        # Beyond 15 digits it is more than 30 million years: a cap will apply.
        return float(int(text)) if len(text) <= 15 else 1e15
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def full_jitter(attempt: int, base: float, cap: float, rnd: random.Random | None = None) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base x 2^attempt)].

    Spreading retries over the whole window keeps many URLs that failed
    together from coming back together (AWS architecture blog, 2015).
    """
    return (rnd or random).uniform(0, min(cap, base * 2 ** attempt))
