"""Spark streaming latency: publish -> `sievemq` streaming source (1 s trigger) -> sink (JSON out).

    python -m bench spark_stream_latency [-- --seconds 40 --rate 200 --warmup 10]

A real gateway (`sievemq serve` on free ports, its own data directory) and a local[2] Spark
query on that data directory: ``readStream.format("sievemq")`` from ``latest``, a
``processingTime='1 second'`` trigger, and a ``foreachBatch`` sink on the driver. A pika
publisher with confirms sends ``rate`` messages a second whose body is the send time
(``time.time_ns()``); the sink takes the time when it holds a micro-batch's rows (after
``collect()``) and records, per message, sink time - send time. Messages sent in the first
``warmup`` seconds are left out (the first micro-batches start Spark's Python workers).

Reported: p50 / p90 / p99 / max latency in ms, messages measured, micro-batches, and the
load average (the machine is shared: latency is mostly waiting for the trigger, so the p50
is bounded below by the trigger and the gateway's commit, above by how busy the CPU is).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pika

from bench._util import machine
from sievemq.testing import ServerProcess


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def publish(url: str, seconds: float, rate: int, stop: threading.Event) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    sent = 0
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        started = time.monotonic()
        while not stop.is_set():
            elapsed = time.monotonic() - started
            if elapsed >= seconds:
                break
            due = int(elapsed * rate) + 1
            while sent < due:
                channel.basic_publish("", "lat", str(time.time_ns()).encode())
                sent += 1
            time.sleep(max(0.0, (sent / rate) - (time.monotonic() - started)))
    finally:
        connection.close()
    return sent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=40.0, help="publishing time")
    parser.add_argument("--rate", type=int, default=200, help="messages per second")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds left out at start")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sievemq-bench-latency-"))
    server = ServerProcess(tmp / "data").start(timeout=180)
    load_before = [round(x, 2) for x in os.getloadavg()]
    try:
        connection = pika.BlockingConnection(pika.URLParameters(server.url))
        connection.channel().queue_declare(
            "lat", durable=True, arguments={"x-queue-type": "stream"}
        )
        connection.close()

        from sievemq.spark import register
        from sievemq.spark.export import build_session

        spark = build_session("local[2]", "1g")
        register(spark)
        latencies: list[float] = []
        batches: list[int] = []
        measure_from = [0]  # ns: messages sent before this are warm-up

        def sink(frame: Any, batch_id: int) -> None:
            rows = frame.collect()
            now = time.time_ns()
            batches.append(len(rows))
            for row in rows:
                sent = int(bytes(row.body))
                if measure_from[0] and sent >= measure_from[0]:
                    latencies.append((now - sent) / 1e6)

        query = (
            spark.readStream.format("sievemq")
            .option("stream", "lat")
            .option("startingOffsets", "latest")
            .load(str(server.data_dir))
            .select("offset", "body")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp / "checkpoint"))
            .trigger(processingTime="1 second")
            .start()
        )
        try:
            while query.lastProgress is None:  # the query planned its first batch
                time.sleep(0.5)
            stop = threading.Event()
            measure_from[0] = time.time_ns() + int(args.warmup * 1e9)
            sent = publish(server.url, args.seconds, args.rate, stop)
            deadline = time.monotonic() + 120
            expected = sent - int(args.warmup * args.rate)
            while len(latencies) < expected and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            query.stop()
            spark.stop()
        result = {
            "bench": "spark_stream_latency",
            "machine": machine(),
            "load_average_before": load_before,
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "trigger": "processingTime 1 second",
            "sink": "foreachBatch (driver, after collect)",
            "rate_per_s": args.rate,
            "published": sent,
            "measured": len(latencies),
            "micro_batches": len(batches),
            "latency_ms": {
                "p50": _quantile(latencies, 0.5),
                "p90": _quantile(latencies, 0.9),
                "p99": _quantile(latencies, 0.99),
                "max": max(latencies),
                "mean": statistics.fmean(latencies),
            }
            if latencies
            else None,
        }
        print(json.dumps(result, indent=1))
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
