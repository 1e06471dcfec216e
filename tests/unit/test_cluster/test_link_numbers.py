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


class Closed:
    def __init__(self) -> None:
        self.why: list[str] = []

    def link_frames(self, channel: object, got: list[tuple[int, bytes]]) -> None:
        raise AssertionError("no frames expected")

    def link_closed(self, channel: object, code: int, text: str) -> None:
        self.why.append(text)


def test_a_node_gone_from_etcd_fails_its_links_at_once() -> None:
    """Not after two missed heartbeats: the chaos suite's publishers through b paused 20-30 s
    when the leader they were forwarded to was frozen or cut off."""
    loop = asyncio.new_event_loop()
    try:
        links = Links("b", lambda: "secret", lambda node: None, loop)
        to_a, to_c = links._connect("a", "/"), links._connect("c", "/")
        to_a.failed = to_c.failed = False  # as if connected (no address here)
        on_a, on_c = Closed(), Closed()
        to_a.open_channel(on_a, "")
        to_c.open_channel(on_c, "")
        links.node_gone("a")
        assert to_a.failed and on_a.why == ["node 'a' left the cluster (its etcd lease ended)"]
        assert not to_c.failed and on_c.why == []
        assert "left the cluster" in links.why_down("a")
    finally:
        loop.close()


def test_a_restarted_node_is_tried_at_once_not_after_the_old_runs_backoff() -> None:
    """CI saw b fail channels to a restarted a with a's old run's error ("connection refused"
    at its old port) for up to the 5 s backoff after a's new record was there."""
    loop = asyncio.new_event_loop()
    try:
        address: dict[str, str] = {}
        links = Links("b", lambda: "secret", address.get, loop)
        links.node_seen("a", 1.0)
        for _ in range(8):  # a killed: tries refused, the backoff grows to its longest
            links._note_down("a", "cannot reach node 'a' at 127.0.0.1:1: refused")
        assert links._connect("a", "/").failed  # within the backoff: fails at once
        links.node_seen("a", 1.0)  # the same run's record rewritten: still backing off
        assert links._connect("a", "/").failed
        address["a"] = "127.0.0.1:9"
        links.node_seen("a", 2.0)  # a new run of a: tried at once
        assert not links._connect("a", "/").failed
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
