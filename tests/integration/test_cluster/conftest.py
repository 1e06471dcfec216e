"""The cluster tests' etcd: one per test module, on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sievemq.testing.etcd import EtcdProcess, running_etcd

from .cluster_helpers import close_open


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    with running_etcd(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.fixture(autouse=True)
def _close_connections() -> Iterator[None]:
    yield
    close_open()
