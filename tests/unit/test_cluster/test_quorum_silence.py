"""A quorum queue's feed heartbeat and a replica's silence (``cluster.quorum_replication``):
the leader's feed carries a BEAT with its committed end when it was quiet, a replica counts
the time since it last heard its leader (not the time it could not try it), and while its
election tail stands it acknowledges no further than the tail (``cluster.failover``)."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from sievemq.amqp import frames, queue_feed
from sievemq.cluster.link import LinkChannel, Links
from sievemq.cluster.quorum_replication import Copy, Feed, Follower, QuorumFeeds
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.directory import FeedChannelEnd
from sievemq.storage import Durability


class Channel:
    """The replica's feed channel to its leader: what it wrote."""

    number = 1

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def close(self) -> None:
        pass


def beat_payload(committed: int) -> bytes:
    """A BEAT's method payload as the link hands it to its receiver."""
    return struct.pack(">HHQ", queue_feed.FEED_CLASS, queue_feed.BEAT, committed)


@pytest.fixture
async def follower(tmp_path: Path) -> AsyncIterator[Follower]:
    copy = Follower(
        "/",
        "q",
        Copy(tmp_path / "copy"),
        cast(Links, None),
        dict,  # no record: it follows nobody by itself
        lambda node: False,
        Durability.NEVER,
        200,
    )
    yield copy
    await copy.stop()


async def test_a_beat_is_heard_and_carries_the_committed_end(follower: Follower) -> None:
    channel = Channel()
    follower._channel = cast(LinkChannel, channel)
    follower.heard_at -= 10  # nothing heard for 10 s
    assert follower.silent_for() >= 10
    follower.link_frames(cast(LinkChannel, channel), [(frames.FRAME_METHOD, beat_payload(42))])
    assert follower.silent_for() < 5
    assert follower.committed == 42
    # frames of a channel it no longer follows are not heard
    follower.heard_at -= 10
    follower.link_frames(cast(LinkChannel, Channel()), [(frames.FRAME_METHOD, beat_payload(50))])
    assert follower.silent_for() >= 10 and follower.committed == 42


async def test_listening_anew_counts_silence_from_now(follower: Follower) -> None:
    follower.heard_at -= 10
    follower.listen_anew()
    assert follower.silent_for() < 5


async def test_the_cap_bounds_holds_and_lifting_it_acknowledges(follower: Follower) -> None:
    channel = Channel()
    follower._channel = cast(LinkChannel, channel)
    follower._epoch = 3
    assert follower.copy.next_id == 1
    follower.cap = (3, 0)  # the tail stood at 0
    follower._send_holds()
    assert channel.sent == [queue_feed.holds(1, 3, 0)]
    follower.cap = (2, 0)  # another epoch's cap: no bound
    follower._send_holds()
    assert channel.sent[-1] == queue_feed.holds(1, 3, 1)
    follower.cap = (3, 0)
    follower.set_cap(None)  # the election chose nobody: what the copy holds, at once
    assert channel.sent[-1] == queue_feed.holds(1, 3, 1) and len(channel.sent) == 3


class End:
    """The leader's end of a feed channel: the frames written."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def end(self) -> FeedChannelEnd:
        return FeedChannelEnd(self.frames.extend, lambda text: None, 7, 131072, lambda: False)


class Shipper:
    def __init__(self, commit_end: int | None, last_id: int) -> None:
        self.queue = type("Q", (), {"commit_end": commit_end})()
        self.log = type("L", (), {"last_id": last_id})()
        self.feeds: set[Any] = set()


async def test_a_quiet_feed_beats_with_the_committed_end(tmp_path: Path) -> None:
    feeds = QuorumFeeds(Broker(tmp_path), lambda *ack: None, beat_s=0.2)
    written = End()
    feed = Feed(feeds, "/", "b", written.end())
    feed.beat(100.0, 0.1)
    assert written.frames == []  # no HELLO yet: nothing to beat for
    feed.shipper = cast(Any, Shipper(commit_end=9, last_id=12))
    feed.sent_at = 99.95
    feed.beat(100.0, 0.1)
    assert written.frames == []  # it carried something a moment ago
    feed.beat(100.2, 0.1)
    assert written.frames == [queue_feed.beat(7, 9)]
    feed.shipper = cast(Any, Shipper(commit_end=None, last_id=12))  # not gated: all of it
    feed.beat(100.4, 0.1)
    assert written.frames[-1] == queue_feed.beat(7, 13)
    feeds.stop()


async def test_a_refusal_from_the_leader_is_heard_a_lost_link_is_not(follower: Follower) -> None:
    """As a stream's copy counts its leader's error answers: the leader runs and answers
    (its queue not open yet, say), it is no leader lost."""
    channel = cast(LinkChannel, Channel())
    follower._channel = channel
    follower.heard_at -= 10
    follower.link_closed(channel, 0, "the link to node 'a' failed")
    assert follower.silent_for() >= 10
    follower._channel = channel
    follower.link_closed(channel, 404, "no quorum queue 'q' in vhost '/' here")
    assert follower.silent_for() < 5
