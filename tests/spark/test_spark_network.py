"""The network mode: Spark reads streams from a running SieveMQ through the RabbitMQ Stream
protocol (``option("uri", "rabbitmq-stream://...")``), published over AMQP 0-9-1 and over the
Stream protocol, filtered by the server's Bloom filters, batch and streaming.

One node: the Metadata lookup is exercised (the reader connects where Metadata points); the
3-node cluster, streams led by different nodes through one URI, is
``test_spark_cluster_network.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pika
import pyarrow.parquet as pq
import pytest
from rstream import AMQPMessage, Producer

from sievemq.testing import ServerProcess

from .spark_data import parquet_available_now

# the JVM start (in the first test's setup) takes minutes on a loaded 2-core machine
pytestmark = pytest.mark.timeout(1200)

REGIONS = ("eu", "us", "ap")


def _uri(server: ServerProcess) -> str:
    return f"rabbitmq-stream://guest:guest@{server.host}:{server.stream_port}/%2F"


def _publish_amqp(
    server: ServerProcess, stream: str, first: int, count: int, **arguments: Any
) -> None:
    """``count`` messages ``m<i>`` with filter value REGIONS[i // 100 % 3], one chunk each
    (the stream declared with ``arguments`` besides its type)."""
    conn = pika.BlockingConnection(pika.URLParameters(server.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream", **arguments})
        for i in range(first, first + count):
            headers = {"x-stream-filter-value": REGIONS[i // 100 % 3], "i": i}
            ch.basic_publish("", stream, f"m{i}".encode(), pika.BasicProperties(headers=headers))
    finally:
        conn.close()


def _filter_stats(server: ServerProcess, stream: str) -> dict[str, int]:
    got = httpx.get(
        f"{server.admin_url}/api/streams/%2F/{stream}", auth=("guest", "guest"), timeout=30
    )
    got.raise_for_status()
    stats: dict[str, int] = got.json()["filter_stats"]
    return stats


def test_batch_reads_over_the_network_as_from_the_files(
    spark: Any, metrics: Any, server: ServerProcess
) -> None:
    _publish_amqp(server, "orders", 0, 300)
    uri = _uri(server)

    def orders(**options: str) -> Any:
        return spark.read.format("sievemq").options(uri=uri, stream="orders", **options).load()

    rows = sorted(orders().collect(), key=lambda r: r.offset)
    assert [bytes(r.body) for r in rows] == [f"m{i}".encode() for i in range(300)]
    assert rows[150].filter_value == "us" and rows[150].headers["i"] == "150"
    assert rows[0].routing_key == "orders" and rows[0].exchange == ""
    # the same rows as the file mode reads from the data directory
    on_disk = spark.read.format("sievemq").option("stream", "orders").load(str(server.data_dir))
    assert sorted(on_disk.collect(), key=lambda r: r.offset) == rows

    # filter values go to the server: it skips the other regions' chunks by Bloom
    before = _filter_stats(server, "orders")["chunks_skipped"]
    us = orders(filterValues="us").select("offset", "filter_value").collect()
    assert sorted(r.offset for r in us) == list(range(100, 200))
    assert {r.filter_value for r in us} == {"us"}
    assert _filter_stats(server, "orders")["chunks_skipped"] - before >= 150
    # a pushed-down WHERE on filter_value does the same
    assert orders().where("filter_value = 'ap'").count() == 100
    # exact semantics as in file mode: match-unfiltered and all
    assert orders(filterValues="eu,us", filterMatchType="all").count() == 0
    assert orders(sql="i >= 290").count() == 10

    # offsets: startingOffsets/endingOffsets, a pushed-down offset range, partitions
    part = orders(startingOffsets="50", endingOffsets="60").collect()
    assert sorted(r.offset for r in part) == list(range(50, 60))
    assert orders().where("offset >= 295").count() == 5
    split = orders(minPartitions="4")
    assert split.rdd.getNumPartitions() == 4 and split.count() == 300
    assert orders(maxOffsetsPerPartition="100").rdd.getNumPartitions() == 3

    with pytest.raises(Exception, match="nosuch"):
        spark.read.format("sievemq").options(uri=uri, stream="nosuch").load().collect()


def test_stream_protocol_publishes_read_over_the_network(
    spark: Any, metrics: Any, server: ServerProcess
) -> None:
    async def extract(msg: AMQPMessage) -> str:
        return str(msg.application_properties["region"])  # type: ignore[index]

    async def publish() -> None:
        async with Producer(
            server.host,
            server.stream_port,
            username="guest",
            password="guest",
            filter_value_extractor=extract,
        ) as p:
            await p.create_stream("rs")
            for batch in range(4):
                messages = [
                    AMQPMessage(
                        body=b"%d-%d" % (batch, i), application_properties={"region": f"r{i % 10}"}
                    )
                    for i in range(50)
                ]
                await p.send_batch("rs", messages)  # type: ignore[arg-type]

    asyncio.run(publish())
    df = spark.read.format("sievemq").options(uri=_uri(server), stream="rs").load()
    assert df.count() == 200
    r7 = df.where("filter_value = 'r7'").collect()
    assert len(r7) == 20 and all(bytes(r.body).endswith(b"7") for r in r7)  # AMQP 1.0 payloads


def _stream_once(spark: Any, uri: str, out: Path, checkpoint: Path) -> list[int]:
    frame = (
        spark.readStream.format("sievemq")
        .options(uri=uri, stream="orders", startingOffsets="earliest", maxOffsetsPerTrigger="120")
        .load()
        .select("offset", "filter_value", "body")
    )
    return parquet_available_now(frame, out, checkpoint)


def test_streaming_query_picks_up_new_messages(
    spark: Any, metrics: Any, server: ServerProcess, tmp_path: Path
) -> None:
    _publish_amqp(server, "orders", 0, 200)
    uri = _uri(server)
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    assert _stream_once(spark, uri, out, checkpoint) == [120, 80]  # maxOffsetsPerTrigger
    _publish_amqp(server, "orders", 200, 50)
    assert _stream_once(spark, uri, out, checkpoint) == [50]  # only what is new
    offsets = pq.read_table(out).column("offset").to_pylist()
    assert sorted(offsets) == list(range(250))
