"""AMQP 0-9-1 and stream-protocol connections and their channels."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sievemq.amqp.errors import ConnectionForced, NotFound
from sievemq.gateway.admin.base import AdminBase
from sievemq.gateway.admin.codec import jsonable
from sievemq.gateway.admin.views import ChannelView, ConnectionView
from sievemq.gateway.model.users import User
from sievemq.gateway.net.tcp_info import socket_counts
from sievemq.gateway.runtime.alarms import blocked_reason
from sievemq.gateway.session.connection import Connection
from sievemq.gateway.streamproto_session.connection import StreamConnection

if TYPE_CHECKING:
    from sievemq.gateway.session.channel import Channel


class ConnectionsAdmin(AdminBase):
    """Connections and channels: list, show, close."""

    def list_connections(self, vhost: str | None = None) -> list[ConnectionView]:
        """AMQP 0-9-1 and stream-protocol connections (``protocol`` tells them apart)."""
        now = time.time()
        views = [self._socket_rates(_connection_view(c), c, now) for c in self._connections()]
        views += [
            self._socket_rates(_stream_connection_view(c), c, now)
            for c in self._stream_connections()
        ]
        views.sort(key=lambda v: v.id)
        return [v for v in views if vhost is None or v.vhost == vhost]

    def get_connection(self, name: str) -> ConnectionView:
        now = time.time()
        for stream_conn in self._stream_connections():
            if stream_connection_name(stream_conn) == name:
                return self._socket_rates(_stream_connection_view(stream_conn), stream_conn, now)
        conn = self._connection(name)
        return self._socket_rates(_connection_view(conn), conn, now)

    def _socket_rates(self, view: ConnectionView, conn: Any, now: float) -> ConnectionView:
        """The socket's byte and segment counts, and the bytes' rates."""
        counts = socket_counts(conn.transport)
        if counts is not None:
            view.recv_oct, view.send_oct = counts.recv_oct, counts.send_oct
            view.recv_cnt, view.send_cnt = counts.recv_cnt, counts.send_cnt
            rates = self._rates.rates(
                ("x", view.name), _OCTETS, (counts.recv_oct, counts.send_oct), now, 2
            )
            view.recv_oct_rate, view.send_oct_rate = rates["recv_oct"], rates["send_oct"]
        return view

    def _connection(self, name: str) -> Connection:
        for conn in self._connections():
            if connection_name(conn) == name:
                return conn
        raise NotFound(f"no connection '{name}'")

    def close_connection(self, name: str, reason: str | None = None) -> None:
        """Close with 320 CONNECTION_FORCED and the reason (RabbitMQ's default text); a
        stream-protocol connection is dropped (its clients see a broken connection)."""
        for stream_conn in self._stream_connections():
            if stream_connection_name(stream_conn) == name:
                stream_conn.abort()
                return
        conn = self._connection(name)
        conn.close(ConnectionForced(reason or "Closed via management plugin"))

    def list_channels(
        self, vhost: str | None = None, connection: str | None = None
    ) -> list[ChannelView]:
        if connection is not None and any(
            stream_connection_name(c) == connection for c in self._stream_connections()
        ):
            return []  # stream-protocol connections have no channels
        conns = [self._connection(connection)] if connection is not None else self._connections()
        return [
            _channel_view(c, ch)
            for c in conns
            if vhost is None or c.vhost_name == vhost
            for ch in sorted(c.channels.values(), key=lambda ch: ch.id)
        ]

    def get_channel(self, name: str) -> ChannelView:
        for view in self.list_channels():
            if view.name == name:
                return view
        raise NotFound(f"no channel '{name}'")

    def publishers(self) -> int:
        """Channels that have published at least once (RabbitMQ's ``publishers``)."""
        return sum(1 for c in self._connections() for ch in c.channels.values() if ch.has_published)


_OCTETS = ("recv_oct", "send_oct")


def split_peer(peer: str) -> tuple[str, int]:
    host, _, port = peer.rpartition(":")
    try:
        return host, int(port)
    except ValueError:
        return peer, 0


def local_address(conn: Connection | StreamConnection) -> tuple[str, int]:
    transport = conn.transport
    sock = transport.get_extra_info("sockname") if transport is not None else None
    if isinstance(sock, tuple) and len(sock) >= 2:
        return str(sock[0]), int(sock[1])
    return "", 0


def connection_name(conn: Connection) -> str:
    """RabbitMQ's ``peer_host:peer_port -> host:port``."""
    host, port = local_address(conn)
    return f"{conn.peer} -> {host}:{port}"


def _connection_view(conn: Connection) -> ConnectionView:
    peer_host, peer_port = split_peer(conn.peer)
    host, port = local_address(conn)
    transport = conn.transport
    ssl = transport is not None and transport.get_extra_info("sslcontext") is not None
    provided = conn.client_properties.get("connection_name")
    if isinstance(provided, bytes):
        provided = provided.decode("utf-8", "replace")
    if conn.state.phase.name in ("CLOSING", "CLOSED"):
        state = "closing"
    elif conn.blocked:
        state = "blocked"
    else:
        state = "running"
    return ConnectionView(
        name=connection_name(conn),
        id=conn.id,
        user=conn.username,
        vhost=conn.vhost_name,
        peer_host=peer_host,
        peer_port=peer_port,
        host=host,
        port=port,
        ssl=ssl,
        client_properties=jsonable(conn.client_properties),
        user_provided_name=provided if isinstance(provided, str) else None,
        channels=len(conn.channels),
        channel_max=conn.channel_max,
        frame_max=conn.frame_max,
        timeout=conn.heartbeat,
        connected_at=int(getattr(conn, "connected_at", time.time()) * 1000),
        state=state,
        blocked_reason=conn.blocked_reason,
    )


def stream_connection_name(conn: StreamConnection) -> str:
    """RabbitMQ names stream connections like AMQP ones: ``peer_host:peer_port -> host:port``."""
    host, port = local_address(conn)
    return f"{conn.peer_host}:{conn.peer_port} -> {host}:{port}"


def user_of(conn: object) -> str:
    user = getattr(conn, "user", None)
    return user.name if isinstance(user, User) else ""


def _stream_connection_view(conn: StreamConnection) -> ConnectionView:
    host, port = local_address(conn)
    transport = conn.transport
    ssl = transport is not None and transport.get_extra_info("sslcontext") is not None
    provided = conn.client_properties.get("connection_name")
    return ConnectionView(
        name=stream_connection_name(conn),
        id=conn.id,
        user=conn.user.name if conn.user is not None else "",
        vhost=conn.vhost.name if conn.vhost is not None else "",
        peer_host=conn.peer_host,
        peer_port=conn.peer_port,
        host=host,
        port=port,
        ssl=ssl,
        client_properties=dict(conn.client_properties),
        user_provided_name=provided,
        channels=0,
        channel_max=0,
        frame_max=conn.frame_max,
        timeout=conn.heartbeat,
        connected_at=int(conn.connected_at * 1000),
        state="blocked" if conn.blocked else "running",
        blocked_reason=blocked_reason(conn.node.alarm_reasons) if conn.blocked else "",
        protocol="stream",
    )


def _channel_view(conn: Connection, ch: Channel) -> ChannelView:
    peer_host, peer_port = split_peer(conn.peer)
    confirm = ch.confirm
    return ChannelView(
        name=f"{connection_name(conn)} ({ch.id})",
        connection_name=connection_name(conn),
        number=ch.id,
        user=conn.username,
        vhost=conn.vhost_name,
        peer_host=peer_host,
        peer_port=peer_port,
        prefetch_count=ch.prefetch,
        global_prefetch_count=ch.global_prefetch,
        consumer_count=len(ch.consumers),
        confirm=confirm is not None,
        messages_unacknowledged=len(ch.unacked),
        messages_unconfirmed=_unconfirmed(confirm),
        state="closing" if ch.closing else "running",
    )


def _unconfirmed(confirm: Any) -> int:
    if confirm is None:
        return 0
    return max(0, int(confirm.next_seq) - int(getattr(confirm, "_next_out", confirm.next_seq)))
