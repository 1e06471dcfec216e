"""RabbitMQ's own Python ``rabbitmqadmin`` (3.10.8, from Debian's rabbitmq-server package)
over the commands users run most, against the admin API.

The same commands were run side by side against RabbitMQ 3.10.8's management plugin; what
differs is in docs/admin-api.md ("rabbitmqadmin"). The script is not copied into the
repository: it is the installed package's (``bench/rabbitmq.sh --install-only`` installs it,
as the benchmark kit does).
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
PLUGIN_COPY = (  # what the management plugin serves at /cli/rabbitmqadmin
    "/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_management-*"
    "/priv/www/cli/rabbitmqadmin"
)


def _find() -> str | None:
    found = shutil.which("rabbitmqadmin") or next(iter(sorted(glob.glob(PLUGIN_COPY))), None)
    return found


@pytest.fixture(scope="module")
def rabbitmqadmin() -> str:
    found = _find()
    if found is None:  # the package the benchmark kit installs too
        subprocess.run(
            ["bash", str(ROOT / "bench" / "rabbitmq.sh"), "--install-only"],
            check=True,
            capture_output=True,
            timeout=600,
        )
        found = _find()
    assert found is not None, "rabbitmqadmin comes with Debian's rabbitmq-server package"
    return found


class Admin:
    """``rabbitmqadmin -H … -P … -u guest -p guest ARGS`` against one server."""

    def __init__(self, script: str, server: ServerProcess) -> None:
        self.base = [sys.executable, script, "-H", server.host, "-P", str(server.admin_port)]
        self.base += ["-u", "guest", "-p", "guest"]

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=60, check=False
        )
        if ok:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run("-f", "raw_json", *args).stdout)


@pytest.fixture
def admin(rabbitmqadmin: str, server: ServerProcess) -> Admin:
    return Admin(rabbitmqadmin, server)


def test_declare_list_publish_get_and_delete(admin: Admin, qname: str) -> None:
    q, s, x = f"{qname}.q", f"{qname}.s", f"{qname}.x"
    assert admin.run("declare", "queue", f"name={q}", "durable=true").stdout == "queue declared\n"
    admin.run("declare", "queue", f"name={s}", "queue_type=stream", "durable=true")
    admin.run("declare", "exchange", f"name={x}", "type=topic")
    admin.run("declare", "binding", f"source={x}", f"destination={q}", "routing_key=a.*")
    admin.run("publish", f"exchange={x}", "routing_key=a.b", "payload=hello")
    admin.run(
        "publish",
        f"routing_key={q}",
        "payload=aGk=",
        "payload_encoding=base64",
        'properties={"delivery_mode":2,"headers":{"h":"v"}}',
    )
    queues = {row["name"]: row for row in admin.json("list", "queues", "name", "type")}
    assert queues[q]["type"] == "classic" and queues[s]["type"] == "stream"
    exchanges = admin.json("list", "exchanges", "name", "type")
    assert {"name": x, "type": "topic"} in exchanges
    names = [e["name"] for e in exchanges]
    assert names == sorted(names)  # RabbitMQ's order
    bindings = admin.json("list", "bindings", "source", "destination", "routing_key")
    assert {"source": x, "destination": q, "routing_key": "a.*"} in bindings
    # rabbitmqadmin sends "count" as a string: RabbitMQ parses it, so must we
    got = admin.json("get", f"queue={q}", "count=2", "ackmode=ack_requeue_false")
    assert [(m["payload"], m["routing_key"]) for m in got] == [("hello", "a.b"), ("hi", q)]
    assert got[1]["properties"] == {"delivery_mode": 2, "headers": {"h": "v"}}
    assert admin.json("get", f"queue={q}") == []  # acked: gone
    shown = admin.run("get", f"queue={s}", ok=False)  # a stream: RabbitMQ's 400
    assert shown.returncode != 0 and "basic.get not supported by stream queues" in shown.stderr
    admin.run("purge", "queue", f"name={q}")
    assert admin.run("delete", "exchange", f"name={x}").stdout == "exchange deleted\n"
    for name in (q, s):
        assert admin.run("delete", "queue", f"name={name}").stdout == "queue deleted\n"
    missing = admin.run("delete", "queue", f"name={q}.nosuch", ok=False)
    assert missing.returncode == 1 and "*** Not found: /api/queues/%2F/" in missing.stderr


def test_users_vhosts_permissions_and_overview(
    admin: Admin, server: ServerProcess, qname: str
) -> None:
    vhost, user = f"{qname}-v", f"{qname}-u"
    admin.run("declare", "vhost", f"name={vhost}")
    admin.run("declare", "user", f"name={user}", "password=pw", "tags=monitoring")
    admin.run("declare", "permission", f"vhost={vhost}", f"user={user}", *_all_perms())
    assert {"name": vhost} in admin.json("list", "vhosts", "name")
    users = {u["name"]: u["tags"] for u in admin.json("list", "users", "name", "tags")}
    assert users[user] in ("monitoring", ["monitoring"])
    perms = admin.json("list", "permissions", "vhost", "user", "configure")
    assert {"vhost": vhost, "user": user, "configure": ".*"} in perms
    with client(server) as http:
        http.put("/api/cluster-name", json={"name": f"{qname}-cluster"}).raise_for_status()
    (overview,) = admin.json("show", "overview", "cluster_name", "rabbitmq_version")
    assert overview["cluster_name"] == f"{qname}-cluster"
    admin.run("delete", "permission", f"vhost={vhost}", f"user={user}")
    admin.run("delete", "user", f"name={user}")
    admin.run("delete", "vhost", f"name={vhost}")
    assert {"name": vhost} not in admin.json("list", "vhosts", "name")


def _all_perms() -> list[str]:
    return ["configure=.*", "write=.*", "read=.*"]


def test_export_and_import(admin: Admin, server: ServerProcess, qname: str, tmp_path: Path) -> None:
    q, x = f"{qname}.q", f"{qname}.x"
    admin.run("declare", "queue", f"name={q}", "durable=true")
    admin.run("declare", "exchange", f"name={x}", "type=fanout")
    admin.run("declare", "binding", f"source={x}", f"destination={q}")
    path = tmp_path / "definitions.json"
    assert admin.run("export", str(path)).returncode == 0
    exported = json.loads(path.read_text())
    assert q in {item["name"] for item in exported["queues"]}
    admin.run("delete", "exchange", f"name={x}")
    admin.run("delete", "queue", f"name={q}")
    assert admin.run("import", str(path)).stdout.startswith("Uploaded definitions")
    assert {"name": q} in admin.json("list", "queues", "name")
    assert {"name": x} in admin.json("list", "exchanges", "name")
    admin.run("delete", "exchange", f"name={x}")
    admin.run("delete", "queue", f"name={q}")


def test_cluster_name_is_kept_in_the_definitions(fresh_server: ServerProcess) -> None:
    with client(fresh_server) as http:
        assert http.get("/api/cluster-name").json() == {"name": _node_name(http)}
        assert http.put("/api/cluster-name", json={"name": "east"}).status_code == 204
        assert http.get("/api/overview").json()["cluster_name"] == "east"
        exported = http.get("/api/definitions").json()
        assert {"name": "cluster_name", "value": "east"} in exported["global_parameters"]
        bad = http.put("/api/cluster-name", json={})
        assert (bad.status_code, bad.json()["reason"]) == (400, "[{key_missing,name}]")
    fresh_server.stop()
    fresh_server.restart()
    with client(fresh_server) as http:
        assert http.get("/api/cluster-name").json() == {"name": "east"}
        exported["global_parameters"] = [{"name": "cluster_name", "value": "west"}]
        assert http.post("/api/definitions", json=exported).status_code in (201, 204)
        assert http.get("/api/cluster-name").json() == {"name": "west"}
        http.put("/api/users/watcher", json={"password": "pw", "tags": "monitoring"})
    with client(fresh_server, "watcher", "pw") as watcher:
        assert watcher.get("/api/cluster-name").json() == {"name": "west"}
        assert watcher.put("/api/cluster-name", json={"name": "x"}).status_code == 401


def _node_name(http: httpx.Client) -> str:
    name: str = http.get("/api/nodes").json()[0]["name"]
    return name
