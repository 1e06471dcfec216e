"""FastStream against SieveMQ: a worker process with a stream subscriber and an RPC handler,
and ``broker.request()`` (direct reply-to) from the test, unchanged from RabbitMQ use.

FastStream could not start at all before direct reply-to existed (its producer declares
``amq.rabbitmq.reply-to`` passively); this is the issue-23 "done when" check.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from faststream.rabbit import RabbitBroker

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

from .workers import worker_process

pytestmark = pytest.mark.timeout(120)

WORKER = "tests.integration.test_clients.faststream_worker"


@pytest.fixture
def stream(server: ServerProcess, qname: str) -> str:
    """A stream with three apac and two emea events, published before the worker starts."""
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i, region in enumerate(["apac", "emea", "apac", "emea", "apac"]):
        ch.basic_publish(
            "",
            qname,
            f"event-{i}".encode(),
            pika.BasicProperties(headers={"x-stream-filter-value": region}),
        )
    conn.close()
    return qname


@pytest.fixture
def worker(server: ServerProcess, stream: str, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    with worker_process(WORKER, server.url, stream, stderr=tmp_path / "worker.err") as proc:
        yield proc


async def test_rpc_and_a_filtered_stream_from_the_first_offset(
    server: ServerProcess, stream: str, worker: subprocess.Popen[str]
) -> None:
    async with RabbitBroker(server.url) as broker:
        reply = await broker.request({"op": "add", "a": 2, "b": 40}, f"{stream}.rpc", timeout=10)
        assert await reply.decode() == {"sum": 42}
        deadline = time.monotonic() + 20
        seen: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            reply = await broker.request({"op": "seen"}, f"{stream}.rpc", timeout=10)
            seen = (await reply.decode())["seen"]
            if len(seen) >= 3:
                break
        # FastStream runs handlers as tasks: the order they append in is not the delivery order
        assert sorted((s["body"], s["offset"]) for s in seen) == [
            ("event-0", 0),
            ("event-2", 2),
            ("event-4", 4),
        ]
    assert worker.poll() is None  # still serving
