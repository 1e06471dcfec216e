"""Sizes as operators write them (RabbitMQ's units) and the memory high watermark.

Pure parsers, shared by the settings (flags, environment) and the admin facade (runtime limit
changes); the resource alarms themselves live in ``gateway.runtime.alarms``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

# RabbitMQ's units: k/K/KiB.. are powers of 1024, kB/KB/MB/GB.. powers of 1000
_UNITS: Final = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tib": 1 << 40,
    "p": 1 << 50,
    "pib": 1 << 50,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
}
_SIZE_RE: Final = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes from ``1000000``, ``512MiB``, ``2GB``, ``50M`` (ValueError otherwise)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"a size must be >= 0, got {text}")
        return text
    match = _SIZE_RE.match(str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a size in bytes: {text!r} (e.g. 50000000, 50MB, 512MiB, 2GB)")
    return int(match.group(1)) * _UNITS[unit]


@dataclass(frozen=True)
class MemoryWatermark:
    """Either a fraction of the total RAM (``relative``) or a byte size (``absolute``)."""

    relative: float | None = 0.4
    absolute: int | None = None

    def limit(self, total_memory: int) -> int:
        if self.absolute is not None:
            return self.absolute
        assert self.relative is not None
        return int(total_memory * self.relative)

    def describe(self) -> str:
        return str(self.absolute) if self.absolute is not None else str(self.relative)


def parse_memory_watermark(text: str | float | int) -> MemoryWatermark:
    """``0.4`` (a fraction of RAM, 0 < f <= 1) or a byte size (``2147483648``, ``2GB``)."""
    if isinstance(text, float) or (isinstance(text, str) and "." in text):
        fraction = float(text)
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"a relative memory watermark must be in (0, 1], got {text}")
        return MemoryWatermark(relative=fraction)
    size = parse_size(text)
    if size == 1:
        return MemoryWatermark(relative=1.0)  # "1" reads as the fraction 1.0, not one byte
    if size == 0:
        raise ValueError("the memory high watermark must be above 0")
    return MemoryWatermark(relative=None, absolute=size)
