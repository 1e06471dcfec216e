"""Backpressure: a client that sends but does not read is held back by TCP, not by memory."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pika
from pamqp import body as pbody
from pamqp import commands, frame, header

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.raw import RawClient

MIB = 1 << 20


def _unroutable_mib() -> bytes:
    """The frames of one mandatory publish of 1 MiB to a routing key no queue is bound to
    (channel 1, bodies in frames of 100,000 bytes)."""
    body = b"x" * MIB
    message = frame.marshal(
        commands.Basic.Publish(exchange="", routing_key="nowhere", mandatory=True), 1
    ) + frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties()), 1)
    for i in range(0, len(body), 100_000):
        message += frame.marshal(pbody.ContentBody(body[i : i + 100_000]), 1)
    return message


def _rss_mib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def test_unread_returns_stop_the_server_reading_and_nothing_is_lost(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data").start()
    try:
        assert srv.proc is not None
        client = RawClient(srv.host, srv.amqp_port, receive_buffer=16384)
        client.handshake()
        client.open_channel()
        rss_before = _rss_mib(srv.proc.pid)
        message = _unroutable_mib()
        total = 60
        sent = [0]

        def send_all() -> None:
            client.sock.settimeout(None)
            for _ in range(total):
                client.send(message)
                sent[0] += 1

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        time.sleep(4)  # the client reads nothing meanwhile
        stalled_at = sent[0]
        rss_grew = _rss_mib(srv.proc.pid) - rss_before
        assert stalled_at < total // 2, f"server kept reading: {stalled_at} MiB accepted"
        assert rss_grew < 48, f"server grew by {rss_grew} MiB holding unread returns"
        # the client now reads: every message comes back as basic.return, none is lost
        returned = 0
        while returned < total:
            method, _props, got = client.read_message(timeout=20)
            assert method.name == "Basic.Return" and method.reply_code == 312
            assert len(got) == MIB
            returned += 1
        sender.join(10)
        assert sent[0] == total
        client.send_frame(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        client.expect(commands.Connection.CloseOk)
    finally:
        srv.stop()


def test_a_client_that_publishes_reads_and_acks_never_deadlocks(tmp_path: Path) -> None:
    # the smallest write buffer: reading pauses at almost every delivery batch
    srv = ServerProcess(tmp_path / "data", ("--write-buffer-high", "4096")).start()
    try:
        conn = connect(srv)
        ch = conn.channel()
        ch.queue_declare("bp", durable=True, arguments={"x-queue-type": "stream"})
        ch.basic_qos(prefetch_count=500)
        got: list[int] = []

        def on_message(c: object, m: pika.spec.Basic.Deliver, p: object, b: bytes) -> None:
            got.append(int(b[:8]))
            ch.basic_ack(m.delivery_tag)

        ch.basic_consume("bp", on_message, arguments={"x-stream-offset": "first"})
        n = 4000
        pad = b"p" * 2000
        for i in range(n):  # publishes interleaved with deliveries on one connection
            ch.basic_publish("", "bp", b"%08d" % i + pad)
            if i % 200 == 0:
                conn.process_data_events(time_limit=0)
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert got == list(range(n))
        conn.close()
    finally:
        srv.stop()


def test_a_client_held_back_by_backpressure_is_not_dropped_for_missed_heartbeats(
    tmp_path: Path,
) -> None:
    srv = ServerProcess(tmp_path / "data").start()
    try:
        client = RawClient(srv.host, srv.amqp_port, receive_buffer=16384)
        client.handshake(heartbeat=1)
        client.open_channel()
        message = _unroutable_mib()
        total = 30
        sender = threading.Thread(
            target=lambda: [client.send(message) for _ in range(total)], daemon=True
        )
        client.sock.settimeout(None)
        sender.start()
        # the server stops reading from us: for four heartbeat intervals it hears nothing,
        # because we read nothing; that is backpressure, not a dead peer
        time.sleep(4.5)
        returned = 0
        while returned < total:
            _, method = client.next_method(timeout=20)
            if method.name != "Basic.Return":
                continue
            size = client._read_raw_header(20)[1]
            got = 0
            while got < size:
                part = client.read_frame(20)[1]
                if part.name == "ContentBody":
                    got += len(part.value)
            returned += 1
        sender.join(10)
        client.send_frame(commands.Basic.Qos(prefetch_count=5), 1)
        client.expect(commands.Basic.QosOk)  # the connection is still alive
    finally:
        srv.stop()
