"""The Arrow Parquet writer of `sievemq export` (``--writer arrow``, the Parquet default).

Still one Spark job: the driver plans the partitions exactly as the `sievemq` source does
(same ranges, same ``minPartitions`` split), Spark runs one task per range
(``sc.parallelize(ranges, n).mapPartitions``), and each task reads its range with the source's
reader and columnar decode (``arrow_read.read_range``) and writes the Arrow batches straight
to one Parquet file with ``pyarrow.parquet`` in the given folder. No row ever crosses into the
JVM, which is where Spark's own writer spends most of its time (bench/RESULTS.md). Each task
returns its file name and row count; reader counters go to the same accumulator the source
uses, so the progress bar works unchanged.

The files carry the source's Arrow schema (``timestamp[us, tz=UTC]``, ``int16`` properties,
``list``/``map``/``struct`` columns), which Spark reads back as the same column types as the
Spark writer's output. Executors must see ``folder`` (a shared file system), as they must see
the data directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sievemq.spark.arrow_read import RangeTask, ReadSettings, read_range, stat_counts
from sievemq.spark.source import RangePartition, SieveDataSource
from sievemq.storage import ReadStats
from sievemq.storage.durable import fsync_dir

GROUP_ROWS = 65536  # rows per Parquet row group (batches are joined up to this)


def plan(options: dict[str, str]) -> tuple[list[RangeTask], ReadSettings, pa.Schema]:
    """The ranges, read settings and Arrow schema the `sievemq` source would use."""
    source = SieveDataSource(options)
    reader = source.reader(source.schema())
    parts = reader.partitions()
    tasks = [
        p.task
        for p in parts
        if isinstance(p, RangePartition) and isinstance(p.task, RangeTask)  # file mode only
    ]
    return tasks, reader.settings, reader.arrow


def write_range(
    task: RangeTask,
    settings: ReadSettings,
    schema: pa.Schema,
    path: Path,
    stats_out: Any = None,
) -> int:
    """Write the rows of ``task`` to the Parquet file ``path``; the row count (no rows: no
    file)."""
    writer: pq.ParquetWriter | None = None
    pending: list[pa.RecordBatch] = []
    held = 0
    rows = 0

    def flush() -> None:
        nonlocal writer, held
        if writer is None:
            writer = pq.ParquetWriter(path, schema, compression="snappy")
        writer.write_table(pa.Table.from_batches(pending, schema))
        pending.clear()
        held = 0

    try:
        for batch in read_range(task, settings, schema, stats_out):
            if batch.num_rows == 0:
                continue
            pending.append(batch)
            held += batch.num_rows
            rows += batch.num_rows
            if held >= GROUP_ROWS:
                flush()
        if pending:
            flush()
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    return rows


def _task(
    settings: ReadSettings,
    schema: pa.Schema,
    folder: str,
    run: str,
    accumulator: Any,
    items: Iterator[tuple[int, RangeTask]],
) -> Iterator[tuple[str, int]]:
    """Executor side: one Spark partition = one range -> one Parquet file."""

    def report(stats: ReadStats) -> None:
        if accumulator is not None:
            accumulator.add(stat_counts(stats))

    for index, task in items:
        name = f"part-{index:05d}-{run}.snappy.parquet"
        rows = write_range(task, settings, schema, Path(folder) / name, report)
        if rows:
            yield name, rows


def write_parquet(
    spark: Any, options: dict[str, str], folder: Path, run: str, accumulator: Any = None
) -> list[tuple[str, int]]:
    """Export the source ``options`` into ``folder`` (created; must be new) as Parquet files
    named ``part-NNNNN-RUN.snappy.parquet``; the (file name, rows) written. No matching row:
    one empty file with the schema, as Spark's writer leaves."""
    tasks, settings, schema = plan(options)
    folder.mkdir(parents=True)
    written: list[tuple[str, int]] = []
    if tasks:
        rdd = spark.sparkContext.parallelize(list(enumerate(tasks)), len(tasks))
        job = partial(_task, settings, schema, str(folder), run, accumulator)
        written = sorted(rdd.mapPartitions(job).collect())
    if not written:
        name = f"part-00000-{run}.snappy.parquet"
        pq.write_table(schema.empty_table(), folder / name, compression="snappy")
        written = [(name, 0)]
    fsync_dir(folder)
    return written
