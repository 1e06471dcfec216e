"""The link's heartbeat follows the lease's TTL: two silent intervals (the drop) are twice the
TTL, a lag the lease survives and the replicas' own detector already takes for a lost leader."""

from __future__ import annotations

import asyncio
from typing import Any

import pamqp.commands as spec

from sievemq.amqp import codec, frames
from sievemq.cluster.link import LINK_HEARTBEAT_S, Links, heartbeat_for


def test_the_interval_is_half_the_ttl_rounded_up_within_its_bounds() -> None:
    assert heartbeat_for(5) == 5  # the default lease: a silent link dropped after 10-15 s
    assert heartbeat_for(2) == 2 and heartbeat_for(1) == 2
    assert heartbeat_for(2.5) == 3
    assert heartbeat_for(30) == LINK_HEARTBEAT_S
    for ttl in range(1, 40):
        assert 2 * heartbeat_for(ttl) >= min(2 * ttl, 2 * LINK_HEARTBEAT_S)


class Transport:
    """Keeps what the link writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False


def test_the_link_asks_its_interval_of_a_peer_that_offers_more() -> None:
    loop = asyncio.new_event_loop()
    try:
        links = Links("b", lambda: "secret", lambda node: None, loop, heartbeat_s=3)
        link = links._connect("a", "/")  # (no address: never connects; tuned by hand)
        transport = Transport()
        link.transport = transport  # type: ignore[assignment]
        link._tuned(spec.Connection.Tune(channel_max=2047, frame_max=131072, heartbeat=60))
        got: Any = frames.FrameReader(131072, 1 << 20).feed(transport.written[0])
        tune_ok: Any = codec.decode_method(got[0][2])
        assert tune_ok.heartbeat == 3 and link._heartbeat_s == 3
        assert link._heartbeat is not None  # the first beat is due in 3 s
        link._heartbeat.cancel()
    finally:
        loop.close()
