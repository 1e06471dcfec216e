"""The cluster under faults: etcd and nodes killed, frozen and restarted while clients publish.

Three real nodes and a real etcd (2 s lease TTL). In each test every node leads one stream and
one durable classic queue, and one pika client per queue publishes with confirms through the
queue's leader (``fault_load.Publisher``) for the whole test; at the end every queue is read
back on its leader and every confirmed message must be there.

- etcd SIGKILLed, and etcd SIGSTOPped past the lease TTL then SIGCONTed: publishing goes on,
  a declare during the outage fails with 541 naming etcd, and succeeds once etcd is back;
  every node is listed running again.
- a node SIGKILLed: its clients are dropped, the other nodes' confirms go on (the longest gap
  is measured and reported), it comes back on its data and its queues are listed online.
- a node SIGSTOPped past the TTL: the others list it stopped; SIGCONT and it registers again
  without a restart.
- a node whose wall clock jumps an hour forward, then back (Debian's ``faketime``): it keeps
  its etcd lease, its name and its queues.

``SIEVEMQ_CLUSTER_FAULT_ROUNDS=N`` repeats each fault N times in one test (``make
cluster-faults``: the long runs); ``SIEVEMQ_CLUSTER_FAULT_REPORT=FILE`` appends each measured
figure there as a JSON line.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pika
from pika.exceptions import AMQPError, ConnectionClosedByBroker

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import cluster_args, get, running, until
from .fault_load import (
    Publisher,
    check_nothing_confirmed_lost,
    declare,
    read_back,
    wait_for_progress,
)

NAMES = ("a", "b", "c")
ROUNDS = int(os.environ.get("SIEVEMQ_CLUSTER_FAULT_ROUNDS", "1"))
REPORT = os.environ.get("SIEVEMQ_CLUSTER_FAULT_REPORT", "")
STEP = 20  # confirms each publisher must add to count as progress
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


def report(figure: str, value: float, **labels: Any) -> None:
    line = json.dumps({"figure": figure, "value": round(value, 3), **labels})
    print(line)
    if REPORT:
        with open(REPORT, "a") as out:
            out.write(line + "\n")


@contextmanager
def load(
    nodes: dict[str, ServerProcess], prefix: str
) -> Iterator[tuple[list[Publisher], dict[str, ServerProcess]]]:
    """A stream and a classic queue on every node, each with its publisher on its leader;
    after the block every confirmed message is read back."""
    pubs: list[Publisher] = []
    leaders: dict[str, ServerProcess] = {}
    for name, node in nodes.items():
        for kind in ("stream", "classic"):
            queue = f"{prefix}-{name}-{kind}"
            declare(node, queue, kind)
            leaders[queue] = node
            pubs.append(Publisher(node, queue, kind).start())
    try:
        yield pubs, leaders
    finally:
        for pub in pubs:
            pub.stop()
    check_nothing_confirmed_lost(leaders, pubs)
    confirmed = sum(len(p.confirmed) for p in pubs)
    report("confirmed_messages_read_back", confirmed, test=prefix)


def on(pubs: list[Publisher], node: ServerProcess) -> list[Publisher]:
    return [p for p in pubs if p.node is node]


def queues(node: ServerProcess) -> dict[str, dict[str, Any]]:
    return {q["name"]: q for q in get(node, "/api/queues")}


def all_running(nodes: dict[str, ServerProcess]) -> None:
    everyone = dict.fromkeys(nodes, True)
    for name, node in nodes.items():
        until(lambda: running(node) == everyone, f"{name} lists every node running")  # noqa: B023


def lease_losses(node: ServerProcess, name: str) -> int:
    return node.stderr().count(f"{name} lost its etcd lease")


def declare_refused(node: ServerProcess, queue: str) -> str:
    """The 541 text of a declare through ``node`` that etcd cannot record."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    try:
        conn.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
    except ConnectionClosedByBroker as refused:
        assert refused.reply_code == 541, refused
        return str(refused.reply_text)
    finally:
        if conn.is_open:
            conn.close()
    raise AssertionError(f"declaring {queue} through {node.url} succeeded with etcd away")


def declared(node: ServerProcess, queue: str) -> bool:
    """One declare attempt; True once the declare-ok came (etcd recorded it)."""
    try:
        declare(node, queue, "stream")
    except AMQPError:
        return False
    return True


def outage_declare(nodes: dict[str, ServerProcess], queue: str) -> None:
    """While etcd is away: a declare fails naming etcd (the queue is kept and recorded once
    etcd answers)."""
    text = declare_refused(nodes["b"], queue)
    assert f"etcd did not record queue '{queue}'" in text, text


