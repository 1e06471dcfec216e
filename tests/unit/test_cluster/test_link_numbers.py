"""A link channel gets the number asked for (a relaying client channel's) when it is free."""

from __future__ import annotations

import asyncio

from sievemq.cluster.link import Links


class Quiet:
    def link_frames(self, channel: object, got: list[tuple[int, bytes]]) -> None:
        raise AssertionError("no frames expected")

    def link_closed(self, channel: object, code: int, text: str) -> None:
        return None


def test_the_number_asked_for_is_given_when_free_else_the_next_free_one() -> None:
    loop = asyncio.new_event_loop()
    try:
        links = Links("b", lambda: "secret", lambda node: None, loop)
        link = links._connect("a", "/")  # no address: failed, but numbers are still given
        receiver = Quiet()
        first = link.open_channel(receiver, "", prefer=7)
        second = link.open_channel(receiver, "", prefer=7)  # taken: the next free one
        third = link.open_channel(receiver, "", prefer=0)
        assert first.number == 7
        assert second.number not in (0, 7) and third.number not in (0, 7, second.number)
        assert link.open_channel(receiver, "", prefer=99999).number not in (0, 99999)
    finally:
        loop.close()
