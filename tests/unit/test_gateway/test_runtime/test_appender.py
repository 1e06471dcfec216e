"""The group-commit appender when an append fails or is still running in a worker thread.

A real Stream is wrapped (``appender_helpers.FlakyStream``) so that one chosen message makes
``Stream.append`` fail (the way a storage-level rejection or an I/O error would), or so that
an append blocks in the worker thread until the test lets it go.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sievemq.gateway.runtime.stream.appender import StreamAppender
from sievemq.storage import Durability, Stream, StreamConfig, layout

from .appender_helpers import FlakyStream, Sink, appender_on, msg, settled, stored


@pytest.mark.parametrize("durability", [Durability.NEVER, Durability.ALWAYS])
async def test_one_bad_message_nacks_only_itself(tmp_path: Path, durability: Durability) -> None:
    real = Stream.open(tmp_path / "s", StreamConfig(durability=durability))
    with appender_on(FlakyStream(real)) as appender:
        a, b = Sink(), Sink()
        for seq, (sink, body) in enumerate(
            [(a, b"a1"), (b, b"b1"), (a, b"bad"), (b, b"b2"), (a, b"a2")], start=1
        ):
            appender.submit(msg(body), sink, seq)
        appender.submit(msg(b"no-confirm"), None, 0)
        await settled(a, 3)
        await settled(b, 2)
        assert a.outcomes == {1: True, 3: False, 5: True}
        assert b.outcomes == {2: True, 4: True}
        assert stored(real) == [b"a1", b"b1", b"b2", b"a2", b"no-confirm"]


async def test_delete_nacks_the_append_in_flight_without_waiting_for_it(tmp_path: Path) -> None:
    real = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.ALWAYS))
    stream = FlakyStream(real)
    stream.release.clear()
    executor = ThreadPoolExecutor(1)
    appender = StreamAppender(stream, asyncio.get_running_loop(), executor, 1000)  # type: ignore[arg-type]
    sink = Sink()
    appender.submit(msg(b"m1"), sink, 1)
    await asyncio.sleep(0)  # the flush hands m1 to the worker, which blocks in append
    assert stream.started.wait(5)
    appender.submit(msg(b"m2"), sink, 2)  # buffered behind the append in flight
    appender.close()  # queue.delete: returns while the worker is still in append
    assert stream.appends == 0
    assert sink.outcomes == {1: False, 2: False}  # never an ack for a deleted stream
    real.delete()
    stream.release.set()
    await asyncio.sleep(0.1)  # the worker's completion arrives after the delete: ignored
    assert sink.outcomes == {1: False, 2: False}
    executor.shutdown()
    assert stream.appends == 1
    assert not (tmp_path / "s").exists()
    layout.wait_discarded()  # its tombstone is removed in the background
    assert list(tmp_path.iterdir()) == []


async def test_shutdown_waits_for_the_append_in_flight_then_writes_the_buffer(
    tmp_path: Path,
) -> None:
    real = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.ALWAYS))
    stream = FlakyStream(real)
    stream.release.clear()
    executor = ThreadPoolExecutor(1)
    appender = StreamAppender(stream, asyncio.get_running_loop(), executor, 1000)  # type: ignore[arg-type]
    sink = Sink()
    appender.submit(msg(b"m1"), sink, 1)
    await asyncio.sleep(0)
    assert stream.started.wait(5)
    appender.submit(msg(b"m2"), sink, 2)
    threading.Timer(0.2, stream.release.set).start()
    appender.flush_now()
    assert sink.outcomes == {1: True, 2: True}
    real.close()
    reopened = Stream.open(tmp_path / "s", StreamConfig())
    assert stored(reopened) == [b"m1", b"m2"]
    reopened.close()
    executor.shutdown()


@pytest.mark.parametrize("durability", [Durability.NEVER, Durability.ALWAYS])
async def test_a_gated_stream_confirms_once_committed(
    tmp_path: Path, durability: Durability
) -> None:
    """A replicated stream's leader: a written batch is confirmed only once the committed
    offset passes its end; a delete nacks what is still held."""
    stream = Stream.open(tmp_path / "s", StreamConfig(durability=durability))
    stream.gate()
    executor = ThreadPoolExecutor(1)
    appender = StreamAppender(stream, asyncio.get_running_loop(), executor, 1000)
    sink = Sink()
    try:
        appender.submit(msg(b"a"), sink, 1)
        appender.submit(msg(b"b"), sink, 2)
        while stream.end_offset < 2 or appender.held == 0:
            await asyncio.sleep(0.01)
        appender.submit(msg(b"c"), sink, 3)
        while stream.end_offset < 3 or appender.held < 2:
            await asyncio.sleep(0.01)
        assert sink.outcomes == {}
        stream.commit(2)  # the first batch's end: its two confirms go
        assert sink.outcomes == {1: True, 2: True}
        stream.commit(3)
        assert sink.outcomes == {1: True, 2: True, 3: True}
        appender.submit(msg(b"d"), sink, 4)
        while appender.held == 0:
            await asyncio.sleep(0.01)
        appender.close()
        assert sink.outcomes[4] is False
    finally:
        executor.shutdown()
        stream.close()


async def test_a_gated_stream_confirms_a_duplicate_once_its_first_copy_is_committed(
    tmp_path: Path,
) -> None:
    """Dedup: a publish the stream already holds is confirmed at once on an ungated stream,
    and on a gated one only once what was submitted before it is committed."""
    stream = Stream.open(tmp_path / "s", StreamConfig(durability=Durability.NEVER))
    appender = StreamAppender(stream, asyncio.get_running_loop(), None, 1000)
    sink = Sink()
    try:
        appender.confirm_duplicates(sink, [1])
        assert sink.outcomes == {1: True}
        stream.gate()
        appender.submit(msg(b"first copy"), sink, 2)
        appender.confirm_duplicates(sink, [3])  # its first copy is in the buffer
        while appender.held == 0:
            await asyncio.sleep(0.01)
        appender.confirm_duplicates(sink, [4])  # written, not committed
        assert sink.outcomes == {1: True}
        stream.commit(1)
        assert sink.outcomes == {1: True, 2: True, 3: True, 4: True}
        appender.confirm_duplicates(sink, [5])  # everything committed
        assert sink.outcomes[5] is True
    finally:
        stream.close()
