"""How much free space a folder must keep, and whether it has it.

``WARC_MIN_FREE`` is bytes (``1073741824``, ``"512MiB"``, ``"2GB"``) or a
share of the filesystem (``"5%"``): an operator with one big archive disk
thinks in percent, one with a small root disk in bytes. Below it a worker
pauses (:mod:`crawler.extensions.storage`); it resumes at a tenth more
(:data:`RESUME_MARGIN`), so a disk hovering at the line does not make it
pause and resume with every page.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: Resume only with this much more than the minimum free (a tenth).
RESUME_MARGIN = 1.1

_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "kib": 1024,
    "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1000**4, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class MinFree:
    """A minimum of free space: ``size`` bytes, or ``percent`` of the filesystem."""

    size: int = 0
    percent: float = 0.0

    def of(self, total: int) -> int:
        """The minimum in bytes on a filesystem of ``total`` bytes."""
        return math.ceil(total * self.percent / 100) if self.percent else self.size

    def __str__(self) -> str:
        return f"{self.percent:g}%" if self.percent else human(self.size)


def parse_min_free(value: object) -> MinFree:
    """``WARC_MIN_FREE`` as a :class:`MinFree` (ValueError: it says what is wrong)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"WARC_MIN_FREE must not be negative, not {value!r}")
        return MinFree(size=int(value))
    text = str(value or "0").strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            percent = -1.0
        if not 0 <= percent < 100:
            raise ValueError(f"WARC_MIN_FREE {text!r}: a percentage is from 0% to 99%")
        return MinFree(percent=percent)
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"WARC_MIN_FREE {text!r}: give bytes (1073741824, 512MiB, 2GB) "
                         "or a percentage of the disk (5%)")
    return MinFree(size=int(float(match.group(1)) * _UNITS[unit]))


def human(size: float) -> str:
    """``size`` bytes for a log line: ``812 MiB``, ``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" or size >= 100 else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
