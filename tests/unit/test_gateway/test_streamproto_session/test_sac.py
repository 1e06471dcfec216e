"""The single-active-consumer coordinator's group rules, with recording stand-ins for the
connection and the subscriptions (no sockets): who is asked, in which order, and who
delivers."""

from __future__ import annotations

import struct
from typing import Any

from sievemq.gateway.streamproto_session.sac import SacCoordinator
from sievemq.streamproto import wire


class Conn:
    def __init__(self) -> None:
        self.frames: list[tuple[int, int, int]] = []  # corr, subscription id, active

    def write(self, data: bytes) -> None:
        key, version = struct.unpack_from(">HH", data, 4)
        assert (key, version) == (wire.CONSUMER_UPDATE, 1)
        self.frames.append(struct.unpack_from(">IBB", data, 8))


class Sub:
    def __init__(self, sid: int) -> None:
        self.subscription_id = sid
        self.holding = False
        self.sac: Any = None
        self.started_at: Any = "never"

    def activate(self, offset: Any) -> None:
        self.holding = False
        self.started_at = offset


class Clock:
    """A recording ``call_later``: the test fires the deadlines it chooses."""

    def __init__(self) -> None:
        self.timers: list[tuple[float, Any, list[bool]]] = []  # delay, callback, [cancelled]

    def call_later(self, delay: float, callback: Any) -> Any:
        cancelled = [False]
        self.timers.append((delay, callback, cancelled))

        class Handle:
            def cancel(self) -> None:
                cancelled[0] = True

        return Handle()

    def live(self) -> list[Any]:
        return [cb for _delay, cb, cancelled in self.timers if not cancelled[0]]

    def fire_all(self) -> None:
        due = [entry for entry in self.timers if not entry[2][0]]
        for _delay, callback, state in due:
            state[0] = True  # fired: no longer pending
            callback()


def _coordinator() -> SacCoordinator:
    return SacCoordinator(60.0, Clock().call_later)  # type: ignore[arg-type]


def _answer(sac: SacCoordinator, conn: Conn, corr: int, kind: int = 0, value: int = 0) -> None:
    sac.on_reply(conn, wire.ConsumerUpdateReply(corr, wire.OK, wire.OffsetSpec(kind, value)))


def test_plain_stream_oldest_member_is_active_and_the_next_takes_over() -> None:
    sac, conn = _coordinator(), Conn()
    a, b = Sub(1), Sub(2)
    key = ("/", "s", "g")
    sac.register(conn, a, key, -1)  # type: ignore[arg-type]
    assert conn.frames[-1][1:] == (1, 1) and a.holding  # asked, not delivering yet
    _answer(sac, conn, conn.frames[-1][0], wire.OFFSET_OFFSET, 7)
    assert not a.holding and a.started_at == wire.OffsetSpec(wire.OFFSET_OFFSET, 7)
    sac.register(conn, b, key, -1)  # type: ignore[arg-type]
    assert conn.frames[-1][1:] == (2, 0) and b.holding  # told it waits
    a.sac.leave()
    assert conn.frames[-1][1:] == (2, 1)  # promoted on the first one's departure
    _answer(sac, conn, conn.frames[-1][0])
    assert not b.holding and b.started_at.kind == wire.OFFSET_NONE
    b.sac.leave()
    assert sac.groups == {}


def test_partitioned_group_steps_down_before_the_newcomer_starts() -> None:
    """Partition 1 of a super stream: with two members the second one is chosen; the first
    stops at once, is told so, and the second is asked only after that answer."""
    sac, c1, c2 = _coordinator(), Conn(), Conn()
    a, b = Sub(5), Sub(6)
    key = ("/", "ss-1", "g")
    sac.register(c1, a, key, 1)  # type: ignore[arg-type]
    _answer(sac, c1, c1.frames[-1][0])
    assert not a.holding
    sac.register(c2, b, key, 1)  # type: ignore[arg-type]
    assert a.holding and c1.frames[-1][1:] == (5, 0)  # stepped down
    assert c2.frames == []  # not yet: the old one may store its offset first
    _answer(sac, c2, c1.frames[-1][0])  # an answer on the wrong connection is ignored
    assert c2.frames == []
    _answer(sac, c1, c1.frames[-1][0])
    assert c2.frames[-1][1:] == (6, 1)
    _answer(sac, c2, c2.frames[-1][0], wire.OFFSET_NEXT)
    assert not b.holding and a.holding


