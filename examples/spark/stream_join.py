"""Stream-stream join: orders joined with the payment that arrives within 10 minutes of the
order (event time, watermarks on both sides), published as one message per match.

Input bodies are JSON: orders ``{"id": "o1", "ts": "..."}``, payments
``{"id": "o1", "ts": "...", "amount": 12.5}``. Output bodies:
``{"id", "ordered", "paid", "amount"}``. Join state lives in the checkpoint, so an order
seen before a restart still matches a payment seen after it.

``--left-outer``: an order that found no payment is published too, with ``"paid": null`` and
``"amount": null``, once it can no longer match: when the watermark (the smaller of both
streams' latest event time minus 10 minutes) passes the order's time plus 10 minutes. Until
then it waits in the join state (across restarts too).

    python examples/spark/stream_join.py --data-dir DATA \
        --uri amqp://guest:guest@127.0.0.1:5672/%2F --checkpoint /tmp/ck-join \
        [--source orders] [--payments payments] [--sink paid-orders] [--left-outer]
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import functions as F

from sievemq.spark import jobs


def _events(spark: Any, args: Any, stream: str, ddl: str, prefix: str) -> Any:
    parsed = jobs.read(spark, args, stream).select(
        F.from_json(F.col("body").cast("string"), ddl).alias("e")
    )
    cols = [F.col(f"e.{c.split()[0]}").alias(f"{prefix}_{c.split()[0]}") for c in ddl.split(",")]
    return parsed.select(*cols).withWatermark(f"{prefix}_ts", "10 minutes")


def query(spark: Any, args: Any) -> Any:
    orders = _events(spark, args, args.source, "id STRING, ts TIMESTAMP", "o")
    payments = _events(spark, args, args.payments, "id STRING, ts TIMESTAMP, amount DOUBLE", "p")
    condition = (
        (F.col("o_id") == F.col("p_id"))
        & (F.col("p_ts") >= F.col("o_ts"))
        & (F.col("p_ts") <= F.col("o_ts") + F.expr("INTERVAL 10 MINUTES"))
    )
    joined = orders.join(payments, condition, "leftOuter" if args.left_outer else "inner")
    out = joined.select(
        F.to_json(
            F.struct(
                F.col("o_id").alias("id"),
                F.date_format("o_ts", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("ordered"),
                F.date_format("p_ts", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("paid"),
                F.col("p_amount").alias("amount"),
            ),
            {"ignoreNullFields": "false"},  # an unmatched order: "paid": null, "amount": null
        ).alias("body")
    )
    return jobs.run(out.writeStream.outputMode("append"), args)


def arguments(argv: list[str]) -> Any:
    p = jobs.parser(__doc__ or "", "orders", "paid-orders")
    p.add_argument("--payments", default="payments", help="the second input stream")
    p.add_argument("--left-outer", action="store_true", help="also unmatched orders")
    return p.parse_args(argv)


def main(argv: list[str]) -> None:
    args = arguments(argv)
    query(jobs.session(args.master, "stream-join"), args).awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
