"""`sievemq export`: a stream (or a filtered slice of it) to Parquet, JSON or Delta via Spark.

Read-only on the data directory, through the `sievemq` source: it reads what the writer had
committed when the export was planned, so it is safe beside a running server. On a terminal
it draws a progress bar on stderr (messages done / planned, rows/s, ETA); otherwise it is quiet
until the one-line summary. Exit status: 0 done (also "nothing new"), 1 the export failed (no
such stream, output exists, Spark error), 2 bad command line.

``--to`` is exclusive, like ``endingOffsets``: ``--from 100 --to 200`` exports offsets 100..199.

Delta: Spark writes Parquet to a staging directory beside the output, then the `deltalake`
package (delta-rs) commits it to the Delta table in one transaction (delta-spark fetches its
JARs from Maven when a session starts, so it cannot work offline).

``--incremental CHECKPOINT``: the next offset of every stream, as JSON. A run exports
``[checkpoint, committed end at planning)`` (the first run starts at ``--from``), appends it to
the output, and only then replaces the checkpoint (write, fsync, rename). A Delta commit also
carries the new checkpoint in its commit metadata, so a run that died between the commit and
the rename resumes from the table, not from the stale file: exactly once for Delta.

Parquet: ``--writer arrow`` (default) runs one Spark task per planned range, each writing its
Parquet file with pyarrow (``arrow_export``); ``--writer spark`` uses Spark's own writer. The
Arrow writer always writes into a staging folder first, renamed into place when it is done.

Parquet and JSON runs are exactly once too (``_stage``/``recover_runs``): the tasks write the run
into ``OUT/_sievemq-staging-ID`` (hidden from readers: Spark, pyarrow and pandas skip names
starting with ``_``), with a manifest holding the run's new checkpoint. Renaming that folder to
``_sievemq-commit-ID`` commits the run; its files are then moved into ``OUT``, the checkpoint
is replaced and the folder removed. The next run first deletes staging folders (a run that
died before its commit: none of its rows is visible) and finishes commit folders (moves what is
left, takes the manifest's checkpoint if it is ahead of the file's), so a kill anywhere repeats
or loses no row.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import threading
import time
import uuid
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
from sievemq.storage.durable import fsync_dir

FORMATS = ("parquet", "json", "delta")
WRITERS = ("arrow", "spark")  # --writer for Parquet: pyarrow in each Spark task, or Spark's own
CHECKPOINT_KEY = "sievemq.checkpoint"  # Delta commit metadata: the checkpoint after the commit
STAGING_PREFIX = "_sievemq-staging-"  # an incremental Parquet/JSON run being written
COMMIT_PREFIX = "_sievemq-commit-"  # a committed run whose files may still need moving
MANIFEST = "sievemq-run.json"  # in both: the checkpoint after the run
STOP_AT = "SIEVEMQ_EXPORT_STOP_AT"  # recovery tests: pause at a named point to be SIGKILLed
Offsets = dict[str, dict[str, int]]  # {vhost: {stream: next offset}}


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
    parser.add_argument(
        "--writer",
        choices=WRITERS,
        default="arrow",
        help="Parquet writer: arrow (pyarrow in each Spark task, default) or spark",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    parser.add_argument(
        "--incremental",
        metavar="CHECKPOINT",
        default=None,
        help="export only what is new since the run that wrote CHECKPOINT (appends to --out)",
    )
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
        # a Python worker on a loaded machine may take longer than Spark's 15 s to connect back
        .config("spark.python.authenticate.socketTimeout", "180s")
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


def export_options(spark: Any, options: dict[str, str]) -> dict[str, str]:
    """``options`` with ``minPartitions`` set to Spark's default parallelism unless given:
    a stream smaller than ``maxBytesPerPartition`` (128 MiB) would otherwise be one task,
    leaving every other core idle."""
    if any(k.lower() == "minpartitions" for k in options):
        return options
    return options | {"minPartitions": str(spark.sparkContext.defaultParallelism)}


def export(
    options: dict[str, str],
    out: Path,
    fmt: str,
    *,
    spark: Any,
    overwrite: bool = False,
    append: bool = False,
    progress: TextIO | None = None,
    commit_metadata: dict[str, str] | None = None,
    run_offsets: Offsets | None = None,
    parquet_writer: str = "arrow",
) -> ExportResult:
    """Write the rows of the source ``options`` to ``out`` (``append``: add to it); raises on
    failure. ``commit_metadata`` goes into the Delta commit. ``run_offsets`` (Parquet/JSON
    with ``append``): write the run to a staging folder in ``out`` and commit it atomically
    with that checkpoint in its manifest (module docstring); ``finish_run`` then removes it.
    ``parquet_writer``: ``arrow`` (each Spark task writes its range with pyarrow,
    ``arrow_export``) or ``spark`` (``DataFrame.write.parquet``)."""
    from sievemq.spark import register
    from sievemq.spark.arrow_export import write_parquet

    if parquet_writer not in WRITERS:
        raise ValueError(f"parquet writer {parquet_writer!r}: expected one of {', '.join(WRITERS)}")

    if out.exists() and not (overwrite or append):
        raise FileExistsError(f"{out} exists (use --overwrite to replace it)")
    before = _data_files(out)
    total = planned_messages(options)
    # Spark's default INT96 reads back as timestamp[ns] without a zone elsewhere (delta-rs, pyarrow)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    metrics = register(spark, metrics=True)
    assert metrics is not None
    started = time.monotonic()
    arrow = fmt == "parquet" and parquet_writer == "arrow"
    staging = out.parent / f".{out.name}.staging-{uuid.uuid4().hex}"
    staged = fmt != "delta" and append and run_offsets is not None
    if staged:
        out.mkdir(parents=True, exist_ok=True)
        staging = out / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    writer: Any = None
    target = staging  # the Arrow writer: renamed to (or moved into) ``out`` when done
    if not arrow:
        df = spark.read.format("sievemq").options(**export_options(spark, options)).load()
        if fmt == "delta" or staged:
            writer = df.write.mode("errorifexists")
        else:
            mode = "overwrite" if overwrite else "append" if append else "errorifexists"
            writer = df.write.mode(mode)
            target = out
    failure: list[BaseException] = []

    def run() -> None:
        try:
            if arrow:
                opts = export_options(spark, options)
                write_parquet(spark, opts, target, uuid.uuid4().hex, metrics.accumulator)
            elif fmt == "json":
                writer.json(str(target))
            else:
                writer.parquet(str(target))
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
    try:
        if failure:
            raise failure[0]
        if fmt == "delta":
            _commit_delta(staging, out, overwrite, append, commit_metadata)
        elif staged:
            assert run_offsets is not None
            _commit_run(staging, out, run_offsets)
        elif arrow:
            _place(staging, out, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone once committed (renamed)
    counters = metrics.value()
    new = _data_files(out) - before
    return ExportResult(
        counters["records_matched"],
        len(new),
        sum(p.stat().st_size for p in new),
        time.monotonic() - started,
        counters,
    )


def _place(staging: Path, out: Path, overwrite: bool) -> None:
    """The Arrow writer's finished folder becomes ``out`` (``overwrite``: replacing it;
    an existing ``out`` otherwise: its files are added, as Spark's append mode does)."""
    if out.exists() and overwrite:
        shutil.rmtree(out)
    if not out.exists():
        os.rename(staging, out)
        fsync_dir(out.parent)
        return
    _move_files(staging, out)


