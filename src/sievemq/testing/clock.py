"""A clock the test moves by hand, for code that schedules with ``loop.call_later``.

Code that polls or times out on loop timers (the resource alarms' poll, a stream
connection's parked publish credits) takes the loop, or its ``call_later``, as a parameter;
a test passes a ``ManualClock`` instead and says when time has passed with ``advance``.
Nothing then depends on how fast the machine runs the real timers.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

__all__ = ["ManualClock", "ManualTimer"]


class ManualTimer:
    """One scheduled callback (what ``call_later`` returns): ``cancel()`` it like a
    ``TimerHandle``."""

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]):
        self._when = when
        self._callback = callback
        self._args = args
        self._cancelled = False

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled

    def _run(self) -> None:
        self._callback(*self._args)


class ManualClock:
    """``time()``, ``call_later()`` and ``call_at()`` as an event loop has them; the timers
    run, in due order, only inside ``advance()``."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._seq = itertools.count()
        self._heap: list[tuple[float, int, ManualTimer]] = []

    def time(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> ManualTimer:
        timer = ManualTimer(when, callback, args)
        heapq.heappush(self._heap, (when, next(self._seq), timer))
        return timer

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> ManualTimer:
        return self.call_at(self._now + delay, callback, *args)

    def pending(self) -> list[float]:
        """The due times of the timers not yet run nor cancelled, earliest first."""
        return sorted(when for when, _, timer in self._heap if not timer.cancelled())

    def advance(self, seconds: float) -> int:
        """Move the clock ``seconds`` on, running every timer due by then (those the
        callbacks schedule too, if due) at its own time; returns how many ran."""
        end = self._now + seconds
        ran = 0
        while self._heap and self._heap[0][0] <= end:
            when, _, timer = heapq.heappop(self._heap)
            if timer.cancelled():
                continue
            self._now = max(self._now, when)
            timer._run()
            ran += 1
        self._now = end
        return ran
