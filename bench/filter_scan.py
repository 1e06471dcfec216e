"""Selective scan through the server: a consumer from `first` finds 10 rare messages behind 1M.

`python -m bench.filter_scan [--messages 1000000] [--repeats 3]`: declares a stream with
255-byte Bloom filters through AMQP, stops the server and writes the stream directly with
``sievemq.storage`` into the server's data dir (chunks of 100 messages of 100 B, each message
with one of 50 common values, then one chunk of 10 'rare' values), restarts the server, then
per repeat an aiormq consumer with x-stream-filter = the 10 rare values attaches at `first`.
Reports the time from basic.consume to the 10th delivery and the stream messages scanned per
second (goal: >= 5M/s). Medians, JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from pathlib import Path

import aiormq
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from bench._util import machine, start_server, stop_server
from bench.filter_common import data_dir, declare
from sievemq.storage import Message, Stream, StreamConfig

PER_CHUNK = 100
COMMON = [f"region-{i:02d}" for i in range(50)]
RARE = [f"rare-{i}" for i in range(10)]
FV = "x-stream-filter-value"


def props(value: str) -> bytes:
    return ContentHeader(0, 0, Basic.Properties(headers={FV: value})).marshal()[12:]


def fill(directory: Path, messages: int) -> int:
    rng = random.Random(7)
    raw = {v: props(v) for v in COMMON + RARE}
    body = os.urandom(100)
    stream = Stream.open(directory, StreamConfig(filter_size_bytes=255))
    for _ in range(messages // PER_CHUNK):
        chunk = []
        for _ in range(PER_CHUNK):
            v = rng.choice(COMMON)
            chunk.append(Message((v,), "", "scan", raw[v], body))
        stream.append(chunk)
    stream.append([Message((v,), "", "scan", raw[v], b"rare") for v in RARE])
    end = stream.end_offset
    stream.close()
    return end


async def find_rare(url: str) -> tuple[float, list[int]]:
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.basic_qos(prefetch_count=100)
    offsets: list[int] = []
    done = asyncio.Event()

    async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
        offsets.append(message.header.properties.headers["x-stream-offset"])
        await ch.basic_ack(message.delivery.delivery_tag)
        if len(offsets) == len(RARE):
            done.set()

    started = time.perf_counter()
    await ch.basic_consume(
        "scan", on_message, arguments={"x-stream-offset": "first", "x-stream-filter": RARE}
    )
    await asyncio.wait_for(done.wait(), 120)
    elapsed = time.perf_counter() - started
    await conn.close()
    return elapsed, offsets


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with data_dir() as data:
        server = start_server(data)
        directory = declare(server, "scan", **{"x-stream-filter-size-bytes": 255})
        stop_server(server)
        t0 = time.perf_counter()
        end = fill(directory, args.messages)
        fill_s = time.perf_counter() - t0
        server = start_server(data)
        try:
            runs = [asyncio.run(find_rare(server.url)) for _ in range(args.repeats)]
        finally:
            stop_server(server)
    for _, offsets in runs:
        assert offsets == list(range(end - len(RARE), end)), offsets
    times = [t for t, _ in runs]
    median = statistics.median(times)
    print(
        json.dumps(
            {
                "benchmark": "filter_scan",
                **machine(),
                "messages": end,
                "chunks": args.messages // PER_CHUNK + 1,
                "filter_size_bytes": 255,
                "fill": "written directly with sievemq.storage into the server's data dir",
                "fill_seconds": round(fill_s, 2),
                "seconds_to_find_10": [round(t, 4) for t in times],
                "median_seconds": round(median, 4),
                "messages_scanned_per_s": round(end / median),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
