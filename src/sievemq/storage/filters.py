"""FilterSpec: which messages a consumer wants, checked per chunk (Bloom) and per message.

Hot path: ``may_match_bytes`` runs once per chunk header a filtered reader looks at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sievemq.storage.bloom import BloomFilter, positions


@dataclass(frozen=True)
class FilterSpec:
    """Wanted filter values; any of them (default) or all of them must be on a message."""

    values: tuple[str, ...]
    match_unfiltered: bool = False
    match_all: bool = False
    # bloom size in bytes -> (byte1, mask1, byte2, mask2) per value, computed once per size
    _probes: dict[int, list[tuple[int, int, int, int]]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def _probes_for(self, size: int) -> list[tuple[int, int, int, int]]:
        probes = self._probes.get(size)
        if probes is None:
            probes = []
            for v in self.values:
                (i1, m1), (i2, m2) = positions(v, size << 3)
                probes.append((i1, m1, i2, m2))
            self._probes[size] = probes
        return probes

    def chunk_may_match(self, bloom: BloomFilter | None) -> bool:
        """False when the chunk certainly holds no matching message."""
        return self.may_match_bytes(None if bloom is None else bloom.to_bytes())

    def may_match_bytes(self, bloom: bytes | None) -> bool:
        """Like chunk_may_match on raw header bytes; None/b"" = chunk has no filter values."""
        if not bloom:
            # osiris convention: no Bloom bytes means every message in the chunk is unfiltered
            return self.match_unfiltered
        if self.match_unfiltered and bloom[0] & 0x80:
            return True
        probes = self._probes.get(len(bloom)) or self._probes_for(len(bloom))
        if self.match_all:
            for i1, m1, i2, m2 in probes:
                if not (bloom[i1] & m1 and bloom[i2] & m2):
                    return False
            return bool(probes)
        for i1, m1, i2, m2 in probes:  # noqa: SIM110 - a plain loop beats any() + generator here
            if bloom[i1] & m1 and bloom[i2] & m2:
                return True
        return False

    def matches(self, filter_values: tuple[str, ...]) -> bool:
        """Exact per-message check."""
        if not filter_values:
            return self.match_unfiltered
        if not self.values:
            return False
        if self.match_all:
            return all(v in filter_values for v in self.values)
        if len(filter_values) == 1:
            return filter_values[0] in self.values
        return any(v in filter_values for v in self.values)
