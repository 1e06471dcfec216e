"""The cluster tests' etcd: one per test module, on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess, running_etcd

from .cluster_helpers import Clients, started_nodes


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    with running_etcd(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.fixture
def clients() -> Iterator[Clients]:
    """pika connections to the nodes, closed after the test."""
    made = Clients()
    yield made
    made.close_all()


@pytest.fixture(scope="module")
def nodes(
    etcd: EtcdProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    """Two nodes, ``a`` and ``b``, for the module (a module may name others)."""
    with started_nodes(etcd, tmp_path_factory.mktemp("nodes"), ("a", "b")) as procs:
        yield procs
