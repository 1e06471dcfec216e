"""Word count: flatMap (split the body into words), keyBy (group by word), count -> stream.

Like RocketMQ Streams' GroupedStream.count(), every change is published: after each
micro-batch, one message per word whose count changed, body ``{"word": ..., "count": N}``
(Spark's update mode, through ``foreachBatch``; exactly once across restarts).

    python examples/spark/word_count.py --data-dir DATA \
        --uri amqp://guest:guest@127.0.0.1:5672/%2F --checkpoint /tmp/ck-wc \
        [--source lines] [--sink word-counts]
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import functions as F

from sievemq.spark import jobs
from sievemq.spark.sink import foreach_batch


def query(spark: Any, args: Any) -> Any:
    lines = jobs.read(spark, args).select(F.col("body").cast("string").alias("line"))
    words = lines.select(F.explode(F.split(F.lower("line"), r"\s+")).alias("word"))  # flatMap
    counts = words.where(F.col("word") != "").groupBy("word").count()  # keyBy + count
    out = counts.select(F.to_json(F.struct("word", "count")).alias("body"))
    writer = (
        out.writeStream.outputMode("update")
        .foreachBatch(foreach_batch(args.uri, args.sink, f"word-count:{args.checkpoint}"))
        .option("checkpointLocation", args.checkpoint)
    )
    writer = (
        writer.trigger(processingTime="1 second")
        if args.continuous
        else writer.trigger(availableNow=True)
    )
    return writer.start()


def arguments(argv: list[str]) -> Any:
    return jobs.parser(__doc__ or "", "lines", "word-counts").parse_args(argv)


def main(argv: list[str]) -> None:
    args = arguments(argv)
    query(jobs.session(args.master, "word-count"), args).awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
