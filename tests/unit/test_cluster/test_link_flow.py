"""A link's flow control (``cluster/link.py``): who is held while it is over its mark, and
when they may read again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sievemq.cluster.link import HIGH_WATER_BYTES, LinkConnection, Links


class Quiet:
    def link_frames(self, channel: object, got: list[tuple[int, bytes]]) -> None:
        raise AssertionError("no frames expected")

    def link_closed(self, channel: object, code: int, text: str) -> None:
        return None


class Transport:
    """What the link asks of its socket: the bytes not taken yet, and the marks."""

    def __init__(self) -> None:
        self.buffered = 0
        self.limits: tuple[int, int] = (0, 0)

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        self.limits = (high, low)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def write(self, data: bytes) -> None:
        self.buffered += len(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        return None


@contextmanager
def link_to_a() -> Iterator[tuple[Links, LinkConnection, Any]]:
    loop = asyncio.new_event_loop()
    try:
        links = Links("b", lambda: "secret", lambda node: None, loop)
        link = links._connect("a", "/")  # no address: failed; made to look connected
        link.failed = False
        transport = Transport()
        link.connection_made(transport)  # type: ignore[arg-type]
        channel = link.open_channel(Quiet(), "q")  # held until the open: counted
        yield links, link, channel
    finally:
        loop.close()


def test_a_client_that_wrote_to_a_link_over_its_mark_is_held_until_it_drains() -> None:
    with link_to_a() as (links, link, channel):
        channel.write(b"x" * 10)
        assert not links.hold(lambda: None)  # under the mark: read on
        link._opened()
        link.pause_writing()  # asyncio: the transport's buffer passed the mark
        channel.write(b"y")
        resumed: list[int] = []
        assert links.hold(lambda: resumed.append(1))
        (view,) = links.describe()
        assert view["over_high_water"] and view["held_connections"] == 1
        assert view["channels"] == {"pinned": 1, "routed": 0, "relay": 0, "other": 0}
        assert not links.hold(lambda: resumed.append(2))  # nothing written since
        link.resume_writing()  # under the low-water mark
        assert resumed == [1]
        assert links.describe()[0]["held_connections"] == 0


def test_what_waits_for_the_open_counts_and_a_lost_link_releases_its_clients() -> None:
    with link_to_a() as (links, link, channel):
        channel.write(b"z" * (HIGH_WATER_BYTES + 1))
        assert link.over and link.buffered > HIGH_WATER_BYTES
        resumed: list[int] = []
        assert links.hold(lambda: resumed.append(1))
        link.fail("dropped")
        assert resumed == [1] and link.buffered < HIGH_WATER_BYTES and not link.over


def test_a_reader_that_did_not_write_to_it_is_not_held() -> None:
    with link_to_a() as (links, link, channel):
        link._opened()
        link.pause_writing()
        channel.write(b"y")
        links.unpress()  # (another's write: each read starts by forgetting it)
        assert not links.hold(lambda: None)
