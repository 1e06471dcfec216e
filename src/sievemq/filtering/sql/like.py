"""LIKE patterns matched in linear time, without a backtracking regex.

Hot path (per message for LIKE filters). RabbitMQ's CVE-2026-67240 came from translating LIKE
into a backtracking regular expression, where ``%a%a%a%...b`` explodes. Here the pattern is
split on ``%`` into fixed-length segments (``_`` matches one character); the first segment is
anchored at the start, the last at the end, and each middle segment is placed at its
leftmost match after the previous one. Leftmost placement is always safe because segments have
a fixed length and ``%`` absorbs any gap, so a match never needs to be revisited: the work is
bounded by (text length x pattern length) and no input can make it exponential.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class PatternError(ValueError):
    """A LIKE pattern that cannot be compiled (bad use of the escape character)."""


@dataclass(frozen=True, slots=True)
class _Segment:
    """A run of pattern characters between two '%': literal chunks at fixed offsets."""

    length: int
    chunks: tuple[tuple[int, str], ...]  # (offset, literal text); gaps are '_'

    def match_at(self, s: str, i: int) -> bool:
        for off, lit in self.chunks:  # noqa: SIM110 (a plain loop is faster than all())
            if not s.startswith(lit, i + off):
                return False
        return True

    def find(self, s: str, start: int, limit: int) -> int:
        """Leftmost i >= start with the segment inside s[i:limit], or -1."""
        length = self.length
        if not self.chunks:
            return start if start + length <= limit else -1
        off0, lit0 = self.chunks[0]
        while start + length <= limit:
            j = s.find(lit0, start + off0, limit)
            if j < 0:
                return -1
            i = j - off0
            if i + length > limit:
                return -1
            if self.match_at(s, i):
                return i
            start = i + 1
        return -1


@dataclass(frozen=True, slots=True)
class LikePattern:
    """A compiled pattern; ``kind`` lets the code generator inline the common shapes."""

    kind: str  # "equals" | "prefix" | "suffix" | "contains" | "any" | "general"
    literal: str  # the plain text for the inlined kinds
    match: Callable[[str], bool]


def _parse(pattern: str, escape: str | None) -> tuple[list[list[str | None]], bool, bool]:
    """Segments (chars, None for '_'), and whether the pattern starts/ends with '%'."""
    segments: list[list[str | None]] = [[]]
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if escape is not None and ch == escape:
            if i + 1 >= n:
                raise PatternError(
                    f"LIKE pattern ends with the escape character {escape!r}: "
                    "expected %, _ or the escape character after it"
                )
            nxt = pattern[i + 1]
            if nxt not in ("%", "_", escape):
                raise PatternError(
                    f"escape character {escape!r} at pattern index {i + 1} must be followed by "
                    f"%, _ or itself, not {nxt!r}"
                )
            segments[-1].append(nxt)
            i += 2
            continue
        if ch == "%":
            segments.append([])
        elif ch == "_":
            segments[-1].append(None)
        else:
            segments[-1].append(ch)
        i += 1
    leading = len(segments) > 1 and not segments[0]
    trailing = len(segments) > 1 and not segments[-1]
    return segments, leading, trailing


def _segment(chars: list[str | None]) -> _Segment:
    chunks: list[tuple[int, str]] = []
    run: list[str] = []
    start = 0
    for k, c in enumerate(chars):
        if c is None:
            if run:
                chunks.append((start, "".join(run)))
                run = []
        else:
            if not run:
                start = k
            run.append(c)
    if run:
        chunks.append((start, "".join(run)))
    return _Segment(len(chars), tuple(chunks))


def compile_pattern(pattern: str, escape: str | None = None) -> LikePattern:
    """Compile a LIKE pattern; raise PatternError on a misused escape character."""
    raw, leading, trailing = _parse(pattern, escape)
    has_wild = any(None in seg for seg in raw)
    if len(raw) == 1:
        only = _segment(raw[0])
        if not has_wild:
            lit = "".join(c for c in raw[0] if c is not None)
            return LikePattern("equals", lit, lit.__eq__)
        return LikePattern("general", "", lambda s: len(s) == only.length and only.match_at(s, 0))
    inner = [seg for seg in raw[1:-1] if seg]
    if not has_wild and not inner:
        head = "".join(c for c in raw[0] if c is not None)
        tail = "".join(c for c in raw[-1] if c is not None)
        if not head and not tail:
            return LikePattern("any", "", lambda s: True)
        if not tail:
            return LikePattern("prefix", head, lambda s: s.startswith(head))
        if not head:
            return LikePattern("suffix", tail, lambda s: s.endswith(tail))
    if not has_wild and len(inner) == 1 and leading and trailing:
        mid = "".join(c for c in inner[0] if c is not None)
        return LikePattern("contains", mid, lambda s: mid in s)
    first = _segment(raw[0])
    last = _segment(raw[-1])
    middle = tuple(_segment(seg) for seg in inner)
    return LikePattern("general", "", lambda s: _match(s, first, middle, last))


def _match(s: str, first: _Segment, middle: tuple[_Segment, ...], last: _Segment) -> bool:
    n = len(s)
    if first.length + last.length > n:
        return False
    if not first.match_at(s, 0):
        return False
    end = n - last.length
    if not last.match_at(s, end):
        return False
    pos = first.length
    for seg in middle:
        i = seg.find(s, pos, end)
        if i < 0:
            return False
        pos = i + seg.length
    return True
