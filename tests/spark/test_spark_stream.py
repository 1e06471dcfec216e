"""readStream over the `sievemq` source: checkpointed Kafka-shaped offsets, admission control,
Trigger.AvailableNow, and a restart that reads only what is new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sievemq.spark.planning import stream_chunks

from .spark_data import parquet_available_now, write_stream

# the JVM start (in the first test's setup) takes minutes on a loaded 2-core machine
pytestmark = pytest.mark.timeout(1200)


def _run(spark: Any, data_dir: Path, out: Path, checkpoint: Path) -> list[int]:
    frame = (
        spark.readStream.format("sievemq")
        .option("stream", "ticks")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "250")
        .option("filterValues", "v1,v2,v3,v4,v5,v6,v7,v8,v9,v0")  # every filtered message
        .load(str(data_dir))
        .select("offset", "filter_value", "body")
    )
    return parquet_available_now(frame, out, checkpoint)


def test_available_now_in_capped_batches_then_resume(
    spark: Any, metrics: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    write_stream(data_dir, "ticks", 30, 20)  # offsets 0..599, one unfiltered per chunk
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    batches = _run(spark, data_dir, out, checkpoint)
    # 600 offsets in batches of at most 250 offsets; 19 of every 20 match the filter
    assert len(batches) == 3 and sum(batches) == 30 * 19
    offsets = pq.read_table(out).column("offset").to_pylist()
    assert len(offsets) == len(set(offsets)) == 30 * 19
    logs = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    last = max(logs, key=lambda p: int(p.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {"/": {"ticks": 600}}

    write_stream(data_dir, "ticks", 5, 20)  # 100 more offsets: 600..699
    assert sum(_run(spark, data_dir, out, checkpoint)) == 5 * 19
    offsets = pq.read_table(out).column("offset").to_pylist()
    assert len(offsets) == len(set(offsets)) == 35 * 19 and max(offsets) == 698


def test_max_bytes_per_trigger_reads_whole_chunks_up_to_the_budget(
    spark: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    directory = write_stream(data_dir, "ticks", 30, 20)
    sizes = [c.size for c in stream_chunks(directory, 600)]
    assert len(sizes) == 30 and max(sizes) < 11 * min(sizes) / 10  # alike: 10 fit, 11 do not
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    frame = (
        spark.readStream.format("sievemq")
        .option("stream", "ticks")
        .option("startingOffsets", "earliest")
        .option("maxBytesPerTrigger", str(10 * max(sizes)))
        .load(str(data_dir))
        .select("offset")
    )
    batches = parquet_available_now(frame, out, checkpoint)
    assert batches == [200, 200, 200]  # 10 chunks of 20 per micro-batch
    ends = sorted(
        json.loads(p.read_text().splitlines()[-1])["/"]["ticks"]
        for p in (checkpoint / "offsets").iterdir()
        if p.name.isdigit()
    )
    assert ends == [200, 400, 600]
    offsets = pq.read_table(out).column("offset").to_pylist()
    assert sorted(offsets) == list(range(600))
