"""A quorum queue's leader cut from its replicas, its etcd lease holding (issue 20), step by
step in the chaos suite's network namespace (``python -m tests.chaos.quorum_cut --artifacts
DIR``; ``test_quorum_leader_cut.py`` runs it and checks ``DIR/result.json``).

Node a leads a three-member quorum queue; messages published through b are confirmed. Then
a is cut from b and c by policy routing (it still reaches etcd: listed running, its lease
holding): the replicas hear no feed, not even its beats, for the lease's TTL and elect one of
them. Publishes through b are confirmed by the new leader; a consumer on the new leader gets
every confirmed message. Once the cut heals a follows as a replica and its copy equals the
leader's. The result names the figures; the test asserts them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import pika
from pika.exceptions import AMQPError

from sievemq.testing import ServerProcess
from tests.integration.test_cluster.fault_load import declare

from . import netns
from .checkers import quorum_copies_equal
from .cluster import ChaosCluster, until
from .quorum_load import connect, drain

QUEUE = "qq-cut"
BEFORE = 50  # confirmed through b before the cut
DURING = 50  # confirmed through b once another node leads
ELECT_S = 90.0  # generous: a loaded machine (the lease is 2 s)


def publish_confirmed(node: ServerProcess, bodies: list[bytes]) -> list[bytes]:
    """Each body published with confirms through ``node`` until one is acked (a nack, or a
    connection lost, sends it again): the bodies confirmed, in order."""
    confirmed: list[bytes] = []
    pending = list(bodies)
    deadline = time.monotonic() + ELECT_S
    while pending and time.monotonic() < deadline:
        try:
            conn = connect(node)
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                while pending:
                    props = pika.BasicProperties(delivery_mode=2)
                    ch.basic_publish("", QUEUE, pending[0], props, mandatory=True)
                    confirmed.append(pending.pop(0))
            finally:
                if conn.is_open:
                    conn.close()
        except AMQPError:
            time.sleep(0.5)  # (nacked, returned or dropped: the same body again)
    return confirmed


def leader_of(cluster: ChaosCluster, judge: str) -> str:
    return str(cluster.queues(judge)[QUEUE]["leader"])


def run(base: Path) -> dict[str, Any]:
    netns.set_up()
    cluster = ChaosCluster(base).start()
    net = netns.Network()
    result: dict[str, Any] = {}
    try:
        a, b = cluster.nodes["a"], cluster.nodes["b"]
        declare(a, QUEUE, "quorum")
        until(
            lambda: (
                sorted(cluster.queues("c").get(QUEUE, {}).get("online") or ()) == ["a", "b", "c"]
            ),
            f"{QUEUE} has its three members online",
        )
        result["leader_before"] = leader_of(cluster, "b")
        before = publish_confirmed(b, [b"before:%d" % i for i in range(BEFORE)])
        result["confirmed_before"] = len(before)

        started = time.monotonic()
        net.isolate(cluster.host("a"), cluster.hosts("b", "c"))
        until(lambda: leader_of(cluster, "b") != "a", "a replica leads the queue", ELECT_S)
        result["elected_s"] = round(time.monotonic() - started, 3)
        result["leader_after"] = leader_of(cluster, "b")
        result["a_running_during"] = cluster.running("b").get("a")  # its lease held
        during = publish_confirmed(b, [b"during:%d" % i for i in range(DURING)])
        result["confirmed_during"] = len(during)
        leader = cluster.nodes[result["leader_after"]]
        got = {f"{d.label}:{d.seq}".encode() for d in drain(leader, QUEUE, 2.0, 120.0)}
        result["consumed"] = len(got)
        result["confirmed_missing"] = len({*before, *during} - got)

        net.heal()
        cluster.wait_all_running()
        data = {name: node.data_dir for name, node in cluster.nodes.items()}
        replicas = {n: data[n] for n in data if n != result["leader_after"]}

        def equal() -> bool:
            differences = quorum_copies_equal(data[result["leader_after"]], replicas, "/", QUEUE)
            return not any(differences.values())

        until(equal, "every copy equals the new leader's", 120.0)
        result["copies_equal"] = True
        result["a_handed_over"] = f"quorum queue '{QUEUE}' in vhost '/' is led by" in a.stderr()
        result["elected_log"] = any(
            f"quorum queue '{QUEUE}' in vhost '/': leader a was lost to a majority" in n.stderr()
            for n in (cluster.nodes["b"], cluster.nodes["c"])
        )
    except AssertionError as error:
        result["error"] = str(error)
    finally:
        net.heal()
        cluster.stop()
    return result


def main(argv: list[str]) -> int:
    if not netns.inside():
        return netns.reexec_in_namespace(["-m", "tests.chaos.quorum_cut", *argv])
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.quorum_cut")
    parser.add_argument("--artifacts", type=Path, required=True)
    args = parser.parse_args(argv)
    base = args.artifacts.resolve()
    base.mkdir(parents=True, exist_ok=True)
    result = run(base)
    (base / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
