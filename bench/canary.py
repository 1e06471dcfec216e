"""A canary connection for runs that attack the server (bench/fuzz_wire.py and the fuzz
tests): pika publishes with confirms and consumes its own stream until told to stop; at the
end it must have received every message it published, in order.

It lives here, not in ``sievemq.testing``, whose contract keeps client libraries out.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pika


class Canary(threading.Thread):
    """Publishes with confirms and consumes its own stream until told to stop."""

    def __init__(self, url: str, prefetch: int = 50, drain_s: float = 20.0) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.prefetch = prefetch
        self.drain_s = drain_s
        self.queue = f"canary-{random.randrange(1 << 30)}"
        self.stop_event = threading.Event()
        self.published: list[bytes] = []
        self.received: list[bytes] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.url))
            pub = conn.channel()
            pub.confirm_delivery()
            pub.queue_declare(self.queue, durable=True, arguments={"x-queue-type": "stream"})
            sub = conn.channel()
            sub.basic_qos(prefetch_count=self.prefetch)

            def on_message(c: Any, method: Any, _p: Any, body: bytes) -> None:
                self.received.append(body)
                c.basic_ack(method.delivery_tag)

            sub.basic_consume(self.queue, on_message, arguments={"x-stream-offset": "first"})
            while not self.stop_event.is_set():
                body = f"canary-{len(self.published)}".encode()
                pub.basic_publish("", self.queue, body)
                self.published.append(body)
                conn.process_data_events(time_limit=0.05)
            deadline = time.monotonic() + self.drain_s
            while len(self.received) < len(self.published) and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.1)
            conn.close()
        except Exception as exc:  # reported in the results
            self.error = repr(exc)
