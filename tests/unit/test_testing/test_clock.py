"""ManualClock: timers run only when the test moves the clock, in due order, at their time."""

from __future__ import annotations

from sievemq.testing.clock import ManualClock


def test_timers_run_in_due_order_at_their_own_time() -> None:
    clock = ManualClock()
    seen: list[tuple[str, float]] = []
    clock.call_later(2.0, lambda: seen.append(("b", clock.time())))
    clock.call_later(1.0, lambda: seen.append(("a", clock.time())))
    clock.call_at(2.0, lambda: seen.append(("c", clock.time())))  # same time: in order made
    assert clock.advance(0.5) == 0 and seen == [] and clock.time() == 0.5
    assert clock.advance(1.5) == 3
    assert seen == [("a", 1.0), ("b", 2.0), ("c", 2.0)]
    assert clock.time() == 2.0 and clock.pending() == []


def test_a_cancelled_timer_never_runs() -> None:
    clock = ManualClock()
    seen: list[int] = []
    timer = clock.call_later(1.0, seen.append, 1)
    clock.call_later(1.0, seen.append, 2)
    timer.cancel()
    assert timer.cancelled() and clock.pending() == [1.0]
    assert clock.advance(10.0) == 1 and seen == [2]


def test_a_timer_made_by_a_callback_runs_if_due_within_the_same_advance() -> None:
    clock = ManualClock()
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(clock.time())
        clock.call_later(1.0, tick)

    clock.call_later(1.0, tick)
    assert clock.advance(3.0) == 3
    assert ticks == [1.0, 2.0, 3.0] and clock.pending() == [4.0]
