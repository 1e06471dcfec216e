"""Reading everything a pika consumer gets, without racing the machine's speed.

"Consume until N s pass without a delivery" loses messages when the first delivery is late
(a loaded machine); "consume exactly N" cannot see an extra one. This waits (up to
``timeout``) for the ``want`` messages the test expects, then keeps listening ``quiet_s``
more so that an unexpected extra delivery is still caught."""

from __future__ import annotations

import time
from typing import Any

from pika.adapters.blocking_connection import BlockingChannel

TICK_S = 0.05


def consume_expected(
    ch: BlockingChannel,
    queue: str,
    want: int,
    arguments: dict[str, Any] | None = None,
    *,
    quiet_s: float = 0.3,
    timeout: float = 10.0,
) -> list[tuple[Any, Any, bytes]]:
    """(method, properties, body) of each delivery, each acked; cancels the consumer."""
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
