"""Fixtures for the end-to-end tests: a real server subprocess and unique names.

Most tests share one server per module (start-up costs about a second); tests that restart
or kill the server get their own. Every test that used the server checks afterwards that the
process is still alive: no client input may crash it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client

from .node_scenarios import NODE_DIR


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One running server for the whole test module; clean SIGTERM exit is asserted."""
    with ServerProcess(tmp_path_factory.mktemp("srv") / "data") as proc:
        yield proc
        assert proc.running, f"server died during the module\nstderr:\n{proc.stderr()}"


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of its own, for tests that stop, kill or restart it."""
    with ServerProcess(tmp_path / "data") as proc:
        yield proc


@pytest.fixture(autouse=True)
def _server_survives(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used the shared server, the process must still be running."""
    yield
    if "server" in request.fixturenames:
        proc: ServerProcess = request.getfixturevalue("server")
        assert proc.running, f"server process died\nstderr:\n{proc.stderr()}"


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    """The shared server's admin API as guest."""
    with client(server) as c:
        yield c


@pytest.fixture
def qname(request: pytest.FixtureRequest) -> str:
    """A queue/exchange name unique to this test (the shared server keeps its streams)."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """amqplib and rabbitmq-stream-js-client installed from the committed lock file (npm ci)
    when they are not there yet."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are required for the Node client tests")
    modules = NODE_DIR / "node_modules"
    if not all((modules / name).is_dir() for name in ("amqplib", "rabbitmq-stream-js-client")):
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            check=True,
            capture_output=True,
            timeout=120,
        )
    return modules
