"""Resource alarms end to end: publishers get connection.blocked and are not read, consumers go on.

The in-process tests run the real listener and connection handler with the real probe
(``SystemProbe`` over the data directory) and move the disk free limit at runtime through the
admin facade, as ``rabbitmqctl set_disk_free_limit`` does: above the real free space the alarm
is on, at 0 it is off. The subprocess test starts ``sievemq serve`` with limits no machine
meets, so the alarm is on from the first poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import aiormq
import pika
from pamqp import body, commands, frame, header

from sievemq.amqp.states import ChannelPhase
from sievemq.testing import RawClient, RunningGateway, ServerProcess, running_gateway
from sievemq.testing.pika_client import connect
from sievemq.testing.wait import eventually

PB = "1PB"  # more free disk than any test machine has: the disk alarm is on
T = TypeVar("T")


def count(gw: RunningGateway, stream: str) -> int:
    return int(gw.facade.get_stream("/", stream).messages)


def connection_of(gw: RunningGateway, predicate: Callable[[Any], bool]) -> Any:
    return next(c for c in gw.node.connections if predicate(c))


class Publisher:
    """A pika publisher with confirms that records blocked/unblocked notifications."""

    def __init__(self, port: int, stream: str) -> None:
        params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=0)
        self.conn = pika.BlockingConnection(params)
        self.events: list[str] = []
        self.conn.add_on_connection_blocked_callback(
            lambda _c, frame: self.events.append("blocked: " + frame.method.reason)
        )
        self.conn.add_on_connection_unblocked_callback(
            lambda _c, _frame: self.events.append("unblocked")
        )
        self.channel = self.conn.channel()
        self.channel.confirm_delivery()
        self.stream = stream

    def publish(self, body: bytes) -> None:
        """Returns once the server confirmed the message (raises if it nacks)."""
        self.channel.basic_publish("", self.stream, body)

    def pump(self, seconds: float) -> None:
        self.conn.process_data_events(time_limit=seconds)

    def pump_until(self, events: int, timeout: float = 10.0) -> None:
        """Let pika run callbacks until ``events`` notifications came (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while len(self.events) < events and time.monotonic() < deadline:
            self.pump(0.05)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(fn, *args)


async def test_disk_alarm_blocks_the_publisher_consumers_go_on_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path / "data") as srv:
        srv.facade.create_stream("/", "s")
        pub = await in_thread(Publisher, srv.port, "s")
        for i in range(3):
            await in_thread(pub.publish, b"m%d" % i)
        assert count(srv, "s") == 3

        # the alarm comes on: the connection that published is blocked and told why
        snapshot = srv.facade.set_alarm_limits(disk_free_limit=PB)
        assert snapshot["active"] == ["disk"] and snapshot["disk"]["alarm"] is True
        assert srv.facade.overview().alarms == ["disk"]
        await in_thread(pub.pump_until, 1)
        assert pub.events == ["blocked: low on disk"]

        # a publish while blocked is not read, so not stored and not confirmed
        pending = asyncio.ensure_future(in_thread(pub.publish, b"m3"))
        await asyncio.sleep(0.5)
        assert not pending.done()
        assert count(srv, "s") == 3

        # a consumer on another connection still gets every message, acking one at a time
        consumer = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{srv.port}/")
        channel = await consumer.channel()
        await channel.basic_qos(prefetch_count=1)
        got: list[bytes] = []

        async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
            got.append(message.body)
            await channel.basic_ack(message.delivery.delivery_tag)

        await channel.basic_consume("s", on_message, arguments={"x-stream-offset": "first"})
        await eventually(lambda: len(got) == 3)
        assert got == [b"m0", b"m1", b"m2"]
        consumer_conn = connection_of(srv, lambda c: not c.has_published())
        assert consumer_conn.blocked is False

        # the alarm clears: unblocked, the held publish is read, stored once and confirmed
        assert srv.facade.set_alarm_limits(disk_free_limit=0)["active"] == []
        await asyncio.wait_for(pending, 5)
        await in_thread(pub.pump_until, 2)  # pika hands queued notifications to callbacks
        assert pub.events == ["blocked: low on disk", "unblocked"]
        assert count(srv, "s") == 4
        await eventually(lambda: len(got) == 4)
        await asyncio.sleep(0.2)
        assert got == [b"m0", b"m1", b"m2", b"m3"]
        await in_thread(pub.publish, b"m4")  # publishing goes on as before
        assert count(srv, "s") == 5
        await in_thread(pub.conn.close)
        await consumer.close()


async def test_a_connection_that_starts_publishing_during_the_alarm_is_blocked(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path / "data") as srv:
        srv.facade.create_stream("/", "s")
        srv.facade.set_alarm_limits(disk_free_limit=PB)
        pub = await in_thread(Publisher, srv.port, "s")
        # open and declare are fine: it is not blocked before it publishes
        await in_thread(pub.channel.queue_declare, "s", False, True, False, False, None)
        assert pub.events == []
        # its first publish is accepted (RabbitMQ: blocked after the publish), then it is held
        await in_thread(pub.publish, b"first")
        await in_thread(pub.pump_until, 1)
        assert pub.events == ["blocked: low on disk"]
        pending = asyncio.ensure_future(in_thread(pub.publish, b"second"))
        await asyncio.sleep(0.4)
        assert not pending.done() and count(srv, "s") == 1
        srv.facade.set_alarm_limits(disk_free_limit=0)
        await asyncio.wait_for(pending, 5)
        assert count(srv, "s") == 2
        await in_thread(pub.conn.close)