def after_outage(nodes: dict[str, ServerProcess], pubs: list[Publisher], tag: str) -> None:
    """Once etcd is back: everyone running, declares succeed, the outage's queue recorded,
    every publisher confirming."""
    all_running(nodes)
    until(lambda: declared(nodes["a"], f"{tag}-after"), "a declare succeeds after the outage")
    until(lambda: queues(nodes["c"]).get(f"{tag}-after"), "c lists the new queue")
    late = until(lambda: queues(nodes["a"]).get(f"{tag}-late"), "the outage's queue recorded")
    assert late["node"] == "b"
    wait_for_progress(pubs, STEP)


def test_etcd_killed_under_load_loses_nothing_and_the_cluster_resumes(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    with load(nodes, "ek") as (pubs, _):
        for round_ in range(ROUNDS):
            wait_for_progress(pubs, STEP)
            start = time.monotonic()
            etcd.kill()
            try:
                outage_declare(nodes, f"ek{round_}-late")
                wait_for_progress(pubs, STEP)  # publishing needs no etcd
            finally:
                etcd.start()  # on its data
            after_outage(nodes, pubs, f"ek{round_}")
            gap = max(p.longest_gap(start, time.monotonic()) for p in pubs)
            report("longest_confirm_gap_s", gap, fault="etcd SIGKILL", round=round_)


def test_etcd_frozen_past_the_ttl_loses_nothing_and_every_node_registers_again(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess]
) -> None:
    assert etcd.proc is not None
    with load(nodes, "es") as (pubs, _):
        for round_ in range(ROUNDS):
            wait_for_progress(pubs, STEP)
            lost = {n: lease_losses(nodes[n], n) for n in NAMES}
            start = time.monotonic()
            os.kill(etcd.proc.pid, signal.SIGSTOP)
            try:
                for name, node in nodes.items():
                    until(
                        lambda: lease_losses(node, name) > lost[name],  # noqa: B023
                        f"{name} logs its lost lease",
                    )
                outage_declare(nodes, f"es{round_}-late")
                wait_for_progress(pubs, STEP)
            finally:
                os.kill(etcd.proc.pid, signal.SIGCONT)
            after_outage(nodes, pubs, f"es{round_}")
            gap = max(p.longest_gap(start, time.monotonic()) for p in pubs)
            report("longest_confirm_gap_s", gap, fault="etcd SIGSTOP", round=round_)


def test_a_killed_node_drops_its_clients_the_others_go_on_and_it_comes_back_on_its_data(
    nodes: dict[str, ServerProcess],
) -> None:
    victim = nodes["c"]
    with load(nodes, "nk") as (pubs, _):
        theirs = on(pubs, victim)
        others = [p for p in pubs if p not in theirs]
        for round_ in range(ROUNDS):
            wait_for_progress(pubs, STEP)
            drops = sum(p.drops for p in theirs)
            start = time.monotonic()
            victim.kill()
            until(lambda: running(nodes["a"]).get("c") is False, "a lists c stopped")
            down = until(lambda: queues(nodes["a"]).get("nk-c-stream"), "a lists c's stream")
            assert down["state"] == "down", down
            wait_for_progress(others, STEP)  # the other nodes serve their own queues
            until(lambda: sum(p.drops for p in theirs) > drops, "c's clients are dropped")  # noqa: B023
            victim.restart()  # on its data
            for queue in ("nk-c-stream", "nk-c-classic"):
                until(
                    lambda: "c" in queues(nodes["a"]).get(queue, {}).get("online", []),  # noqa: B023
                    f"a lists {queue} online again",
                )
            wait_for_progress(pubs, STEP)  # c's clients connected again
            end = time.monotonic()
            gap = max(p.longest_gap(start, end) for p in others)
            report("longest_confirm_gap_s_other_nodes", gap, fault="node SIGKILL", round=round_)
            report("node_down_s", end - start, fault="node SIGKILL", round=round_)


def test_a_node_frozen_past_the_ttl_is_listed_stopped_and_registers_again_without_a_restart(
    nodes: dict[str, ServerProcess],
) -> None:
    frozen = nodes["c"]
    with load(nodes, "ns") as (pubs, _):
        others = [p for p in pubs if p.node is not frozen]
        for round_ in range(ROUNDS):
            wait_for_progress(pubs, STEP)
            pid = frozen.pid
            back = frozen.stderr().count("c registered again")
            start = time.monotonic()
            os.kill(pid, signal.SIGSTOP)
            try:
                until(lambda: running(nodes["a"]).get("c") is False, "a lists c stopped")
                until(lambda: running(nodes["b"]).get("c") is False, "b lists c stopped")
                wait_for_progress(others, STEP)
            finally:
                os.kill(pid, signal.SIGCONT)
            until(lambda: running(nodes["a"]).get("c") is True, "a lists c running again")
            until(lambda: frozen.stderr().count("c registered again") > back, "c logs it")  # noqa: B023
            assert frozen.running and frozen.pid == pid  # the same process
            wait_for_progress(pubs, STEP)
            gap = max(p.longest_gap(start, time.monotonic()) for p in others)
            report("longest_confirm_gap_s_other_nodes", gap, fault="node SIGSTOP", round=round_)
            assert "c" in queues(nodes["a"])["ns-c-stream"]["online"]


