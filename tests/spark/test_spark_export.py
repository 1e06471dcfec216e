"""`sievemq export`: the export function on the shared session, and the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sievemq.spark.export import export

from .spark_data import T0, write_stream

# the JVM start (in the first test's setup) takes minutes on a loaded 2-core machine
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exportdata")
    write_stream(root, "orders", 30, 10)
    return root


def test_export_to_parquet_with_a_filter_and_a_range(
    spark: Any, data_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.parquet"
    options = {"path": str(data_dir), "stream": "orders", "filterValues": "v3"}
    options |= {"startingOffsets": "100", "endingOffsets": "250"}
    result = export(options, out, "parquet", spark=spark)
    table = pq.read_table(out)
    # chunks 13 and 23 (offsets 130..139, 230..239), 9 filtered messages each
    assert sorted(table.column("offset").to_pylist()) == [
        *range(130, 139),
        *range(230, 239),
    ]
    assert result.messages == 18 and result.files >= 1
    assert str(table.schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
    assert result.counters["chunks_skipped"] >= 15 - 2 - 3  # 15 chunks in range, 2 match
    with pytest.raises(FileExistsError):
        export(options, out, "parquet", spark=spark)


def test_export_to_json_by_time(spark: Any, data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    options = {
        "path": str(data_dir),
        "stream": "orders",
        "startingTimestamp": str(T0 + 28_000),
    }
    result = export(options, out, "json", spark=spark)
    lines = [json.loads(x) for f in sorted(out.glob("part-*")) for x in f.read_text().splitlines()]
    assert sorted(x["offset"] for x in lines) == list(range(280, 300))
    assert result.messages == 20


def test_command_line_export(data_dir: Path, tmp_path: Path, spark: Any) -> None:
    out = tmp_path / "cli.parquet"
    cmd = [sys.executable, "-m", "sievemq", "export", "--data-dir", str(data_dir)]
    bad = subprocess.run(
        [*cmd, "--stream", "nope", "--out", str(out)], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 1 and "no stream 'nope'" in bad.stderr and not out.exists()
    bad_from = subprocess.run(
        [*cmd, "--stream", "orders", "--from", "soon", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad_from.returncode == 1 and "--from" in bad_from.stderr
    args = ["--stream", "orders", "--filter", "v1", "--from", "50", "--to", "2024-01-01"]
    done = subprocess.run(
        [*cmd, *args, "--out", str(out), "--master", "local[1]"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    # chunks 11 and 21, 9 filtered messages each
    assert done.stdout.startswith("exported 18 messages from orders (vhost /) to ")
    assert len(done.stdout.splitlines()) == 1
    assert "[" not in done.stderr  # no progress bar when stderr is not a terminal
    assert pq.read_table(out).num_rows == 18
