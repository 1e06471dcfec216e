"""Stream protocol (port 5552) throughput with the rstream client: SieveMQ beside RabbitMQ.

`python -m bench.stream_protocol --port P [--label L] [--n N] [--runs R] [--no-filter]`
against a running server (SieveMQ's `stream=` port, or RabbitMQ's stream plugin). Prints
one JSON object: per test the median msg/s of R runs.

- publish_confirm_<size>: rstream `send_batch` of 100 messages, confirms handled by a
  callback, at most 50 batches unconfirmed; timed until every message is confirmed.
- consume_<size>: one subscriber from `first` over the N messages just published, raw
  payloads (no AMQP 1.0 decoding in the client), timed until the last one arrives.
- filtered_consume_1in50: N messages in batches of 100 with filter values v0..v49 (Publish
  v2), a subscriber with `filter.0=v7`; timed until its N/50 messages arrive (needs stream
  filtering: RabbitMQ 3.13+, not the 3.10.8 peer).

The client is Python: it, not the server, may be what limits these numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from typing import Any

from rstream import (
    Consumer,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    MessageContext,
    OffsetType,
    Producer,
    RawMessage,
)

from bench._util import machine

WINDOW = 50  # batches in flight


async def _publish(host: str, port: int, stream: str, n: int, size: int, filtered: bool) -> float:
    confirmed = 0
    done = asyncio.Event()

    def on_confirm(status: Any) -> None:
        nonlocal confirmed
        confirmed += 1
        if confirmed >= n:
            done.set()

    async def extract(msg: Any) -> str:
        return f"v{msg.publishing_id % 50}"

    kwargs: dict[str, Any] = {"filter_value_extractor": extract} if filtered else {}
    body = b"x" * size
    async with Producer(host, port, username="guest", password="guest", **kwargs) as p:
        await p.create_stream(stream, exists_ok=True)
        start = time.perf_counter()
        sent = 0
        next_id = 1
        while sent < n:
            batch = []
            for _ in range(min(100, n - sent)):
                batch.append(RawMessage(body, publishing_id=next_id))
                next_id += 1
            await p.send_batch(stream, batch, on_publish_confirm=on_confirm)  # type: ignore[arg-type]
            sent += len(batch)
            while sent - confirmed > WINDOW * 100:
                await asyncio.sleep(0)
        await asyncio.wait_for(done.wait(), 120)
        return n / (time.perf_counter() - start)


async def _consume(
    host: str, port: int, stream: str, expect: int, filter_value: str | None, whole: bool = False
) -> float:
    got = 0
    done = asyncio.Event()

    async def on_message(msg: Any, ctx: MessageContext) -> None:
        nonlocal got
        got += 1
        if got >= expect:
            done.set()

    kwargs: dict[str, Any] = {}
    if filter_value is not None:
        # the client post-filters as its docs say (the payload is the raw bytes here: the
        # value is the publishing id's residue, so test the record's position instead)
        wanted = int(filter_value[1:])
        kwargs["filter_input"] = FilterConfiguration(
            values_to_filter=[filter_value], predicate=lambda m: True
        )
        if whole:
            kwargs["properties"] = {"sievemq-whole-chunks": "true"}

        async def on_filtered(msg: Any, ctx: MessageContext) -> None:
            nonlocal got
            if (ctx.offset + 1) % 50 == wanted:
                got += 1
                if got >= expect:
                    done.set()

        handler = on_filtered
    else:
        handler = on_message
    async with Consumer(host, port, username="guest", password="guest") as c:
        start = time.perf_counter()
        await c.subscribe(
            stream,
            handler,
            decoder=None,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            initial_credit=10,
            **kwargs,
        )
        await asyncio.wait_for(done.wait(), 120)
        return expect / (time.perf_counter() - start)


async def _delete(host: str, port: int, stream: str) -> None:
    async with Producer(host, port, username="guest", password="guest") as p:
        await p.delete_stream(stream, missing_ok=True)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for size in (100, 1024):
        pub, con = [], []
        for _ in range(args.runs):
            stream = f"bench-{uuid.uuid4().hex[:8]}"
            pub.append(await _publish(args.host, args.port, stream, args.n, size, False))
            con.append(await _consume(args.host, args.port, stream, args.n, None))
            await _delete(args.host, args.port, stream)
        results[f"publish_confirm_{size}B_msg_s"] = round(statistics.median(pub))
        results[f"consume_{size}B_msg_s"] = round(statistics.median(con))
    if not args.no_filter:
        exact, whole = [], []
        for _ in range(args.runs):
            stream = f"bench-{uuid.uuid4().hex[:8]}"
            await _publish(args.host, args.port, stream, args.n, 100, True)
            exact.append(await _consume(args.host, args.port, stream, args.n // 50, "v7"))
            if args.whole_chunks:
                whole.append(await _consume(args.host, args.port, stream, args.n // 50, "v7", True))
            await _delete(args.host, args.port, stream)
        results["filtered_consume_1in50_matching_msg_s"] = round(statistics.median(exact))
        if whole:
            results["filtered_whole_chunks_1in50_matching_msg_s"] = round(statistics.median(whole))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--label", default="server")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-filter", action="store_true")
    parser.add_argument(
        "--whole-chunks",
        action="store_true",
        help="also measure SieveMQ's sievemq-whole-chunks=true (RabbitMQ-style) delivery",
    )
    args = parser.parse_args()
    results = asyncio.run(_run(args))
    print(json.dumps({"label": args.label, "n": args.n, "runs": args.runs, **machine(), **results}))


if __name__ == "__main__":
    main()
