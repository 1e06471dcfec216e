"""The batch `sievemq` source on a real local[2] Spark: columns, options, pushdown, errors.

Pushdown is proven with the reader's chunk counters (summed from the executors through the
metrics accumulator), never with time.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sievemq.filtering.subscriptions import SubscriptionRegistry
from sievemq.storage.layout import stream_directory
from sievemq.storage.segment import list_segments

from .spark_data import T0, write_stream

CHUNKS, PER_CHUNK = 50, 20
TOTAL = CHUNKS * PER_CHUNK

# the JVM start (in the first test's setup) takes minutes on a loaded 2-core machine
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sparkdata")
    write_stream(root, "orders", CHUNKS, PER_CHUNK)
    write_stream(root, "refunds", 5, 4)
    write_stream(root, "other", 3, 2, vhost="shop")
    return root


def measured(metrics: Any) -> Callable[[], dict[str, int]]:
    """A function returning how much each counter grew since this call."""
    before = metrics.value()

    def delta() -> dict[str, int]:
        return {k: v - before[k] for k, v in metrics.value().items()}

    return delta


def orders(spark: Any, data_dir: Path, **options: str) -> Any:
    reader = spark.read.format("sievemq").option("stream", "orders")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(data_dir))


def test_columns_and_values(spark: Any, metrics: Any, data_dir: Path) -> None:
    df = orders(spark, data_dir)
    assert df.columns == [
        "offset",
        "timestamp",
        "filter_values",
        "filter_value",
        "exchange",
        "routing_key",
        "properties",
        "headers",
        "body",
    ]
    rows = {r.offset: r for r in df.collect()}
    assert sorted(rows) == list(range(TOTAL))
    r = rows[3 * PER_CHUNK + 5]  # chunk 3, message 5
    assert r.timestamp == datetime.datetime(2023, 11, 14, 22, 13, 23)  # T0 + 3 s, session UTC
    assert r.filter_values == ["v3"] and r.filter_value == "v3"
    assert (r.exchange, r.routing_key, bytes(r.body)) == ("amq.direct", "rk3", b"orders 3 5")
    assert r.properties.content_type == "text/plain" and r.properties.delivery_mode is None
    assert r.headers == {"n": "5"}
    unfiltered = rows[3 * PER_CHUNK + PER_CHUNK - 1]
    assert unfiltered.filter_values == [] and unfiltered.filter_value is None
    # a user schema selects columns: only those are decoded and returned
    picked = (
        spark.read.format("sievemq")
        .schema("body BINARY, offset BIGINT")
        .option("stream", "orders")
        .load(str(data_dir))
        .where("offset = 7")
        .collect()
    )
    assert [(bytes(x.body), x.offset) for x in picked] == [(b"orders 0 7", 7)]


def test_where_on_offset_and_timestamp_prunes_chunks(
    spark: Any, metrics: Any, data_dir: Path
) -> None:
    delta = measured(metrics)
    got = orders(spark, data_dir).where("offset >= 205 AND offset < 215").collect()
    assert sorted(r.offset for r in got) == list(range(205, 215))
    assert delta()["chunks_scanned"] == 1  # offsets 200..219 are one chunk of 50

    delta = measured(metrics)
    start = datetime.datetime.fromtimestamp((T0 + 40_000) / 1000, datetime.UTC)
    df = orders(spark, data_dir).where(f"timestamp >= '{start.isoformat()}'")
    assert df.count() == 10 * PER_CHUNK
    assert delta()["chunks_scanned"] == 10

    delta = measured(metrics)
    assert orders(spark, data_dir).where("offset < 0").count() == 0
    assert delta()["chunks_scanned"] == 0


def test_where_on_filter_value_skips_chunks_by_bloom(
    spark: Any, metrics: Any, data_dir: Path
) -> None:
    delta = measured(metrics)
    got = orders(spark, data_dir).where("filter_value = 'v7'").collect()
    assert len(got) == 5 * (PER_CHUNK - 1) and {r.routing_key for r in got} == {
        f"rk{c}" for c in range(7, CHUNKS, 10)
    }
    d = delta()
    assert d["chunks_scanned"] == CHUNKS
    # 16-byte Bloom filters of one value each: at most a couple of false positives
    assert d["chunks_skipped"] >= CHUNKS - 5 - 3
    assert d["records_matched"] == len(got)

    delta = measured(metrics)
    n = orders(spark, data_dir).where("filter_value IN ('v1', 'v2')").count()
    assert n == 10 * (PER_CHUNK - 1)
    assert delta()["chunks_skipped"] >= CHUNKS - 10 - 3


def test_filter_values_option_is_the_consumer_filter(
    spark: Any, metrics: Any, data_dir: Path
) -> None:
    delta = measured(metrics)
    got = orders(spark, data_dir, filterValues="v2,v4").collect()
    assert len(got) == 10 * (PER_CHUNK - 1)
    assert {r.filter_value for r in got} == {"v2", "v4"}
    assert delta()["chunks_skipped"] >= CHUNKS - 10 - 3
    # match-unfiltered adds the messages without a value, from every chunk
    got = orders(spark, data_dir, filterValues='["v2"]', matchUnfiltered="true").collect()
    assert len(got) == 5 * (PER_CHUNK - 1) + CHUNKS
    # all: a message with one value cannot carry both
    assert orders(spark, data_dir, filterValues="v2,v4", filterMatchType="all").count() == 0


def test_sql_option_and_registered_subscription_bits(
    spark: Any, metrics: Any, tmp_path: Path
) -> None:
    expression = "n >= 18 AND TAGS = 'v3'"
    directory = tmp_path / "streams" / "%2F" / "subs"
    directory.mkdir(parents=True)
    registry = SubscriptionRegistry(directory)
    registry.register("c1", expression)
    write_stream(tmp_path, "subs", 20, 20, extra=registry.extra_for)

    def read(**options: str) -> Any:
        reader = spark.read.format("sievemq").option("stream", "subs").option("sql", expression)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(str(tmp_path))

    delta = measured(metrics)
    got = read().collect()
    # message 18 of chunks 3 and 13 (message 19 is unfiltered, so TAGS = 'v3' is false)
    assert sorted((r.routing_key, r.headers["n"]) for r in got) == [("rk13", "18"), ("rk3", "18")]
    assert delta()["chunks_skipped_subscription"] == 0  # no consumer name: all evaluated
    delta = measured(metrics)
    assert read(consumerName="c1").count() == 2
    counts = delta()
    assert counts["chunks_skipped_subscription"] == 18  # the subscription's bits rule out 18/20
    assert counts["chunks_skipped_extra"] == 18  # the name it had before, still there


def test_offsets_timestamps_and_several_streams(spark: Any, data_dir: Path) -> None:
    df = orders(spark, data_dir, startingOffsets="990", endingOffsets="latest")
    assert [r.offset for r in df.orderBy("offset").collect()] == list(range(990, TOTAL))
    js = orders(spark, data_dir, startingOffsets='{"/": {"orders": 10}}', endingOffsets="12")
    assert [r.offset for r in js.collect()] == [10, 11]
    by_time = orders(
        spark, data_dir, startingTimestamp=str(T0 + 2000), endingTimestamp="2023-11-14T22:13:24Z"
    )
    assert by_time.count() == 2 * PER_CHUNK  # chunks 2 and 3
    both = (
        spark.read.format("sievemq")
        .option("stream", "orders,refunds")
        .load(str(data_dir))
        .groupBy("vhost", "stream")
        .count()
        .collect()
    )
    assert sorted(tuple(r) for r in both) == [("/", "orders", TOTAL), ("/", "refunds", 20)]
    pattern = (
        spark.read.format("sievemq")
        .option("vhost", "shop")
        .option("streamPattern", "oth.*")
        .load(str(data_dir))
    )
    assert {(r.vhost, r.stream) for r in pattern.collect()} == {("shop", "other")}


def test_partitions_follow_the_size_options(spark: Any, data_dir: Path) -> None:
    segments = list_segments(stream_directory(data_dir, "/", "orders"))
    assert len(segments) > 1
    # by default one range per segment here (a range never spans segments; 128 MiB cap)
    assert orders(spark, data_dir).rdd.getNumPartitions() == len(segments)
    by_size = orders(spark, data_dir, maxBytesPerPartition="4000")
    assert by_size.rdd.getNumPartitions() > len(segments) + 2
    assert by_size.count() == TOTAL  # ranges never overlap or leave gaps
    split = orders(spark, data_dir, minPartitions="4")
    assert split.rdd.getNumPartitions() >= 4 and split.count() == TOTAL


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("bogus", "1", "bogus"),
        ("startingOffsets", "soon", "startingOffsets"),
        ("filterMatchType", "most", "filterMatchType"),
        ("sql", "a = ", "sql"),
        ("minPartitions", "-1", "minPartitions"),
    ],
)
def test_bad_options_fail_naming_the_option(
    spark: Any, data_dir: Path, option: str, value: str, named: str
) -> None:
    with pytest.raises(Exception, match=f"option '{named}'"):
        orders(spark, data_dir, **{option: value}).count()


def test_missing_stream_is_an_error(spark: Any, data_dir: Path) -> None:
    with pytest.raises(Exception, match="no stream 'nope'"):
        spark.read.format("sievemq").option("stream", "nope").load(str(data_dir)).count()
