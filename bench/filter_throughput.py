"""Filtered consume throughput when 1 message in 10 matches, against unfiltered consume.

`python -m bench.filter_throughput [--messages 500000] [--repeats 3]`: declares a stream
through AMQP, stops the server and writes N messages of 100 B directly with ``sievemq.storage``
(chunks of 100; filter values v0..v9 round-robin, so every chunk holds every value and the
Bloom filter cannot skip: this measures the exact per-message check), restarts the server.
Per repeat, loadgen (Go amqp091 client, prefetch 1000) consumes from `first`: unfiltered (all N)
and with x-stream-filter=v3 (N/10). Reports delivered msgs/s, stream msgs scanned/s and server
CPU per stream message. Medians, JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

from bench._util import machine, start_server, stop_server
from bench.filter_common import data_dir, declare, loadgen
from bench.filter_scan import props
from sievemq.storage import Message, Stream, StreamConfig

PER_CHUNK = 100
VALUES = [f"v{i}" for i in range(10)]


def fill(directory: Path, messages: int) -> None:
    raw = {v: props(v) for v in VALUES}
    body = os.urandom(100)
    stream = Stream.open(directory, StreamConfig())
    for c in range(messages // PER_CHUNK):
        base = c * PER_CHUNK
        stream.append(
            [
                Message((v,), "", "tp", raw[v], body)
                for v in (VALUES[(base + i) % 10] for i in range(PER_CHUNK))
            ]
        )
    stream.close()


def run(server: Any, n: int, filtered: bool) -> dict[str, float]:
    extra: list[object] = ["-m", n // 10, "-filter", "v3"] if filtered else ["-m", n]
    r = loadgen(
        server,
        "-mode",
        "consume",
        "-queue",
        "tp",
        "-no-declare",
        "-keep",
        "-offset",
        "first",
        "-prefetch",
        1000,
        "-idle",
        "3s",
        *extra,
    )
    delivered = r["consumed"]
    seconds = delivered / r["cons_msgs_per_s"]
    return {
        "delivered": delivered,
        "delivered_msgs_per_s": r["cons_msgs_per_s"],
        "seconds": seconds,
        "stream_msgs_per_s": n / seconds,
        "server_cpu_us_per_stream_msg": r["server_cpu_s"] / n * 1e6,
        "unmatched": r.get("filter_unmatched", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.messages - args.messages % PER_CHUNK
    with data_dir() as data:
        server = start_server(data)
        directory = declare(server, "tp")
        stop_server(server)
        fill(directory, n)
        server = start_server(data)
        try:
            plain, filt = [], []
            for _ in range(args.repeats):  # interleaved, so noise hits both alike
                plain.append(run(server, n, False))
                filt.append(run(server, n, True))
        finally:
            stop_server(server)

    def med(rows: list[dict[str, float]]) -> dict[str, float]:
        return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}

    p, f = med(plain), med(filt)
    print(
        json.dumps(
            {
                "benchmark": "filter_throughput",
                **machine(),
                "messages": n,
                "body_bytes": 100,
                "match_ratio": 0.1,
                "fill": "written directly with sievemq.storage into the server's data dir",
                "unfiltered": p,
                "filtered_1_in_10": f,
                "stream_scan_ratio_filtered_vs_unfiltered": round(
                    f["stream_msgs_per_s"] / p["stream_msgs_per_s"], 2
                ),
                "runs": {"unfiltered": plain, "filtered": filt},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
