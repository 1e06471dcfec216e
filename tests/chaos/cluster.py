"""The chaos suite's cluster: one etcd on 127.0.0.10 and nodes a, b, c on 127.0.0.11-13,
real processes inside the run's network namespace, their data and logs in the run's
artifacts directory.

Every node runs with Debian's libfaketime preloaded (the monotonic clock left alone, as an
NTP step would) and its own offset file, so a scenario can step any node's wall clock; and
with ``source_address/`` on its ``PYTHONPATH``, so its connections leave from its alias and
a partition can tell it apart.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sievemq.cluster.local import EtcdProcess, free_port
from sievemq.testing import ServerProcess
from tests.integration.test_cluster.cluster_helpers import cluster_args

ETCD_HOST = "127.0.0.10"
HOSTS = {"a": "127.0.0.11", "b": "127.0.0.12", "c": "127.0.0.13"}
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
SHIM = Path(__file__).resolve().parent / "source_address"
WAIT_S = 60.0  # generous: a loaded machine; every wait returns as soon as it holds


def until(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Poll ``check`` until it returns something truthy (errors count as not yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.2)


@dataclass
class ChaosCluster:
    base: Path
    etcd: EtcdProcess = field(init=False)
    nodes: dict[str, ServerProcess] = field(default_factory=dict)
    clocks: dict[str, Path] = field(default_factory=dict)  # faketime offset file per node

    def __post_init__(self) -> None:
        if not FAKETIME_LIB.exists():
            raise RuntimeError(f"{FAKETIME_LIB} missing: install faketime (make faketime)")
        self.etcd = EtcdProcess(self.base / "etcd", host=ETCD_HOST, unsafe_no_fsync=True)
        self.etcd.client_port = free_port(ETCD_HOST)  # known before the nodes' flags name it
        for name, host in HOSTS.items():
            clock = self.base / f"{name}.faketime"
            clock.write_text("+0\n")
            self.clocks[name] = clock
            env = {
                "PYTHONPATH": str(SHIM),
                "SIEVEMQ_CHAOS_SOURCE": host,
                "LD_PRELOAD": str(FAKETIME_LIB),
                "FAKETIME_TIMESTAMP_FILE": str(clock),
                "FAKETIME_CACHE_DURATION": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            }
            args = (
                *cluster_args(self.etcd, name),
                "--amqp-host",
                host,
                "--admin-host",
                host,
            )
            self.nodes[name] = ServerProcess(self.base / "nodes" / name, args, env=env)

    def start(self) -> ChaosCluster:
        self.etcd.start()
        for node in self.nodes.values():
            node.start()
        self.wait_all_running()
        return self

    def stop(self) -> dict[str, int]:
        """Every node SIGTERMed (its exit status), then etcd."""
        codes: dict[str, int] = {}
        for name, node in self.nodes.items():
            if node.running:
                codes[name] = node.stop()
        self.etcd.stop()
        return codes

    def host(self, name: str) -> str:
        return ETCD_HOST if name == "etcd" else HOSTS[name]

    def get(self, name: str, path: str) -> Any:
        node = self.nodes[name]
        answer = httpx.get(node.admin_url + path, auth=("guest", "guest"), timeout=10)
        answer.raise_for_status()
        return answer.json()

    def running(self, name: str) -> dict[str, bool]:
        return {n["name"]: n["running"] for n in self.get(name, "/api/nodes")}

    def queues(self, name: str) -> dict[str, dict[str, Any]]:
        return {q["name"]: q for q in self.get(name, "/api/queues")}

    def wait_all_running(self) -> None:
        everyone = dict.fromkeys(self.nodes, True)
        for name in self.nodes:

            def listed(name: str = name) -> bool:
                return self.running(name) == everyone

            until(listed, f"{name} lists every node running")

    def lease_losses(self, name: str) -> int:
        return self.nodes[name].stderr().count(f"{name} lost its etcd lease")

    def published_at(self, name: str) -> float:
        """When ``name`` last rewrote its etcd record, by its own (perhaps skewed) clock."""
        key = base64.b64encode(f"sievemq/nodes/{name}".encode()).decode()
        url = self.etcd.url + "/v3/kv/range"
        kvs = httpx.post(url, json={"key": key}, timeout=10).json().get("kvs") or []
        if not kvs:
            return 0.0
        return float(json.loads(base64.b64decode(kvs[0]["value"])).get("published", 0.0))
