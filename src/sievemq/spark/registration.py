"""register(spark): the `sievemq` source on a session, optionally with reader metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.accumulators import AccumulatorParam
from pyspark.sql import SparkSession

from sievemq.spark import callback_server
from sievemq.spark.source import SieveDataSource
from sievemq.storage import READ_FIELDS


class _SumParam(AccumulatorParam[tuple[int, ...]]):
    def zero(self, value: tuple[int, ...]) -> tuple[int, ...]:
        return (0,) * len(READ_FIELDS)

    def addInPlace(self, value1: tuple[int, ...], value2: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(a + b for a, b in zip(value1, value2, strict=True))


@dataclass
class ReadMetrics:
    """Reader counters summed over every finished task of this session's sievemq reads."""

    accumulator: Any

    def value(self) -> dict[str, int]:
        """The counters by ``ReadStats`` field name, and ``chunks_skipped_extra``: the name
        ``chunks_skipped_subscription`` had before it matched the admin API's (kept for
        code that reads it)."""
        counts = dict(zip(READ_FIELDS, self.accumulator.value, strict=True))
        counts["chunks_skipped_extra"] = counts["chunks_skipped_subscription"]
        return counts


def register(spark: SparkSession, *, metrics: bool = False) -> ReadMetrics | None:
    """Register ``format("sievemq")`` on this session (and enable filter pushdown), and make
    the driver's py4j callback server (``foreachBatch``) work whatever the number of open
    descriptors (``callback_server``)."""
    callback_server.install()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    if not metrics:
        spark.dataSource.register(SieveDataSource)
        return None
    acc = spark.sparkContext.accumulator((0,) * len(READ_FIELDS), _SumParam())
    # a subclass made here is pickled by value, carrying the accumulator to the executors
    source = type("SieveDataSource", (SieveDataSource,), {"metrics": acc})
    spark.dataSource.register(source)
    return ReadMetrics(acc)
