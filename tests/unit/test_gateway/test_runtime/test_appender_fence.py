"""A fenced stream's appender (``cluster.failover``: its leader may have been replaced)
confirms nothing: every batch is nacked unwritten, and an append already running in a
worker thread when the fence came is nacked though written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sievemq.gateway.runtime.stream.appender import StreamAppender
from sievemq.storage import Durability, Stream, StreamConfig

from .appender_helpers import FlakyStream, Sink, appender_on, msg, settled


@pytest.mark.parametrize("durability", [Durability.NEVER, Durability.ALWAYS])
async def test_fenced_batches_are_nacked_and_not_written(
    tmp_path: Path, durability: Durability
) -> None:
    stream = Stream.open(tmp_path / "s", StreamConfig(durability=durability))
    fenced = False
    with appender_on(stream, fenced=lambda: fenced) as appender:
        sink = Sink()
        appender.submit(msg(b"before"), sink, 1)
        await settled(sink, 1)
        fenced = True
        appender.submit(msg(b"while fenced"), sink, 2)
        appender.submit(msg(b"while fenced too"), sink, 3)
        await settled(sink, 3)
        fenced = False
        appender.submit(msg(b"after"), sink, 4)
        await settled(sink, 4)
        assert sink.outcomes == {1: True, 2: False, 3: False, 4: True}
        assert stream.end_offset == 2  # "before" and "after" only


async def test_an_append_in_flight_when_fenced_is_nacked(tmp_path: Path) -> None:
    stream = FlakyStream(Stream.open(tmp_path / "s", StreamConfig(durability=Durability.ALWAYS)))
    stream.release.clear()
    fenced = False
    with appender_on(stream, fenced=lambda: fenced) as appender:
        sink = Sink()
        appender.submit(msg(b"m1"), sink, 1)
        await asyncio.sleep(0)
        assert stream.started.wait(5)  # in the worker's append
        fenced = True
        stream.release.set()
        await settled(sink, 1)
        assert sink.outcomes == {1: False}


class WrittenSink(Sink):
    """A deduplicating publisher's sink: told apart when a nacked message was written."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[int] = []

    def nack_written(self, seqs: list[int]) -> None:
        self.written.extend(seqs)
        self.settle_confirms(seqs, False)


async def test_written_then_fenced_is_nacked_as_written(tmp_path: Path) -> None:
    """Held for the majority, then fenced (or in a worker's append when the fence came):
    nacked, but as written, so a deduplicating publisher keeps the id (the chaos suite
    found such a message resent and stored twice once its sequence was rewound)."""
    stream = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.NEVER))
    stream.gate()
    fenced = False
    appender = StreamAppender(stream, asyncio.get_running_loop(), None, 1000, fenced=lambda: fenced)
    sink, plain = WrittenSink(), Sink()
    appender.submit(msg(b"held"), sink, 1)
    appender.submit(msg(b"held too"), plain, 1)
    for _ in range(100):
        if appender.held:
            break
        await asyncio.sleep(0.01)
    assert appender.held == 1 and stream.end_offset == 2
    fenced = True
    appender.submit(msg(b"refused"), sink, 2)
    await asyncio.sleep(0.05)
    stream.commit(2)
    await settled(sink, 2)
    await settled(plain, 1)
    assert sink.outcomes == {1: False, 2: False} and plain.outcomes == {1: False}
    assert sink.written == [1]  # the refused one was not written: rewound, resent, stored
    assert stream.end_offset == 2
    appender.close()
    stream.close()
