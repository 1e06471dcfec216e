"""A stream copy's election cap (``cluster.failover``) and silence (``Follower.silent_for``):
lifting the cap acknowledges at once what the copy holds, and the time a copy could not
try its leader counts as no silence of the leader's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sievemq.cluster.replication import Follower
from sievemq.gateway.model.stream.arguments import stream_arguments_from_table
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.storage import Message, Stream, StreamConfig
from sievemq.streamproto import wire


class Wire:
    """What the copy sent its leader (the subscription's connection)."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def write(self, data: bytes) -> None:
        self.sent += data

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


@pytest.fixture
async def follower(tmp_path: Path) -> AsyncIterator[Follower]:
    stream = Stream.open(tmp_path / "copy", StreamConfig())
    stream.append([Message((), "", "rk", b"\x00\x00", b"x")] * 5)
    arguments = stream_arguments_from_table({"x-queue-type": "stream"}, "s", "/")
    copy = Follower(StreamQueue("s", "/", arguments, stream), lambda: None, lambda: ("u", "p"))
    yield copy
    await copy.stop()


async def test_lifting_the_cap_acknowledges_what_the_copy_holds(follower: Follower) -> None:
    """A chunk taken while an election's tail stood was acknowledged no further than the
    tail; the election chose nobody: the leader learns at once that the copy holds it (its
    publisher, waiting for the confirm, sends nothing that would make the copy ack again)."""
    follower.epoch = 1
    follower.cap = (1, 3)
    assert follower.holds() == 3
    connection = Wire()
    follower._writer = connection  # type: ignore[assignment]  # subscribed to the leader
    follower.connected.set()
    follower.set_cap(None)
    assert bytes(connection.sent) == wire.replica_holds(0, 1, 5)


async def test_lifting_the_cap_unsubscribed_sends_nothing(follower: Follower) -> None:
    """Not subscribed (held by the election, reconnecting): the subscription's first frame
    says what the copy holds."""
    follower.epoch = 1
    follower.cap = (1, 3)
    connection = Wire()
    follower._writer = connection  # type: ignore[assignment]  # connecting, not subscribed
    follower.set_cap(None)
    assert follower.cap is None and connection.sent == b""


async def test_time_it_could_not_try_its_leader_is_no_silence(follower: Follower) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0)  # its task runs (no leader to follow: it waits)
    follower.heard_at = loop.time() - 60  # held by an election, or its leader not listed
    assert follower.silent_for() >= 60
    follower.listen_anew()  # the hold lifted, the leader listed again
    assert follower.silent_for() < 1
    follower.heard_at = loop.time() + 5  # heard later than now (a freeze noticed): kept
    follower.listen_anew()
    assert follower.heard_at == pytest.approx(loop.time() + 5, abs=1)
