"""AMQP declares, deletes and binds never wait on the event loop for the definitions log's
fdatasync (docs/architecture.md).

The disk is made slow at the one seam the OS gives: ``os.fdatasync`` of ``definitions.log``
sleeps 1 s. The change is applied in memory at once, the fdatasync runs in a worker thread,
and the channel's -ok reply (and every later frame of that channel) waits for it: the loop
keeps serving other connections meanwhile. Several channels' changes share one fdatasync
(group commit). A failed fdatasync closes the connection with 541 and a text naming the log,
and the change is not reported as done. (Durability across a SIGKILL right after the
declare-ok: ``tests/integration/test_runtime/test_definitions_sigkill.py``.)
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path

import aio_pika
import pytest
from pamqp import commands

from sievemq.testing import running_gateway
from sievemq.testing.raw import AsyncRawClient, publish_frames
from sievemq.testing.wait import eventually

from .slow_sync import SLOW_SYNC_S, SlowDefinitionsSync, _ticker

pytestmark = pytest.mark.timeout(90)

STREAM = {"x-queue-type": "stream"}


async def test_declares_wait_for_their_sync_without_blocking_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_gateway(tmp_path / "data", heartbeat=1) as gw:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        other = await aio_pika.connect(gw.url, heartbeat=1)
        declarer = await aio_pika.connect(gw.url)
        async with other, declarer:
            pub = await other.channel(publisher_confirms=True)
            await pub.declare_queue("busy", durable=True, arguments=STREAM)
            slow = SlowDefinitionsSync()
            monkeypatch.setattr(os, "fdatasync", slow)
            lateness: list[float] = []
            ticks = asyncio.ensure_future(_ticker(loop, lateness))
            channels = [await declarer.channel() for _ in range(4)]
            # the sync is held until released: no race with a timer on a slow machine
            slow.hold()
            declares = [
                asyncio.ensure_future(ch.declare_queue(f"new{i}", durable=True, arguments=STREAM))
                for i, ch in enumerate(channels)
            ]
            queues = gw.broker.vhost("/").queues
            # the declares are applied, their sync is under way
            await eventually(
                lambda: bool(slow.threads) and all(f"new{i}" in queues for i in range(4))
            )
            # meanwhile the other connection publishes with confirms, at once
            confirmed = []
            for i in range(5):
                t = time.monotonic()
                await pub.default_exchange.publish(aio_pika.Message(b"m%d" % i), "busy")
                confirmed.append(time.monotonic() - t)
            await asyncio.sleep(SLOW_SYNC_S)  # the sync lasts a second at least (heartbeats)
            assert not any(d.done() for d in declares), "a declare-ok came before its sync"
            slow.release()
            await asyncio.gather(*declares)
            answered = time.monotonic()
            ticks.cancel()

            # every publish was confirmed while the declares still waited (checked above)
            assert max(confirmed) < SLOW_SYNC_S, f"publish waited {max(confirmed):.2f}s"
            # a sync on the loop would hold it for HOLD_S (nobody could release it)
            assert max(lateness) < SLOW_SYNC_S, f"loop blocked {max(lateness):.2f}s"
            assert slow.threads and loop_thread not in slow.threads, "fdatasync on the loop"
            assert slow.timed_out == 0
            assert slow.ended and min(slow.ended) <= answered
            # four channels' declares: one sync, or two when the first started alone
            assert len(slow.threads) <= 2, slow.threads
            assert not other.is_closed  # its heartbeats (1 s) kept going
            for i in range(4):
                assert f"new{i}" in gw.broker.vhost("/").queues


async def test_frames_after_a_change_wait_for_it_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pipelined on one channel: declare, bind, passive declare, delete, unbind-free
    declare. Each reply comes in the order sent, each change's reply only after its
    sync; a second channel's publish on the same connection is not held."""
    async with running_gateway(tmp_path / "data") as gw:
        client = await AsyncRawClient.connect(gw.host, gw.port)
        await client.handshake()
        await client.open_channel(1)
        await client.open_channel(2)
        await client.rpc(commands.Confirm.Select(), 2)
        slow = SlowDefinitionsSync(delay=0.3)
        monkeypatch.setattr(os, "fdatasync", slow)
        sent = time.monotonic()
        for method in (
            commands.Queue.Declare(queue="p", durable=True, arguments=STREAM),
            commands.Queue.Bind(queue="p", exchange="amq.direct", routing_key="k"),
            commands.Queue.Declare(queue="p", passive=True),
            commands.Queue.Delete(queue="p"),
            commands.Queue.Declare(queue="p", passive=True),
        ):
            client.send_frame(method, 1)
        client.send_frame(commands.Exchange.Declare(exchange="amq.direct", passive=True), 2)
        replies: list[tuple[int, str, float]] = []
        while len(replies) < 6:
            chid, value = await client.read_frame()
            if value.name != "Heartbeat":
                replies.append((chid, value.name, time.monotonic() - sent))
        on_one = [(name, at) for chid, name, at in replies if chid == 1]
        assert [name for name, _ in on_one] == [
            "Queue.DeclareOk",
            "Queue.BindOk",
            "Queue.DeclareOk",
            "Queue.DeleteOk",
            "Channel.Close",  # the passive declare of the deleted queue: 404
        ]
        # three changes, three syncs in a row before the last reply
        assert on_one[-1][1] >= 3 * 0.3, on_one
        on_two = [(name, at) for chid, name, at in replies if chid == 2]
        assert on_two[0][0] == "Exchange.DeclareOk"
        # before channel 1's first reply, which waited for a sync (an order, not a timing)
        first_on_one = next(i for i, (chid, _, _) in enumerate(replies) if chid == 1)
        assert replies.index((2, *on_two[0])) < first_on_one, "channel 2 waited for channel 1"
        assert "p" not in gw.broker.vhost("/").queues
        await client.close()


