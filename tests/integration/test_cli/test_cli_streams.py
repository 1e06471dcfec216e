"""`sievemq streams` lists a running server's streams from its data directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(60)


def _streams(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sievemq", "streams", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_lists_each_stream_with_its_message_count(fresh_server: ServerProcess) -> None:
    conn = connect(fresh_server)
    ch = conn.channel()
    ch.confirm_delivery()
    for name in ("orders", "empty"):
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    for i in range(5):
        ch.basic_publish("", "orders", f"m{i}".encode())
    conn.close()

    result = _streams(fresh_server.data_dir)

    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split()[1]: line.split() for line in result.stdout.splitlines()[1:]}
    vhost, name, messages, size, segments, first, last = rows["orders"][:7]
    assert (vhost, name, messages, segments, first, last) == ("/", "orders", "5", "1", "0", "4")
    assert int(size) > 5 * len("m0")
    assert rows["empty"][2] == "0"
    assert fresh_server.running  # read-only: the server kept going


def test_a_directory_without_data_says_so(tmp_path: Path) -> None:
    result = _streams(tmp_path)
    assert result.returncode == 1
    assert "no SieveMQ data" in result.stderr