def publish_through(node: ServerProcess, queue: str, count: int) -> list[int]:
    """``count`` publishes with confirms (mandatory) through ``node``; the numbers sent."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for seq in range(count):
            ch.basic_publish("", queue, f"{queue}:{seq}".encode(), mandatory=True)
    finally:
        conn.close()
    return list(range(count))


def test_a_stream_deleted_on_its_leader_after_forwarded_publishes_leaves_the_others_learning(
    nodes: dict[str, ServerProcess],
) -> None:
    """Deleting a stream that another node forwarded publishes to retires that node's link
    channel: it must go on following etcd (it once stopped learning of new queues)."""
    a, b = nodes["a"], nodes["b"]
    declare(a, "fd-1", "stream")
    until(lambda: queues(b).get("fd-1"), "b lists a's stream")
    sent = publish_through(b, "fd-1", 10)
    assert read_back(a, "fd-1", "stream", sent) == set(sent)
    conn = pika.BlockingConnection(pika.URLParameters(a.url))
    conn.channel().queue_delete("fd-1")
    conn.close()
    until(lambda: "fd-1" not in queues(b), "b forgets the deleted stream")
    declare(a, "fd-2", "stream")
    until(lambda: queues(b).get("fd-2"), "b learns of a's next stream")
    sent = publish_through(b, "fd-2", 10)
    assert read_back(a, "fd-2", "stream", sent) == set(sent)
    assert "Traceback" not in b.stderr(), b.stderr()


# ---------------------------------------------------------------- a clock that jumps


def node_key(etcd: EtcdProcess, name: str) -> dict[str, Any]:
    """``sievemq/nodes/NAME`` read straight from etcd: its lease and its record."""
    key = base64.b64encode(f"sievemq/nodes/{name}".encode()).decode()
    answer = httpx.post(etcd.url + "/v3/kv/range", json={"key": key}, timeout=10).json()
    kvs = answer.get("kvs") or [{}]
    record = json.loads(base64.b64decode(kvs[0]["value"])) if "value" in kvs[0] else {}
    return {"lease": kvs[0].get("lease"), "record": record}


def published_at(etcd: EtcdProcess, name: str) -> float:
    return float(node_key(etcd, name)["record"].get("published", 0.0))


def test_a_node_whose_clock_jumps_keeps_its_name_and_its_queues(
    etcd: EtcdProcess, nodes: dict[str, ServerProcess], tmp_path: Path
) -> None:
    assert FAKETIME_LIB.exists(), f"{FAKETIME_LIB} missing: install faketime (make faketime)"
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    env = {
        "LD_PRELOAD": str(FAKETIME_LIB),
        "FAKETIME_TIMESTAMP_FILE": str(offset),
        "FAKETIME_CACHE_DURATION": "1",  # the file is read again every second
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # an NTP step moves the wall clock only
    }
    skewed = ServerProcess(tmp_path / "d", cluster_args(etcd, "d"), env=env).start()
    try:
        everyone = {**nodes, "d": skewed}
        all_running(everyone)
        lease = node_key(etcd, "d")["lease"]
        with load({"d": skewed}, "cj") as (pubs, _):
            for round_ in range(ROUNDS):
                for jump, later in (("+3600", True), ("-3600", False)):
                    wait_for_progress(pubs, STEP)
                    offset.write_text(jump + "\n")

                    def moved(later: bool = later) -> bool:
                        skew = published_at(etcd, "d") - time.time()
                        return skew > 1800 if later else skew < -1800

                    # d rewrites its record every 10 s: the stamp shows its clock moved
                    until(moved, f"d's record is stamped {jump} s off", timeout=60)
                    wait_for_progress(pubs, STEP)
                    # a second rewrite under the same lease: d kept renewing it all along
                    stamp = published_at(etcd, "d")
                    until(lambda: published_at(etcd, "d") != stamp, "d rewrites its record")  # noqa: B023
                    assert node_key(etcd, "d")["lease"] == lease, f"round {round_}: {jump}"
                    assert running(nodes["a"]).get("d") is True
            offset.write_text("+0\n")
        log = skewed.stderr()
        assert "lost its etcd lease" not in log and "registered again" not in log, log
        listed = queues(nodes["a"])
        for kind in ("stream", "classic"):
            seen = listed[f"cj-d-{kind}"]
            assert seen["leader"] == "d" and "d" in seen["online"], seen
    finally:
        if skewed.running:
            assert skewed.stop() == 0, skewed.stderr()
