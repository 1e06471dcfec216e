"""The super-stream commands of a stream-protocol connection: CreateSuperStream,
DeleteSuperStream, Route and Partitions (RabbitMQ 3.13's).

Moved out of ``streamproto_session.connection``: a super stream is an exchange with one
stream per partition (``gateway.model.stream.super_streams``); these handlers check the
permissions, call the model and answer with the protocol's codes. Each takes the connection
and the command's cursor, as the connection's dispatch table calls it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from sievemq.amqp.errors import AMQPError
from sievemq.gateway.model.stream import super_streams
from sievemq.storage import StorageError
from sievemq.streamproto import wire
from sievemq.streamproto.wire import Cursor

if TYPE_CHECKING:
    from sievemq.gateway.model.vhost import VirtualHost

log = logging.getLogger(__name__)


class CommandHost(Protocol):
    """What the super-stream commands need of their connection
    (``streamproto_session.connection.StreamConnection``)."""

    vhost: VirtualHost | None

    def write(self, data: bytes) -> None: ...
    def may(self, kind: str, stream: str, resource: str = "queue") -> bool: ...
    def queue_arguments(self, args: dict[str, str]) -> dict[str, Any]: ...


def _may_manage(conn: CommandHost, name: str, partitions: list[str]) -> bool:
    """Create/DeleteSuperStream: configure on the super stream's exchange and on every
    partition stream."""
    return conn.may("configure", name, "exchange") and all(
        conn.may("configure", p) for p in partitions
    )


def create_super_stream(conn: CommandHost, cur: Cursor) -> None:
    corr = cur.u32()
    name = cur.string()
    partitions = cur.strings()
    binding_keys = cur.strings()
    args = cur.properties()
    assert conn.vhost is not None
    key = wire.CREATE_SUPER_STREAM
    try:
        arguments = conn.queue_arguments(args)
    except ValueError:
        conn.write(wire.response(key, corr, wire.PRECONDITION_FAILED))
        return
    if not _may_manage(conn, name, partitions):
        conn.write(wire.response(key, corr, wire.ACCESS_REFUSED))
        return
    # RabbitMQ spreads the partitions over the cluster unless told otherwise
    arguments.setdefault("x-queue-leader-locator", "balanced")
    try:
        super_streams.create(conn.vhost, name, partitions, binding_keys, arguments)
    except super_streams.SuperStreamError as error:
        code = wire.STREAM_ALREADY_EXISTS if error.kind == "exists" else wire.PRECONDITION_FAILED
        conn.write(wire.response(key, corr, code))
        return
    except AMQPError:
        conn.write(wire.response(key, corr, wire.PRECONDITION_FAILED))
        return
    except (StorageError, OSError) as error:
        log.error("create super stream %s failed: %s", name, error)
        conn.write(wire.response(key, corr, wire.INTERNAL_ERROR))
        return
    conn.write(wire.response(key, corr, wire.OK))


def delete_super_stream(conn: CommandHost, cur: Cursor) -> None:
    corr = cur.u32()
    name = cur.string()
    assert conn.vhost is not None
    key = wire.DELETE_SUPER_STREAM
    if not _may_manage(conn, name, super_streams.partitions(conn.vhost, name) or []):
        conn.write(wire.response(key, corr, wire.ACCESS_REFUSED))
        return
    try:
        super_streams.delete(conn.vhost, name)
    except super_streams.SuperStreamError:
        conn.write(wire.response(key, corr, wire.STREAM_DOES_NOT_EXIST))
        return
    except AMQPError:
        conn.write(wire.response(key, corr, wire.ACCESS_REFUSED))
        return
    conn.write(wire.response(key, corr, wire.OK))


def route(conn: CommandHost, cur: Cursor) -> None:
    corr = cur.u32()
    routing_key = cur.string()
    name = cur.string()
    assert conn.vhost is not None
    streams = super_streams.route(conn.vhost, name, routing_key)
    if streams is None:
        conn.write(wire.streams_response(wire.ROUTE, corr, wire.STREAM_DOES_NOT_EXIST, []))
        return
    conn.write(wire.streams_response(wire.ROUTE, corr, wire.OK, streams))


def partitions(conn: CommandHost, cur: Cursor) -> None:
    corr = cur.u32()
    name = cur.string()
    assert conn.vhost is not None
    streams = super_streams.partitions(conn.vhost, name)
    if streams is None:
        code = wire.STREAM_DOES_NOT_EXIST
        conn.write(wire.streams_response(wire.PARTITIONS, corr, code, []))
        return
    conn.write(wire.streams_response(wire.PARTITIONS, corr, wire.OK, streams))
