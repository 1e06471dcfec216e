"""A fenced stream's appender (``cluster.failover``: its leader may have been replaced)
confirms nothing: every batch is nacked unwritten, and an append already running in a
worker thread when the fence came is nacked though written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sievemq.gateway.model.stream import dedup
from sievemq.gateway.runtime.stream.appender import StreamAppender
from sievemq.storage import Durability, Message, Stream, StreamConfig
from sievemq.storage.publishers import PublisherSequences
from sievemq.testing.raw import props_bytes

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


def _dedup(reference: str, publishing_id: int) -> Message:
    headers = {"x-sievemq-publisher": reference, "x-sievemq-publishing-id": publishing_id}
    return Message((), "", "rk", props_bytes(headers=headers), b"id %d" % publishing_id)


async def test_ids_refused_by_a_fenced_stream_are_no_duplicates_when_sent_again(
    tmp_path: Path,
) -> None:
    """A deduplicated AMQP publisher pipelines 5, 6, then 7 before it hears of the nacks:
    all three refused unwritten, all three stored once sent again; an old id still is a
    duplicate."""
    stream = Stream.open(tmp_path / "s", StreamConfig())
    sequences = PublisherSequences(stream, dedup.stored_tag)
    fenced = False
    appender = StreamAppender(
        stream,
        asyncio.get_running_loop(),
        None,
        1000,
        fenced=lambda: fenced,
        sequences=lambda: sequences,
    )
    sink = Sink()

    def publish(publishing_id: int, seq: int) -> None:
        sequences.update("ref", publishing_id)  # what the channel's admit does on arrival
        appender.submit(_dedup("ref", publishing_id), sink, seq)

    publish(4, 1)
    await settled(sink, 1)
    fenced = True
    publish(5, 2)
    publish(6, 3)
    await settled(sink, 3)
    assert sequences.get("ref") == 4
    publish(7, 4)  # sent before the nacks arrived, refused in turn
    await settled(sink, 4)
    assert sequences.get("ref") == 4  # not 6: 5 and 6 are still to come again
    fenced = False
    for seq, publishing_id in enumerate((5, 6, 7), start=5):
        publish(publishing_id, seq)
    await settled(sink, 7)
    assert sink.outcomes == {1: True, 2: False, 3: False, 4: False, 5: True, 6: True, 7: True}
    assert sequences.get("ref") == 7 and not sequences.refusing
    assert stream.end_offset == 4  # 4, 5, 6, 7 once each
    appender.close()
    stream.close()
