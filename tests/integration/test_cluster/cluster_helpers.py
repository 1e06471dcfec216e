"""Helpers of the cluster tests: node flags, polling, the admin API of a node (its /metrics
counters, the cluster overview), publishes, what the replication tests ask a stream on a node
(its end, its files, its offsets and sequences, who leads it after a failover), and nodes
that join, stop and are forgotten (the members each node then lists)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import pika
import pytest
from rstream.exceptions import OffsetNotFound, StreamNotAvailable

from sievemq.cluster.coordination import EtcdClient
from sievemq.cluster.membership import MEMBERS
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


GLOBAL = re.compile(r"^rabbitmq_global_messages_(\w+)_total\{(.*)\} (\S+)$", re.M)


def global_counts(
    node: ServerProcess, kinds: tuple[str, ...], queue_type: str | None = None
) -> dict[str, float]:
    """``node``'s own ``rabbitmq_global_messages_KIND_total`` counters of ``kinds``, from its
    /metrics: summed over protocols and queue types (or only ``queue_type``'s)."""
    text = httpx.get(node.admin_url + "/metrics", timeout=10).text
    out = dict.fromkeys(kinds, 0.0)
    for kind, labels, value in GLOBAL.findall(text):
        if kind in out and (queue_type is None or f'queue_type="{queue_type}"' in labels):
            out[kind] += float(value)
    return out


def overview_since(seen_by: ServerProcess, since: float, nodes: int) -> dict[str, Any]:
    """``seen_by``'s cluster overview once each of the ``nodes`` nodes' parts in it was
    published after ``since`` (a ``time.time()``): it counts what the test did before."""

    def fresh() -> dict[str, Any] | None:
        overview: dict[str, Any] = get(seen_by, "/api/overview")
        ages = [part["age_ms"] for part in overview["sievemq"]["totals_from"]]
        recent = all(age / 1000 < time.time() - since for age in ages)
        return overview if recent and len(ages) == nodes else None

    return dict(until(fresh, "every node published its totals again", timeout=60))


def running(node: ServerProcess) -> dict[str, bool]:
    """Node name -> running, as ``node``'s /api/nodes says."""
    return {n["name"]: n["running"] for n in get(node, "/api/nodes")}


@contextmanager
def started_nodes(
    etcd: EtcdProcess,
    base: Path,
    names: tuple[str, ...],
    flags: tuple[str, ...] = (),
    ttl_s: int = TTL_S,
) -> Iterator[dict[str, ServerProcess]]:
    """Nodes joined through ``etcd`` (each with ``flags``, leases of ``ttl_s``), started one
    at a time (each start is seconds of CPU), each stopped after the block with exit status
    0 (the test's connections closed first)."""
    procs = {n: ServerProcess(base / n, (*cluster_args(etcd, n, ttl_s), *flags)) for n in names}
    try:
        for proc in procs.values():
            proc.start()
        yield procs
    finally:
        close_open()
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


def numbered(prefix: str, count: int) -> list[bytes]:
    """Bodies ``PREFIX 0`` .. ``PREFIX count-1``: published, then looked for in order."""
    return [f"{prefix} {i}".encode() for i in range(count)]


def publish_each(
    on: Any,
    routing_key: str,
    bodies: list[bytes],
    exchange: str = "",
    properties: pika.BasicProperties | None = None,
    mandatory: bool = True,
) -> None:
    """Each of ``bodies`` published on pika channel ``on`` in turn (in confirm mode each
    waits for its confirm: pika raises on a nack, and on a return when ``mandatory``)."""
    for body in bodies:
        on.basic_publish(exchange, routing_key, body, properties, mandatory=mandatory)


def publish_pipelined(
    node: ServerProcess, messages: list[tuple[str, aio_pika.Message]]
) -> list[str]:
    """Each (routing key, message) published to the default exchange through ``node`` on one
    aio-pika channel with confirms, all in flight at once: each confirm's kind (``Ack``)."""

    async def publish() -> list[str]:
        conn = await aio_pika.connect(node.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            confirms = await asyncio.gather(
                *(ch.default_exchange.publish(message, key) for key, message in messages)
            )
        return [type(c).__name__ for c in confirms]

    return asyncio.run(publish())


def read_until_end(node: ServerProcess, name: str) -> list[bytes]:
    """The bodies of stream ``name`` from the first offset, through ``node``, before the
    first ``end`` (a test publishes it last: every message before it has been read)."""
    ch = channel(node)
    ch.basic_qos(prefetch_count=500)
    got: list[bytes] = []
    args = {"x-stream-offset": "first"}
    for method, _, body in ch.consume(name, arguments=args, inactivity_timeout=WAIT_S):
        assert method is not None, f"no end after {len(got)} deliveries of {name}"
        ch.basic_ack(method.delivery_tag)
        if body == b"end":
            return got
        got.append(body)
    raise AssertionError("unreachable")


def filled(
    node: ServerProcess,
    name: str,
    bodies: list[bytes],
    arguments: dict[str, Any] | None = None,
) -> Any:
    """Queue ``name`` declared durable on ``node`` (with ``arguments``) and ``bodies``
    published to it with confirms: the publishing pika channel."""
    ch = channel(node)
    ch.queue_declare(name, durable=True, arguments=arguments)
    ch.confirm_delivery()
    publish_each(ch, name, bodies)
    return ch


def queues(node: ServerProcess) -> dict[str, dict[str, Any]]:
    """``node``'s /api/queues by queue name."""
    return {q["name"]: q for q in get(node, "/api/queues")}


def new_leader(seen_by: ServerProcess, name: str, candidates: tuple[str, ...]) -> str:
    """The node among ``candidates`` that leads ``name``, once ``seen_by``'s /api/queues says
    one does (after a failover: the lease TTL, then an election)."""
    return str(
        until(
            lambda: (
                queues(seen_by).get(name, {}).get("leader") in candidates
                and queues(seen_by)[name]["leader"]
            ),
            f"one of {', '.join(candidates)} leads {name}",
            timeout=60,
        )
    )


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


@contextmanager
def etcd_away(etcd: EtcdProcess) -> Iterator[None]:
    """etcd stopped for the block (started again on its data after it, whatever happens)."""
    etcd.stop()
    try:
        yield
    finally:
        etcd.start()


async def _forget(etcd: EtcdProcess, name: str) -> None:
    client = EtcdClient([etcd.url])
    try:
        await client.delete(MEMBERS + name)
    finally:
        await client.close()


def members(node: ServerProcess, queue: str) -> tuple[list[str], list[str]]:
    """(members, online) of ``queue`` as ``node``'s /api/queues lists them."""
    row = queues(node).get(queue, {})
    return list(row.get("members") or []), list(row.get("online") or [])


def replicas_on(seen_by: tuple[ServerProcess, ...], queue: str, names: list[str]) -> None:
    """Wait until every node of ``seen_by`` lists ``names`` as ``queue``'s members, each
    online."""
    for node in seen_by:
        until(
            lambda n=node: members(n, queue) == (names, names),
            f"{node.data_dir.name} lists {', '.join(names)} as {queue}'s members, online",
        )


def declare_sized(node: ServerProcess, arguments: dict[str, Any], size: str) -> None:
    """The reconcile tests' queues, declared on ``node`` (a) while only a and b run:
    ``grown`` of the default size (3: two members for now), ``single`` and ``pair`` (the
    ``size`` argument 1 and 2: at their size already, they never move)."""
    ch = channel(node)
    ch.queue_declare("grown", durable=True, arguments=arguments)
    ch.queue_declare("single", durable=True, arguments={**arguments, size: 1})
    ch.queue_declare("pair", durable=True, arguments={**arguments, size: 2})
    assert members(node, "grown") == (["a", "b"], ["a", "b"])


def sizes_kept(node: ServerProcess) -> None:
    """``single`` and ``pair`` (``declare_sized``) still on the nodes they were declared on."""
    assert members(node, "single")[0] == ["a"]
    assert members(node, "pair")[0] == ["a", "b"]


def joined_node(
    node: ServerProcess, seen_by: tuple[ServerProcess, ...], queue: str, names: list[str]
) -> None:
    """``node`` started (it joins the cluster), once every node of ``seen_by`` and ``node``
    lists ``names`` as ``queue``'s members, online (the join re-chose its replicas)."""
    node.start()
    replicas_on((*seen_by, node), queue, names)


def stopped_while_one_joins(
    leaving: ServerProcess, joining: ServerProcess, seen_by: ServerProcess
) -> None:
    """``leaving`` stopped (SIGTERM: a transient loss) and ``joining`` started meanwhile,
    once ``seen_by`` lists each so."""
    assert leaving.stop() == 0, leaving.stderr()
    gone, new = leaving.data_dir.name, joining.data_dir.name
    until(lambda: not running(seen_by).get(gone, True), f"{seen_by} lists {gone} stopped")
    joining.start()
    until(lambda: running(seen_by).get(new), f"{seen_by} lists {new} running")


def forgotten(
    etcd: EtcdProcess, name: str, seen_by: tuple[ServerProcess, ...], queue: str, names: list[str]
) -> None:
    """Node ``name`` forgotten (its ``sievemq/members/NAME`` deleted, RabbitMQ's
    ``forget_cluster_node``), once every node of ``seen_by`` lists ``names`` as ``queue``'s
    members, online (another node took its place)."""
    asyncio.run(_forget(etcd, name))
    replicas_on(seen_by, queue, names)


def closed_with_541(action: Callable[[], object], text: str) -> None:
    """``action`` (a pika call) gets its connection closed with 541 and a reply naming
    ``text`` (what etcd did not record while it was away)."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as refused:
        action()
    assert refused.value.reply_code == 541
    assert text in refused.value.reply_text


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


async def until_offset(
    node: ServerProcess, name: str, reference: str, offset: int, what: str, timeout: float = WAIT_S
) -> None:
    """Wait until ``node`` answers ``offset`` for ``reference`` (QueryOffset); fail naming
    ``what``."""

    async def answers() -> bool:
        return await offset_on(node, name, reference) == offset

    await until_async(answers, what, timeout)


async def store_offset(node: ServerProcess, name: str, reference: str, offset: int) -> None:
    """A StoreOffset of ``reference`` on ``node`` (through a client of its own)."""
    client = await open_client(node)
    try:
        await client.store_offset(name, reference, offset)
    finally:
        await client.close()


async def republish_old_ids(node: ServerProcess, name: str, reference: str) -> None:
    """Ids 5..14 of ``reference`` published to ``node`` after 0..9 were stored: 5..9 are
    deduplicated (the stream holds 15) and the publisher's sequence is 14."""
    publish_deduplicated(node, name, reference, range(5, 15))
    assert end_offset(node, name) == 15
    assert await sequence_on(node, name, reference) == 14


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
