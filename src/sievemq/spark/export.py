"""`sievemq export`: a stream (or a filtered slice of it) to Parquet or JSON through Spark.

Read-only on the data directory, through the `sievemq` source: it reads what the writer had
committed when the export was planned, so it is safe beside a running server. On a terminal
it draws a progress bar on stderr (messages done / planned, rows/s, ETA); otherwise it is quiet
until the one-line summary. Exit status: 0 done, 1 the export failed (no such stream, output
exists, Spark error), 2 bad command line (argparse).

``--to`` is exclusive, like ``endingOffsets``: ``--from 100 --to 200`` exports offsets 100..199.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sievemq.spark.options import OptionError, parse_options, parse_timestamp
from sievemq.spark.planning import (
    Bounds,
    end_offset,
    plan_ranges,
    resolve_streams,
    start_offset,
    stream_chunks,
    stream_state,
    timestamp_bounds,
)

FORMATS = ("parquet", "json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", default=None, help="data directory (default $SIEVEMQ_DATA_DIR or ./data)"
    )
    parser.add_argument("--stream", required=True, help="stream name(s), comma separated")
    parser.add_argument("--vhost", default="/", help="virtual host (default /)")
    parser.add_argument("--filter", default=None, help="filter values v1,v2 (x-stream-filter)")
    parser.add_argument(
        "--match-unfiltered", action="store_true", help="also messages without a filter value"
    )
    parser.add_argument(
        "--match-all", action="store_true", help="a message must carry every --filter value"
    )
    parser.add_argument("--sql", default=None, help="an x-stream-filter-sql expression")
    parser.add_argument(
        "--from", dest="start", default=None, help="first | OFFSET | ISO-TIME (default first)"
    )
    parser.add_argument(
        "--to", dest="end", default=None, help="OFFSET | ISO-TIME, exclusive (default: the end)"
    )
    parser.add_argument("--out", "--output", dest="out", required=True, help="output directory")
    parser.add_argument("--format", choices=FORMATS, default="parquet", help="default parquet")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--driver-memory", default="1g", help="spark.driver.memory (default 1g)")


@dataclass
class ExportResult:
    messages: int
    files: int
    bytes: int
    seconds: float
    counters: dict[str, int] = field(default_factory=dict)


def source_options(args: argparse.Namespace, data_dir: Path) -> dict[str, str]:
    """The `sievemq` source options for the command line (raises OptionError on bad input)."""
    options = {"path": str(data_dir), "stream": args.stream, "vhost": args.vhost}
    if args.filter is not None:
        options["filterValues"] = args.filter
        if args.match_unfiltered:
            options["matchUnfiltered"] = "true"
        if args.match_all:
            options["filterMatchType"] = "all"
    if args.sql is not None:
        options["sql"] = args.sql
    start = (args.start or "first").strip()
    if start.lower() in ("first", "earliest"):
        options["startingOffsets"] = "earliest"
    elif re.fullmatch(r"\d+", start):
        options["startingOffsets"] = start
    else:
        options["startingTimestamp"] = str(parse_timestamp("--from", start))
    if args.end is not None:
        end = args.end.strip()
        if end.lower() in ("last", "latest", "end"):
            options["endingOffsets"] = "latest"
        elif re.fullmatch(r"\d+", end):
            options["endingOffsets"] = end
        else:
            options["endingTimestamp"] = str(parse_timestamp("--to", end))
    return options


def planned_messages(options: dict[str, str]) -> int:
    """Offsets the export will look at (an upper bound of the rows when filtering)."""
    parsed = parse_options(options)
    total = 0
    for ref in resolve_streams(parsed):
        state = stream_state(ref)
        b = timestamp_bounds(parsed).narrow(
            Bounds(
                start_offset(parsed, ref, state, streaming=False), end_offset(parsed, ref, state)
            )
        )
        if b.lo >= b.hi:
            continue
        chunks = stream_chunks(Path(ref.directory), min(state.end, b.hi))
        for r, _ in plan_ranges(ref, chunks, b, 1 << 62, None):
            total += r.until - r.start
    return total


def build_session(master: str, driver_memory: str) -> Any:
    # Spark starts many Python workers; without cached bytecode each one compiles pyspark
    # again (seconds on a loaded machine) before it can connect back to the JVM
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName("sievemq-export")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def _bar(done: int, total: int, started: float, width: int = 30) -> str:
    elapsed = max(time.monotonic() - started, 1e-6)
    rate = done / elapsed
    frac = min(1.0, done / total) if total else 1.0
    filled = int(frac * width)
    eta = f"{(total - done) / rate:.0f}s" if rate > 0 and done < total else "-"
    return (
        f"\r[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} messages "
        f"{rate:,.0f} rows/s ETA {eta}"
    )


def _output_size(out: Path) -> tuple[int, int]:
    files = [p for p in out.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
    return len(files), sum(p.stat().st_size for p in files)


def export(
    options: dict[str, str],
    out: Path,
    fmt: str,
    *,
    spark: Any,
    overwrite: bool = False,
    progress: TextIO | None = None,
) -> ExportResult:
    """Write the rows of the source ``options`` to ``out``; raises on failure."""
    from sievemq.spark import register

    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists (use --overwrite to replace it)")
    total = planned_messages(options)
    # Spark's default INT96 reads back as timestamp[ns] without a zone elsewhere (delta-rs, pyarrow)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    metrics = register(spark, metrics=True)
    assert metrics is not None
    started = time.monotonic()
    df = spark.read.format("sievemq").options(**options).load()
    writer = df.write.mode("overwrite" if overwrite else "errorifexists")
    failure: list[BaseException] = []

    def run() -> None:
        try:
            if fmt == "json":
                writer.json(str(out))
            else:
                writer.parquet(str(out))
        except BaseException as error:  # re-raised in the caller's thread
            failure.append(error)

    worker = threading.Thread(target=run, name="sievemq-export", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.5)
        if progress is not None:
            now = metrics.value()
            done = now["records_matched"] + now["records_skipped"] + now["records_skipped_by_bloom"]
            progress.write(_bar(min(done, total), total, started))
            progress.flush()
    if progress is not None:
        progress.write("\n")
    if failure:
        raise failure[0]
    counters = metrics.value()
    files, size = _output_size(out)
    return ExportResult(
        counters["records_matched"], files, size, time.monotonic() - started, counters
    )


def run_export(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The `sievemq export` command; returns the exit status."""
    data_dir = Path(args.data_dir or os.environ.get("SIEVEMQ_DATA_DIR") or "./data")
    try:
        options = source_options(args, data_dir)
        # checked before Spark starts: a typo costs no JVM start
        parse_options(options)
        resolve_streams(parse_options(options))
    except OptionError as error:
        print(f"sievemq export: {_cli_text(str(error))}", file=err)
        return 1
    target = Path(args.out)
    if target.exists() and not args.overwrite:
        print(f"sievemq export: {target} exists (use --overwrite to replace it)", file=err)
        return 1
    try:
        spark = build_session(args.master, args.driver_memory)
    except ImportError as error:
        print(f"sievemq export: needs pyspark (pip install 'sievemq[spark]'): {error}", file=err)
        return 2
    try:
        result = export(
            options,
            target,
            args.format,
            spark=spark,
            overwrite=args.overwrite,
            progress=err if err.isatty() else None,
        )
    except Exception as error:
        print(f"sievemq export: failed: {_first_line(error)}", file=err)
        return 1
    finally:
        spark.stop()
    rate = result.messages / result.seconds if result.seconds > 0 else 0.0
    print(
        f"exported {result.messages} messages from {args.stream} (vhost {args.vhost}) to {target} "
        f"({args.format}, {result.files} files, {result.bytes} bytes) in {result.seconds:.1f} s "
        f"({rate:,.0f} messages/s)",
        file=out,
    )
    return 0


def _cli_text(text: str) -> str:
    return text.removeprefix("sievemq: ")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    for line in text.splitlines():
        if "sievemq:" in line:
            return line.strip()
    return text.splitlines()[0] if text else type(error).__name__
