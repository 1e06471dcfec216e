"""A compaction of definitions.log run by the deferred sync's worker thread, killed
(SIGKILL) at each of its steps: after a restart every synced definition is there, the
log reads whole, and no temp file is left."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sievemq.gateway.model import definitions
from sievemq.gateway.model.definitions import DefinitionStore

SCRIPT = r"""
import os, signal, sys
from pathlib import Path
from sievemq.gateway.model import definitions
from sievemq.gateway.model.definitions import DefinitionStore

directory, step = Path(sys.argv[1]), sys.argv[2]
definitions._COMPACT_MIN = 64

def q(name):
    return {"vhost": "/", "name": name, "arguments": {"x-queue-type": "stream"}}

store = DefinitionStore(directory)

def crash(at):
    if at == "temp-synced":  # the loop commits while the thread compacts (never synced)
        store.put("queues", q("tail"))
        store.commit()
    if at == step:
        print("crashing at", at, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

definitions._crash_point = crash
store.defer_sync = True
for i in range(20):
    store.put("queues", q(f"q{i}"))
    store.commit()
    store.take_sync()()
print("synced", flush=True)
for i in range(10_000):
    store.put("queues", q("churn"))
    store.commit()
    store.take_sync()()
    store.delete("queues", q("churn"))
    store.commit()
    store.take_sync()()
print("no compaction happened", flush=True)
"""

STEPS = ("temp-synced", "renamed", "log-synced", "dir-synced")


@pytest.mark.parametrize("step", STEPS)
def test_a_kill_at_each_compaction_step_loses_nothing_synced(tmp_path: Path, step: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), step],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)
    assert f"crashing at {step}" in proc.stdout
    with DefinitionStore(tmp_path) as store:
        data = store.load()
    assert data is not None
    names = {q["name"] for q in data["queues"]}
    # churn and tail were committed but not synced when the process died: either way
    assert names - {"churn", "tail"} == {f"q{i}" for i in range(20)}
    assert not (tmp_path / (definitions.LOG_NAME + ".tmp")).exists()
    if step in ("log-synced", "dir-synced"):
        assert "tail" in names  # the new log had it, synced
        lines = (tmp_path / definitions.LOG_NAME).read_bytes().count(b"\n")
        assert lines <= 30, lines  # compacted: one line per live item, plus the tail
