"""Windowed counts on event time: tumbling, sliding or session windows per key, with a
watermark (the allowed lateness), published when a window closes.

Input bodies are JSON ``{"key": "k", "ts": "2026-01-01T00:00:03Z"}``; ``ts`` is the event
time (RocketMQ Streams' ``selectTimestamp``). A window is published once the watermark
(the largest ``ts`` seen minus ``--lateness``) passes its end; an event older than the
watermark is dropped. Output bodies: ``{"key", "start", "end", "count"}``.

    python examples/spark/windowed_counts.py --data-dir DATA \
        --uri amqp://guest:guest@127.0.0.1:5672/%2F --checkpoint /tmp/ck-win \
        --kind tumbling|sliding|session [--size "10 seconds"] [--slide "5 seconds"] \
        [--gap "5 seconds"] [--lateness "2 seconds"] [--source events] [--sink window-counts]
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import functions as F

from sievemq.spark import jobs

EVENT = "key STRING, ts TIMESTAMP"


def query(spark: Any, args: Any) -> Any:
    events = (
        jobs.read(spark, args)
        .select(F.from_json(F.col("body").cast("string"), EVENT).alias("e"))
        .select("e.key", "e.ts")
        .withWatermark("ts", args.lateness)
    )
    if args.kind == "tumbling":
        window = F.window("ts", args.size)
    elif args.kind == "sliding":
        window = F.window("ts", args.size, args.slide)
    else:
        window = F.session_window("ts", args.gap)
    counts = events.groupBy(window.alias("w"), "key").count()
    out = counts.select(
        F.to_json(
            F.struct(
                "key",
                F.date_format("w.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("start"),
                F.date_format("w.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("end"),
                "count",
            )
        ).alias("body")
    )
    return jobs.run(out.writeStream.outputMode("append"), args)


def arguments(argv: list[str]) -> Any:
    p = jobs.parser(__doc__ or "", "events", "window-counts")
    p.add_argument("--kind", choices=("tumbling", "sliding", "session"), default="tumbling")
    p.add_argument("--size", default="10 seconds")
    p.add_argument("--slide", default="5 seconds")
    p.add_argument("--gap", default="5 seconds")
    p.add_argument("--lateness", default="2 seconds")
    return p.parse_args(argv)


def main(argv: list[str]) -> None:
    args = arguments(argv)
    query(jobs.session(args.master, f"windowed-counts-{args.kind}"), args).awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
