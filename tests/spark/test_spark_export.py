"""`sievemq export`: the export function on the shared session, and the real command line."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import sievemq.spark.export as export_module
from sievemq.spark.export import add_arguments, export, run_export

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


def _cli(spark: Any, *argv: str) -> tuple[int, str, str]:
    """`sievemq export ARGV` in this process on the shared session."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = run_export(parser.parse_args(list(argv)), out, err, spark=spark)
    return code, out.getvalue(), err.getvalue()


def _delta_offsets(path: Path) -> list[int]:
    return sorted(DeltaTable(str(path)).to_pyarrow_table().column("offset").to_pylist())


def test_incremental_delta_export_is_exactly_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    write_stream(data, "orders", 10, 10)  # offsets 0..99
    out, ck = tmp_path / "table", tmp_path / "ck.json"
    argv = ["--data-dir", str(data), "--stream", "orders", "--format", "delta"]
    argv += ["--out", str(out), "--incremental", str(ck)]
    code, stdout, stderr = _cli(spark, *argv)
    assert code == 0, stderr
    assert stdout.startswith("exported 100 messages from orders (vhost /) to ")
    assert "(delta, new since" in stdout and len(stdout.splitlines()) == 1
    assert _delta_offsets(out) == list(range(100))
    table = DeltaTable(str(out))
    schema = table.schema().to_arrow()
    assert [f.name for f in schema] == [
        "offset", "timestamp", "filter_values", "filter_value", "exchange", "routing_key",
        "properties", "headers", "body",
    ]  # fmt: skip
    assert json.loads(ck.read_text())["offsets"] == {"/": {"orders": 100}}

    version = table.version()
    assert _cli(spark, *argv)[:2] == (0, f"nothing new in orders (vhost /) since {ck}\n")
    assert DeltaTable(str(out)).version() == version  # no empty commit

    write_stream(data, "orders", 5, 10)  # offsets 100..149
    code, stdout, _ = _cli(spark, *argv)
    assert code == 0 and stdout.startswith("exported 50 messages")
    assert _delta_offsets(out) == list(range(150))

    # the run dies after its Delta commit, before the checkpoint file is replaced: the next
    # run resumes from the checkpoint inside the commit, not from the stale file
    write_stream(data, "orders", 3, 10)  # offsets 150..179

    def die(*_: object) -> None:
        raise OSError("killed before the checkpoint")

    with monkeypatch.context() as patched:
        patched.setattr(export_module, "write_checkpoint", die)
        code, _, stderr = _cli(spark, *argv)
    assert code == 1 and "killed before the checkpoint" in stderr
    assert json.loads(ck.read_text())["offsets"] == {"/": {"orders": 150}}  # stale
    assert _delta_offsets(out) == list(range(180))  # the commit went in
    assert _cli(spark, *argv)[:2] == (0, f"nothing new in orders (vhost /) since {ck}\n")
    assert json.loads(ck.read_text())["offsets"] == {"/": {"orders": 180}}
    assert _delta_offsets(out) == list(range(180))  # exactly once

    # a checkpoint belongs to one output
    other = [*argv[:-3], str(tmp_path / "other"), "--incremental", str(ck)]
    code, _, stderr = _cli(spark, *other)
    assert code == 1 and "belongs to the delta export to" in stderr


def test_incremental_parquet_appends_only_new_rows(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_stream(data, "orders", 4, 10)
    out, ck = tmp_path / "pq", tmp_path / "ck.json"
    argv = ["--data-dir", str(data), "--stream", "orders", "--filter", "v1,v2"]
    argv += ["--from", "15", "--out", str(out), "--incremental", str(ck)]
    assert _cli(spark, *argv)[0] == 0  # chunks 1 and 2 from offset 15: 15..18, 20..28
    write_stream(data, "orders", 3, 10)  # offsets 40..69 carry v0, v1, v2
    code, stdout, _ = _cli(spark, *argv)
    assert code == 0 and stdout.startswith("exported 18 messages")
    offsets = sorted(pq.read_table(out).column("offset").to_pylist())
    assert offsets == [*range(15, 19), *range(20, 29), *range(50, 59), *range(60, 69)]


@pytest.mark.parametrize(
    "extra",
    [{}, {"filterValues": "v3", "startingOffsets": "100"}, {"filterValues": "nothing-has-this"}],
    ids=["all", "filtered", "no-row"],
)
def test_arrow_writer_output_is_what_the_spark_writer_writes(
    spark: Any, data_dir: Path, tmp_path: Path, extra: dict[str, str]
) -> None:
    options = {"path": str(data_dir), "stream": "orders"} | extra
    by_arrow = export(options, tmp_path / "arrow", "parquet", spark=spark)
    by_spark = export(options, tmp_path / "spark", "parquet", spark=spark, parquet_writer="spark")
    assert by_arrow.messages == by_spark.messages
    a = spark.read.parquet(str(tmp_path / "arrow"))
    s = spark.read.parquet(str(tmp_path / "spark"))
    assert a.schema == s.schema  # same column names, types and nullability, nested ones too
    assert a.schema.simpleString() == s.schema.simpleString()
    rows_a = sorted(a.collect(), key=lambda r: r["offset"])
    rows_s = sorted(s.collect(), key=lambda r: r["offset"])
    assert [r.asDict(recursive=True) for r in rows_a] == [r.asDict(recursive=True) for r in rows_s]
    assert len(rows_a) == by_arrow.messages
    if not extra:
        assert len(rows_a) == 300 and rows_a[0]["headers"] and rows_a[0]["properties"]
    # overwrite replaces the output, leaving no staging folder beside it
    again = export(options, tmp_path / "arrow", "parquet", spark=spark, overwrite=True)
    assert spark.read.parquet(str(tmp_path / "arrow")).count() == again.messages
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arrow", "spark"]


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_incremental_parquet_with_either_writer(spark: Any, tmp_path: Path, writer: str) -> None:
    data = tmp_path / "data"
    write_stream(data, "orders", 10, 10)  # offsets 0..99
    out, ck = tmp_path / "out", tmp_path / "ck.json"
    argv = ["--data-dir", str(data), "--stream", "orders", "--writer", writer]
    argv += ["--out", str(out), "--incremental", str(ck)]
    code, stdout, stderr = _cli(spark, *argv)
    assert code == 0 and stdout.startswith("exported 100 messages"), stderr
    write_stream(data, "orders", 5, 10)  # offsets 100..149
    code, stdout, stderr = _cli(spark, *argv)
    assert code == 0 and stdout.startswith("exported 50 messages"), stderr
    assert sorted(pq.read_table(out).column("offset").to_pylist()) == list(range(150))
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("_")) in ([], ["_SUCCESS"])
