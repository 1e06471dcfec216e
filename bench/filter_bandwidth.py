"""Bandwidth saved by broker-side filtering, through a real server and a real client.

`python -m bench.filter_bandwidth [--n 3000] [--repeats 3]`: loadgen (Go amqp091 client)
publishes N messages of 10 KB with x-stream-filter-value round-robin over 50 values; then,
per repeat, one unfiltered consumer and one consumer with x-stream-filter=v7 read the stream
from `first`. Reports the bytes each received (loadgen's bytes_received) and the share saved.
RabbitMQ's blog reports about 80 % saved (whole chunks are delivered and the client re-filters);
SieveMQ delivers only the matching messages. Medians of the repeats, JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics

from bench._util import machine, start_server, stop_server
from bench.filter_common import data_dir, declare, loadgen

VALUES = 50
SIZE = 10 * 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.n - args.n % VALUES
    with data_dir() as data:
        server = start_server(data)
        try:
            declare(server, "bw")
            pub = loadgen(
                server,
                "-mode",
                "publish",
                "-queue",
                "bw",
                "-no-declare",
                "-keep",
                "-n",
                n,
                "-size",
                SIZE,
                "-filter-values",
                VALUES,
            )
            runs = []
            for _ in range(args.repeats):
                common = (
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
                )
                plain = loadgen(server, *common, "-m", n)
                filtered = loadgen(server, *common, "-m", n // VALUES, "-filter", "v7")
                runs.append(
                    {
                        "unfiltered_bytes": plain["bytes_received"],
                        "unfiltered_msgs": plain.get("consumed"),
                        "filtered_bytes": filtered["bytes_received"],
                        "filtered_msgs": filtered.get("consumed"),
                        "filtered_unmatched": filtered.get("filter_unmatched"),
                        "saved": 1 - filtered["bytes_received"] / plain["bytes_received"],
                    }
                )
        finally:
            stop_server(server)
    print(
        json.dumps(
            {
                "benchmark": "filter_bandwidth",
                **machine(),
                "messages": n,
                "body_bytes": SIZE,
                "values": VALUES,
                "publish_msgs_per_s": pub.get("pub_msgs_per_s"),
                "unfiltered_bytes": statistics.median(r["unfiltered_bytes"] for r in runs),
                "filtered_bytes": statistics.median(r["filtered_bytes"] for r in runs),
                "saved_percent": round(100 * statistics.median(r["saved"] for r in runs), 2),
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
