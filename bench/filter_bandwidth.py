"""Bandwidth saved by broker-side filtering, through a real server and a real client.

`python -m bench.filter_bandwidth [--n 3000] [--repeats 3] [--layout both]`: N messages of
10 KB, each with one of 50 x-stream-filter-values, are published through the server; then, per
repeat, one unfiltered consumer and one consumer with x-stream-filter=v7 (loadgen, Go amqp091)
read the stream from `first`. Reports the bytes each received (loadgen's bytes_received), the
share saved, and what the server read from its files for each consumer (``/proc/PID/io``
rchar: the Bloom filter's work shows there, not in the bytes a client receives).

Two layouts of the values over the stream:

- ``round-robin``: loadgen publishes v0..v49 in turn, so every chunk holds all 50 values: the
  Bloom filter skips nothing and the whole saving comes from SieveMQ's exact per-message
  check (RabbitMQ's blog reports about 80 % saved, as it sends whole chunks).
- ``clustered``: the values come in runs (60 messages of v0, then 60 of v1, ...), as when a
  value is a tenant, a region or a time window; an aiormq publisher sends each run with its
  confirms in flight together. Chunks then hold one or two values and the Bloom filter skips
  the others without reading them.

Medians of the repeats, JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from typing import Any

import aiormq
from pamqp.commands import Basic

from bench._util import Server, machine, start_server, stop_server
from bench.filter_common import data_dir, declare, loadgen

VALUES = 50
SIZE = 10 * 1024
FV = "x-stream-filter-value"


def read_bytes(pid: int) -> int:
    """Bytes the process read through read/pread calls so far (its stream files, mostly)."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/PID/io")


async def publish_clustered(url: str, queue: str, n: int) -> None:
    """n messages, value v0 for the first n/50, then v1, ...; each run confirmed together."""
    body = os.urandom(SIZE)
    conn = await aiormq.connect(url)
    channel = await conn.channel()  # publisher confirms on
    per_value = n // VALUES
    for value in range(VALUES):
        props = Basic.Properties(headers={FV: f"v{value}"})
        await asyncio.gather(
            *(
                channel.basic_publish(body, routing_key=queue, properties=props)
                for _ in range(per_value)
            )
        )
    await conn.close()


def consume(server: Server, n: int, *extra: object) -> dict[str, Any]:
    before = read_bytes(server.pid)
    got = loadgen(
        server,
        "-mode",
        "consume",
        "-queue",
        "bw",
        "-no-declare",
        "-keep",
        "-offset",
        "first",
        "-prefetch",
        500,
        "-idle",
        "2s",
        "-m",
        n,
        *extra,
    )
    got["server_read_bytes"] = read_bytes(server.pid) - before
    return got


def measure(layout: str, n: int, repeats: int) -> dict[str, Any]:
    with data_dir() as data:
        server = start_server(data)
        try:
            declare(server, "bw")
            if layout == "round-robin":
                loadgen(
                    server,
                    *("-mode", "publish", "-queue", "bw", "-no-declare", "-keep"),
                    *("-n", n, "-size", SIZE, "-filter-values", VALUES),
                )
            else:
                asyncio.run(publish_clustered(server.url, "bw", n))
            runs = []
            for _ in range(repeats):
                plain = consume(server, n)
                filtered = consume(server, n // VALUES, "-filter", "v7")
                runs.append(
                    {
                        "unfiltered_bytes": plain["bytes_received"],
                        "unfiltered_msgs": plain.get("consumed"),
                        "unfiltered_server_read_bytes": plain["server_read_bytes"],
                        "filtered_bytes": filtered["bytes_received"],
                        "filtered_msgs": filtered.get("consumed"),
                        "filtered_unmatched": filtered.get("filter_unmatched"),
                        "filtered_server_read_bytes": filtered["server_read_bytes"],
                        "filtered_server_cpu_s": filtered["server_cpu_s"],
                        "saved": 1 - filtered["bytes_received"] / plain["bytes_received"],
                    }
                )
        finally:
            stop_server(server)

    def median(key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    return {
        "layout": layout,
        "unfiltered_bytes": median("unfiltered_bytes"),
        "filtered_bytes": median("filtered_bytes"),
        "saved_percent": round(100 * median("saved"), 2),
        "unfiltered_server_read_bytes": median("unfiltered_server_read_bytes"),
        "filtered_server_read_bytes": median("filtered_server_read_bytes"),
        "filtered_server_cpu_s": median("filtered_server_cpu_s"),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layout", choices=["round-robin", "clustered", "both"], default="both")
    args = parser.parse_args()
    n = args.n - args.n % VALUES
    layouts = ["round-robin", "clustered"] if args.layout == "both" else [args.layout]
    print(
        json.dumps(
            {
                "benchmark": "filter_bandwidth",
                **machine(),
                "messages": n,
                "body_bytes": SIZE,
                "values": VALUES,
                "results": [measure(layout, n, args.repeats) for layout in layouts],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