def test_partition_index_spreads_three_partitions_over_three_members() -> None:
    sac = _coordinator()
    conns = [Conn() for _ in range(3)]
    subs = {(p, m): Sub(10 * m + p) for p in range(3) for m in range(3)}
    for m in range(3):  # members join one after another, each on every partition
        for p in range(3):
            sac.register(conns[m], subs[p, m], ("/", f"ss-{p}", "g"), p)  # type: ignore[arg-type]
            # answer everything pending, as a client does
            for conn in conns:
                for corr, _sid, _active in list(conn.frames):
                    _answer(sac, conn, corr)
    active = {p: [m for m in range(3) if not subs[p, m].holding] for p in range(3)}
    assert active == {0: [0], 1: [1], 2: [2]}  # partition p -> member p mod 3


def test_unanswered_activation_passes_the_member_over() -> None:
    clock = Clock()
    sac, c1, c2 = SacCoordinator(5.0, clock.call_later), Conn(), Conn()  # type: ignore[arg-type]
    a, b = Sub(1), Sub(2)
    key = ("/", "s", "g")
    sac.register(c1, a, key, -1)  # type: ignore[arg-type]
    sac.register(c2, b, key, -1)  # type: ignore[arg-type]
    assert c1.frames[-1][1:] == (1, 1) and c2.frames[-1][1:] == (2, 0)
    assert [delay for delay, _cb, _c in clock.timers] == [5.0]  # only the activation waits
    late = c1.frames[-1][0]
    clock.fire_all()  # a never answers
    assert sac.timeouts == 1
    assert c2.frames[-1][1:] == (2, 1)  # the next one is asked
    _answer(sac, c2, c2.frames[-1][0], wire.OFFSET_NEXT)
    assert not b.holding and a.holding
    _answer(sac, c1, late)  # a's late answer changes nothing
    assert a.holding and not b.holding
    assert clock.live() == []  # b answered: no deadline left
    b.sac.leave()  # a is the only member now: asked again
    assert c1.frames[-1][1:] == (1, 1)
    _answer(sac, c1, c1.frames[-1][0])
    assert not a.holding


def test_unanswered_step_down_is_treated_as_inactive() -> None:
    clock = Clock()
    sac, c1, c2 = SacCoordinator(5.0, clock.call_later), Conn(), Conn()  # type: ignore[arg-type]
    a, b = Sub(5), Sub(6)
    key = ("/", "ss-1", "g")
    sac.register(c1, a, key, 1)  # type: ignore[arg-type]
    _answer(sac, c1, c1.frames[-1][0])
    sac.register(c2, b, key, 1)  # type: ignore[arg-type]
    assert a.holding and c1.frames[-1][1:] == (5, 0)  # stepped down, answer awaited
    assert c2.frames == []
    clock.fire_all()  # a never answers its step-down
    assert sac.timeouts == 1
    assert c2.frames[-1][1:] == (6, 1)  # the group moved on
    _answer(sac, c2, c2.frames[-1][0])
    assert not b.holding and a.holding


def test_a_deadline_is_cancelled_by_the_answer_and_by_leaving() -> None:
    clock = Clock()
    sac, conn = SacCoordinator(5.0, clock.call_later), Conn()  # type: ignore[arg-type]
    a, b = Sub(1), Sub(2)
    key = ("/", "s", "g")
    sac.register(conn, a, key, -1)  # type: ignore[arg-type]
    _answer(sac, conn, conn.frames[-1][0])
    assert clock.live() == []
    sac.register(conn, b, key, -1)  # type: ignore[arg-type]
    a.sac.leave()
    assert conn.frames[-1][1:] == (2, 1) and len(clock.live()) == 1
    b.sac.leave()
    assert clock.live() == [] and sac.groups == {} and sac.timeouts == 0
