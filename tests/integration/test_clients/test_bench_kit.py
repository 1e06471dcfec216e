"""The benchmark kit of bench/: the Go load generator against a real server, and Debian's
RabbitMQ started and stopped by bench/rabbitmq.sh: the README's figures can be rerun from a
clone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pika
import pytest

from bench import kit, rabbitmq_cluster
from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(600)


def run_loadgen(port: int, *args: object) -> dict[str, object]:
    out = subprocess.run(
        [str(kit.loadgen()), "-port", str(port), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_loadgen_publishes_consumes_filters_and_times(server: ServerProcess) -> None:
    port = server.amqp_port
    pub = run_loadgen(
        port, "-mode", "publish", "-queue", "kit", "-keep", "-n", 2000, "-size", 64,
        "-filter-values", 4, "-unique-props",
    )  # fmt: skip
    assert pub["published"] == 2000 and float(pub["pub_msgs_per_s"]) > 0  # type: ignore[arg-type]
    every = run_loadgen(
        port, "-mode", "consume", "-queue", "kit", "-no-declare", "-keep", "-m", 2000,
        "-offset", "first",
    )  # fmt: skip
    assert (every["consumed"], every["bytes_received"], every["stop_reason"]) == (
        2000,
        2000 * 64,
        "count",
    )
    one = run_loadgen(
        port, "-mode", "consume", "-queue", "kit", "-no-declare", "-m", 600, "-offset",
        "first", "-filter", "v1", "-idle", "1s",
    )  # fmt: skip
    # SieveMQ filters exactly: a quarter of the messages, every one a match
    assert (one["consumed"], one["filter_matched"], one["filter_unmatched"]) == (500, 500, 0)
    assert one["stop_reason"] == "idle"
    both = run_loadgen(port, "-mode", "both", "-n", 300, "-rate", 1000, "-ack-every", 1)
    assert both["consumed"] == 300
    assert 0 < float(both["lat_p50_us"]) <= float(both["lat_p99_us"])  # type: ignore[arg-type]
    with (
        connect(server) as conn,
        pytest.raises(pika.exceptions.ChannelClosedByBroker),
    ):
        conn.channel().queue_declare("kit", passive=True)  # deleted without -keep


def test_rabbitmq_sh_runs_a_private_node_and_cleans_up() -> None:
    with kit.rabbitmq_server() as (port, pid):
        params = pika.ConnectionParameters("127.0.0.1", port)
        with pika.BlockingConnection(params) as conn:
            ch = conn.channel()
            ok = ch.queue_declare("s", durable=True, arguments={"x-queue-type": "stream"})
            assert ok.method.queue == "s"
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b"beam" in cmdline or b"erl" in cmdline
    assert not Path(f"/proc/{pid}").exists(), "the node outlived the block"


def test_rabbitmq_cluster_joins_three_nodes_and_leaves_nothing_running() -> None:
    """bench/rabbitmq_cluster.py: three Erlang nodes joined into one cluster, a quorum queue
    with a member on each; after the block no beam or epmd of it runs and its folder is gone."""
    with rabbitmq_cluster.rabbitmq_cluster(3) as cluster:
        names = [node.name for node in cluster.nodes]
        status = json.loads(cluster.nodes[0].ctl("cluster_status", "--formatter", "json"))
        assert sorted(status["running_nodes"]) == sorted(names)
        second = cluster.nodes[1]
        with pika.BlockingConnection(pika.URLParameters(second.url)) as conn:
            args = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}
            conn.channel().queue_declare("qq", durable=True, arguments=args)
        assert cluster.leader("qq") == second.name  # client-local: the declaring node
        members = cluster.nodes[0].ctl("list_queues", "name", "members")
        assert all(name in members for name in names)
        pids = [*cluster.pids(), cluster.epmd.pid]
        base = cluster.base
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], "outlived the block"
    assert not base.exists()
