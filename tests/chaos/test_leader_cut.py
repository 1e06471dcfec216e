"""A leader cut from its replicas only, its etcd lease holding (issue 20: "it loses its
majority"): a real partition by policy routing in the chaos suite's network namespace,
under the chaos workload, with every checker.

The replicas hear nothing from the leader past the lease's TTL and elect one of them (a
majority of the members); the old leader, still registered, reads the new record from
etcd and hands over (what it held unconfirmed is nacked, later publishes through it are
forwarded); once the cut heals it follows the new leader, its copy cut back. Nothing
confirmed is lost: the old leader could commit nothing once its replicas stood in the
election, so none of its late publishes was confirmed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.run import QUORUM

ROOT = Path(__file__).resolve().parents[2]


def one_clean_round(scenario: str) -> tuple[Path, dict[str, Any]]:
    """One round of ``scenario`` under the chaos workload: its artifacts folder and summary,
    every checker clean (they stay in .chaos/ when it fails: the history, the nodes' logs)."""
    artifacts = ROOT / ".chaos" / f"{scenario}-{time.strftime('%Y%m%dT%H%M%S')}"
    command = [sys.executable, "-m", "tests.chaos.run", "--rounds", "1", "--minutes", "0"]
    command += ["--hold-s", "3", "--artifacts", str(artifacts), "--scenarios", scenario]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=840)
    summary_file = artifacts / "summary.json"
    assert summary_file.exists(), f"no summary (exit {done.returncode}):\n{done.stderr[-4000:]}"
    summary: dict[str, Any] = json.loads(summary_file.read_text())
    assert done.returncode == 0 and summary["findings"] == [], summary
    assert summary["per_fault"][scenario]["count"] == 1, summary
    assert summary["lost"] == 0 and summary["unexpected"] == 0, summary
    assert summary["duplicates_with_dedup"] == 0 and summary["gaps"] == 0, summary
    assert summary["declared_missing"] == 0 and summary["replicas_unequal"] == 0, summary
    return artifacts, summary


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "scenario",
    [
        "leader-cut-from-nodes",
        # cut from one replica, then from the other 3.5 s later: elections that begin apart
        # must still count each other's tails (two 30-minute runs saw replicas alternate
        # elections for a minute; this timing does not bring that about every time)
        "leader-cut-from-nodes-staggered",
    ],
)
def test_a_leader_cut_from_its_replicas_is_replaced_and_loses_nothing(scenario: str) -> None:
    artifacts, summary = one_clean_round(scenario)
    logs = {n: (artifacts / "nodes" / f"{n}.stderr.1").read_text() for n in ("a", "b", "c")}
    # a replica was elected while a was listed running (its lease held: the election said
    # so); a loaded machine may also see a's lease lapse at other moments of the run
    elected = "leader a was lost to a majority of its members; this node leads it now"
    assert any(elected in logs[n] for n in ("b", "c")), "no replica took over"
    assert "is led by" in logs["a"] and "this node's copy becomes its replica" in logs["a"]
    # the quorum queue too (a led it): a replica elected, a handed it over, nothing lost
    quorum = f"quorum queue '{QUORUM}' in vhost '/'"
    assert any(f"{quorum}: {elected}" in logs[n] for n in ("b", "c")), "no quorum election"
    assert f"{quorum} is led by" in logs["a"], "a did not hand the quorum queue over"
    assert summary["quorum"]["lost"] == 0 and summary["quorum_copies_unequal"] == 0, summary
    shutil.rmtree(artifacts)


@pytest.mark.timeout(900)
def test_nodes_cut_from_each_other_keep_their_leaders_and_lose_nothing() -> None:
    """Every node cut from both others, each reaching etcd: the replicas lose their leader
    but reach no member that could follow them, so none is elected (the scenario makes a
    changed leader a finding); after the heal every publish is confirmed, nothing lost."""
    scenario = "nodes-apart"
    artifacts, summary = one_clean_round(scenario)
    assert summary["quorum"]["lost"] == 0 and summary["quorum_copies_unequal"] == 0, summary
    logs = {n: (artifacts / "nodes" / f"{n}.stderr.1").read_text() for n in ("b", "c")}
    # the replicas did lose their leader, and stayed out for want of a member to follow them
    assert all("it offers no tail (nobody could follow it)" in logs[n] for n in logs), logs
    shutil.rmtree(artifacts)
