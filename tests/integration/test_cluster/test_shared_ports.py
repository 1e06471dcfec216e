"""Nodes of one machine sharing the AMQP and HTTP ports (SO_REUSEPORT, ``--reuse-port``,
``sievemq cluster up --shared-ports``): connections to the one port land on several nodes
and every one works; each node keeps its own Stream-protocol port."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pytest

from sievemq.cluster.local import free_port
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.process import ready_fields

from .cluster_helpers import cluster_args, get

CONNECTIONS = 40  # all on one node of two: odds 2**-39


@pytest.fixture(scope="module")
def shared(
    etcd: EtcdProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, list[ServerProcess]]]:
    port = free_port()
    base = tmp_path_factory.mktemp("shared")
    procs = [
        ServerProcess(
            base / name, (*cluster_args(etcd, name), "--reuse-port", "--amqp-port", str(port))
        )
        for name in ("s1", "s2")
    ]
    try:
        for proc in procs:
            proc.start()
        yield port, procs
    finally:
        for proc in procs:
            if proc.running:
                assert proc.stop() == 0, proc.stderr()


def own_connections(node: ServerProcess) -> int:
    """The connections this node holds (its /api/connections lists every node's, by node)."""
    me = get(node, "/api/overview")["node"]
    return sum(1 for conn in get(node, "/api/connections") if conn["node"] == me)


def test_connections_to_one_port_reach_every_node_and_all_work(
    shared: tuple[int, list[ServerProcess]],
) -> None:
    port, nodes = shared
    assert {n.amqp_port for n in nodes} == {port}
    assert len({n.stream_port for n in nodes}) == 2  # each its own
    opened = []
    try:
        for i in range(CONNECTIONS):
            conn = pika.BlockingConnection(
                pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/")
            )
            opened.append(conn)
            ch = conn.channel()
            queue = ch.queue_declare("", exclusive=True).method.queue
            ch.basic_publish("", queue, f"hello {i}".encode())
            got = None
            while got is None:
                _method, _props, got = ch.basic_get(queue, auto_ack=True)
            assert got == f"hello {i}".encode()
        per_node = {n.stdout_lines[0]: own_connections(n) for n in nodes}
        assert sum(per_node.values()) == CONNECTIONS
        assert all(count > 0 for count in per_node.values()), per_node
    finally:
        for conn in opened:
            conn.close()


def test_cluster_up_shares_the_amqp_and_http_ports(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "sievemq", "cluster", "up", "--nodes", "2", "--shared-ports"]
    cmd += ["--data-dir", str(tmp_path / "cluster"), "--cluster-lease-ttl", "2"]
    for flag in ("--etcd-port", "--amqp-port", "--stream-port", "--admin-port", "--cluster-port"):
        cmd += [flag, "0"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            proc.stdout.readline()  # etcd ready
            fields = [ready_fields(proc.stdout.readline()) for _ in range(2)]
            assert fields[0]["amqp"] == fields[1]["amqp"]
            assert fields[0]["admin"] == fields[1]["admin"]
            assert fields[0]["stream"] != fields[1]["stream"]
            answered = set()
            for _ in range(CONNECTIONS):  # a new connection each: the kernel picks a node
                with httpx.Client(auth=("guest", "guest"), timeout=10) as http:
                    answered.add(http.get(fields[0]["admin"] + "/api/overview").json()["node"])
            assert answered == {"node1", "node2"}
            host, port = fields[0]["amqp"].rsplit(":", 1)
            conn = pika.BlockingConnection(pika.ConnectionParameters(host, int(port)))
            assert conn.channel().is_open
            conn.close()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)
