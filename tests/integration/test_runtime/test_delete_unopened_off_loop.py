"""Deleting a stream not opened since the start does not open it (issue 21 item 3): its
recovery would read its files on the event loop. The directory is renamed to a tombstone
and removed by a background thread, as for an open stream; the delete-ok still says how
many messages it held, and other connections are served throughout."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from sievemq.storage import Stream, layout
from sievemq.storage.layout import stream_directory
from sievemq.testing import running_gateway
from sievemq.testing.wait import eventually

from .slow_sync import SLOW_SYNC_S, _ticker, fill_streams, publish_timed

pytestmark = pytest.mark.timeout(120)

STREAM = {"x-queue-type": "stream"}


class SlowOpen:
    """``Stream.open`` that sleeps ``SLOW_SYNC_S`` first (a stream whose recovery reads a
    lot), recording the thread and the directory."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, Path]] = []
        self._real = Stream.open

    def __call__(self, directory: Path, *args: Any, **kwargs: Any) -> Stream:
        self.calls.append((threading.get_ident(), Path(directory)))
        time.sleep(SLOW_SYNC_S)
        return self._real(directory, *args, **kwargs)


async def test_deleting_a_stream_not_opened_since_the_start_does_not_open_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    await fill_streams(data, "idle", [aio_pika.Message(b"%d" % i) for i in range(20)], "busy")
    directory = stream_directory(data, "/", "idle")
    assert directory.is_dir()

    async with running_gateway(data) as gw:
        loop = asyncio.get_running_loop()
        slow = SlowOpen()
        monkeypatch.setattr(Stream, "open", slow)
        deleter = await aio_pika.connect(gw.url)
        other = await aio_pika.connect(gw.url)
        async with deleter, other:
            och = await other.channel(publisher_confirms=True)
            await publish_timed(och, "busy", 1)  # "busy" is open now (slowly, once)
            slow.calls.clear()
            lateness: list[float] = []
            ticks = asyncio.ensure_future(_ticker(loop, lateness))
            dch = await deleter.channel()
            deleting = asyncio.ensure_future(dch.queue_delete("idle"))
            served = await publish_timed(och, "busy")
            result = await deleting
            await asyncio.to_thread(layout.wait_discarded)
            await eventually(lambda: len(lateness) >= 2)
            ticks.cancel()
        assert slow.calls == [], "the deleted stream was opened"
        assert result.message_count == 20
        assert max(served) < SLOW_SYNC_S / 2, served
        assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
        assert not directory.exists()
        assert sorted(p.name for p in directory.parent.iterdir()) == ["busy"]  # no tombstone
        # the name is free: a new stream of that name starts empty
        again = await aio_pika.connect(gw.url)
        async with again:
            ach = await again.channel()
            fresh = await ach.declare_queue("idle", durable=True, arguments=STREAM)
            assert fresh.declaration_result.message_count == 0
    async with running_gateway(data) as gw:  # and it stays deleted
        assert gw.broker.vhost("/").queues["idle"].message_count == 0
