"""``x-expires``: a classic queue unused for that long is deleted (RabbitMQ's queue TTL).

Unused means no consumers, and no declare or basic.get (``ClassicQueue.last_used_ms``) for
``x-expires`` ms. One sweep a second over the classic queues that have the argument.
"""

from __future__ import annotations

import asyncio
import time

from sievemq.gateway.model.broker import Broker

SWEEP_S = 1.0


def sweep(broker: Broker, now_ms: int | None = None) -> int:
    """Delete every expired queue now; returns how many went."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    gone = 0
    for vhost in list(broker.vhosts.values()):
        for queue in list(vhost.classic.queues.values()):
            expires = queue.arguments.expires
            if expires is None or queue.consumers:
                continue
            if now - queue.last_used_ms >= expires:
                vhost.classic.remove(queue)
                gone += 1
    return gone


def start(broker: Broker, loop: asyncio.AbstractEventLoop) -> None:
    """Sweep every second on ``loop`` for as long as the loop runs."""

    def tick() -> None:
        sweep(broker)
        loop.call_later(SWEEP_S, tick)

    loop.call_later(SWEEP_S, tick)
