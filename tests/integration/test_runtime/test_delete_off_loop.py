"""queue.delete under ``--fsync always`` never waits on the event loop for an fdatasync.

The disk is made slow at the one seam the OS gives: ``os.fdatasync`` of a stream's file
is held until the test releases it (after at least a second). A publish
is confirmed only after its append and fdatasync in a worker thread; a queue.delete while
that append is in flight used to wait for it on the loop (and fsync the stream again before
removing it). Now the delete is answered while that fdatasync is still held, the loop keeps
serving (a timer's lateness stays far below the hold), the publish is nacked, the name can
be declared again at once, and the deleted stream's files go when the worker's append ends.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import aio_pika
import pytest
from aio_pika.exceptions import DeliveryError

from sievemq.gateway.model.broker import Broker
from sievemq.storage import Durability
from sievemq.storage.layout import TOMBSTONE_PREFIX
from sievemq.testing import running_gateway

pytestmark = pytest.mark.timeout(60)

SLOW_SYNC_S = 1.0  # the stream's fdatasync is held at least this long
HOLD_S = 10.0  # and goes on by itself after this, so a broken test cannot hang


async def test_delete_with_an_append_in_flight_does_not_block_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fdatasync = os.fdatasync
    sync_threads: list[int] = []
    syncing = asyncio.Event()

    async with running_gateway(tmp_path / "data", durability=Durability.ALWAYS) as gw:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        conn = await aio_pika.connect(gw.url)
        async with conn:
            channel = await conn.channel(publisher_confirms=True)
            queue = await channel.declare_queue(
                "slow", durable=True, arguments={"x-queue-type": "stream"}
            )
            await channel.default_exchange.publish(aio_pika.Message(b"before"), "slow")

            def slow_fdatasync(fd: int) -> None:
                # slow for the stream's files only: the delete-ok does wait for the
                # definitions log's fdatasync, in a worker thread (test_declare_off_loop.py)
                if "/streams/" in os.readlink(f"/proc/self/fd/{fd}"):
                    sync_threads.append(threading.get_ident())
                    loop.call_soon_threadsafe(syncing.set)
                    released.append(release.wait(HOLD_S))
                real_fdatasync(fd)

            release = threading.Event()
            released: list[bool] = []  # one entry per held fdatasync once it has ended
            monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
            publish = asyncio.ensure_future(
                channel.default_exchange.publish(aio_pika.Message(b"in flight"), "slow")
            )
            await asyncio.wait_for(syncing.wait(), 10)  # the append is in its fdatasync now

            lateness: list[float] = []

            async def ticker() -> None:
                while True:
                    due = loop.time() + 0.01
                    await asyncio.sleep(0.01)
                    lateness.append(loop.time() - due)

            ticks = asyncio.ensure_future(ticker())
            admin = await conn.channel()
            started = loop.time()
            await admin.queue_delete("slow")
            delete_took = loop.time() - started
            # answered while the append's fdatasync is still held: it did not wait for it
            assert released == [], f"queue.delete waited for the append ({delete_took:.2f}s)"
            await asyncio.sleep(SLOW_SYNC_S)  # the loop serves the ticker meanwhile
            ticks.cancel()
            release.set()
            with pytest.raises(DeliveryError):
                await publish
            deadline = time.monotonic() + 10
            while not released and time.monotonic() < deadline:  # the worker goes on
                await asyncio.sleep(0.01)
            assert released == [True], released
            # a stream fdatasync on the loop would have held it for HOLD_S
            assert max(lateness) < SLOW_SYNC_S, f"loop blocked {max(lateness):.2f}s"
            assert loop_thread not in sync_threads, "a stream fdatasync ran on the event loop"

            # the name is free at once; the new stream is empty and takes publishes
            again = await admin.declare_queue(
                "slow", durable=True, arguments={"x-queue-type": "stream"}
            )
            assert again.declaration_result.message_count == 0
            monkeypatch.setattr(os, "fdatasync", real_fdatasync)
            await channel.default_exchange.publish(aio_pika.Message(b"after"), "slow")
            del queue

            # the old files go once the worker's append has ended
            vhost_dir = gw.broker.vhost("/").get_queue("slow").stream.directory.parent
            deadline = time.monotonic() + 10
            while sorted(p.name for p in vhost_dir.iterdir()) != ["slow"]:
                assert time.monotonic() < deadline, list(vhost_dir.iterdir())
                await asyncio.sleep(0.05)
            got = []
            reader = await conn.channel()
            await reader.set_qos(prefetch_count=10)
            stream = await reader.declare_queue("slow", passive=True)
            async with stream.iterator(arguments={"x-stream-offset": "first"}) as messages:
                async for message in messages:
                    got.append(message.body)
                    await message.ack()
                    break
            assert got == [b"after"]


def test_a_crash_between_rename_and_removal_leaves_nothing_after_a_restart(
    tmp_path: Path,
) -> None:
    leftover = tmp_path / "data" / "streams" / "%2F" / (TOMBSTONE_PREFIX + "abc")
    leftover.mkdir(parents=True)
    (leftover / "00000000000000000000.segment").write_bytes(b"x" * 100)
    broker = Broker(tmp_path / "data")
    try:
        assert not leftover.exists()
        assert leftover.parent.exists()
    finally:
        broker.close()
