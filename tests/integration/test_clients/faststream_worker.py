"""A FastStream application as a user writes it: an RPC handler and a stream subscriber.

Run as a worker process by test_faststream.py (``python -m ... URL STREAM``): it declares a
stream queue, consumes it from the first offset with a filter, and answers RPC requests
(FastStream replies to the direct reply-to name the request carries). ``seen`` answers the
stream messages consumed so far, so the test can check them through RPC too. Not a test.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from faststream import FastStream
from faststream.rabbit import Channel, QueueType, RabbitBroker, RabbitMessage, RabbitQueue


def build(url: str, stream: str) -> FastStream:
    broker = RabbitBroker(url)
    app = FastStream(broker)
    seen: list[dict[str, Any]] = []

    @broker.subscriber(
        RabbitQueue(stream, durable=True, queue_type=QueueType.STREAM),
        channel=Channel(prefetch_count=50),
        consume_args={"x-stream-offset": "first", "x-stream-filter": "apac"},
    )
    async def on_event(body: str, message: RabbitMessage) -> None:
        offset = message.headers.get("x-stream-offset")
        seen.append({"body": body, "offset": offset})

    @broker.subscriber(f"{stream}.rpc")
    async def rpc(request: dict[str, Any]) -> Any:
        if request["op"] == "add":
            return {"sum": request["a"] + request["b"]}
        return {"seen": seen}

    @app.after_startup
    async def ready() -> None:
        print("worker ready", flush=True)

    return app


if __name__ == "__main__":
    asyncio.run(build(sys.argv[1], sys.argv[2]).run())
