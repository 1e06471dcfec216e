"""A deep durable queue does not hold its messages in the server's memory.

200,000 persistent 1 KiB messages (about 205 MB of bodies) go into a durable classic queue;
the server process's peak resident memory (VmHWM in /proc/PID/status) must stay far below
the bodies' size, then the queue drains completely and in publish order.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.process import status_kib

pytestmark = pytest.mark.timeout(600)

COUNT = 200_000
BODY = 1024
# what the queue may add to the idle server's resident memory: the memory window (2048
# bodies, 2 MiB), the index of the paged messages (~30 B each: 6 MB) and the buffers of
# one publishing and one consuming connection (measured: +7.6 MB); the bodies are 205 MB,
# and holding them all (as before the window) measured +257 MB
GROWTH_BOUND = 40 * 1024 * 1024


def test_deep_durable_queue_keeps_memory_bounded_and_drains_in_order(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data") as server:
        conn = connect(server)
        ch = conn.channel()
        ch.queue_declare("deep", durable=True)
        idle_kib = status_kib(server.pid, "VmRSS")
        persistent = pika.BasicProperties(delivery_mode=2)
        pad = b"p" * (BODY - 8)
        for i in range(COUNT):
            ch.basic_publish("", "deep", struct.pack(">Q", i) + pad, persistent)
            if i % 5000 == 4999:  # a round trip now and then: the server keeps up
                ch.queue_declare("deep", passive=True)
        assert ch.queue_declare("deep", passive=True).method.message_count == COUNT
        full_kib = status_kib(server.pid, "VmRSS")
        peak_kib = status_kib(server.pid, "VmHWM")
        assert (peak_kib - idle_kib) * 1024 < GROWTH_BOUND, (idle_kib, full_kib, peak_kib)

        ch.basic_qos(prefetch_count=1000)
        received = 0
        for index, (method, _props, body) in enumerate(ch.consume("deep", inactivity_timeout=30)):
            assert method is not None, f"stalled after {index} messages"
            assert struct.unpack_from(">Q", body)[0] == index  # in publish order
            assert len(body) == BODY and not method.redelivered
            received = index + 1
            if received % 500 == 0:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if received == COUNT:
                break
        assert received == COUNT
        ch.cancel()
        assert ch.queue_declare("deep", passive=True).method.message_count == 0
        peak_kib = status_kib(server.pid, "VmHWM")
        assert (peak_kib - idle_kib) * 1024 < GROWTH_BOUND, (idle_kib, peak_kib)
        conn.close()
        segments = list((server.data_dir / "queues").rglob("*.qseg"))
        assert len(segments) <= 1  # every fully acked segment was deleted


def test_small_window_keeps_priorities_requeues_and_dead_letters(tmp_path: Path) -> None:
    """A window of 4 messages (and 64 KiB): everything past it is read back from disk, with
    priorities, requeue order and dead-lettering as with every body in memory, across a
    restart."""
    args = ("--queue-memory-messages", "4", "--queue-memory-bytes", "64KiB")
    with ServerProcess(tmp_path / "data", extra_args=args) as server:
        conn = connect(server)
        ch = conn.channel()
        ch.queue_declare("dead", durable=True)
        ch.queue_declare(
            "prio",
            durable=True,
            arguments={"x-max-priority": 2, "x-dead-letter-exchange": ""}
            | {"x-dead-letter-routing-key": "dead"},
        )
        ch.confirm_delivery()
        sent = [(i, i % 3) for i in range(60)]
        for i, priority in sent:
            props = pika.BasicProperties(delivery_mode=2, priority=priority)
            ch.basic_publish("", "prio", b"%d" % i, props)
        first = [ch.basic_get("prio") for _ in range(3)]
        for method, _, _ in first[:2]:
            ch.basic_nack(method.delivery_tag, requeue=True)
        ch.basic_reject(first[2][0].delivery_tag, requeue=False)  # dead-lettered
        conn.close()
        server.stop()
        server.start()
        conn = connect(server)
        ch = conn.channel()
        got = []
        while True:
            method, _props, body = ch.basic_get("prio", auto_ack=True)
            if method is None:
                break
            got.append((int(body), method.redelivered))
        by_priority = [i for p in (2, 1, 0) for i, q in sent if q == p]
        assert [i for i, _ in got] == [i for i in by_priority if i != by_priority[2]]
        flagged = {i for i, r in got if r}
        # the requeued ones are flagged; so is every id below the highest one delivered (the
        # delivered mark is a high-water mark), and nothing above it
        assert set(by_priority[:2]) <= flagged
        assert flagged == {i for i, _ in got if i <= max(by_priority[:3])}
        method, _props, body = ch.basic_get("dead", auto_ack=True)
        assert method is not None and int(body) == by_priority[2]
        conn.close()