async def test_a_failed_sync_closes_the_connection_and_reports_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        client = await AsyncRawClient.connect(gw.host, gw.port)
        await client.handshake()
        await client.open_channel(1)
        witness = await aio_pika.connect(gw.url)
        monkeypatch.setattr(
            os, "fdatasync", SlowDefinitionsSync(0.05, OSError(errno.EIO, "Input/output error"))
        )
        client.send_frame(commands.Queue.Declare(queue="lost", durable=True, arguments=STREAM), 1)
        reply = await client.next_method()
        assert isinstance(reply, commands.Connection.Close), reply
        assert reply.reply_code == 541
        assert "definitions.log" in reply.reply_text and "Input/output error" in reply.reply_text
        monkeypatch.undo()
        # the node goes on: another connection declares and gets its answer
        async with witness:
            ch = await witness.channel()
            await ch.declare_queue("after", durable=True, arguments=STREAM)
        await client.close()


async def test_publishes_behind_a_held_declare_are_bounded_then_all_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that declares a stream and at once pipelines 8 MiB of publishes to it on the
    same channel: while the declare's sync runs, the held frames stay near 1 MiB (the
    connection stops reading), and afterwards every publish is stored and confirmed, in
    order, after the declare-ok."""
    async with running_gateway(tmp_path / "data") as gw:
        loop = asyncio.get_running_loop()
        client = await AsyncRawClient.connect(gw.host, gw.port)
        await client.handshake()
        await client.open_channel(1)
        await client.rpc(commands.Confirm.Select(), 1)
        monkeypatch.setattr(os, "fdatasync", SlowDefinitionsSync())
        count, body = 2000, b"x" * 4096
        publish = commands.Basic.Publish(exchange="", routing_key="piped")
        client.send_frame(commands.Queue.Declare(queue="piped", durable=True, arguments=STREAM), 1)
        client.send(publish_frames(publish, 1, b"\x00\x00", body) * count)
        peak = 0

        async def sample() -> None:
            nonlocal peak
            while True:
                for conn in list(gw.node.connections):
                    peak = max(peak, getattr(conn, "backlog_bytes", 0))
                await asyncio.sleep(0.005)

        sampler = loop.create_task(sample())
        first = await client.next_method(timeout=30)
        assert isinstance(first, commands.Queue.DeclareOk), first
        acked = 0
        while acked < count:
            reply = await client.next_method(timeout=30)
            assert isinstance(reply, commands.Basic.Ack), reply
            acked = reply.delivery_tag if reply.multiple else acked + 1
        sampler.cancel()
        assert 0 < peak < 3 * 1024 * 1024, peak
        assert gw.broker.vhost("/").get_queue("piped").message_count == count
        await client.close()
