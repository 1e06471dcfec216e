"""Latency histograms of the write path (append batches, fdatasync), for ``/metrics``.

Observed on the event loop once per batch or sync, never per message: a bisect and three
additions. The admin plane reads them through the facade and exposes them as Prometheus
histograms (``sievemq_append_seconds``, ``sievemq_fsync_seconds``).
"""

from __future__ import annotations

from bisect import bisect_left

BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


class Histogram:
    """Counts per upper bound (``BUCKETS``, then +Inf), their sum and count."""

    __slots__ = ("count", "counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= bound) pairs, ending with (inf, count)."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*BUCKETS, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


class WriteLatencies:
    """The node's write-path histograms, shared by every stream's appender."""

    __slots__ = ("append", "fsync")

    def __init__(self) -> None:
        self.append = Histogram()
        self.fsync = Histogram()
