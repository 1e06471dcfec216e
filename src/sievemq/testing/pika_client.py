"""pika (blocking) against a ``ServerProcess``: connecting, publishing into a stream, and
reading everything a consumer gets without racing the machine's speed.

Needs pika installed (a test dependency, not one of SieveMQ's). pika blocks: use it against
``sievemq serve`` (``ServerProcess``), not against an in-process gateway on the test's loop.
"""

from __future__ import annotations

import time
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

from sievemq.testing.gateway import RunningGateway
from sievemq.testing.process import ServerProcess

__all__ = ["connect", "consume_expected", "params", "publish_to_stream"]

TICK_S = 0.05


def params(server: ServerProcess | RunningGateway) -> pika.ConnectionParameters:
    """The server's AMQP port as guest on vhost ``/``, one connection attempt."""
    return pika.ConnectionParameters(host=server.host, port=server.amqp_port, connection_attempts=1)


def connect(server: ServerProcess | RunningGateway) -> pika.BlockingConnection:
    """A blocking connection to the server as guest on vhost ``/``."""
    return pika.BlockingConnection(params(server))


def publish_to_stream(
    server: ServerProcess, queue: str, messages: list[tuple[bytes, dict[str, object]]]
) -> None:
    """Declare the stream ``queue`` and publish (body, headers) pairs with confirms."""
    conn = connect(server)
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for body, headers in messages:
        ch.basic_publish("", queue, body, pika.BasicProperties(headers=headers))
    conn.close()


def consume_expected(
    ch: BlockingChannel,
    queue: str,
    want: int,
    arguments: dict[str, Any] | None = None,
    *,
    quiet_s: float = 0.3,
    timeout: float = 10.0,
) -> list[tuple[Any, Any, bytes]]:
    """(method, properties, body) of each delivery, each acked; cancels the consumer.

    "Consume until N s pass without a delivery" loses messages when the first delivery is
    late (a loaded machine); "consume exactly N" cannot see an extra one. This waits (up to
    ``timeout``) for the ``want`` messages the test expects, then keeps listening
    ``quiet_s`` more so that an unexpected extra delivery is still caught."""
    out: list[tuple[Any, Any, bytes]] = []
    deadline = time.monotonic() + timeout
    quiet_since: float | None = None
    for method, props, body in ch.consume(queue, arguments=arguments, inactivity_timeout=TICK_S):
        now = time.monotonic()
        if method is not None:
            out.append((method, props, body))
            ch.basic_ack(method.delivery_tag)
            quiet_since = None
            continue
        if len(out) < want and now < deadline:
            continue
        quiet_since = quiet_since or now
        if now - quiet_since >= quiet_s or now >= deadline + quiet_s:
            break
    ch.cancel()
    return out
