"""bench/cluster_scaling.py runs from a clone: a small run on two nodes, its JSON read back
(the figures themselves are bench/RESULTS.md's, measured with bigger runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.timeout(600)


def test_the_cluster_benchmark_spreads_streams_over_the_nodes_and_reports_json(
    tmp_path: Path,
) -> None:
    raw = tmp_path / "runs.jsonl"
    small = ["--nodes", "2", "--streams", "2", "--n", "2000", "--repeats", "1", "--no-rabbitmq"]
    out = subprocess.run(
        [sys.executable, "-m", "bench.cluster_scaling", *small, "--raw", str(raw)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["nodes"] == 2 and report["commit"]
    (row,) = report["results"]
    assert row["streams"] == 2
    for system in ("cluster-2", "single"):
        for phase in ("publish", "consume"):
            figures = row[system][phase]
            assert "errors" not in figures, figures
            assert figures["agg_msgs_per_s"] > 0 and figures["server_cpu_us_per_msg"] > 0
    assert set(row["cluster_over_single"]) == {"publish", "consume"}
    runs = [json.loads(line) for line in raw.read_text().splitlines()]
    assert {r["system"] for r in runs} == {"cluster-2", "single"}
    for run in runs:  # every confirmed message stored and read back
        assert run["publish"]["msgs"] == run["consume"]["msgs"] == 4000, run
