"""What the stream jobs in examples/spark/ share: a session, and their command line.

``session(master)`` builds a SparkSession the way the jobs and tests need it (the workers'
Python is this interpreter, Spark bound to 127.0.0.1 unless ``--master`` names a cluster,
UTC, quiet) and registers the ``sievemq`` source and sink on it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def session(master: str = "local[2]", app: str = "sievemq-job") -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from sievemq.spark.registration import register

    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.authenticate.socketTimeout", "180s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def parser(description: str, source: str, sink: str) -> argparse.ArgumentParser:
    """The options every example job takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data-dir", required=True, help="the server's --data-dir (read side)")
    p.add_argument(
        "--uri", required=True, help="the gateway to publish into: amqp://user:pass@host:port/%%2F"
    )
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    p.add_argument("--source", default=source, help=f"input stream (default {source})")
    p.add_argument("--sink", default=sink, help=f"output stream (default {sink})")
    p.add_argument("--master", default="local[2]", help="Spark master URL")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument(
        "--continuous",
        action="store_true",
        help="keep running with a 1 s trigger (default: process what is there, then exit)",
    )
    return p


def run(query_writer: Any, args: argparse.Namespace) -> Any:
    """Start a DataStreamWriter with the common sink options and trigger."""
    writer = (
        query_writer.format("sievemq")
        .option("uri", args.uri)
        .option("stream", args.sink)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.continuous:
        writer = writer.trigger(processingTime="1 second")
    else:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def read(spark: Any, args: argparse.Namespace, stream: str | None = None) -> Any:
    """``readStream`` of the input stream from the earliest offset."""
    reader = (
        spark.readStream.format("sievemq")
        .option("stream", stream or args.source)
        .option("startingOffsets", "earliest")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    return reader.load(args.data_dir)
