"""One memory budget for the bodies of all durable classic queues of a node.

1,000 durable queues each get 16 persistent 8 KiB messages (128 MiB of bodies) on a node
started with ``--queue-memory-bytes 16MiB``: the bytes the queues hold in memory together
(RabbitMQ's ``message_bytes_ram``, summed over ``GET /api/queues``) stay within the budget,
no queue holds more than its fair share, the server's peak resident memory grows far less
than the bodies' size, and every message comes back from disk, in order, intact. (With a
window of its own per queue, as before, every body stayed in memory: +128 MiB and more.)
"""

from __future__ import annotations

import struct
from pathlib import Path

import httpx
import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.process import status_kib

pytestmark = pytest.mark.timeout(600)

QUEUES = 1000
PER_QUEUE = 16
BODY = 8 * 1024
BUDGET = 16 * 1024 * 1024
# the budget, the index of the paged messages (~30 B each), 1,000 queues' objects and the
# buffers of one publishing connection; the bodies are 128 MiB
GROWTH_BOUND = 48 * 1024 * 1024


def body(queue: int, i: int) -> bytes:
    head = struct.pack(">II", queue, i)
    return head + bytes([queue % 251]) * (BODY - len(head))


def test_a_thousand_deep_queues_share_one_budget_and_drain_from_disk(tmp_path: Path) -> None:
    args = ("--queue-memory-bytes", "16MiB")
    with ServerProcess(tmp_path / "data", extra_args=args) as server:
        conn = pika.BlockingConnection(pika.URLParameters(server.url))
        ch = conn.channel()
        for q in range(QUEUES):
            ch.queue_declare(f"deep-{q}", durable=True)
        idle_kib = status_kib(server.pid, "VmRSS")
        persistent = pika.BasicProperties(delivery_mode=2)
        for i in range(PER_QUEUE):  # round robin, as many publishers would
            for q in range(QUEUES):
                ch.basic_publish("", f"deep-{q}", body(q, i), persistent)
            ch.queue_declare("deep-0", passive=True)  # a round trip: the server kept up
        for q in range(QUEUES):
            assert ch.queue_declare(f"deep-{q}", passive=True).method.message_count == PER_QUEUE
        peak_kib = status_kib(server.pid, "VmHWM")
        assert (peak_kib - idle_kib) * 1024 < GROWTH_BOUND, (idle_kib, peak_kib)

        with httpx.Client(auth=("guest", "guest"), timeout=120) as admin:
            listed = admin.get(f"{server.admin_url}/api/queues/%2F").json()
        deep = [item for item in listed if item["name"].startswith("deep-")]
        assert len(deep) == QUEUES
        in_ram = sum(item["message_bytes_ram"] for item in deep)
        assert 0 < in_ram <= BUDGET + BODY, in_ram
        assert max(item["message_bytes_ram"] for item in deep) <= BUDGET // QUEUES + BODY
        paged = sum(item["message_bytes_paged_out"] for item in deep)
        assert in_ram + paged == QUEUES * PER_QUEUE * BODY

        for q in range(QUEUES):
            got = []
            while (message := ch.basic_get(f"deep-{q}", auto_ack=True))[0] is not None:
                got.append(message[2])
            assert got == [body(q, i) for i in range(PER_QUEUE)], f"queue deep-{q}"
        conn.close()
