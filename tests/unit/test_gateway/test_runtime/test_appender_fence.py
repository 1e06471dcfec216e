"""A fenced stream's appender (``cluster.failover``: its leader may have been replaced)
confirms nothing: every batch is nacked unwritten, and an append already running in a
worker thread when the fence came is nacked though written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

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
