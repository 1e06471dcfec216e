"""Spark export speed: `sievemq export` to Parquet on local[2] beside its limits (JSON out).

    python -m bench spark_export [-- --messages 1000000 --bodies 100,1024 --runs 3]

Writes N messages (body B bytes, chunks of 1000, 50 filter values clustered in time: chunk c
carries value ``c * 50 // chunks``) with sievemq.storage, then measures, each a median of runs:

- ``raw_read``: reading the segment files' bytes (the physical limit);
- ``arrow_decode``: the source's own decode (StreamReader + Arrow batches) in one process,
  without Spark (the pure-pyarrow path);
- ``per_record_decode``: storage's per-record decode (the old path's first stage, no Arrow);
- ``spark_noop``: the same read through Spark into its ``noop`` sink (the source, the Python
  workers and the Arrow hand-over to the JVM, without the Parquet write);
- ``spark_parquet``: the export function writing Parquet through Spark's writer
  (``--writer spark``) on local[2] (session already started: JVM start-up and the first
  export, which starts Spark's Python workers, are reported apart); ``partitions`` is the
  number of Spark tasks of the read;
- ``arrow_parquet``: the same export with the Arrow writer (``--writer arrow``, the default:
  each Spark task writes its range with pyarrow), run interleaved with ``spark_parquet``;
  ``over_spark_writer`` is the speed-up in the same run;
- ``filtered`` (first size only): an export of one value of 50 (default writer); the share
  of chunks whose body was read.

for each body size, with the load average before and after (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._util import machine
from sievemq.storage import Message, Stream, StreamConfig
from sievemq.storage.layout import stream_directory
from sievemq.storage.segment import list_segments, segment_name

PER_CHUNK = 1000
WRITERS = ("arrow", "spark")  # export --writer
VALUES = 50


def write(data_dir: Path, messages: int, body: int) -> Path:
    directory = stream_directory(data_dir, "/", "bench")
    directory.mkdir(parents=True)
    chunks = messages // PER_CHUNK
    payload = b"x" * body
    with Stream.open(directory, StreamConfig(filter_size_bytes=64)) as stream:
        for c in range(chunks):
            value = (f"value-{c * VALUES // chunks}",)
            batch = [Message(value, "", "bench", b"\x00\x00", payload)] * PER_CHUNK
            stream.append(batch)
    return directory


def raw_read(directory: Path) -> tuple[float, int]:
    started = time.perf_counter()
    size = 0
    for first in list_segments(directory):
        with open(directory / segment_name(first), "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                size += len(chunk)
    return time.perf_counter() - started, size


def arrow_decode(directory: Path, messages: int) -> float:
    from pyspark.sql.types import StructType

    from sievemq.spark.arrow_read import RangeTask, ReadSettings, read_range
    from sievemq.spark.schema import arrow_schema, source_schema

    schema: StructType = source_schema(False)
    arrow = arrow_schema(schema)
    started = time.perf_counter()
    rows = sum(
        b.num_rows
        for b in read_range(
            RangeTask(str(directory), "/", "bench", 0, messages),
            ReadSettings(tuple(schema.names)),
            arrow,
        )
    )
    assert rows == messages, rows
    return time.perf_counter() - started


def row_decode(directory: Path, messages: int) -> float:
    """storage's per-record decode (``StreamReader.read`` -> Record tuples): the first stage
    of the source's decode before the columnar decoder, without its Arrow building."""
    from sievemq.storage import StreamReader

    started = time.perf_counter()
    reader = StreamReader.open(directory)
    rows = 0
    while not reader.at_end:
        rows += len(reader.read(8192, None, None, 64))
    reader.close()
    assert rows == messages, rows
    return time.perf_counter() - started


def decode_only(tmp: Path, n: int, body: int, runs: int) -> dict[str, Any]:
    """Columnar decode beside the per-record decode, interleaved, in one process."""
    directory = write(tmp / f"data{body}", n, body)
    columnar, rows, raw = [], [], []
    for _ in range(runs):
        raw.append(raw_read(directory)[0])
        columnar.append(arrow_decode(directory, n))
        rows.append(row_decode(directory, n))
    shutil.rmtree(tmp / f"data{body}", ignore_errors=True)
    c, r = statistics.median(columnar), statistics.median(rows)
    return {
        "body_bytes": body,
        "raw_read_rows_per_s": n / statistics.median(raw),
        "columnar_arrow_decode_rows_per_s": n / c,
        "per_record_decode_rows_per_s": n / r,
        "columnar_over_per_record": r / c,
    }


