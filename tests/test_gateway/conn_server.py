"""A real `sievemq serve` subprocess for the connection-handler tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# fields by key: ``amqps=HOST:PORT`` sits between them when TLS is on
READY = re.compile(
    r"^sievemq ready amqp=([\d.]+):(\d+)(?: amqps=\S+)? admin=http://([\d.]+):(\d+)$"
)


@dataclass
class Server:
    process: subprocess.Popen[str]
    host: str
    amqp_port: int
    admin_port: int
    data_dir: Path
    ready_line: str

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)


def start_server(data_dir: Path, *extra: str) -> Server:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sievemq",
            "serve",
            "--data-dir",
            str(data_dir),
            "--amqp-port",
            "0",
            "--admin-port",
            "0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    match = READY.match(line)
    if match is None:
        process.kill()
        _, err = process.communicate(timeout=10)
        raise AssertionError(f"no ready line, got {line!r}; stderr:\n{err}")
    return Server(process, match[1], int(match[2]), int(match[4]), data_dir, line)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("data"))
    yield srv
    if srv.process.poll() is None:
        srv.process.kill()
        srv.process.wait(10)
