"""After a crash that left no snapshot of a stream's publisher sequences, the first
QueryPublisherSequence (or named DeclarePublisher) rebuilds them by scanning the stream:
that scan runs in a worker thread. The command is answered once it is done (and the
connection's later frames wait, in order); other connections are served meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from rstream import Producer, RawMessage

from sievemq.storage.layout import stream_directory
from sievemq.storage.publishers import SNAPSHOT_FILE, PublisherSequences
from sievemq.testing import running_gateway
from sievemq.testing.stream_client import in_process_stream_client, in_process_stream_listener

from .slow_sync import SLOW_SYNC_S, SlowScan, _ticker, publish_timed

pytestmark = pytest.mark.timeout(120)

N = 500


@contextlib.asynccontextmanager
async def _producer(gw: Any) -> AsyncIterator[Producer]:
    async with (
        in_process_stream_listener(gw) as port,
        Producer(gw.host, port, username="guest", password="guest") as p,
    ):
        yield p


async def _publish_named(gw: Any, stream: str) -> None:
    async with _producer(gw) as p:
        await p.create_stream(stream, exists_ok=True)
        await p.send_batch(
            stream,
            [RawMessage(b"%d" % i, publishing_id=i) for i in range(1, N)],
            publisher_name="ref",
        )
        await p.send_wait(stream, RawMessage(b"last", publishing_id=N), publisher_name="ref")


async def test_the_sequence_rebuild_runs_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    async with running_gateway(data) as gw:
        await _publish_named(gw, "s")
        other = await aio_pika.connect(gw.url)
        async with other:
            await (await other.channel()).declare_queue(
                "busy", durable=True, arguments={"x-queue-type": "stream"}
            )
    snapshot = stream_directory(data, "/", "s") / SNAPSHOT_FILE
    snapshot.unlink(missing_ok=True)  # as a crash leaves it: the stream must be scanned
    async with running_gateway(data) as gw:
        loop = asyncio.get_running_loop()
        slow = SlowScan()
        monkeypatch.setattr(PublisherSequences, "_scan", slow.method())
        other = await aio_pika.connect(gw.url)
        async with other:
            pub = await other.channel(publisher_confirms=True)
            async with in_process_stream_client(gw) as client:
                lateness: list[float] = []
                ticks = asyncio.ensure_future(_ticker(loop, lateness))
                started = time.monotonic()
                query = asyncio.ensure_future(client.query_publisher_sequence("s", "ref"))
                await asyncio.sleep(0.2)
                served = await publish_timed(pub, "busy")
                assert not query.done(), "answered before the scan"
                assert await query == N
                ticks.cancel()
                assert time.monotonic() - started >= SLOW_SYNC_S
                assert slow.threads and threading.get_ident() not in slow.threads
                assert max(served) < SLOW_SYNC_S / 2, served
                assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
        # loaded now: a named producer's duplicate is dropped, the next id is stored
        monkeypatch.undo()
        async with _producer(gw) as p:
            await p.send_wait("s", RawMessage(b"dup", publishing_id=N), publisher_name="ref")
            await p.send_wait("s", RawMessage(b"new", publishing_id=N + 1), publisher_name="ref")
        assert gw.broker.vhost("/").queues["s"].message_count == N + 1


async def test_a_named_declare_publisher_waits_for_the_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    async with running_gateway(data) as gw:
        await _publish_named(gw, "s")
    (stream_directory(data, "/", "s") / SNAPSHOT_FILE).unlink(missing_ok=True)
    async with running_gateway(data) as gw:
        loop = asyncio.get_running_loop()
        slow = SlowScan()
        monkeypatch.setattr(PublisherSequences, "_scan", slow.method())
        lateness: list[float] = []
        ticks = asyncio.ensure_future(_ticker(loop, lateness))
        started = time.monotonic()
        async with _producer(gw) as p:
            # rstream declares the named publisher, then sends: both wait for the scan
            await p.send_wait("s", RawMessage(b"dup", publishing_id=N), publisher_name="ref")
            await p.send_wait("s", RawMessage(b"new", publishing_id=N + 1), publisher_name="ref")
        ticks.cancel()
        assert time.monotonic() - started >= SLOW_SYNC_S
        assert slow.threads and threading.get_ident() not in slow.threads
        assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
        assert gw.broker.vhost("/").queues["s"].message_count == N + 1
