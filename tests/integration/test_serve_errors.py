"""`sievemq serve` refuses to start with a one-line reason, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sievemq.testing import ServerProcess

pytestmark = pytest.mark.timeout(60)


def test_a_port_in_use_is_reported_and_exits_1(server: ServerProcess, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sievemq",
            "serve",
            "--data-dir",
            str(tmp_path / "other"),
            "--amqp-port",
            str(server.amqp_port),
            "--admin-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "cannot listen" in result.stderr
    assert "Traceback" not in result.stderr
    assert server.running  # the server holding the port is untouched
