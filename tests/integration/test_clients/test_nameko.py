"""nameko against SieveMQ: a service process answers RPC (nameko's reply queues on its
``nameko-rpc`` topic exchange) and handles an event another process dispatches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sievemq.testing import ServerProcess

from .workers import ROOT, worker_process

pytestmark = pytest.mark.timeout(120)

MODULE = "tests.integration.test_clients.nameko_service"


def test_rpc_and_events(server: ServerProcess, tmp_path: Path) -> None:
    with worker_process(MODULE, "service", server.url, stderr=tmp_path / "service.err"):
        done = subprocess.run(
            [sys.executable, "-m", MODULE, "client", server.url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"add": 42, "seen": [{"order": 7}]}
