"""A real etcd for tests: Debian's etcd on free loopback ports in a temporary folder.

etcd is installed by ``make etcd`` (``make test`` depends on it). It skips fsync
(``--unsafe-no-fsync``): a test's etcd data is thrown away with its folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sievemq.cluster.local import EtcdProcess

__all__ = ["EtcdProcess", "running_etcd"]


@contextmanager
def running_etcd(data_dir: Path) -> Iterator[EtcdProcess]:
    """An etcd started in ``data_dir`` for the ``with`` block, stopped after it."""
    etcd = EtcdProcess(data_dir, unsafe_no_fsync=True).start()
    try:
        yield etcd
    finally:
        etcd.stop()
