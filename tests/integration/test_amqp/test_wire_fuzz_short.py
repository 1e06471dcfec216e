"""A short bounded run of the grammar-aware wire fuzzer (bench/fuzz_wire.py; the long run
is `python -m bench.fuzz_wire`, figures in bench/RESULTS.md): valid handshakes, then
generated and mutated frames over many connections while a pika canary publishes with
confirms and consumes. No 541, no traceback, the canary gets every message in order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sievemq.testing import ServerProcess

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
FUZZ = [sys.executable, "-m", "bench.fuzz_wire"]


def test_twenty_thousand_fuzzed_frames(server: ServerProcess) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.fuzz_wire",
            "--frames",
            "20000",
            "--seed",
            "13",
            "--url",
            server.url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["frames_sent"] >= 20000
    assert result["internal_errors_541"] == 0, result["findings"]
    assert result["findings"] == []
    assert result["canary"]["error"] is None
    assert result["canary"]["published"] > 0
    assert result["canary"]["in_order_and_complete"], result["canary"]
    # the fuzzer met the limits and the protocol checks, not only garbage
    assert result["close_codes"].get("501", 0) > 0
    assert result["close_codes"].get("406", 0) > 0
    assert server.running
    assert "Traceback" not in server.stderr()
