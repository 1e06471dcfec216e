"""Spark streaming latency: publish -> `sievemq` streaming source (1 s trigger) -> sink (JSON out).

    python -m bench spark_stream_latency [-- --seconds 40 --rate 200 --warmup 10
                                            --sink both --budget 330]

A real gateway (`sievemq serve` on free ports, its own data directory) and a local[2] Spark
query on that data directory: ``readStream.format("sievemq")`` from ``latest`` with a
``processingTime='1 second'`` trigger. A pika publisher with confirms sends ``rate`` messages
a second whose body is the send time (``time.time_ns()``). Two sinks, one query each, one
after the other in the same session (``--sink sievemq|driver|both``):

- ``sievemq``: the real path, ``writeStream.format("sievemq")`` publishing the bodies into a
  second stream through the gateway with confirms; a pika consumer on that stream takes the
  time each message arrives;
- ``driver``: a ``foreachBatch`` sink on the driver; the time is taken when it holds a
  micro-batch's rows (after ``collect()``).

Per message: arrival time - send time. Messages sent in the first ``warmup`` seconds are left
out (the first micro-batches start Spark's Python workers). ``--budget`` bounds the whole
run (JVM start included): publishing is cut short and waits end so that the JSON is printed
within it, with ``"complete": false`` when messages were still missing.

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


def publish(url: str, stream: str, seconds: float, rate: int) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    sent = 0
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        started = time.monotonic()
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= seconds:
                break
            due = int(elapsed * rate) + 1
            while sent < due:
                channel.basic_publish("", stream, str(time.time_ns()).encode())
                sent += 1
            time.sleep(max(0.0, (sent / rate) - (time.monotonic() - started)))
    finally:
        connection.close()
    return sent


def _declare(url: str, *streams: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    for stream in streams:
        channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    connection.close()


class _Arrivals:
    """Latencies (ms) of the messages sent at or after ``measure_from`` (ns)."""

    def __init__(self) -> None:
        self.measure_from = 0
        self.latencies: list[float] = []
        self.batches: list[int] = []

    def add(self, body: bytes, now: int) -> None:
        sent = int(body)
        if self.measure_from and sent >= self.measure_from:
            self.latencies.append((now - sent) / 1e6)


def _consume(url: str, stream: str, arrivals: _Arrivals, stop: threading.Event) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)

    def on(ch: Any, method: Any, props: Any, body: bytes) -> None:
        arrivals.add(body, time.time_ns())
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(stream, on, arguments={"x-stream-offset": "next"})
    while not stop.is_set():
        connection.process_data_events(time_limit=0.05)
    connection.close()


def _measure(
    spark: Any, server: ServerProcess, tmp: Path, kind: str, args: Any, deadline: float
) -> dict[str, Any]:
    """One query with the ``kind`` sink; publishes and waits within ``deadline``."""
    source, out = f"lat-{kind}", f"lat-{kind}-out"
    _declare(server.url, source, out)
    arrivals = _Arrivals()
    reader = (
        spark.readStream.format("sievemq")
        .option("stream", source)
        .option("startingOffsets", "latest")
        .load(str(server.data_dir))
    )
    stop = threading.Event()
    consumer: threading.Thread | None = None
    if kind == "driver":

        def sink(frame: Any, batch_id: int) -> None:
            rows = frame.collect()
            now = time.time_ns()
            arrivals.batches.append(len(rows))
            for row in rows:
                arrivals.add(bytes(row.body), now)

        writer = reader.select("offset", "body").writeStream.foreachBatch(sink)
    else:
        writer = (
            reader.select("body").writeStream.format("sievemq").options(uri=server.url, stream=out)
        )
        consumer = threading.Thread(target=_consume, args=(server.url, out, arrivals, stop))
        consumer.start()
    query = (
        writer.option("checkpointLocation", str(tmp / f"checkpoint-{kind}"))
        .trigger(processingTime="1 second")
        .start()
    )
    sent = expected = batches = 0
    try:
        while query.lastProgress is None and time.monotonic() < deadline:
            if not query.isActive:
                raise RuntimeError(f"the {kind} query failed: {query.exception()}")
            time.sleep(0.5)  # the query planned its first batch
        # publishing leaves a third of what is left for the last messages to come through
        seconds = min(args.seconds, max(0.0, (deadline - time.monotonic()) * 2 / 3))
        arrivals.measure_from = time.time_ns() + int(args.warmup * 1e9)
        sent = publish(server.url, source, seconds, args.rate)
        expected = max(0, sent - int(args.warmup * args.rate))
        while len(arrivals.latencies) < expected and time.monotonic() < deadline:
            time.sleep(0.5)
        batches = len(query.recentProgress)
    finally:
        query.stop()
        stop.set()
        if consumer is not None:
            consumer.join()
    latencies = arrivals.latencies
    return {
        "sink": "foreachBatch (driver, after collect)"
        if kind == "driver"
        else "sievemq sink -> gateway -> pika consumer",
        "published": sent,
        "expected": expected,
        "measured": len(latencies),
        "complete": len(latencies) >= expected > 0,
        "micro_batches": batches,
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=40.0, help="publishing time per sink")
    parser.add_argument("--rate", type=int, default=200, help="messages per second")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds left out at start")
    parser.add_argument("--sink", choices=("driver", "sievemq", "both"), default="both")
    parser.add_argument(
        "--budget", type=float, default=330.0, help="seconds for the whole run (JVM included)"
    )
    args = parser.parse_args()
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="sievemq-bench-latency-"))
    server = ServerProcess(tmp / "data").start(timeout=180)
    load_before = [round(x, 2) for x in os.getloadavg()]
    results: dict[str, Any] = {}
    try:
        from sievemq.spark import jobs

        # the jobs' session: the sievemq source and sink registered, and Python workers given
        # 180 s to connect back (the 15 s default fails on a loaded machine)
        spark = jobs.session("local[2]", "bench-stream-latency")
        session_start = time.monotonic() - started
        kinds = ["sievemq", "driver"] if args.sink == "both" else [args.sink]
        end = started + args.budget - 15  # stopping the query and the session
        try:
            for n, kind in enumerate(kinds):
                share = (end - time.monotonic()) / (len(kinds) - n)
                results[kind] = _measure(spark, server, tmp, kind, args, time.monotonic() + share)
        finally:
            spark.stop()
        result = {
            "bench": "spark_stream_latency",
            "machine": machine(),
            "load_average_before": load_before,
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "trigger": "processingTime 1 second",
            "rate_per_s": args.rate,
            "session_start_s": round(session_start, 1),
            "elapsed_s": round(time.monotonic() - started, 1),
            **results,
        }
        print(json.dumps(result, indent=1))
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
