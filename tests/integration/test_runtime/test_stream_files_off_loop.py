"""A new stream's files (its directory, first segment and index) and the fsyncs that make
them durable never run on the event loop: a worker thread creates them with the definitions
sync, and the declare (AMQP queue.declare, the stream protocol's Create) is answered only
once both are on disk. The seam: ``os.fsync`` of a stream directory sleeps 1 s; another
connection is served meanwhile. A failure closes the connection with 541 naming the files."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path

import aio_pika
import aiormq
import pytest

from sievemq.storage.layout import stream_directory
from sievemq.storage.segment import index_name, segment_name
from sievemq.testing import running_gateway
from sievemq.testing.stream_client import in_process_stream_client

from .slow_sync import SLOW_SYNC_S, SlowFsync, _ticker, stream_dir

pytestmark = pytest.mark.timeout(90)

STREAM = {"x-queue-type": "stream"}


def _has_files(data: Path, name: str) -> bool:
    directory = stream_directory(data, "/", name)
    return (directory / segment_name(0)).exists() and (directory / index_name(0)).exists()


async def test_amqp_declare_creates_the_files_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    async with running_gateway(data, heartbeat=1) as gw:
        loop = asyncio.get_running_loop()
        other = await aio_pika.connect(gw.url, heartbeat=1)
        declarer = await aio_pika.connect(gw.url)
        async with other, declarer:
            pub = await other.channel(publisher_confirms=True)
            await pub.declare_queue("busy", durable=True, arguments=STREAM)
            slow = SlowFsync(stream_dir)
            monkeypatch.setattr(os, "fsync", slow)
            lateness: list[float] = []
            ticks = asyncio.ensure_future(_ticker(loop, lateness))
            ch = await declarer.channel()
            started = time.monotonic()
            declare = asyncio.ensure_future(ch.declare_queue("new", durable=True, arguments=STREAM))
            await asyncio.sleep(0.2)
            assert "new" in gw.broker.vhost("/").queues  # applied at once
            confirmed = []
            for i in range(5):  # the other connection is served meanwhile
                t = time.monotonic()
                await pub.default_exchange.publish(aio_pika.Message(b"m%d" % i), "busy")
                confirmed.append(time.monotonic() - t)
            assert not declare.done(), "declare-ok before the stream's files were durable"
            queue = await declare
            answered = time.monotonic()
            ticks.cancel()
            assert answered - started >= SLOW_SYNC_S
            assert max(confirmed) < SLOW_SYNC_S / 2, f"publish waited {max(confirmed):.2f}s"
            assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
            assert slow.threads and threading.get_ident() not in slow.threads
            assert _has_files(data, "new")
            monkeypatch.undo()
            # the new stream works: publish, then read it back
            await pub.default_exchange.publish(aio_pika.Message(b"hello"), "new")
            await ch.set_qos(prefetch_count=10)
            got: asyncio.Future[bytes] = loop.create_future()

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                if not got.done():
                    got.set_result(message.body)
                await message.ack()

            await queue.consume(on_message, arguments={"x-stream-offset": "first"})
            assert await asyncio.wait_for(got, 10) == b"hello"


async def test_stream_protocol_create_creates_the_files_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    async with running_gateway(data) as gw, in_process_stream_client(gw) as client:
        loop = asyncio.get_running_loop()
        slow = SlowFsync(stream_dir)
        monkeypatch.setattr(os, "fsync", slow)
        lateness: list[float] = []
        ticks = asyncio.ensure_future(_ticker(loop, lateness))
        started = time.monotonic()
        create = asyncio.ensure_future(client.create_stream("s1"))
        await asyncio.sleep(0.3)
        assert "s1" in gw.broker.vhost("/").queues
        assert not create.done(), "create answered before the stream's files were durable"
        await create
        ticks.cancel()
        assert time.monotonic() - started >= SLOW_SYNC_S
        assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
        assert slow.threads and threading.get_ident() not in slow.threads
        assert _has_files(data, "s1")


async def test_failed_file_creation_closes_with_541_naming_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    async with running_gateway(data) as gw:
        connection = await aiormq.connect(gw.url)
        channel = await connection.channel()
        failing = SlowFsync(stream_dir, 0.05, OSError(errno.EIO, "I/O error"))
        monkeypatch.setattr(os, "fsync", failing)
        with pytest.raises(aiormq.exceptions.ConnectionInternalError) as caught:
            await channel.queue_declare("broken", durable=True, arguments=STREAM)
        text = str(caught.value)
        assert "creating a new stream's files failed" in text, text
        assert "broken" in text and "I/O error" in text, text
        monkeypatch.undo()
        # the node goes on: another connection declares and uses a stream
        other = await aiormq.connect(gw.url)
        ch = await other.channel()
        await ch.queue_declare("fine", durable=True, arguments=STREAM)
        assert _has_files(data, "fine")
        await other.close()
