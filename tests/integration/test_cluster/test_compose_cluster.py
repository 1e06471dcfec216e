"""docker-compose.yml's `cluster` profile, run outside Docker (Docker cannot run here).

etcd's compose command runs as Debian's /usr/bin/etcd with the same flags (the service's
host names and ports mapped to free loopback ports); node1-node3 run their compose
commands (hosts and paths mapped to this machine); the three join through that etcd, a
queue declared on one is known to the others, and each node's Prometheus target (the
`sievemq-cluster` job of deploy/prometheus.yml) answers text promtool accepts, every series
labelled with its node.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sievemq.cluster.local import ETCD, free_port
from sievemq.testing import ServerProcess

from .cluster_helpers import WAIT_S, get, running, until

ROOT = Path(__file__).resolve().parents[3]
NODES = ("node1", "node2", "node3")


def _compose() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def _etcd_command(words: list[str], data: Path, client: int, peer: int) -> list[str]:
    """etcd's compose command for this machine: Debian's binary, loopback, free ports."""
    assert words[0] == "/usr/local/bin/etcd"  # the official image's binary
    out = [ETCD]
    for word in words[1:]:
        word = word.replace("0.0.0.0", "127.0.0.1").replace("http://etcd:", "http://127.0.0.1:")
        word = word.replace(":2379", f":{client}").replace(":2380", f":{peer}")
        out.append(str(data) if word == "/etcd-data" else word)
    return out


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as answer:
            return b'"true"' in answer.read()
    except (OSError, urllib.error.URLError):
        return False


@pytest.fixture(scope="module")
def etcd_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("compose-etcd")
    client, peer = free_port(), free_port()
    command = _etcd_command(_compose()["etcd"]["command"], base / "data", client, peer)
    with (base / "etcd.log").open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{client}"
    try:
        deadline = time.monotonic() + WAIT_S
        while not _healthy(url):
            assert proc.poll() is None, (base / "etcd.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "etcd did not become healthy"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(WAIT_S)


@pytest.fixture(scope="module")
def nodes(
    etcd_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    base = tmp_path_factory.mktemp("compose-nodes")
    services = _compose()
    procs: dict[str, ServerProcess] = {}
    try:
        for name in NODES:
            words = services[name]["command"]
            assert words[:2] == ["sievemq", "serve"]
            args = [
                w.replace("0.0.0.0", "127.0.0.1")
                .replace("http://etcd:2379", etcd_url)
                .replace("/var/lib/sievemq", str(base / name))
                for w in words[2:]
            ]
            args[args.index("--advertise-host") + 1] = "127.0.0.1"  # the service's host name
            # ServerProcess adds free AMQP, stream and admin ports; the cluster port too here
            procs[name] = ServerProcess(base / name, (*args, "--cluster-port", "0")).start()
        yield procs
    finally:
        for proc in procs.values():
            if proc.running:
                assert proc.stop() == 0, proc.stderr()


def test_the_three_compose_nodes_form_one_cluster(nodes: dict[str, ServerProcess]) -> None:
    everyone = dict.fromkeys(NODES, True)
    for name, node in nodes.items():
        until(lambda: running(node) == everyone, f"{name} sees all three")  # noqa: B023
    conn = pika.BlockingConnection(pika.URLParameters(nodes["node1"].url))
    conn.channel().queue_declare("compose-orders", durable=True)
    conn.close()

    def listed() -> Any:
        return {q["name"]: q for q in get(nodes["node3"], "/api/queues")}.get("compose-orders")

    assert until(listed, "node3 knows node1's queue")["leader"] == "node1"


def _promtool() -> str:
    for candidate in (ROOT / ".tools" / "bin" / "promtool", shutil.which("promtool")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.fail("promtool is missing: run `make promtool`")


def test_prometheus_scrapes_each_compose_node(nodes: dict[str, ServerProcess]) -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "sievemq-cluster"]
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert sorted(t.split(":")[0] for t in targets) == list(NODES)
    for target in targets:
        name = target.split(":")[0]
        text = httpx.get(nodes[name].admin_url + job["metrics_path"], timeout=60).text
        labels = {
            s.labels.get("node") for f in text_string_to_metric_families(text) for s in f.samples
        }
        assert labels == {name}
        lint = subprocess.run(
            [_promtool(), "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert lint.returncode == 0, lint.stdout + lint.stderr
