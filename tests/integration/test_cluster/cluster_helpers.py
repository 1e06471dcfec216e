"""Helpers of the cluster tests: node flags, polling, the admin API of a node, and what the
replication tests ask a stream on a node (its end, its files, its offsets and sequences)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pika
from rstream.exceptions import OffsetNotFound, StreamNotAvailable

from sievemq.cluster.replication import replica_directory
from sievemq.spark.stream_client import StreamClient, StreamURI
from sievemq.storage.layout import stream_directory
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.stream_client import open_client
from sievemq.testing.stream_files import segment_files

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


async def until_async(
    check: Callable[[], Awaitable[Any]], what: str, timeout: float = WAIT_S
) -> None:
    """Await ``check()`` until it is truthy; fail naming ``what`` (``until`` for checks
    that talk to a node through an async client)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.1)


def get(node: ServerProcess, path: str) -> Any:
    response = httpx.get(node.admin_url + path, auth=("guest", "guest"), timeout=10)
    response.raise_for_status()
    return response.json()


def running(node: ServerProcess) -> dict[str, bool]:
    """Node name -> running, as ``node``'s /api/nodes says."""
    return {n["name"]: n["running"] for n in get(node, "/api/nodes")}


@contextmanager
def started_nodes(
    etcd: EtcdProcess, base: Path, names: tuple[str, ...], ttl_s: int = TTL_S
) -> Iterator[dict[str, ServerProcess]]:
    """Nodes joined through ``etcd`` (leases of ``ttl_s``), started one at a time (each start
    is seconds of CPU), each stopped after the block with exit status 0."""
    procs = {n: ServerProcess(base / n, cluster_args(etcd, n, ttl_s)) for n in names}
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


def declare_replicated(
    leader: ServerProcess, seen_by: ServerProcess, name: str, members: tuple[str, ...]
) -> None:
    """A stream declared on ``leader`` with one member per name in ``members`` (the leader
    first), once ``seen_by``'s /api/queues shows them all online."""
    arguments = {"x-queue-type": "stream", "x-initial-cluster-size": len(members)}
    channel(leader).queue_declare(name, durable=True, arguments=arguments)
    until(
        lambda: queues(seen_by).get(name, {}).get("online") == list(members),
        f"{members[0]} leads {name}, {', '.join(members[1:])} replicate it",
    )


def end_offset(node: ServerProcess, name: str) -> int:
    """The stream's end (next offset) as ``node``'s StreamStats answers it."""
    uri = StreamURI.parse(f"rabbitmq-stream://guest:guest@{node.host}:{node.stream_port}/%2F")
    with StreamClient(uri) as client:
        return int(client.stream_stats(name).end)


def publish_deduplicated(node: ServerProcess, name: str, reference: str, ids: range) -> None:
    """AMQP 0-9-1 publishes with confirms and SieveMQ's dedup headers."""
    ch = channel(node)
    ch.confirm_delivery()
    for i in ids:
        headers = {"x-sievemq-publisher": reference, "x-sievemq-publishing-id": i}
        ch.basic_publish(
            "",
            name,
            b"dedup %d" % i,
            pika.BasicProperties(headers=headers),
            mandatory=True,
        )


async def offset_on(node: ServerProcess, name: str, reference: str) -> int | None:
    """The offset stored for ``reference`` as ``node`` answers QueryOffset; None when none
    is stored (or, during a failover, no member answers: 6)."""
    client = await open_client(node)
    try:
        return int(await client.query_offset(name, reference))
    except (OffsetNotFound, StreamNotAvailable):
        return None
    finally:
        await client.close()


async def sequence_on(node: ServerProcess, name: str, reference: str) -> int:
    """The publisher ``reference``'s last sequence as ``node`` answers it."""
    client = await open_client(node)
    try:
        return int(await client.query_publisher_sequence(name, reference))
    finally:
        await client.close()


def copy_of(node: ServerProcess, name: str) -> dict[str, bytes]:
    """``node``'s replica of stream ``name``: its segment files."""
    return segment_files(replica_directory(node.data_dir, "/", name))


def led_by(node: ServerProcess, name: str) -> dict[str, bytes]:
    """Stream ``name`` as ``node`` leads it: its segment files."""
    return segment_files(stream_directory(node.data_dir, "/", name))
