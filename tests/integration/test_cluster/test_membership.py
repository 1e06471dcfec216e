"""Three real `sievemq serve` processes joined through a real etcd on loopback.

Every node lists every node; a node SIGKILLed is shown stopped once its lease expires and
running again when restarted on its data; a second node with a live name refuses to start;
etcd restarted without its data: every node registers again; a node started before etcd
waits for it. The lease TTL is 2 s so the whole module takes a few tens of seconds.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sievemq.cluster.local import free_port
from sievemq.testing import ServerProcess, ServerStartError
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import WAIT_S, cluster_args, get, running, until

NAMES = ("n1", "n2", "n3")


def test_the_ready_line_names_the_node_and_its_cluster_port(
    nodes: dict[str, ServerProcess],
) -> None:
    ready = nodes["n1"].stdout_lines[0]
    assert " node=n1 cluster=127.0.0.1:" in ready
    assert int(ready.rsplit(":", 1)[1]) > 0


def test_every_node_lists_all_three(nodes: dict[str, ServerProcess]) -> None:
    everyone = dict.fromkeys(NAMES, True)
    for name, node in nodes.items():
        until(lambda: running(node) == everyone, f"{name} sees all three")  # noqa: B023
    listed = {n["name"]: n for n in get(nodes["n1"], "/api/nodes")}
    remote = listed["n2"]  # as n2 published itself into etcd
    assert remote["fd_used"] > 0 and remote["fd_total"] >= remote["fd_used"]
    assert remote["mem_used"] > 0 and remote["uptime"] >= 0
    ports = {(li["protocol"], li["port"]) for li in remote["listeners"]}
    assert ("amqp", nodes["n2"].amqp_port) in ports
    assert get(nodes["n3"], "/api/nodes/n1")["name"] == "n1"
    overview = get(nodes["n2"], "/api/overview")
    assert overview["node"] == "n2"
    # the cluster is named after its first node, the same on every node (as RabbitMQ's)
    assert overview["cluster_name"] == get(nodes["n3"], "/api/overview")["cluster_name"]
    assert overview["cluster_name"] in NAMES


def test_a_second_node_with_a_live_name_refuses_to_start(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess], tmp_path: Path
) -> None:
    twin = ServerProcess(tmp_path / "twin", cluster_args(etcd, "n1"))
    with pytest.raises(ServerStartError):
        twin.start()
    assert twin.proc is not None and twin.proc.wait(WAIT_S) == 2
    assert "node name 'n1' is taken by a running node" in twin.stderr()
    assert running(nodes["n1"])["n1"]  # the first one is untouched


def test_a_killed_node_is_stopped_after_its_ttl_and_back_when_restarted(
    nodes: dict[str, ServerProcess],
) -> None:
    nodes["n3"].kill()
    until(lambda: running(nodes["n1"]).get("n3") is False, "n1 sees n3 stopped")
    until(lambda: running(nodes["n2"]).get("n3") is False, "n2 sees n3 stopped")
    listed = {n["name"]: n for n in get(nodes["n1"], "/api/nodes")}
    assert listed["n3"] == {"name": "n3", "type": "disc", "running": False}
    nodes["n3"].restart()  # on its data directory: the same node
    until(lambda: running(nodes["n1"]).get("n3") is True, "n1 sees n3 back")


def test_killed_and_restarted_at_once_the_node_takes_its_own_name_back(
    nodes: dict[str, ServerProcess],
) -> None:
    nodes["n2"].kill()
    nodes["n2"].restart()  # within its old lease: its data directory says it is n2
    until(lambda: running(nodes["n1"]).get("n2") is True, "n1 sees n2 back")


def test_a_node_cut_off_from_etcd_past_its_ttl_says_so_and_registers_again(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    etcd.stop()
    until(lambda: "n1 lost its etcd lease" in nodes["n1"].stderr(), "n1 logs its lost lease")
    etcd.start()  # on its data: the old leases come back with it, the nodes take over
    everyone = dict.fromkeys(NAMES, True)
    until(lambda: running(nodes["n1"]) == everyone, "n1 sees all three again")
    until(lambda: "n1 registered again" in nodes["n1"].stderr(), "n1 logs it is back")


def test_nodes_register_again_when_etcd_comes_back_without_its_data(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    def back(name: str) -> int:
        return nodes[name].stderr().count(f"{name} registered again")

    before = {name: back(name) for name in NAMES}
    etcd.stop()
    etcd.start(wipe=True)
    everyone = dict.fromkeys(NAMES, True)
    for name, node in nodes.items():
        until(lambda: running(node) == everyone, f"{name} sees all three again")  # noqa: B023
        until(lambda: back(name) > before[name], f"{name} logs it registered again")  # noqa: B023


def test_a_node_started_before_etcd_waits_for_it(tmp_path: Path) -> None:
    etcd = EtcdProcess(tmp_path / "etcd", unsafe_no_fsync=True)
    etcd.client_port = free_port()  # known before it runs: the node is told it first
    early = ServerProcess(tmp_path / "early", cluster_args(etcd, "early"))
    started = threading.Thread(target=early.start)
    started.start()
    try:
        until(lambda: "waiting for etcd" in early.stderr(), "the node logs that it waits")
        etcd.start()
        started.join(WAIT_S)
        assert early.running and " node=early " in early.stdout_lines[0]
        assert running(early) == {"early": True}
    finally:
        started.join(WAIT_S)
        if early.running:
            assert early.stop() == 0, early.stderr()
        etcd.stop()
