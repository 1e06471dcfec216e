"""The chaos suite in short (``make test``): one round of every follower and etcd fault
and of the leader's (failover: SIGKILL, SIGSTOP past the lease, isolated, cut from etcd
only), each held briefly, in a network namespace of its own (one etcd member, 5 s leases),
with every checker over the whole history. Halves and the three-member etcd faults run in
``make chaos``.

The long run is ``make chaos MINUTES=N`` (``python -m tests.chaos.run``; docs/testing.md).
Also here: the checkers themselves, on input broken on purpose, so that a run without
findings means something.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sievemq.storage.layout import queue_directory
from sievemq.storage.queue_log import QueueLog

from .checkers import (
    Stored,
    check_declared,
    check_publisher,
    check_quorum,
    check_reader,
    quorum_copies_equal,
    replicas_equal,
)
from .quorum_load import QuorumDelivery
from .scenarios import FOLLOWER_SCENARIOS, LEADER_SCENARIOS
from .workload import Delivery

ROOT = Path(__file__).resolve().parents[2]
SHORT = (*FOLLOWER_SCENARIOS, *LEADER_SCENARIOS)
# the nodes' default lease: with 2 s, a machine loaded past 20 (other sessions' clusters)
# had etcd itself expire leases it could not renew in time, every node in turn, and the
# round spent its minutes in failovers nobody asked for (nothing lost, but no progress)
LEASE_TTL_S = 5


@pytest.mark.timeout(900)
def test_one_round_of_every_fault_loses_nothing() -> None:
    """Its artifacts stay in .chaos/ when it fails (the history and the nodes' logs)."""
    artifacts = ROOT / ".chaos" / f"short-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    command = [sys.executable, "-m", "tests.chaos.run", "--rounds", "1", "--minutes", "0"]
    command += ["--hold-s", "2", "--lease-ttl", str(LEASE_TTL_S), "--artifacts", str(artifacts)]
    command += ["--scenarios", ",".join(SHORT)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=840)
    summary_file = artifacts / "summary.json"
    assert summary_file.exists(), f"no summary (exit {done.returncode}):\n{done.stderr[-4000:]}"
    summary = json.loads(summary_file.read_text())
    assert done.returncode == 0 and summary["findings"] == [], summary
    assert set(summary["per_fault"]) == set(SHORT), summary["per_fault"]
    assert summary["lost"] == 0 and summary["unexpected"] == 0, summary
    assert summary["duplicates_with_dedup"] == 0 and summary["gaps"] == 0, summary
    assert summary["confirmed"] > 500 and summary["deliveries"] > 500, summary
    assert summary["declared_missing"] == 0 and summary["replicas_unequal"] == 0, summary
    quorum = summary["quorum"]
    assert quorum["confirmed"] > 100 and quorum["lost"] == 0, quorum
    assert quorum["requeued"] > 0 and quorum["delivery_count_backwards"] == 0, quorum
    assert summary["quorum_copies_unequal"] == 0, summary
    assert json.loads(done.stdout) == summary
    history = [json.loads(line) for line in (artifacts / "history.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "recovered" for e in history) == len(SHORT)
    failovers = [f for name, f in summary["per_fault"].items() if name in LEADER_SCENARIOS]
    assert all(f["failover_s"] for f in failovers), summary["per_fault"]
    for name in ("a", "b", "c"):
        assert (artifacts / "nodes" / f"{name}.stderr.1").exists()
    shutil.rmtree(artifacts)


def test_the_checkers_notice_what_they_look_for(tmp_path: Path) -> None:
    stored = Stored([(0, "p", 0), (1, "p", 2), (2, "p", 2), (3, "q", 0), (4, "p", 9)])
    result = check_publisher("p", [0, 1, 2], {0, 1, 2, 3}, stored, dedup=True)
    assert result.figures["lost"] == 1 and result.figures["unexpected"] == 1
    assert result.figures["duplicates"] == 1 and len(result.findings) == 3
    assert check_publisher("p", [0, 2], {0, 2, 9}, stored, dedup=False).findings == []

    gap = [Delivery(1, 0, "p", 0), Delivery(1, 2, "p", 2)]
    assert check_reader("r", gap, stored).figures["gaps"] == 1
    resumed_past = [Delivery(1, 0, "p", 0), Delivery(2, 2, "p", 2)]
    assert check_reader("r", resumed_past, stored).figures["gaps"] == 1
    again = [Delivery(1, 0, "p", 0), Delivery(1, 1, "p", 2), Delivery(2, 1, "p", 2)]
    assert check_reader("r", again, stored).findings == []  # at least once across a reconnect
    wrong = [Delivery(1, 0, "p", 1)]
    assert "the stream holds" in check_reader("r", wrong, stored).findings[0]
    only_q = [Delivery(1, 3, "q", 0)]
    assert check_reader("f", only_q, stored, lambda lab, _seq: lab == "q").findings == []
    p_too = [Delivery(1, 0, "p", 0), Delivery(1, 3, "q", 0)]
    assert check_reader("f", p_too, stored, lambda lab, _seq: lab == "q").findings
    missed = [Delivery(1, 4, "p", 9)]
    assert check_reader("f", missed, stored, lambda lab, _seq: lab == "p").figures["gaps"] == 3

    assert check_declared({"x", "y"}, {"x"}).findings == ["declared-ok queues gone: ['y']"]

    leader, replica = tmp_path / "a", tmp_path / "b"
    copy = replica / "replicas" / "streams" / "%2F" / "s"
    for directory in (leader / "streams" / "%2F" / "s", copy):
        directory.mkdir(parents=True)
        (directory / "00000000000000000000.segment").write_bytes(b"chunk")
    assert replicas_equal(leader, {"b": replica}, "/", "s") == {"b": ""}
    (copy / "00000000000000000000.segment").write_bytes(b"chunK!")
    assert "differ" in replicas_equal(leader, {"b": replica}, "/", "s")["b"]
    assert replicas_equal(leader, {"c": tmp_path / "c"}, "/", "s") == {"c": "no copy"}


def quorum_delivery(
    seq: int, message_id: str, count: int, settled: str = "ack", connection: int = 1
) -> QuorumDelivery:
    return QuorumDelivery(0.0, "c", connection, "p", seq, message_id, count, count > 0, settled)


def test_the_quorum_checkers_notice_what_they_look_for(tmp_path: Path) -> None:
    published = {"p": ([0, 1, 2], {0, 1, 2, 3})}
    given_back = [quorum_delivery(0, "0.1", 0, "requeue"), quorum_delivery(0, "0.1", 1)]
    resent = [quorum_delivery(1, "1.2", 0), quorum_delivery(1, "1.3", 0)]  # two sends
    fine = check_quorum("q", published, [*given_back, *resent, quorum_delivery(2, "2.4", 0)])
    assert fine.findings == [], fine.findings
    assert fine.figures["stored_twice"] == 1 and fine.figures["requeued"] == 1
    ordered = [quorum_delivery(0, "0.1", 2), quorum_delivery(0, "0.1", 1)]
    ordered.append(quorum_delivery(9, "9.9", 0))
    for i, d in enumerate(ordered):
        d.t = float(i)
    broken = check_quorum("q", published, ordered)
    assert broken.figures["lost"] == 2 and broken.figures["unexpected"] == 1
    assert broken.figures["delivery_count_backwards"] == 1 and len(broken.findings) == 3
    other = [quorum_delivery(0, "0.1", 2), quorum_delivery(0, "0.1", 0, connection=2)]
    other[1].t = 1.0  # another connection's: its order is not the server's
    assert check_quorum("q", {"p": ([0], {0})}, other).findings == []
    only_given_back = check_quorum("q", {"p": ([0], {0})}, given_back[:1])
    assert only_given_back.figures["lost"] == 1  # given back is not settled

    def log_of(node: str, bodies: list[bytes], acked: list[int]) -> None:
        qlog = QueueLog(queue_directory(tmp_path / node, "/", "q"))
        qlog.recover()
        qlog.append([(qlog.next_id(), 0, "", "q", b"", body) for body in bodies])
        qlog.ack(acked)
        qlog.close()

    log_of("a", [b"x", b"y", b"z"], [1])
    log_of("b", [b"x", b"y", b"z"], [1])
    log_of("c", [b"x", b"y"], [1])
    log_of("d", [b"x", b"y", b"Z"], [1])
    copies = {n: tmp_path / n for n in "bcde"}
    found = quorum_copies_equal(tmp_path / "a", copies, "/", "q")
    assert found["b"] == "" and found["e"] == "no copy", found
    assert "1 missing" in found["c"] and "1 changed" in found["d"], found
