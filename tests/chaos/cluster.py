"""The chaos suite's cluster: etcd (one member on 127.0.0.10, or three on 127.0.0.10, .20,
.30) and nodes a, b, c on 127.0.0.11-13, real processes inside the run's network namespace,
their data and logs in the run's artifacts directory.

Three etcd members run as three users of their own (uid 61000-61002, etcd's data folders
theirs): etcd dials its peers from 127.0.0.1 whatever it listens on, so a cut between members
is made by the sender's uid (``netns.Network.cut_user``). Each node is given every member,
first the one its index names (a: 1st, b: 2nd, c: 3rd), so a member's loss is the first
endpoint of one node. The members run with ``--pre-vote`` (a member back from a partition
does not unseat the leader), as etcd 3.5 does by default.

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
from tests.integration.test_cluster.cluster_helpers import TTL_S, cluster_args

ETCD_HOSTS = ("127.0.0.10", "127.0.0.20", "127.0.0.30")
ETCD_UID = 61000  # member i runs as uid ETCD_UID + i (three members)
HOSTS = {"a": "127.0.0.11", "b": "127.0.0.12", "c": "127.0.0.13"}
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
SHIM = Path(__file__).resolve().parent / "source_address"
RESTART_S = 240.0
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
    etcd_members: int = 1
    lease_ttl_s: int = TTL_S
    etcds: list[EtcdProcess] = field(init=False)
    nodes: dict[str, ServerProcess] = field(default_factory=dict)
    clocks: dict[str, Path] = field(default_factory=dict)  # faketime offset file per node

    def __post_init__(self) -> None:
        if not FAKETIME_LIB.exists():
            raise RuntimeError(f"{FAKETIME_LIB} missing: install faketime (make faketime)")
        if self.etcd_members not in (1, 3):
            raise ValueError("etcd runs one member or three")
        if self.etcd_members == 1:
            self.etcds = [EtcdProcess(self.base / "etcd", host=ETCD_HOSTS[0], unsafe_no_fsync=True)]
        else:
            self.etcds = [
                EtcdProcess(
                    self.base / f"etcd{i + 1}",
                    host=host,
                    unsafe_no_fsync=True,
                    name=f"etcd{i + 1}",
                    extra_args=("--pre-vote",),
                    uid=ETCD_UID + i,
                )
                for i, host in enumerate(ETCD_HOSTS)
            ]
            everyone = ",".join(f"{m.name}={m.peer_url}" for m in self.etcds)
            for member in self.etcds:
                member.initial_cluster = everyone
        for member in self.etcds:  # known before the nodes' flags name them
            member.client_port = free_port(member.host)
        for index, (name, host) in enumerate(HOSTS.items()):
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
            first = index % len(self.etcds)
            urls = [m.url for m in (*self.etcds[first:], *self.etcds[:first])]
            args = (
                *cluster_args(self.etcds[0], name, self.lease_ttl_s),
                "--amqp-host",
                host,
                "--admin-host",
                host,
            )
            at = args.index("--cluster-etcd") + 1
            args = (*args[:at], ",".join(urls), *args[at + 1 :])
            self.nodes[name] = ServerProcess(self.base / "nodes" / name, args, env=env)

    def restart(self, name: str) -> None:
        """Node ``name`` again on its data; it may take minutes on a loaded machine (its
        streams' recovery): the 30-minute run's restart once missed the usual 60 s."""
        self.nodes[name].start(timeout=RESTART_S)

    def start_etcd(self, members: list[EtcdProcess] | None = None) -> None:
        """Start ``members`` (default: every one) on their data, then wait until each serves
        (none does before a majority runs)."""
        members = self.etcds if members is None else members
        for member in members:
            member.launch()
        for member in members:
            member.wait_healthy()

    def etcd_down(self) -> list[EtcdProcess]:
        return [m for m in self.etcds if not m.running]

    def etcd_leader(self) -> int | None:
        """The index of the member etcd's raft leader is now (None: none answered)."""
        ids = {}
        leader = None
        for index, member in enumerate(self.etcds):
            if not member.running:
                continue
            try:
                answer = httpx.post(member.url + "/v3/maintenance/status", json={}, timeout=2)
                status = answer.json()
            except (httpx.HTTPError, ValueError):
                continue
            ids[status.get("header", {}).get("member_id")] = index
            leader = status.get("leader") or leader
        return ids.get(leader)

    def start(self) -> ChaosCluster:
        self.start_etcd()
        for node in self.nodes.values():
            node.start()
        self.wait_all_running()
        return self

    def stop(self) -> dict[str, int]:
        """Every node SIGTERMed (its exit status), then etcd; one that does not stop is
        killed and the others are still stopped (a run once left a node and etcd running)."""
        codes: dict[str, int] = {}
        for name, node in self.nodes.items():
            if node.running:
                try:
                    codes[name] = node.stop()
                except (AssertionError, OSError):
                    node.kill()
                    codes[name] = -9
        for member in self.etcds:
            member.stop()
        return codes

    def host(self, name: str) -> str:
        return HOSTS[name]

    def hosts(self, *names: str) -> list[str]:
        """The addresses of nodes and of etcd (``etcd``: every member)."""
        return [h for n in names for h in (self.etcd_hosts() if n == "etcd" else [HOSTS[n]])]

    def etcd_hosts(self) -> list[str]:
        return [m.host for m in self.etcds]

    def get(self, name: str, path: str, patience_s: float = 0.0) -> Any:
        """``path`` of node ``name``'s admin API; asked again for up to ``patience_s`` when
        the node does not answer in time (the final checks: a node still busy after the
        heal once ended a 30-minute run before it wrote its summary)."""
        node = self.nodes[name]
        deadline = time.monotonic() + patience_s
        while True:
            try:
                answer = httpx.get(node.admin_url + path, auth=("guest", "guest"), timeout=10)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2.0)
        answer.raise_for_status()
        return answer.json()

    def running(self, name: str) -> dict[str, bool]:
        return {n["name"]: n["running"] for n in self.get(name, "/api/nodes")}

    def queues(self, name: str, patience_s: float = 0.0) -> dict[str, dict[str, Any]]:
        return {q["name"]: q for q in self.get(name, "/api/queues", patience_s)}

    def wait_all_running(self) -> None:
        everyone = dict.fromkeys(self.nodes, True)
        for name in self.nodes:

            def listed(name: str = name) -> bool:
                return self.running(name) == everyone

            until(listed, f"{name} lists every node running")

    def lease_losses(self, name: str) -> int:
        return self.nodes[name].stderr().count(f"{name} lost its etcd lease")

    def fences(self, name: str) -> int:
        """How often ``name`` fenced its streams (its lease not renewed for a TTL)."""
        return self.nodes[name].stderr().count("cannot be sure it still leads")

    def published_at(self, name: str) -> float:
        """When ``name`` last rewrote its etcd record, by its own (perhaps skewed) clock."""
        key = base64.b64encode(f"sievemq/nodes/{name}".encode()).decode()
        member = next(m for m in self.etcds if m.running)
        url = member.url + "/v3/kv/range"
        kvs = httpx.post(url, json={"key": key}, timeout=10).json().get("kvs") or []
        if not kvs:
            return 0.0
        return float(json.loads(base64.b64decode(kvs[0]["value"])).get("published", 0.0))
