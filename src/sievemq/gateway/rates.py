"""Rates of the admin plane's counters and lengths, as RabbitMQ's management plugin shows
them (``*_details.rate``): per object, (time, value) samples are kept for the last
``RATE_WINDOW_S``; a rate is the change over them per second.

Samples come from the facade's background sampler every ``SAMPLE_INTERVAL_S`` (RabbitMQ's
``collect_statistics_interval``, 5 s by default), and from the requests themselves (at most
one a second), so that the first answer after a burst already shows its rate."""

from __future__ import annotations

from collections import deque

RATE_WINDOW_S = 5.0  # the rate is over (at least) the last this many seconds
SAMPLE_INTERVAL_S = 5.0  # the background sampler's default period
MIN_GAP_S = 1.0  # two samples of one key are at least this far apart

Key = tuple[str, ...]


class RateSampler:
    """Per key, a few (time, value) samples. A counter's rate is never negative (a counter
    that went down was reset); a length's (``gauge=True``) is negative while it shrinks."""

    def __init__(self, window_s: float = RATE_WINDOW_S, min_gap_s: float = MIN_GAP_S) -> None:
        self.window_s = window_s
        self.min_gap_s = min(min_gap_s, window_s)
        self._samples: dict[Key, deque[tuple[float, int]]] = {}

    def rate(self, key: Key, value: int, now: float, gauge: bool = False) -> float:
        """Record ``value`` at ``now`` (unless the last sample is newer than the minimum gap)
        and answer the change per second since the oldest sample of the window."""
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = deque(maxlen=16)
        if not samples or now - samples[-1][0] >= self.min_gap_s:
            samples.append((now, value))
        # keep the newest sample at least a window old: the rate spans a whole window
        while len(samples) > 2 and now - samples[1][0] >= self.window_s:
            samples.popleft()
        then, before = samples[0]
        elapsed = now - then
        if elapsed <= 0 or (value < before and not gauge):
            return 0.0
        return round((value - before) / elapsed, 1)

    def forget(self, keep: set[Key]) -> None:
        """Drop the samples of every key not in ``keep`` (objects gone)."""
        for key in [k for k in self._samples if k not in keep]:
            del self._samples[key]

    def __len__(self) -> int:
        return len(self._samples)
