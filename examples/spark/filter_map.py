"""filter + map -> stream: keep the messages whose body is not empty, upper-case the body,
keep the filter value, publish into the output stream (exactly once across restarts).

    python examples/spark/filter_map.py --data-dir DATA \
        --uri amqp://guest:guest@127.0.0.1:5672/%2F \
        --checkpoint /tmp/ck-filter-map [--source orders] [--sink orders-upper]
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import functions as F

from sievemq.spark import jobs


def query(spark: Any, args: Any) -> Any:
    rows = jobs.read(spark, args)
    out = rows.where(F.length("body") > 0).select(  # filter
        F.upper(F.col("body").cast("string")).alias("body"),  # map
        "filter_value",
    )
    return jobs.run(out.writeStream, args)


def arguments(argv: list[str]) -> Any:
    return jobs.parser(__doc__ or "", "orders", "orders-upper").parse_args(argv)


def main(argv: list[str]) -> None:
    args = arguments(argv)
    spark = jobs.session(args.master, "filter-map")
    q = query(spark, args)
    q.awaitTermination()
    print(f"filter_map: done, {sum(p['numInputRows'] for p in q.recentProgress)} rows", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