def spark_noop(spark: Any, options: dict[str, str], n: int) -> tuple[float, int]:
    """Seconds to read everything through Spark into the ``noop`` sink, and the tasks."""
    from sievemq.spark import register
    from sievemq.spark.export import export_options

    register(spark)
    options = export_options(spark, options)
    df = spark.read.format("sievemq").options(**options).load()
    partitions = df.rdd.getNumPartitions()
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started, partitions


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def one_size(tmp: Path, spark: Any, n: int, body: int, runs: int, filtered: bool) -> dict[str, Any]:
    from sievemq.spark.export import export

    data_dir = tmp / f"data{body}"
    directory = write(data_dir, n, body)
    raw = [raw_read(directory) for _ in range(runs)]
    raw_s = statistics.median(t for t, _ in raw)
    size = raw[0][1]
    decode_s = statistics.median(arrow_decode(directory, n) for _ in range(runs))
    record_s = statistics.median(row_decode(directory, n) for _ in range(runs))
    options = {"path": str(data_dir), "stream": "bench"}
    spark_noop(spark, options, n)  # starts the Python workers of this data set's tasks
    noop = [spark_noop(spark, options, n) for _ in range(runs)]
    noop_s = statistics.median(t for t, _ in noop)
    times: dict[str, list[float]] = {w: [] for w in WRITERS}
    for i in range(runs + 1):  # the first run starts Spark's Python workers: reported apart
        for w in WRITERS:  # interleaved: both writers see the same load
            target = tmp / f"out{body}-{w}-{i}"
            result = export(options, target, "parquet", spark=spark, parquet_writer=w)
            assert result.messages == n, result.messages
            times[w].append(result.seconds)
            shutil.rmtree(target, ignore_errors=True)

    def rates(seconds: float) -> dict[str, float]:
        return {"seconds": seconds, "rows_per_s": n / seconds, "mb_per_s": size / seconds / 1e6}

    writers: dict[str, dict[str, Any]] = {}
    for w in WRITERS:
        seconds = statistics.median(times[w][1:])
        writers[w] = {"partitions": noop[0][1]} | rates(seconds)
        writers[w] |= {"first_export_seconds": times[w][0], "of_arrow_decode": decode_s / seconds}
    export_s, arrow_s = writers["spark"]["seconds"], writers["arrow"]["seconds"]
    out: dict[str, Any] = {
        "body_bytes": body,
        "segment_bytes": size,
        "raw_read": {"seconds": raw_s, "mb_per_s": size / raw_s / 1e6, "rows_per_s": n / raw_s},
        "arrow_decode": rates(decode_s),
        "per_record_decode": {
            "seconds": record_s,
            "rows_per_s": n / record_s,
            "columnar_over_per_record": record_s / decode_s,
        },
        "spark_noop": rates(noop_s) | {"of_arrow_decode": decode_s / noop_s},
        "spark_parquet": writers["spark"] | {"of_raw_read": raw_s / export_s},
        "arrow_parquet": writers["arrow"] | {"over_spark_writer": export_s / arrow_s},
    }
    if filtered:
        got = export(
            options | {"filterValues": "value-17"}, tmp / "filtered", "parquet", spark=spark
        )
        scanned = got.counters["chunks_scanned"]
        body_read = scanned - got.counters["chunks_skipped"]
        out["filtered"] = {
            "rows": got.messages,
            "chunks_scanned": scanned,
            "chunks_body_read": body_read,
            "share_of_chunks_read": body_read / scanned,
            "seconds": got.seconds,
        }
    shutil.rmtree(data_dir, ignore_errors=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--bodies", default="100,1024", help="body sizes in bytes, comma list")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--decode-only",
        action="store_true",
        help="no Spark: the columnar decode beside storage's per-record decode",
    )
    args = parser.parse_args()
    n = args.messages
    bodies = [int(b) for b in args.bodies.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="sievemq-bench-spark-"))
    load_before = load_average()
    if args.decode_only:
        try:
            sizes = [decode_only(tmp, n, body, args.runs) for body in bodies]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(
            json.dumps(
                {
                    "bench": "spark_export --decode-only",
                    "machine": machine(),
                    "load_average_before": load_before,
                    "load_average_after": load_average(),
                    "messages": n,
                    "runs": args.runs,
                    "sizes": sizes,
                },
                indent=1,
            )
        )
        return 0
    try:
        from sievemq.spark.export import build_session

        started = time.perf_counter()
        spark = build_session("local[2]", "1g")
        jvm_s = time.perf_counter() - started
        try:
            sizes = [
                one_size(tmp, spark, n, body, args.runs, filtered=i == 0)
                for i, body in enumerate(bodies)
            ]
        finally:
            spark.stop()
        result_json: dict[str, Any] = {
            "bench": "spark_export",
            "machine": machine(),
            "load_average_before": load_before,
            "load_average_after": load_average(),
            "messages": n,
            "runs": args.runs,
            "master": "local[2]",
            "jvm_start_seconds": jvm_s,
            "sizes": sizes,
        }
        print(json.dumps(result_json, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
