"""Per-chunk Bloom filter: mmh3, two bit positions, bit 0 = "has unfiltered messages".

Hot path: positions are memoised per (value, bit count) because a consumer checks the same
few values against every chunk header it skips.
"""

from __future__ import annotations

from functools import lru_cache

import mmh3

MIN_SIZE = 16
MAX_SIZE = 4096
HASH_MMH3 = 1  # hash id written in every chunk header


def check_size(size_bytes: int) -> None:
    """Reject sizes outside 16..4096 bytes."""
    if not MIN_SIZE <= size_bytes <= MAX_SIZE:
        raise ValueError(f"bloom filter size must be {MIN_SIZE}..{MAX_SIZE} bytes: {size_bytes}")


@lru_cache(maxsize=65536)
def positions(value: str, bits: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two (byte index, mask) pairs of ``value`` in a filter of ``bits`` bits.

    "" (a message without a filter value) maps to bit 0 twice; any other value maps into
    1..bits-1 using the two 64-bit halves of MurmurHash3 x64-128, MSB-first bit numbering.
    """
    if value == "":
        return (0, 0x80), (0, 0x80)
    h1, h2 = mmh3.hash64(value, 0, True, False)
    b1 = 1 + h1 % (bits - 1)
    b2 = 1 + h2 % (bits - 1)
    return (b1 >> 3, 0x80 >> (b1 & 7)), (b2 >> 3, 0x80 >> (b2 & 7))


class BloomFilter:
    """A fixed-size Bloom filter whose bytes go into a chunk header."""

    __slots__ = ("_bits", "size_bytes")

    def __init__(self, size_bytes: int) -> None:
        check_size(size_bytes)
        self.size_bytes = size_bytes
        self._bits = bytearray(size_bytes)

    def add(self, value: str) -> None:
        """Add a filter value; "" marks a message without a value (sets bit 0)."""
        (i1, m1), (i2, m2) = positions(value, self.size_bytes << 3)
        self._bits[i1] |= m1
        self._bits[i2] |= m2

    def might_contain(self, value: str) -> bool:
        """False means the value is certainly absent; True means maybe present."""
        (i1, m1), (i2, m2) = positions(value, self.size_bytes << 3)
        return bool(self._bits[i1] & m1) and bool(self._bits[i2] & m2)

    def to_bytes(self) -> bytes:
        return bytes(self._bits)

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        bloom = cls(len(data))
        bloom._bits[:] = data
        return bloom

    def __repr__(self) -> str:
        return f"BloomFilter({self.size_bytes}, {self._bits.hex()})"
