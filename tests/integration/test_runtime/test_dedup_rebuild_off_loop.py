"""The first deduplicated AMQP 0-9-1 publish to a stream after a crash rebuilds the stream's
publisher sequences by scanning it: in a worker thread (issue 21 item 3). The publish, and
every later frame of its channel, wait for the rebuild, in order; other connections are
served meanwhile, and the loop never stalls."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import aio_pika
import pytest

from sievemq.storage.layout import stream_directory
from sievemq.storage.publishers import SNAPSHOT_FILE, PublisherSequences
from sievemq.testing import running_gateway

from .slow_sync import SLOW_SYNC_S, SlowScan, _ticker, fill_streams, publish_timed

pytestmark = pytest.mark.timeout(120)

N = 300
STREAM = {"x-queue-type": "stream"}


def deduplicated(body: bytes, publishing_id: int) -> aio_pika.Message:
    return aio_pika.Message(
        body,
        headers={"x-sievemq-publisher": "ref", "x-sievemq-publishing-id": publishing_id},
    )


async def read_all(url: str, queue: str, count: int) -> list[bytes]:
    conn = await aio_pika.connect(url)
    async with conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=count)
        q = await ch.declare_queue(queue, passive=True)
        got: list[bytes] = []
        async with q.iterator(arguments={"x-stream-offset": "first"}) as messages:
            async for message in messages:
                got.append(message.body)
                await message.ack()
                if len(got) == count:
                    break
        return got


async def test_the_rebuild_for_an_amqp_deduplicated_publish_runs_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    await fill_streams(data, "s", [deduplicated(b"%d" % i, i) for i in range(1, N + 1)], "busy")
    # as a crash leaves it: no snapshot, the stream must be scanned to know ref's last id
    (stream_directory(data, "/", "s") / SNAPSHOT_FILE).unlink(missing_ok=True)

    async with running_gateway(data) as gw:
        loop = asyncio.get_running_loop()
        slow = SlowScan()
        monkeypatch.setattr(PublisherSequences, "_scan", slow.method())
        publisher = await aio_pika.connect(gw.url)
        other = await aio_pika.connect(gw.url)
        async with publisher, other:
            pch = await publisher.channel(publisher_confirms=True)
            och = await other.channel(publisher_confirms=True)
            lateness: list[float] = []
            ticks = asyncio.ensure_future(_ticker(loop, lateness))
            started = time.monotonic()
            # on one channel, in this order: a duplicate, a new id, a plain message
            duplicate = asyncio.ensure_future(
                pch.default_exchange.publish(deduplicated(b"again", N), "s")
            )
            fresh = asyncio.ensure_future(
                pch.default_exchange.publish(deduplicated(b"new", N + 1), "s")
            )
            plain = asyncio.ensure_future(pch.default_exchange.publish(aio_pika.Message(b"p"), "s"))
            await asyncio.sleep(0.2)
            served = await publish_timed(och, "busy")
            assert not duplicate.done(), "confirmed before the scan"
            await asyncio.gather(duplicate, fresh, plain)
            ticks.cancel()
            assert time.monotonic() - started >= SLOW_SYNC_S
            assert slow.threads and threading.get_ident() not in slow.threads
            assert max(served) < SLOW_SYNC_S / 2, served
            assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
        monkeypatch.undo()
        got = await read_all(gw.url, "s", N + 2)
        assert got[N:] == [b"new", b"p"]  # the duplicate was dropped, the order kept
        assert gw.broker.vhost("/").queues["s"].message_count == N + 2
