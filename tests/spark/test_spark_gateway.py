"""End to end: messages published through a real SieveMQ server with pika, read by Spark
from the same data directory while the server keeps running (committed data only)."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from sievemq.testing.pika_client import connect

# the JVM start (in the first test's setup) takes minutes on a loaded 2-core machine
pytestmark = pytest.mark.timeout(1200)


def test_published_messages_read_by_spark_beside_the_server(
    spark: Any, metrics: Any, server: Any
) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    for i in range(60):
        values: Any = ["eu", "paid"] if i % 3 == 0 else ("us" if i % 3 == 1 else None)
        headers: dict[str, Any] = {"i": i}
        if values is not None:
            headers["x-stream-filter-value"] = values
        ch.basic_publish(
            "",
            "events",
            f"event {i}".encode(),
            pika.BasicProperties(headers=headers, content_type="text/plain", priority=3),
        )
    try:
        df = spark.read.format("sievemq").option("stream", "events").load(str(server.data_dir))
        rows = sorted(df.collect(), key=lambda r: r.offset)
        assert [bytes(r.body) for r in rows] == [f"event {i}".encode() for i in range(60)]
        assert rows[0].filter_values == ["eu", "paid"] and rows[0].filter_value == "eu"
        assert rows[1].filter_values == ["us"] and rows[2].filter_values == []
        assert rows[5].headers["i"] == "5" and rows[5].properties.priority == 3
        assert rows[5].routing_key == "events" and rows[5].exchange == ""

        # the consumer filter semantics: any (default) vs all, and match-unfiltered
        def events(**options: str) -> Any:
            return spark.read.format("sievemq").options(stream="events", **options)

        assert events(filterValues="paid").load(str(server.data_dir)).count() == 20
        both = events(filterValues="eu,us", filterMatchType="all")
        assert both.load(str(server.data_dir)).count() == 0
        sql = events(sql="i >= 50 AND TAGS = 'us'").load(str(server.data_dir))
        assert sorted(r.headers["i"] for r in sql.collect()) == ["52", "55", "58"]
        # the server still serves the stream it shares with Spark
        ch.basic_publish("", "events", b"after", pika.BasicProperties(headers={"i": 60}))
        assert events().load(str(server.data_dir)).count() == 61
    finally:
        conn.close()
