"""A quorum queue's leader cut from its replicas only, its etcd lease holding: a replica is
elected, publishes through another node are confirmed, nothing confirmed is lost and the old
leader follows once healed (``quorum_cut.py``: a real partition in the chaos suite's network
namespace)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.chaos.quorum_cut import BEFORE, DURING

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_a_quorum_leader_cut_from_its_replicas_is_replaced_and_loses_nothing() -> None:
    """Its artifacts stay in .chaos/ when it fails (the nodes' logs)."""
    artifacts = ROOT / ".chaos" / f"quorum-cut-{time.strftime('%Y%m%dT%H%M%S')}"
    command = [sys.executable, "-m", "tests.chaos.quorum_cut", "--artifacts", str(artifacts)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=570)
    found = artifacts / "result.json"
    assert found.exists(), f"no result (exit {done.returncode}):\n{done.stderr[-4000:]}"
    result = json.loads(found.read_text())
    assert done.returncode == 0 and "error" not in result, result
    assert result["leader_before"] == "a" and result["leader_after"] in ("b", "c"), result
    assert result["confirmed_before"] == BEFORE and result["confirmed_during"] == DURING, result
    # every confirmed message reached a consumer of the new leader, and only those
    assert result["confirmed_missing"] == 0 and result["consumed"] == BEFORE + DURING, result
    assert result["copies_equal"] and result["a_handed_over"], result
    # elected while a was listed running (its lease held), not after it stopped
    assert result["elected_log"], result
    print(json.dumps(result))  # (the figures, with -s)
    shutil.rmtree(artifacts)
