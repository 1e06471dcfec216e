"""`sievemq serve` refuses to start with a one-line reason, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sievemq.testing import ServerProcess

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("busy", ["amqp", "admin"])
def test_a_port_in_use_is_reported_and_exits_1(
    server: ServerProcess, tmp_path: Path, busy: str
) -> None:
    ports = {"amqp": "0", "admin": "0", "stream": "0"}
    ports[busy] = str(server.amqp_port)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sievemq",
            "serve",
            "--data-dir",
            str(tmp_path / "other"),
            *(arg for name, port in ports.items() for arg in (f"--{name}-port", port)),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "cannot listen" in result.stderr
    assert f"'127.0.0.1', {server.amqp_port}" in result.stderr
    assert "Traceback" not in result.stderr
    # every port is bound before anything heavy: the data directory was never opened
    assert not (tmp_path / "other").exists()
    assert server.running  # the server holding the port is untouched
