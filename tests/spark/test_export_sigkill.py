"""`sievemq export --incremental` to Parquet and JSON is exactly once across a SIGKILL.

The command runs as a real process (its own session, so the kill takes the JVM and the Python
workers too) and is paused by ``$SIEVEMQ_EXPORT_STOP_AT`` at one point of a run:

- ``planned``: before Spark writes anything;
- ``staged``: the run's files are written, in the staging folder, not committed;
- ``committed``: the staging folder was renamed (the commit), no file moved into the output;
- ``moved``: every file is in the output, the checkpoint is still the old one;
- ``checkpointed``: the checkpoint is replaced, the commit folder not yet removed.

Then it is SIGKILLed and run again (on the shared session); every message must be in the
output exactly once and the checkpoint at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sievemq.spark.export import STOP_AT

from .spark_data import write_stream
from .test_spark_export import _cli

pytestmark = pytest.mark.timeout(1500)


def offsets(out: Path, fmt: str) -> list[int]:
    """The offsets a reader of the output sees (hidden ``_``/``.`` names skipped)."""
    if not out.exists():
        return []
    if fmt == "parquet":
        return sorted(pq.read_table(out).column("offset").to_pylist())
    return sorted(
        json.loads(line)["offset"]
        for f in out.glob("part-*")
        for line in f.read_text().splitlines()
    )


def kill_at(argv: list[str], point: str, log: Path) -> None:
    """Run the command until it reports ``point``, then SIGKILL its process group."""
    cmd = [sys.executable, "-m", "sievemq", "export", *argv, "--master", "local[1]"]
    env = dict(os.environ, **{STOP_AT: point})
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 900  # a JVM start takes minutes on a loaded machine
        while f"stopped at {point}" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, f"never reached {point}"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)


# (format, window, rows visible after the kill, what the rerun prints)
WINDOWS = [
    ("parquet", "planned", 100, "exported 50 messages"),
    ("parquet", "staged", 100, "exported 50 messages"),
    ("parquet", "committed", 100, "nothing new"),
    ("parquet", "moved", 150, "nothing new"),
    ("parquet", "checkpointed", 150, "nothing new"),
    ("json", "staged", 100, "exported 50 messages"),
    ("json", "moved", 150, "nothing new"),
]


@pytest.mark.parametrize(("fmt", "point", "visible", "rerun"), WINDOWS)
def test_killed_incremental_run_is_exactly_once(
    spark: Any, tmp_path: Path, fmt: str, point: str, visible: int, rerun: str
) -> None:
    data = tmp_path / "data"
    write_stream(data, "orders", 10, 10)  # offsets 0..99
    out, ck = tmp_path / "out", tmp_path / "ck.json"
    argv = ["--data-dir", str(data), "--stream", "orders", "--format", fmt]
    argv += ["--out", str(out), "--incremental", str(ck)]
    code, stdout, stderr = _cli(spark, *argv)
    assert code == 0 and stdout.startswith("exported 100 messages"), stderr
    write_stream(data, "orders", 5, 10)  # offsets 100..149

    kill_at(argv, point, tmp_path / "killed.log")
    assert offsets(out, fmt) == list(range(visible))  # a reader never sees a partial run
    stale = 150 if point == "checkpointed" else 100
    assert json.loads(ck.read_text())["offsets"] == {"/": {"orders": stale}}

    code, stdout, stderr = _cli(spark, *argv)
    assert code == 0 and stdout.startswith(rerun), (stdout, stderr)
    assert offsets(out, fmt) == list(range(150))  # every message exactly once
    assert json.loads(ck.read_text())["offsets"] == {"/": {"orders": 150}}
    assert not [p.name for p in out.iterdir() if p.name.startswith("_sievemq-")]

    write_stream(data, "orders", 2, 10)  # offsets 150..169: the next run goes on from there
    code, stdout, _ = _cli(spark, *argv)
    assert code == 0 and stdout.startswith("exported 20 messages")
    assert offsets(out, fmt) == list(range(170))
