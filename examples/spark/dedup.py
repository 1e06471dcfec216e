"""Stateful dedup: publish each event id once, however often it arrives (within the
watermark: ids are remembered for ``--within`` of event time after their last sighting).

Input bodies are JSON ``{"id": "e1", "ts": "...", ...}``; the first body seen for an id is
published unchanged. The seen ids live in the checkpoint, so an id seen before a restart is
still a duplicate after it.

    python examples/spark/dedup.py --data-dir DATA \
        --uri amqp://guest:guest@127.0.0.1:5672/%2F --checkpoint /tmp/ck-dedup \
        [--within "1 hour"] [--source events] [--sink unique-events]
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import functions as F

from sievemq.spark import jobs


def query(spark: Any, args: Any) -> Any:
    events = jobs.read(spark, args).select(
        "body",
        "filter_value",
        F.from_json(F.col("body").cast("string"), "id STRING, ts TIMESTAMP").alias("e"),
    )
    unique = (
        events.select("body", "filter_value", "e.id", "e.ts")
        .withWatermark("ts", args.within)
        .dropDuplicatesWithinWatermark(["id"])
    )
    return jobs.run(unique.select("body", "filter_value").writeStream.outputMode("append"), args)


def arguments(argv: list[str]) -> Any:
    p = jobs.parser(__doc__ or "", "events", "unique-events")
    p.add_argument("--within", default="1 hour", help="how long an id is remembered")
    return p.parse_args(argv)


def main(argv: list[str]) -> None:
    args = arguments(argv)
    query(jobs.session(args.master, "dedup"), args).awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
