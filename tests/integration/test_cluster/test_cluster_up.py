"""`sievemq cluster up` starts an etcd and N nodes, prints their ready lines, stops them all
on SIGTERM; and a single node (no --cluster-etcd) imports nothing of the cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from sievemq.testing.process import ready_fields

WAIT_S = 60.0


def test_cluster_up_runs_etcd_and_the_nodes_until_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    cmd = [sys.executable, "-m", "sievemq", "cluster", "up", "--nodes", "2"]
    cmd += ["--data-dir", str(data), "--cluster-lease-ttl", "2"]
    for port in ("--etcd-port", "--amqp-port", "--stream-port", "--admin-port", "--cluster-port"):
        cmd += [port, "0"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline().rstrip("\n") for _ in range(3)]
            assert lines[0].startswith("etcd ready http://127.0.0.1:"), lines
            fields = [ready_fields(line) for line in lines[1:]]
            assert [f["node"] for f in fields] == ["node1", "node2"], lines
            assert fields[0]["amqp"] != fields[1]["amqp"]
            listed = httpx.get(
                fields[0]["admin"] + "/api/nodes", auth=("guest", "guest"), timeout=10
            ).json()
            assert "node1" in {n["name"] for n in listed}
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(WAIT_S) == 0, proc.stderr.read() if proc.stderr else ""
        finally:
            if proc.poll() is None:  # a failed check: never leave the cluster running
                proc.terminate()
                proc.wait(WAIT_S)
    for name in ("node1", "node2"):
        assert (data / name / "cluster-node-id").exists()
    assert (data / "etcd" / "etcd.log").exists()


def test_a_single_node_imports_nothing_of_the_cluster() -> None:
    script = (
        "import sys\n"
        "from sievemq.cli import _build_parser\n"
        "_build_parser().parse_args(['serve'])\n"
        "import sievemq.serve\n"
        "print(sorted(m for m in sys.modules if m.startswith('sievemq.cluster')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ),
        timeout=WAIT_S,
    )
    assert out.stdout.strip() == "[]"
