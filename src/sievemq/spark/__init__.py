"""`sievemq.spark`: a PySpark source and sink for SieveMQ streams, files or network (docs/spark.md).

``register(spark)`` registers the source as ``sievemq`` and turns on
``spark.sql.python.filterPushdown.enabled`` (off by default in Spark, and a Python source that
pushes filters fails while it is off). With ``metrics=True`` it returns a ``ReadMetrics``
whose counters (chunks scanned, chunks skipped by Bloom, ...) add up what every read of this
session did on the executors, the same counters the gateway keeps per consumer.

Imports only storage, filtering, pyspark and pyarrow: executors need ``sievemq`` installed and
the data directory on a path they can read, nothing of the gateway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sievemq.spark.registration import ReadMetrics, register
    from sievemq.spark.source import SieveDataSource

__all__ = ["ReadMetrics", "SieveDataSource", "register"]


def __getattr__(name: str) -> Any:
    # lazy: `sievemq export --help` and the CLI parser must not pay for importing pyspark
    if name in ("ReadMetrics", "register"):
        from sievemq.spark import registration

        return getattr(registration, name)
    if name == "SieveDataSource":
        from sievemq.spark.source import SieveDataSource

        return SieveDataSource
    raise AttributeError(name)
