"""Rates of the admin plane's counters and lengths, as RabbitMQ's management plugin shows them.

Each is a ``*_details.rate``: per object, (time, values) samples are kept for the last
``RATE_WINDOW_S``; a rate is the change over them per second.

Samples come from the facade's background sampler every ``SAMPLE_INTERVAL_S`` (RabbitMQ's
``collect_statistics_interval``, 5 s by default), and from the requests themselves (at most
one a second), so that the first answer after a burst already shows its rate. One sample
holds all the values of one object (a queue's counters and lengths), so a round costs one
call per object."""

from __future__ import annotations

from collections import deque

RATE_WINDOW_S = 5.0  # the rate is over (at least) the last this many seconds
SAMPLE_INTERVAL_S = 5.0  # the background sampler's default period
MIN_GAP_S = 1.0  # two samples of one object are at least this far apart

Key = tuple[str, ...]


class RateSampler:
    """Per object, a few (time, values) samples. The first ``counters`` values are counters:
    their rate is never negative (a counter that went down was reset); the others are
    lengths, whose rate is negative while they shrink."""

    def __init__(self, window_s: float = RATE_WINDOW_S, min_gap_s: float = MIN_GAP_S) -> None:
        self.window_s = window_s
        self.min_gap_s = min(min_gap_s, window_s)
        self._samples: dict[Key, deque[tuple[float, tuple[int, ...]]]] = {}

    def rates(
        self, key: Key, names: tuple[str, ...], values: tuple[int, ...], now: float, counters: int
    ) -> dict[str, float]:
        """Record ``values`` at ``now`` and answer each one's change per second since the
        oldest sample of the window, by ``names``."""
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = deque(maxlen=16)
        if len(samples) >= 2 and samples[-1][1] == values and samples[-2][1] == values:
            samples[-1] = (now, values)  # nothing moved: one flat stretch, two samples
        elif not samples or now - samples[-1][0] >= self.min_gap_s:
            samples.append((now, values))
        # keep the oldest sample at least a window old: the rate spans a whole window
        while len(samples) > 2 and now - samples[1][0] >= self.window_s:
            samples.popleft()
        then, first = samples[0]
        before: tuple[float, ...] = first
        start = now - self.window_s
        if then < start and len(samples) >= 2:
            # the values a window ago, on the line between the two oldest samples (exact
            # for a flat stretch: a burst after a long idle time is rated over the window)
            t1, second = samples[1]
            if t1 <= start:
                then, before = t1, second
            else:
                share = (start - then) / (t1 - then)
                before = tuple(a + (b - a) * share for a, b in zip(first, second, strict=True))
                then = start
        elapsed = now - then
        out: dict[str, float] = {}
        for i, name in enumerate(names):
            change = values[i] - before[i]
            if elapsed <= 0 or (change < 0 and i < counters):
                out[name] = 0.0
            else:
                out[name] = round(change / elapsed, 1)
        return out

    def forget(self, keep: set[Key]) -> None:
        """Drop the samples of every object not in ``keep`` (objects gone)."""
        for key in [k for k in self._samples if k not in keep]:
            del self._samples[key]

    def __len__(self) -> int:
        return len(self._samples)
