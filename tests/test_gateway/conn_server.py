"""The module-scoped ``server`` fixture of the connection-handler tests (tests/test_gateway).

Starting `sievemq serve` and reading its ready line is tests/server_process.py's job; this only
makes it importable from here (tests/test_gateway is not a package) and re-exports it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server_process import ServerProcess

__all__ = ["ServerProcess", "server"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server per test module, killed afterwards (these tests do not check its exit)."""
    srv = ServerProcess(tmp_path_factory.mktemp("srv") / "data").start()
    yield srv
    if srv.running:
        srv.kill()
