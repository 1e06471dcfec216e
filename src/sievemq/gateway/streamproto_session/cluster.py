"""A stream-protocol connection's cluster decisions: which node leads a stream, which nodes
hold its replicas, and what a client is told about a stream another node leads.

Moved out of ``streamproto_session.connection`` (which keeps the handshake, the commands'
framing and the publishers and subscriptions). Every function takes the node's
directory (None on a single node: then no stream is elsewhere and nothing here
reaches the cluster) and the connection's vhost name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from sievemq.gateway.model.directory import Leaders, LeaderUnavailable, Placement, StreamReplicas
from sievemq.streamproto import wire

if TYPE_CHECKING:
    from sievemq.gateway.model.stream.queue import StreamQueue

log = logging.getLogger(__name__)

Where = tuple[str, int]  # a stream listener as advertised: host, port
MetadataItem = tuple[str, int, int, tuple[int, ...]]  # name, code, leader index, replicas


class StreamDirectory(Leaders, StreamReplicas, Protocol):
    """What Metadata asks of the cluster: a stream's leader and its replicas."""


def replica(directory: StreamReplicas | None, vhost: str, name: str) -> StreamQueue | None:
    """This node's replica of stream ``name`` (a cluster; read-only): subscribers read
    it here, as RabbitMQ's stream clients read a replica Metadata names."""
    return None if directory is None else directory.replica_queue(vhost, name)


def led_elsewhere(directory: Leaders | None, vhost: str, name: str) -> str | None:
    """The cluster node that leads stream ``name`` when it is another one, else None."""
    if directory is None or directory.queue_type(vhost, name) != "stream":
        return None
    return directory.leader_elsewhere(vhost, name)


def missing_code(directory: Leaders | None, vhost: str, name: str) -> int:
    """The code for a stream this node does not hold: 6 (STREAM_NOT_AVAILABLE) when
    another cluster node leads it, as RabbitMQ answers a Subscribe on a node without a
    member of the stream (Metadata names the leader to connect to), else 2."""
    if led_elsewhere(directory, vhost, name) is not None:
        return wire.STREAM_NOT_AVAILABLE
    return wire.STREAM_DOES_NOT_EXIST


def create_refused(directory: Leaders | None, vhost: str, name: str) -> int | None:
    """The answer to a Create of a name this node does not hold when another cluster node
    leads a queue of that name (a stream: already exists; another type: precondition
    failed), else None."""
    kind = None if directory is None else directory.queue_type(vhost, name)
    if kind is None:
        return None
    return wire.STREAM_ALREADY_EXISTS if kind == "stream" else wire.PRECONDITION_FAILED


def delete_elsewhere(
    directory: Placement, vhost: str, name: str, answer: Callable[[int], None]
) -> None:
    """Delete a stream another node leads: asked of it through its etcd record (no
    frame is forwarded); ``answer(code)`` once its record is gone or the ask failed."""
    asked = directory.delete_elsewhere(vhost, name)

    def answered(done: asyncio.Future[None]) -> None:
        error = None if done.cancelled() else done.exception()
        if error is None and not done.cancelled():
            code = wire.OK
        elif isinstance(error, LeaderUnavailable):
            code = wire.STREAM_NOT_AVAILABLE
        else:
            log.error("delete of stream %s through its leader failed: %s", name, error)
            code = wire.INTERNAL_ERROR
        answer(code)

    asked.add_done_callback(answered)


def metadata(
    directory: StreamDirectory | None,
    vhost: str,
    names: Iterable[str],
    here: Callable[[str], bool],
    this_node: Where,
    tls: bool,
) -> tuple[list[Where], list[MetadataItem]]:
    """Each stream's leader, as RabbitMQ answers on any node of a cluster: this node's
    listener (``this_node``) for a stream it holds (``here``), the leader's advertised
    stream listener for one another node leads (code 6 and no leader while that node is
    down), code 2 for a stream no node has; with the stream's running replicas (their
    stream listeners), which serve Subscribe from their copy."""
    brokers: list[Where] = []
    items: list[MetadataItem] = []
    for n in names:
        if here(n):
            where: Where | None = this_node
            code = wire.OK
        else:
            leader = led_elsewhere(directory, vhost, n)
            if leader is None or directory is None:
                items.append((n, wire.STREAM_DOES_NOT_EXIST, wire.NO_LEADER, ()))
                continue
            where = directory.stream_listener(leader, tls)
            code = wire.OK if where is not None else wire.STREAM_NOT_AVAILABLE
        if where is None:
            items.append((n, code, wire.NO_LEADER, ()))
            continue
        if where not in brokers:
            brokers.append(where)
        replicas: list[int] = []
        if directory is not None:
            for node in directory.replicas(vhost, n):
                at = directory.stream_listener(node, tls)
                if at is not None and at != where:
                    if at not in brokers:
                        brokers.append(at)
                    replicas.append(brokers.index(at))
        items.append((n, code, brokers.index(where), tuple(replicas)))
    return brokers, items
