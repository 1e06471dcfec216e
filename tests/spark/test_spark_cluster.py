"""`sievemq export --master spark://...` against a real Spark standalone cluster.

The test starts a master and one worker on 127.0.0.1 (free ports, 1 core, 1 GiB) with the
`spark-class` that pyspark ships, runs the real command line against them, and kills both.
The executors run on this machine, so the data directory is on a path they see and `sievemq`
is installed in the interpreter they start (PYSPARK_PYTHON): what docs/spark.md says a
cluster needs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from .spark_data import write_stream

pytestmark = pytest.mark.timeout(1500)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _spark_env(tmp: Path) -> dict[str, str]:
    import pyspark

    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # executors' Python workers compile pyspark
    env |= {
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp / "logs"),
        "PYSPARK_PYTHON": sys.executable,
    }
    return env


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("SPARK CLUSTER TEST SKIPPED: no Java (install openjdk-17-jre-headless)")
    import pyspark

    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    env = _spark_env(tmp_path)
    port, ui = _free_port(), _free_port()
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        started.append(
            subprocess.Popen(
                [spark_class, *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()

    master = f"spark://127.0.0.1:{port}"
    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui),
        )  # fmt: skip
        start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            master,
            "--host", "127.0.0.1", "--port", str(_free_port()),
            "--webui-port", str(_free_port()), "--cores", "1", "--memory", "1g",
            "--work-dir", str(tmp_path / "work"),
        )  # fmt: skip
        deadline = time.monotonic() + 600
        while True:  # the master's JSON status lists the worker once it registered
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                    if json.load(r).get("aliveworkers", 0) >= 1:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                text = "\n".join((logs / f).read_text()[-2000:] for f in os.listdir(logs))
                pytest.fail(f"the standalone cluster did not come up:\n{text}")
            time.sleep(1)
        yield master
    finally:
        for p in started:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in started:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)


def test_export_on_a_standalone_cluster(cluster: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_stream(data, "orders", 20, 10)  # offsets 0..199, v0..v9 by chunk
    out = tmp_path / "out.parquet"
    cmd = [sys.executable, "-m", "sievemq", "export", "--data-dir", str(data)]
    done = subprocess.run(
        [*cmd, "--stream", "orders", "--filter", "v3", "--out", str(out), "--master", cluster],
        env=_spark_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("exported 18 messages from orders (vhost /) to ")
    offsets = sorted(pq.read_table(out).column("offset").to_pylist())
    assert offsets == [*range(30, 39), *range(130, 139)]
    # the rows were read by the cluster's executor, not in the driver
    apps = list((tmp_path / "work").iterdir())
    assert len(apps) == 1 and apps[0].name.startswith("app-")
