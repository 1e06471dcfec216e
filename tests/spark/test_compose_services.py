"""Every service of docker-compose.yml, run outside Docker (Docker cannot run here).

The gateway runs its compose command (hosts and paths mapped to this machine, free ports);
pika publishes into `orders`; the spark-export job runs its compose command twice beside the
running gateway (incremental Delta export); Prometheus' scrape targets answer in the
Prometheus text format (promtool lints what they return; tests/test_compose.py checks the
config itself with promtool).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
import yaml
from deltalake import DeltaTable
from prometheus_client.parser import text_string_to_metric_families

from sievemq.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(1500)


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def _local(words: list[str], paths: dict[str, Path]) -> list[str]:
    """A compose command for this machine: container paths -> tmp paths, 0.0.0.0 -> 127.0.0.1."""
    out = []
    for word in words:
        word = word.replace("0.0.0.0", "127.0.0.1")
        for inside, outside in paths.items():
            if word == inside or word.startswith(inside + "/"):
                word = str(outside) + word[len(inside) :]
        out.append(word)
    return out


def _publish(url: str, count: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("orders", durable=True, arguments={"x-queue-type": "stream"})
        for i in range(count):
            channel.basic_publish(
                "",
                "orders",
                f"order {i}".encode(),
                pika.BasicProperties(headers={"x-stream-filter-value": f"r{i % 3}"}),
            )
    finally:
        connection.close()


def _promtool() -> str:
    for candidate in (ROOT / ".tools" / "bin" / "promtool", shutil.which("promtool")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.fail("promtool is missing: run `make promtool`")


def test_every_compose_service_command_runs(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("SPARK TESTS SKIPPED: no Java (install openjdk-17-jre-headless)")
    services = _services()
    paths = {"/var/lib/sievemq": tmp_path / "data", "/exports": tmp_path / "exports"}
    (tmp_path / "exports").mkdir()

    # gateway: its compose command (ServerProcess adds free ports and prints them)
    gateway = services["gateway"]["command"]
    assert gateway[:2] == ["sievemq", "serve"]
    server = ServerProcess(paths["/var/lib/sievemq"], tuple(_local(gateway[2:], paths)))
    server.start(timeout=180)
    try:
        assert server.host == "127.0.0.1"
        _publish(server.url, 30)

        # spark-export: its compose command, twice, beside the running gateway
        job = _local(services["spark-export"]["command"], paths)
        assert job[:2] == ["sievemq", "export"]
        command = [sys.executable, "-m", "sievemq", *job[1:]]
        first = subprocess.run(command, capture_output=True, text=True, timeout=900)
        assert first.returncode == 0, first.stderr[-3000:]
        assert first.stdout.startswith("exported 30 messages from orders (vhost /) to ")
        _publish(server.url, 12)
        second = subprocess.run(command, capture_output=True, text=True, timeout=900)
        assert second.returncode == 0, second.stderr[-3000:]
        assert second.stdout.startswith("exported 12 messages")
        table = DeltaTable(str(tmp_path / "exports" / "orders")).to_pyarrow_table()
        assert sorted(table.column("offset").to_pylist()) == list(range(42))
        bodies = sorted(bytes(b) for b in table.column("body").to_pylist())
        assert bodies == sorted(f"order {i}".encode() for i in [*range(30), *range(12)])

        # prometheus: each scrape target answers in the Prometheus text format
        config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
        # (the cluster profile's targets: tests/integration/test_cluster/test_compose_cluster.py)
        gateway_jobs = [
            job
            for job in config["scrape_configs"]
            if all(t.startswith("gateway:") for g in job["static_configs"] for t in g["targets"])
        ]
        for job_config in gateway_jobs:
            for group in job_config["static_configs"]:
                for target in group["targets"]:
                    host, port = target.split(":")
                    assert host == "gateway" and int(port) == 15672  # the compose service
            url = f"http://127.0.0.1:{server.admin_port}{job_config['metrics_path']}"
            response = httpx.get(url, timeout=60)
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/plain")
            families = {f.name for f in text_string_to_metric_families(response.text)}
            assert families, job_config["job_name"]
            lint = subprocess.run(
                [_promtool(), "check", "metrics"],
                input=response.text,
                capture_output=True,
                text=True,
                timeout=60,
            )
            # promtool found that /metrics/per-object wrote HELP/TYPE without the counters'
            # _total suffix (the series were untyped for Prometheus): fixed with this test
            assert lint.returncode == 0, lint.stdout + lint.stderr
    finally:
        server.stop()
