"""The `sievemq` sink: batch and streaming writes published through a real gateway, errors that
name the option or column, and exactly once across a driver killed mid-batch."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sievemq.storage.layout import stream_directory
from sievemq.storage.reader import disk_end
from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(1200)
ROOT = Path(__file__).resolve().parents[2]


def _end(server: ServerProcess, stream: str) -> int:
    directory = stream_directory(server.data_dir, "/", stream)
    return disk_end(directory) if directory.exists() else 0


def _read(spark: Any, server: ServerProcess, stream: str) -> list[Any]:
    df = spark.read.format("sievemq").option("stream", stream).load(str(server.data_dir))
    return sorted(df.collect(), key=lambda r: r.offset)


def test_batch_write_publishes_every_column_through_the_gateway(
    spark: Any, metrics: Any, server: Any
) -> None:
    rows = [(f"m{i}".encode(), ["eu", "paid"] if i % 2 else [], {"i": str(i)}) for i in range(40)]
    df = spark.createDataFrame(
        rows, "body BINARY, filter_values ARRAY<STRING>, headers MAP<STRING,STRING>"
    ).repartition(2)
    df.write.format("sievemq").option("uri", server.url).option("stream", "out").mode(
        "append"
    ).save()
    got = _read(spark, server, "out")
    assert sorted(bytes(r.body) for r in got) == sorted(r[0] for r in rows)
    by_body = {bytes(r.body): r for r in got}
    assert by_body[b"m3"].filter_values == ["eu", "paid"] and by_body[b"m4"].filter_values == []
    assert by_body[b"m7"].headers["i"] == "7" and by_body[b"m7"].routing_key == "out"
    # the gateway's own filter sees the values the sink published
    paid = spark.read.format("sievemq").options(stream="out", filterValues="paid")
    assert paid.load(str(server.data_dir)).count() == 20

    # through an exchange, with a routing key per row and a string body
    keyed = spark.createDataFrame(
        [("a", "k1", "eu"), ("b", "k2", None)],
        "body STRING, routing_key STRING, filter_value STRING",
    )

    conn = connect(server)
    ch = conn.channel()
    ch.exchange_declare("ex", "fanout")
    ch.queue_bind("out", "ex")
    conn.close()
    keyed.write.format("sievemq").options(uri=server.url, stream="out", exchange="ex").mode(
        "append"
    ).save()
    tail = sorted(_read(spark, server, "out")[40:], key=lambda r: bytes(r.body))
    assert [(bytes(r.body), r.routing_key, r.exchange, r.filter_value) for r in tail] == [
        (b"a", "k1", "ex", "eu"),
        (b"b", "k2", "ex", None),
    ]


@pytest.mark.parametrize(
    ("ddl", "options", "text"),
    [
        ("body BINARY", {"stream": "out"}, "option 'uri': required"),
        ("body BINARY", {"uri": "http://h/"}, "option 'uri': expected amqp://"),
        ("body BINARY", {"uri": "amqp://h/"}, "option 'stream': required"),
        ("body BINARY", {"uri": "amqp://h/", "stream": "o", "colour": "red"}, "option 'colour'"),
        ("body BINARY", {"uri": "amqp://h/", "stream": "o", "batchId": "1"}, "option 'queryId'"),
        ("body INT", {"uri": "amqp://h/", "stream": "o"}, "column 'body': expected BINARY"),
        ("bdy BINARY", {"uri": "amqp://h/", "stream": "o"}, "column 'bdy': not a sink column"),
        ("offset BIGINT", {"uri": "amqp://h/", "stream": "o"}, "column 'offset'"),
        ("headers STRING, body BINARY", {"uri": "amqp://h/", "stream": "o"}, "column 'headers'"),
        ("routing_key STRING, body BINARY", {"uri": "amqp://h/", "stream": "o"}, "'exchange'"),
    ],
)
def test_sink_errors_name_the_option_or_column(
    spark: Any, metrics: Any, ddl: str, options: dict[str, str], text: str
) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=text):
        df.write.format("sievemq").options(**options).mode("append").save()


def test_overwrite_mode_is_refused(spark: Any, metrics: Any) -> None:
    df = spark.createDataFrame([], "body BINARY")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("sievemq").options(uri="amqp://h/", stream="o").mode("overwrite").save()


N = 6000
PER_BATCH = 2000


def test_driver_killed_mid_batch_restarts_exactly_once(
    spark: Any, metrics: Any, server: Any, tmp_path: Path
) -> None:
    """examples/spark/filter_map.py in its own process, SIGKILLed (with its JVM and workers)
    while a micro-batch is half published, then run again on the same checkpoint: the output
    holds every input row exactly once."""
    rows = [(f"row {i}".encode(), f"v{i % 3}") for i in range(N)]
    spark.createDataFrame(rows, "body BINARY, filter_value STRING").write.format("sievemq").options(
        uri=server.url, stream="in"
    ).mode("append").save()
    assert _end(server, "in") == N

    checkpoint = tmp_path / "ck"
    argv = [
        sys.executable,
        str(ROOT / "examples" / "spark" / "filter_map.py"),
        "--data-dir",
        str(server.data_dir),
        "--uri",
        server.url,
        "--checkpoint",
        str(checkpoint),
        "--source",
        "in",
        "--sink",
        "out",
        "--master",
        "local[1]",
        "--max-offsets-per-trigger",
        str(PER_BATCH),
    ]
    with (tmp_path / "driver.log").open("w") as log:
        driver = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    seen = 0
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and driver.poll() is None:
            seen = _end(server, "out")
            if seen % PER_BATCH:  # part of a micro-batch is stored, the rest is not
                break
            time.sleep(0.005)
        assert driver.poll() is None, f"the query ended before a kill: {seen} rows out"
        os.killpg(driver.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        driver.wait(60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert 0 < seen < N
    time.sleep(1.0)
    at_kill = _end(server, "out")

    with (tmp_path / "driver2.log").open("w") as log:
        again = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=900)
    assert again.returncode == 0, (tmp_path / "driver2.log").read_text()[-3000:]

    out = _read(spark, server, "out")
    counts = collections.Counter(bytes(r.body) for r in out)
    assert len(out) == N, f"{len(out)} rows out (at kill {at_kill}), {N} in"
    assert counts == collections.Counter(f"ROW {i}".encode() for i in range(N))
    assert {r.filter_value for r in out} == {"v0", "v1", "v2"}
