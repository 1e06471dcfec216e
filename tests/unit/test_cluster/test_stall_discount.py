"""A node that ran late takes that time off its copies' silence, and keeps the rest."""

from __future__ import annotations

from sievemq.cluster.failover import discount_stall, heard_since


class Copy:
    def __init__(self, heard_at: float) -> None:
        self.heard_at = heard_at


def test_the_stall_is_not_counted_but_the_silence_before_it_is() -> None:
    quiet_for_4s = Copy(heard_at=100.0)  # last frame at 100, the loop stalled 104-106
    discount_stall([quiet_for_4s], late=2.0, now=106.0)
    assert quiet_for_4s.heard_at == 102.0  # silent 4 s now, as before the stall
    # (reset to now, as before, a stall every few seconds kept every copy "hearing")


def test_a_frame_read_in_the_late_turn_is_not_pushed_into_the_future() -> None:
    just_heard = Copy(heard_at=105.9)
    discount_stall([just_heard], late=2.0, now=106.0)
    assert just_heard.heard_at == 106.0


def test_a_stall_while_an_election_stands_is_not_the_leader_heard() -> None:
    """An election that chose nobody stands from 100; the node's loop stalls 2 s at 101-103:
    ``discount_stall`` moves the copy's heard_at forward, which is no frame from the leader."""
    copy = Copy(heard_at=100.0)  # counted from when it stood (``listen_anew``)
    discount_stall([copy], late=2.0, now=103.0)
    assert not heard_since(copy.heard_at, stood_at=100.0, stalls_s=2.0)
    copy.heard_at = 103.5  # a frame from the leader
    assert heard_since(copy.heard_at, stood_at=100.0, stalls_s=2.0)
