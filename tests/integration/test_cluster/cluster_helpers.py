"""Helpers of the cluster tests: node flags, polling, the admin API of a node."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pika

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

TTL_S = 2
WAIT_S = 30.0  # generous: a loaded machine; every wait returns as soon as it holds


def cluster_args(etcd: EtcdProcess, name: str, ttl_s: int = TTL_S) -> tuple[str, ...]:
    return (
        "--node-name",
        name,
        "--cluster-etcd",
        etcd.url,
        "--cluster-port",
        "0",
        "--cluster-lease-ttl",
        str(ttl_s),
    )


def until(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)


def get(node: ServerProcess, path: str) -> Any:
    response = httpx.get(node.admin_url + path, auth=("guest", "guest"), timeout=10)
    response.raise_for_status()
    return response.json()


def running(node: ServerProcess) -> dict[str, bool]:
    """Node name -> running, as ``node``'s /api/nodes says."""
    return {n["name"]: n["running"] for n in get(node, "/api/nodes")}


@contextmanager
def started_nodes(
    etcd: EtcdProcess, base: Path, names: tuple[str, ...]
) -> Iterator[dict[str, ServerProcess]]:
    """Nodes joined through ``etcd``, started one at a time (each start is seconds of CPU),
    each stopped after the block with exit status 0."""
    procs = {n: ServerProcess(base / n, cluster_args(etcd, n)) for n in names}
    try:
        for proc in procs.values():
            proc.start()
        yield procs
    finally:
        for proc in procs.values():
            if proc.running:
                assert proc.stop() == 0, proc.stderr()


OPEN: list[pika.BlockingConnection] = []  # closed after each test (conftest)


def channel(node: ServerProcess) -> Any:
    """A pika channel on ``node`` (its connection closed after the test)."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    OPEN.append(conn)
    return conn.channel()


def close_open() -> None:
    while OPEN:
        conn = OPEN.pop()
        if conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):  # its node was killed
                conn.close()


def queues(node: ServerProcess) -> dict[str, dict[str, Any]]:
    """``node``'s /api/queues by queue name."""
    return {q["name"]: q for q in get(node, "/api/queues")}


@contextmanager
def stopped(*procs: ServerProcess) -> Iterator[None]:
    """The nodes SIGSTOPped for the block (SIGCONTed after it, whatever happens)."""
    pids = [p.pid for p in procs]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
