"""Spark sink speed (JSON out): publish rate of the `sievemq` sink and publish-to-sink latency.

    python -m bench spark_sink [-- --rows 20000 --runs 3 --latency-messages 20]

Against a real server on free ports and a local[2] session (JVM start reported apart):

- ``batch_sink``: ``df.write.format("sievemq")`` of N rows (100 B bodies, 2 partitions, so two
  tasks publish at once), rows/s, median of runs, each into a fresh stream;
- ``one_publisher``: the sink's own publish loop (``spark/publisher.py``: confirms, dedup
  headers, large writes, 5,000 in flight) from this process over one connection: the
  per-connection ceiling the tasks run at;
- ``aiormq_one_publisher``: the loop the sink used before (aiormq, one socket write per
  publish, 500 in flight), same rows and headers, in the same run: the ratio is the speed-up;
- ``replay``: the same N rows again under the same publisher ids: all confirmed, none stored
  (what a replayed micro-batch costs);
- ``latency``: a streaming query (1 s processing-time trigger) from one stream into another
  through the sink; messages published every 0.5 s carry their send time, a consumer on the
  output stream records the arrival: median / p95 / max seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench._util import machine
from sievemq.spark import jobs
from sievemq.spark.sink import SinkOptions, publish_rows
from sievemq.storage.layout import stream_directory
from sievemq.storage.reader import disk_end
from sievemq.testing import start_server_process

BODY = b"x" * 100


def _batch_sink(spark: Any, url: str, rows: int, name: str) -> float:
    df = spark.createDataFrame([(BODY,)] * rows, "body BINARY").repartition(2).cache()
    df.count()
    started = time.perf_counter()
    df.write.format("sievemq").options(uri=url, stream=name).mode("append").save()
    elapsed = time.perf_counter() - started
    df.unpersist()
    return rows / elapsed


def _one_publisher(url: str, rows: int, name: str, reference: str) -> float:
    options = SinkOptions(url, name)
    started = time.perf_counter()
    publish_rows(options, [(BODY, name, (), ())] * rows, reference, 0)
    return rows / (time.perf_counter() - started)


async def _aiormq_loop(url: str, rows: int, name: str, reference: str) -> None:
    """The sink's publish loop before ``spark/publisher.py`` (aiormq), kept as the baseline."""
    import asyncio

    import aiormq
    from pamqp import commands as spec

    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        await channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        pending: list[Any] = []
        for pid in range(rows):
            headers = {"x-sievemq-publisher": reference, "x-sievemq-publishing-id": pid}
            props = spec.Basic.Properties(
                headers=headers, delivery_mode=2, message_id=f"{reference}:{pid}"
            )
            pending.append(
                channel.basic_publish(BODY, routing_key=name, properties=props, mandatory=True)
            )
            if len(pending) >= 500:
                outcomes = await asyncio.gather(*pending)
                assert all(isinstance(o, spec.Basic.Ack) for o in outcomes)
                pending = []
        assert all(isinstance(o, spec.Basic.Ack) for o in await asyncio.gather(*pending))
    finally:
        await connection.close()


def _aiormq_publisher(url: str, rows: int, name: str, reference: str) -> float:
    import asyncio

    started = time.perf_counter()
    asyncio.run(_aiormq_loop(url, rows, name, reference))
    return rows / (time.perf_counter() - started)


def _latency(spark: Any, server: Any, messages: int, checkpoint: Path) -> list[float]:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(server.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for name in ("lat-in", "lat-out"):
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    query = (
        spark.readStream.format("sievemq")
        .option("stream", "lat-in")
        .option("startingOffsets", "latest")
        .load(str(server.data_dir))
        .select("body")
        .writeStream.format("sievemq")
        .options(uri=server.url, stream="lat-out", checkpointLocation=str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )
    arrivals: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        c = pika.BlockingConnection(pika.URLParameters(server.url))
        cch = c.channel()
        cch.basic_qos(prefetch_count=100)

        def on(channel: Any, method: Any, props: Any, body: bytes) -> None:
            arrivals.append(time.time() - float(body))
            channel.basic_ack(method.delivery_tag)

        cch.basic_consume("lat-out", on, arguments={"x-stream-offset": "next"})
        while not stop.is_set():
            c.process_data_events(time_limit=0.05)
        c.close()

    thread = threading.Thread(target=consume)
    thread.start()
    try:
        while not query.recentProgress:  # the first (empty) trigger ran: the query is up
            time.sleep(0.2)
        for _ in range(messages):
            ch.basic_publish("", "lat-in", repr(time.time()).encode())
            time.sleep(0.5)
        deadline = time.monotonic() + 60
        while len(arrivals) < messages and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join()
        query.stop()
        conn.close()
    return arrivals


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--latency-messages", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, start_server_process(Path(tmp) / "data") as server:
        started = time.perf_counter()
        spark = jobs.session("local[2]", "bench-spark-sink")
        jvm_start = time.perf_counter() - started
        _batch_sink(spark, server.url, 1000, "warm")  # workers started, aiormq imported
        sink = [_batch_sink(spark, server.url, args.rows, f"b{i}") for i in range(args.runs)]
        one: list[float] = []
        old: list[float] = []
        for i in range(args.runs):  # interleaved: both see the same load
            one.append(_one_publisher(server.url, args.rows, f"o{i}", f"ref{i}"))
            old.append(_aiormq_publisher(server.url, args.rows, f"a{i}", f"ref{i}"))
        replay = [
            _one_publisher(server.url, args.rows, f"o{i}", f"ref{i}") for i in range(args.runs)
        ]
        stored = [
            disk_end(stream_directory(server.data_dir, "/", f"o{i}")) for i in range(args.runs)
        ]
        lat: list[float] = []
        if args.latency_messages:
            lat = sorted(_latency(spark, server, args.latency_messages, Path(tmp) / "ck"))
        spark.stop()
    result = {
        "benchmark": "spark_sink",
        **machine(),
        "rows": args.rows,
        "body_bytes": len(BODY),
        "runs": args.runs,
        "session_start_s": round(jvm_start, 1),
        "batch_sink_rows_per_s": round(statistics.median(sink)),
        "one_publisher_rows_per_s": round(statistics.median(one)),
        "aiormq_one_publisher_rows_per_s": round(statistics.median(old)),
        "one_publisher_vs_aiormq": round(statistics.median(one) / statistics.median(old), 2),
        "replay_rows_per_s": round(statistics.median(replay)),
        "stored_after_replay": stored[: args.runs],
        "latency_messages": len(lat),
        "latency_median_s": round(statistics.median(lat), 2) if lat else None,
        "latency_p95_s": round(lat[int(0.95 * (len(lat) - 1))], 2) if lat else None,
        "latency_max_s": round(lat[-1], 2) if lat else None,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
