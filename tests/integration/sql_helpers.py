"""Shared helpers of the SQL/named-consumer integration tests: pika against a real server."""

from __future__ import annotations

import pika

from sievemq.testing import ServerProcess

__all__ = ["params", "publish"]


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
