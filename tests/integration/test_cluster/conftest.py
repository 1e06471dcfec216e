"""The cluster tests' etcd (one per test module, on free loopback ports) and nodes (a
module's, three fresh ones per test, or two running and two to start: ``cluster``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess, running_etcd

from .cluster_helpers import close_open, cluster_args, started_nodes


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    with running_etcd(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.fixture(scope="module")
def nodes(
    etcd: EtcdProcess, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, ServerProcess]]:
    """The test module's nodes, joined through its etcd and started once for its tests: named
    by the module's ``NAMES`` (nodes a and b without it)."""
    names = getattr(request.module, "NAMES", ("a", "b"))
    with started_nodes(etcd, tmp_path_factory.mktemp("nodes"), names) as procs:
        yield procs


@pytest.fixture
def fresh_nodes(etcd: EtcdProcess, tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    """Three nodes a, b and c started anew for each test: for tests that kill or stop one."""
    with started_nodes(etcd, tmp_path, ("a", "b", "c")) as procs:
        yield procs


@pytest.fixture
def cluster(etcd: EtcdProcess, tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    """a and b running; c and d made, not started (stopped after the test if started): for
    tests of nodes that join later."""
    with started_nodes(etcd, tmp_path, ("a", "b")) as procs:
        later = {n: ServerProcess(tmp_path / n, cluster_args(etcd, n)) for n in ("c", "d")}
        try:
            yield {**procs, **later}
        finally:
            for proc in later.values():
                if proc.running:
                    assert proc.stop() == 0, proc.stderr()


@pytest.fixture(autouse=True)
def _close_connections() -> Iterator[None]:
    yield
    close_open()
