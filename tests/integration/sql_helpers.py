"""Shared helpers of the SQL/named-consumer integration tests: real server, real clients."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pika
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server_process import ServerProcess
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.net.listener import start_amqp_listener
from sievemq.gateway.runtime.node import Limits, Node
from sievemq.serve import protocol_factory

__all__ = ["ServerProcess", "in_process_server", "params", "publish", "stream_server"]


def params(srv: ServerProcess) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(host=srv.host, port=srv.amqp_port, connection_attempts=1)


def publish(
    srv: ServerProcess, queue: str, messages: list[tuple[bytes, dict[str, object]]]
) -> None:
    """Declare the stream and publish with confirms, one message per chunk-ish."""
    conn = pika.BlockingConnection(params(srv))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for body, headers in messages:
        ch.basic_publish("", queue, body, pika.BasicProperties(headers=headers))
    conn.close()


@pytest.fixture(scope="module")
def stream_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("sql") / "data").start()
    yield srv
    if srv.running:
        srv.stop()


@asynccontextmanager
async def in_process_server(data_dir: Path) -> AsyncIterator[tuple[Node, int]]:
    """The gateway on this test's event loop, so a test can read the broker's statistics."""
    import asyncio

    broker = Broker(data_dir)
    node = Node(broker, Limits(), asyncio.get_running_loop())
    server, port = await start_amqp_listener(lambda: protocol_factory(node), "127.0.0.1", 0)
    try:
        yield node, port
    finally:
        server.close()
        for conn in list(node.connections):
            if conn.transport is not None:
                conn.transport.abort()
        await asyncio.sleep(0.05)
        node.flush_all()
        broker.close()
        node.executor.shutdown(wait=True)
