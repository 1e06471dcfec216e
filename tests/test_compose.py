"""docker-compose.yml and the Dockerfile are checked here, since Docker cannot run on CI.

They must follow the compose specification (its JSON schema), start the real command line
with flags that exist, publish the default ports, point the health check at a route the admin
app serves, and give Prometheus a config promtool accepts that scrapes the admin port.
tests/spark/test_compose_services.py runs every service's command outside Docker.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sievemq.admin_api import create_app
from sievemq.cli import _build_parser
from sievemq.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_gateway_service_runs_a_valid_serve_command() -> None:
    gateway = _compose()["services"]["gateway"]
    command = gateway["command"]
    assert command[:2] == ["sievemq", "serve"]
    args = _build_parser().parse_args(command[1:])
    assert args.command == "serve"


def test_gateway_service_publishes_the_default_ports() -> None:
    defaults = Settings()
    gateway = _compose()["services"]["gateway"]
    published = {int(p.split(":")[1]) for p in gateway["ports"]}
    assert published == {defaults.amqp_port, defaults.admin_port}


async def test_healthcheck_route_is_served_by_the_admin_app() -> None:
    gateway = _compose()["services"]["gateway"]
    url = " ".join(gateway["healthcheck"]["test"])
    path = re.search(r"http://[^/]+(/[a-z]+)", url)
    assert path is not None
    # httpx's own ASGI transport: starlette's TestClient warns that its httpx use is deprecated
    transport = httpx.ASGITransport(app=create_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        response = await client.get(path.group(1))
    assert response.status_code == 200


def test_dockerfile_cmd_is_a_valid_serve_command() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE)
    assert cmd is not None
    words = yaml.safe_load(cmd.group(1))
    assert _build_parser().parse_args(words[1:]).command == "serve"


def _tool(name: str) -> str:
    """A tool from the venv or .tools/bin (`make test` fetches promtool there)."""
    for folder in (Path(sys.executable).parent, ROOT / ".tools" / "bin"):
        if (folder / name).exists():
            return str(folder / name)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: run `make setup promtool`")
    return found


def test_compose_file_follows_the_compose_specification(tmp_path: Path) -> None:
    """check-jsonschema ships the compose-spec JSON schema (vendor.compose-spec)."""
    check = [_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec"]
    done = subprocess.run([*check, str(ROOT / "docker-compose.yml")], capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = _compose()
    broken["services"]["spark-export"]["depends_on"]["gateway"]["condition"] = "when_ready"
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(yaml.safe_dump(broken))
    refused = subprocess.run([*check, str(bad)], capture_output=True, text=True)
    assert refused.returncode == 1 and "when_ready" in refused.stdout


def test_spark_export_service_runs_a_valid_export_command() -> None:
    job = _compose()["services"]["spark-export"]
    assert job["image"] == _compose()["services"]["gateway"]["image"]  # the same image
    args = _build_parser().parse_args(job["command"][1:])
    assert args.command == "export" and args.format == "delta" and args.incremental
    data = {v.split(":")[1]: v for v in job["volumes"]}
    assert data[args.data_dir].endswith(":ro")  # reads the gateway's volume, never writes
    gateway_data = _compose()["services"]["gateway"]["volumes"][0].split(":")[0]
    assert data[args.data_dir].split(":")[0] == gateway_data
    assert Path(args.out).parent.as_posix() in data  # the output lands in a volume


def test_prometheus_config_is_valid_and_scrapes_the_admin_port() -> None:
    prometheus = _compose()["services"]["prometheus"]
    mount = next(v for v in prometheus["volumes"] if v.startswith("./"))
    source, target = mount.split(":")[:2]
    assert f"--config.file={target}" in prometheus["command"]
    config_path = ROOT / source
    done = subprocess.run(
        [_tool("promtool"), "check", "config", str(config_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    config = yaml.safe_load(config_path.read_text())
    targets = {
        (job["metrics_path"], t)
        for job in config["scrape_configs"]
        for group in job["static_configs"]
        for t in group["targets"]
    }
    admin = Settings().admin_port
    cluster = {"node1", "node2", "node3"}
    assert cluster <= set(_compose()["services"])
    assert targets == {
        ("/metrics", f"gateway:{admin}"),
        ("/metrics/per-object", f"gateway:{admin}"),
        *(("/metrics", f"{node}:{admin}") for node in cluster),
    }


def test_the_cluster_profile_joins_three_nodes_to_its_etcd() -> None:
    services = _compose()["services"]
    etcd = services["etcd"]
    assert re.fullmatch(r"gcr\.io/etcd-development/etcd:v\d+\.\d+\.\d+", etcd["image"])
    assert etcd["profiles"] == ["cluster"]
    client_url = etcd["command"][etcd["command"].index("--advertise-client-urls") + 1]
    published = set()
    for name in ("node1", "node2", "node3"):
        node = services[name]
        assert node["image"] == services["gateway"]["image"] and node["profiles"] == ["cluster"]
        args = _build_parser().parse_args(node["command"][1:])
        assert (args.node_name, args.cluster_etcd, args.advertise_host) == (
            name,
            client_url,
            name,
        )
        assert node["depends_on"]["etcd"]["condition"] == "service_healthy"
        published |= {p.split(":")[0] for p in node["ports"]}
    assert len(published) == 6  # each node its own host ports


def test_grafana_is_provisioned_with_the_dashboards_and_the_prometheus_datasource() -> None:
    services = _compose()["services"]
    grafana = services["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    prometheus_port = services["prometheus"]["ports"][0].split(":")[1]
    assert source["type"] == "prometheus"
    assert source["url"] == f"http://prometheus:{prometheus_port}"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "sievemq.yml").read_text())[
        "providers"
    ]
    folder = ROOT / mounts[provider["options"]["path"]]
    dashboards = sorted(folder.glob("*.json"))
    assert [d.name for d in dashboards] == [
        "sievemq-overview.json",
        "sievemq-stream-protocol.json",
        "sievemq-streams-filtering.json",
    ]
    for path in dashboards:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] == path.stem
        uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
        assert uids == {source["uid"]}, path.name  # every query goes to the provisioned one
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"] + "/")
    assert (folder / home.rsplit("/", 1)[1]).exists()