def _commit_delta(
    staging: Path, out: Path, overwrite: bool, append: bool, metadata: dict[str, str] | None
) -> None:
    """Spark's Parquet files in ``staging`` -> one commit to the Delta table at ``out``."""
    import pyarrow.dataset as ds
    from deltalake import CommitProperties, write_deltalake

    files = sorted(str(p) for p in staging.glob("*.parquet"))
    rows = ds.dataset(files, format="parquet").scanner().to_reader()
    commit = CommitProperties(custom_metadata=metadata) if metadata else None
    if overwrite:
        write_deltalake(str(out), rows, mode="overwrite", commit_properties=commit)
    else:
        write_deltalake(
            str(out), rows, mode="append" if append else "error", commit_properties=commit
        )


def stop_point(point: str) -> None:
    """Pause forever at ``point`` when ``$SIEVEMQ_EXPORT_STOP_AT`` names it (recovery tests
    SIGKILL the command there: before the write, staged, committed, moved, checkpointed)."""
    if os.environ.get(STOP_AT) == point:
        print(f"sievemq export: stopped at {point} (${STOP_AT})", file=sys.stderr, flush=True)
        while True:
            time.sleep(60)


def _commit_run(staging: Path, out: Path, offsets: Offsets) -> None:
    """Commit a staged Parquet/JSON run: manifest, rename (the commit), move its files."""
    manifest = staging / MANIFEST
    with open(manifest, "w") as f:
        f.write(json.dumps({"version": 1, "offsets": offsets}, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(staging)
    stop_point("staged")
    committed = out / (COMMIT_PREFIX + staging.name.removeprefix(STAGING_PREFIX))
    os.rename(staging, committed)
    fsync_dir(out)
    stop_point("committed")
    _move_files(committed, out)
    stop_point("moved")


def _move_files(committed: Path, out: Path) -> None:
    """Move a committed run's data files into ``out`` (what an earlier attempt moved is gone
    from ``committed`` already, so this may run again after a kill)."""
    for path in sorted(committed.iterdir()):
        if path.is_file() and not path.name.startswith((".", "_")) and path.name != MANIFEST:
            os.replace(path, out / path.name)
    fsync_dir(out)


def recover_runs(out: Path) -> Offsets | None:
    """Before an incremental Parquet/JSON run: delete runs that died before their commit,
    finish committed ones; the checkpoint of the latest committed run (None: none found)."""
    if not out.is_dir():
        return None
    latest: Offsets | None = None
    for path in sorted(out.iterdir()):
        if path.is_dir() and path.name.startswith(STAGING_PREFIX):
            shutil.rmtree(path)
        elif path.is_dir() and path.name.startswith(COMMIT_PREFIX):
            try:
                offsets = _offsets(json.loads((path / MANIFEST).read_text()).get("offsets"))
            except (OSError, ValueError, AttributeError) as error:
                raise ValueError(f"committed run {path}: bad manifest: {error}") from None
            _move_files(path, out)
            if latest is None or _later(offsets, latest):
                latest = offsets
    return latest


def finish_runs(out: Path) -> None:
    """After the checkpoint took a committed run's offsets: remove its folder."""
    for path in out.glob(f"{COMMIT_PREFIX}*"):
        shutil.rmtree(path)


def delta_checkpoint(out: Path) -> Offsets | None:
    """The checkpoint the Delta table's latest commit carries (None: not a table, or none)."""
    if not (out / "_delta_log").is_dir():
        return None
    from deltalake import DeltaTable

    history = DeltaTable(str(out)).history(1)
    raw = history[0].get(CHECKPOINT_KEY) if history else None
    return _offsets(json.loads(raw)) if isinstance(raw, str) else None


def _offsets(data: object) -> Offsets:
    """Validated ``{vhost: {stream: offset}}`` (ValueError otherwise)."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object of vhosts")
    out: Offsets = {}
    for vhost, streams in data.items():
        if not isinstance(streams, dict):
            raise ValueError(f"vhost {vhost!r}: expected an object of streams")
        for name, offset in streams.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise ValueError(f"{vhost}/{name}: offset {offset!r} is not a number >= 0")
            out.setdefault(str(vhost), {})[str(name)] = offset
    return out


def read_checkpoint(path: Path, out: Path, fmt: str) -> Offsets | None:
    """The checkpoint file's offsets (None when there is none yet); ValueError when it is
    damaged or was written for another output or format."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"checkpoint {path}: cannot read it: {error}") from None
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ValueError(f"checkpoint {path}: not a sievemq export checkpoint")
    if data.get("out") != str(out.resolve()) or data.get("format") != fmt:
        raise ValueError(
            f"checkpoint {path} belongs to the {data.get('format')} export to {data.get('out')}"
        )
    try:
        return _offsets(data.get("offsets"))
    except ValueError as error:
        raise ValueError(f"checkpoint {path}: {error}") from None


def write_checkpoint(path: Path, out: Path, fmt: str, offsets: Offsets) -> None:
    """Replace the checkpoint atomically (temporary file, fsync, rename, fsync the folder)."""
    body = {"version": 1, "out": str(out.resolve()), "format": fmt, "offsets": offsets}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(body, indent=1, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _later(a: Offsets, b: Offsets) -> bool:
    """Whether ``a`` is ahead of ``b`` for some stream and behind for none."""
    ahead = False
    for vhost, streams in a.items():
        for name, offset in streams.items():
            other = b.get(vhost, {}).get(name)
            if other is not None and offset < other:
                return False
            ahead = ahead or other is None or offset > other
    return ahead


def incremental_range(
    options: dict[str, str], done: Offsets | None
) -> tuple[dict[str, str], Offsets, int]:
    """Source options for ``[done, committed end)`` of every stream, the end (the next
    checkpoint) and the number of new offsets. Streams not in ``done`` start where
    ``options`` say (``--from``)."""
    parsed = parse_options(options)
    ends: Offsets = {}
    starts: Offsets = {}
    new = 0
    for ref in resolve_streams(parsed):
        state = stream_state(ref)
        ends.setdefault(ref.vhost, {})[ref.name] = state.end
        since = (done or {}).get(ref.vhost, {}).get(ref.name)
        if since is None:
            since = start_offset(parsed, ref, state, streaming=False)
        since = min(since, state.end)
        starts.setdefault(ref.vhost, {})[ref.name] = since
        new += state.end - max(since, state.first)
    ranged = {k: v for k, v in options.items() if k not in ("startingTimestamp",)}
    ranged["startingOffsets"] = json.dumps(starts)
    ranged["endingOffsets"] = json.dumps(ends)
    return ranged, ends, new


def _data_files(out: Path) -> set[Path]:
    if not out.exists():
        return set()
    return {
        p
        for p in out.rglob("*")
        if p.is_file() and not any(part.startswith((".", "_")) for part in p.relative_to(out).parts)
    }


def run_export(
    args: argparse.Namespace, out: TextIO, err: TextIO, *, spark: Any | None = None
) -> int:
    """The `sievemq export` command; returns the exit status. ``spark``: a session to use
    (and leave running) instead of starting one."""
    data_dir = Path(args.data_dir or os.environ.get("SIEVEMQ_DATA_DIR") or "./data")
    target = Path(args.out)
    checkpoint = Path(args.incremental) if args.incremental else None
    if checkpoint is not None and (args.end is not None or args.overwrite):
        print("sievemq export: --incremental goes with neither --to nor --overwrite", file=err)
        return 2
    try:
        options = source_options(args, data_dir)
        # checked before Spark starts: a typo costs no JVM start
        parse_options(options)
        resolve_streams(parse_options(options))
    except OptionError as error:
        print(f"sievemq export: {_cli_text(str(error))}", file=err)
        return 1
    end: Offsets | None = None
    if checkpoint is not None:
        try:
            done = read_checkpoint(checkpoint, target, args.format)
            delta = args.format == "delta"
            committed = delta_checkpoint(target) if delta else recover_runs(target)
            if committed is not None and (done is None or _later(committed, done)):
                done = committed  # the last run died after its commit: resume after it
            options, end, new = incremental_range(options, done)
        except (ValueError, OptionError) as error:
            print(f"sievemq export: {_cli_text(str(error))}", file=err)
            return 1
        if new == 0:
            write_checkpoint(checkpoint, target, args.format, end)
            if args.format != "delta":
                finish_runs(target)
            print(f"nothing new in {args.stream} (vhost {args.vhost}) since {checkpoint}", file=out)
            return 0
    elif target.exists() and not args.overwrite:
        print(f"sievemq export: {target} exists (use --overwrite to replace it)", file=err)
        return 1
    own = spark is None
    try:
        if spark is None:
            spark = build_session(args.master, args.driver_memory)
    except ImportError as error:
        print(f"sievemq export: needs pyspark (pip install 'sievemq[spark]'): {error}", file=err)
        return 2
    try:
        stop_point("planned")
        result = export(
            options,
            target,
            args.format,
            spark=spark,
            overwrite=args.overwrite,
            append=checkpoint is not None,
            progress=err if err.isatty() else None,
            commit_metadata={CHECKPOINT_KEY: json.dumps(end)} if end is not None else None,
            run_offsets=end,
            parquet_writer=args.writer,
        )
        if checkpoint is not None and end is not None:
            write_checkpoint(checkpoint, target, args.format, end)
            stop_point("checkpointed")
            if args.format != "delta":
                finish_runs(target)
    except Exception as error:
        print(f"sievemq export: failed: {_first_line(error)}", file=err)
        return 1
    finally:
        if own:
            spark.stop()
    rate = result.messages / result.seconds if result.seconds > 0 else 0.0
    since = f", new since {checkpoint}" if checkpoint is not None else ""
    print(
        f"exported {result.messages} messages from {args.stream} (vhost {args.vhost}) to {target} "
        f"({args.format}{since}, {result.files} files, {result.bytes} bytes) in "
        f"{result.seconds:.1f} s ({rate:,.0f} messages/s)",
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