async def test_a_client_without_the_capability_is_held_silently_and_not_dropped_for_heartbeats(
    tmp_path: Path,
) -> None:
    """RawClient does not advertise connection.blocked; it sends no heartbeats either."""
    async with running_gateway(tmp_path / "data", heartbeat=1) as srv:
        srv.facade.create_stream("/", "s")
        client = await in_thread(RawClient, "127.0.0.1", srv.port)
        await in_thread(client.handshake, "guest", "guest", "PLAIN", 131072, 1)
        await in_thread(client.open_channel)
        assert isinstance(
            await in_thread(client.rpc, commands.Confirm.Select()), commands.Confirm.SelectOk
        )
        await in_thread(client.publish, 1, "", "s", b"\x00\x00", b"one")
        assert (await in_thread(client.next_method))[1].delivery_tag == 1  # basic.ack
        srv.facade.set_alarm_limits(disk_free_limit=PB)
        conn = connection_of(srv, lambda c: c.has_published())
        assert conn.blocked is True
        await in_thread(client.publish, 1, "", "s", b"\x00\x00", b"two")
        # three heartbeat intervals without a byte read from it: still connected
        frames: list[Any] = []

        def read_for(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while (left := deadline - time.monotonic()) > 0:
                with contextlib.suppress(TimeoutError):
                    frames.append(client.read_frame(timeout=left)[1])

        await in_thread(read_for, 3.2)
        assert {f.name for f in frames} == {"Heartbeat"}  # no connection.blocked, no ack
        assert count(srv, "s") == 1 and conn in srv.node.connections
        srv.facade.set_alarm_limits(disk_free_limit=0)
        _, ack = await in_thread(client.next_method)
        assert isinstance(ack, commands.Basic.Ack) and ack.delivery_tag == 2
        assert count(srv, "s") == 2
        client.sock.close()


async def test_a_connection_is_held_between_messages_not_half_way_through_one(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path / "data") as srv:
        srv.facade.create_stream("/", "s")
        client = await in_thread(RawClient, "127.0.0.1", srv.port)
        await in_thread(client.handshake)
        await in_thread(client.open_channel)
        await in_thread(client.rpc, commands.Confirm.Select())
        method = frame.marshal(commands.Basic.Publish(exchange="", routing_key="s"), 1)
        head = frame.marshal(header.ContentHeader(0, 4, commands.Basic.Properties()), 1)
        await in_thread(client.send, method + head)  # the body is still to come
        conn = connection_of(srv, lambda c: c.has_published())
        await eventually(lambda: conn.channels[1].state.phase is ChannelPhase.AWAIT_BODY)
        srv.facade.set_alarm_limits(disk_free_limit=PB)
        assert conn.blocked is False  # half a message: not held yet
        await in_thread(client.send, frame.marshal(body.ContentBody(b"half"), 1))
        _, ack = await in_thread(client.next_method)
        assert isinstance(ack, commands.Basic.Ack) and ack.delivery_tag == 1
        assert count(srv, "s") == 1
        await eventually(lambda: conn.blocked)  # held once the message was complete
        await in_thread(client.publish, 1, "", "s", b"\x00\x00", b"next")
        await asyncio.sleep(0.3)
        assert count(srv, "s") == 1
        srv.facade.set_alarm_limits(disk_free_limit=0)
        _, ack = await in_thread(client.next_method)
        assert isinstance(ack, commands.Basic.Ack) and ack.delivery_tag == 2
        assert count(srv, "s") == 2
        client.sock.close()


def test_serve_flags_turn_the_alarms_on_from_the_start(tmp_path: Path) -> None:
    srv = ServerProcess(
        tmp_path / "data",
        extra_args=(
            "--disk-free-limit",
            PB,
            "--memory-high-watermark",
            "1000",  # bytes: no Python process is that small
            "--alarm-interval-ms",
            "50",
        ),
    ).start()
    try:
        pub = Publisher(srv.amqp_port, "s")
        pub.channel.queue_declare("s", durable=True, arguments={"x-queue-type": "stream"})
        pub.publish(b"accepted")
        deadline = time.monotonic() + 15  # ends as soon as the wait is over
        while not pub.events and time.monotonic() < deadline:
            pub.pump(0.1)
        assert pub.events == ["blocked: low on memory & disk"]

        consumer = connect(srv)
        channel = consumer.channel()
        channel.basic_qos(prefetch_count=10)
        method, _props, body = next(
            channel.consume("s", arguments={"x-stream-offset": "first"}, inactivity_timeout=5)
        )
        assert body == b"accepted"
        channel.basic_ack(method.delivery_tag)
        consumer.close()

        # the blocked publisher's next message is never read: it is not stored
        sent = threading.Thread(target=_publish_quietly, args=(pub,), daemon=True)
        sent.start()
        sent.join(1.0)
        assert sent.is_alive()
    finally:
        code = srv.stop()  # 320 to the blocked connection too; clean exit
    assert code == 0, srv.stderr()


def _publish_quietly(pub: Publisher) -> None:
    with contextlib.suppress(Exception):
        pub.publish(b"held")
