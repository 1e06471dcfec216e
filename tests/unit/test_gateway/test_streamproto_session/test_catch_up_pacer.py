"""A copy's catch-up pacing: the share of the leader's loop its turns take follows the live
load (``CatchUpPacer``). Times are given, not measured: no test here depends on speed."""

from __future__ import annotations

import pytest

from sievemq.gateway.streamproto_session.subscription import (
    CATCH_UP_LATE_S,
    CATCH_UP_SHARE_MAX,
    CATCH_UP_SHARE_MIN,
    CatchUpPacer,
)


def run_turns(pacer: CatchUpPacer, now: float, turns: int, end: int, late: float = 0.0) -> float:
    """``turns`` turns of 1 ms, each begun ``late`` seconds after its pause ended; the
    stream's end stays at ``end``. Returns the time after the last."""
    for _ in range(turns):
        left = pacer.wait(now)
        if left > 0:
            now += left + late
            assert pacer.wait(now) == 0
        pacer.turn_done(now, now + 0.001, end, goes_on=True)
        now += 0.001
    return now


def test_the_first_turn_goes_at_once_at_the_smallest_share() -> None:
    pacer = CatchUpPacer()
    assert pacer.wait(100.0) == 0
    pacer.turn_done(100.0, 100.001, 5, goes_on=True)  # a new end to it: counted as live load
    assert pacer.share == CATCH_UP_SHARE_MIN
    pause = 0.001 * (1 - CATCH_UP_SHARE_MIN) / CATCH_UP_SHARE_MIN  # a tenth of the loop
    assert pacer.wait(100.001) == pytest.approx(pause)


def test_an_idle_leader_lets_the_catch_up_grow_to_full_speed() -> None:
    pacer = CatchUpPacer()
    now = run_turns(pacer, 0.0, 1, end=7)
    shares = []
    for _ in range(6):
        now = run_turns(pacer, now, 1, end=7)  # no publishes, on time
        shares.append(pacer.share)
    assert shares == sorted(shares)
    assert shares[-1] == CATCH_UP_SHARE_MAX
    assert pacer.wait(now) == 0  # no pause left at full speed


def test_publishes_bring_the_share_back_down() -> None:
    pacer = CatchUpPacer()
    now = run_turns(pacer, 0.0, 8, end=7)
    assert pacer.share == CATCH_UP_SHARE_MAX
    now = run_turns(pacer, now, 1, end=8)  # the stream's end moved: publishers at work
    assert pacer.share == CATCH_UP_SHARE_MIN
    spent = 0.0
    start = now
    for end in range(9, 29):  # a steady publisher: every turn finds the end moved
        now = run_turns(pacer, now, 1, end=end)
        spent += 0.001
    assert pacer.share == CATCH_UP_SHARE_MIN
    assert spent / (now - start) == pytest.approx(CATCH_UP_SHARE_MIN, rel=0.1)


def test_a_late_turn_counts_as_load_but_a_wait_for_credit_does_not() -> None:
    pacer = CatchUpPacer()
    now = run_turns(pacer, 0.0, 3, end=3)
    assert CATCH_UP_SHARE_MIN < pacer.share < CATCH_UP_SHARE_MAX  # turns are paused
    # a turn out of credit schedules none; the credit comes long after the pause ended
    pacer.turn_done(now, now + 0.001, 3, goes_on=False)
    grown = min(CATCH_UP_SHARE_MAX, pacer.share * 2)
    later = pacer.due + 1.0
    assert pacer.wait(later) == 0
    pacer.turn_done(later, later + 0.001, 3, goes_on=True)
    assert pacer.share == grown
    pacer = CatchUpPacer()
    now = run_turns(pacer, 0.0, 3, end=3)
    run_turns(pacer, now, 1, end=3, late=CATCH_UP_LATE_S * 2)  # its timer ran late
    assert pacer.share == CATCH_UP_SHARE_MIN


def test_at_full_speed_a_turn_run_late_after_the_one_before_counts_as_load() -> None:
    pacer = CatchUpPacer()
    now = run_turns(pacer, 0.0, 8, end=3)
    assert pacer.share == CATCH_UP_SHARE_MAX
    assert pacer.wait(now) == 0  # no pause: the next turn follows the last at once
    pacer.turn_done(now, now + 0.001, 3, goes_on=True)
    now += 0.001 + CATCH_UP_LATE_S * 2  # other work ran in between (another stream's)
    assert pacer.wait(now) == 0
    pacer.turn_done(now, now + 0.001, 3, goes_on=True)
    assert pacer.share == CATCH_UP_SHARE_MIN
