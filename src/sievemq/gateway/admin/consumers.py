"""Consumers of every protocol, stream-protocol publishers and single-active-consumer groups."""

from __future__ import annotations

from typing import Any

from sievemq.gateway.admin.base import AdminBase
from sievemq.gateway.admin.connections import (
    connection_name,
    split_peer,
    stream_connection_name,
    user_of,
)
from sievemq.gateway.admin.views import (
    ConsumerFilterView,
    ConsumerView,
    SacGroupView,
    SacMemberView,
    StreamClientView,
    StreamConsumerView,
    StreamPublisherView,
)
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.stream.queue import ConsumerInfo, StreamQueue
from sievemq.gateway.session.connection import Connection
from sievemq.gateway.streamproto_session import sac
from sievemq.gateway.streamproto_session.connection import StreamConnection
from sievemq.gateway.streamproto_session.subscription import Subscription
from sievemq.storage import FilterStats


class ConsumersAdmin(AdminBase):
    """Consumers, stream-protocol publishers and single-active-consumer groups."""

    def list_consumers(
        self, vhost: str | None = None, stream: str | None = None
    ) -> list[ConsumerView]:
        """Live consumers with their filter, lag and filter statistics (those of this
        node's replicas of streams other nodes lead too)."""
        if stream is not None:
            in_vhost = self.broker.vhost(vhost or "/")
            if stream in in_vhost.classic.queues:
                queues = []
            else:
                queues = [self._readable(vhost or "/", stream)]  # 404 when neither
        else:
            queues = [q for q in self.broker.queues() if vhost is None or q.vhost == vhost]
            directory = self.broker.directory
            if directory is not None:
                copies = directory.replica_queues()
                queues += [q for q in copies if vhost is None or q.vhost == vhost]
        connections = {c.id: c for c in self._connections()}
        views = [_consumer_view(q, c, connections) for q in queues for c in list(q.consumers)]
        if stream is not None:
            classic = self.broker.vhost(vhost or "/").classic.queues.get(stream)
            classic_queues = [] if classic is None else [classic]
        else:
            classic_queues = [q for v in self._vhosts(vhost) for q in v.classic.queues.values()]
        views.extend(
            _classic_consumer_view(q, c, connections)
            for q in classic_queues
            for c in list(q.consumers)
        )
        wanted = {id(q) for q in queues}
        views.extend(
            _stream_subscription_view(conn, sub)
            for conn in self._stream_connections()
            for sub in list(conn.subscriptions.values())
            if sub.active and id(sub.queue) in wanted
        )
        return sorted(views, key=lambda v: (v.vhost, v.stream, v.consumer_tag))

    def list_stream_consumers(
        self, vhost: str | None = None, stream: str | None = None
    ) -> list[StreamConsumerView]:
        """Stream-protocol subscriptions, as the stream management plugin lists them."""
        views = [
            _stream_consumer_view(conn, sub)
            for conn in self._stream_connections()
            for sub in list(conn.subscriptions.values())
            if sub.active
        ]
        return sorted(
            (v for v in views if _matches(v, vhost, stream)),
            key=lambda v: (v.vhost, v.stream, v.connection_name, v.subscription_id),
        )

    def list_stream_publishers(
        self, vhost: str | None = None, stream: str | None = None
    ) -> list[StreamPublisherView]:
        views = [
            StreamPublisherView(
                **_stream_client(conn, pub.queue.vhost, pub.queue.name),
                publisher_id=pub.publisher_id,
                reference=pub.reference,
                published=pub.published,
                confirmed=pub.confirmed,
                errored=pub.errored,
            )
            for conn in self._stream_connections()
            for pub in list(conn.publishers.values())
        ]
        return sorted(
            (v for v in views if _matches(v, vhost, stream)),
            key=lambda v: (v.vhost, v.stream, v.connection_name, v.publisher_id),
        )

    def list_sac_groups(self, vhost: str | None = None) -> list[SacGroupView]:
        """Single-active-consumer groups with their members in the group's order (the one
        that is or will be active first on a plain stream)."""
        if self.stream_node is None:
            return []
        views = []
        for (group_vhost, stream, name), group in sorted(self.stream_node.sac.groups.items()):
            if vhost is not None and group_vhost != vhost:
                continue
            members = [
                SacMemberView(
                    subscription_id=m.sub.subscription_id,
                    connection_name=(
                        stream_connection_name(m.conn)
                        if isinstance(m.conn, StreamConnection)
                        else ""
                    ),
                    user=user_of(m.conn),
                    state=_SAC_STATES[m.state],
                    active=m.state == sac.ACTIVE,
                )
                for m in group.members
            ]
            views.append(SacGroupView(group_vhost, stream, name, group.partition_index, members))
        return views


_SAC_STATES = {
    sac.ACTIVE: "active",
    sac.ACTIVATING: "activating",
    sac.INACTIVE: "waiting",
    sac.DEACTIVATING: "deactivating",
}


def _matches(view: StreamClientView, vhost: str | None, stream: str | None) -> bool:
    return (vhost is None or view.vhost == vhost) and (stream is None or view.stream == stream)


def _stream_client(conn: StreamConnection, vhost: str, stream: str) -> dict[str, Any]:
    return {
        "vhost": vhost,
        "stream": stream,
        "connection_name": stream_connection_name(conn),
        "user": user_of(conn),
        "peer_host": conn.peer_host,
        "peer_port": conn.peer_port,
    }


def _stream_consumer_view(conn: StreamConnection, sub: Subscription) -> StreamConsumerView:
    member = sub.sac
    if isinstance(member, sac.SacMember):
        active = member.state == sac.ACTIVE
        status = "single_active" if active else "waiting"
        group: str | None = member.group.key[2]
    else:
        active, status, group = True, "up", None
    offset = sub.next_offset
    return StreamConsumerView(
        **_stream_client(conn, sub.queue.vhost, sub.queue.name),
        subscription_id=sub.subscription_id,
        credits=max(0, sub.credit),
        consumed=sub.delivered,
        offset=offset,
        offset_lag=max(0, sub.queue.stream.end_offset - offset),
        properties=dict(sub.properties),
        active=active,
        activity_status=status,
        group=group,
    )


def _stream_subscription_view(conn: StreamConnection, sub: Subscription) -> ConsumerView:
    """A stream-protocol subscription as RabbitMQ's stream plugin registers it with the
    queue: tag ``stream.subid-N``, no acks, no prefetch, Subscribe's properties as its
    arguments; its connection stands in for the channel (number 0)."""
    view = _stream_consumer_view(conn, sub)
    spec = sub.spec
    return ConsumerView(
        vhost=view.vhost,
        stream=view.stream,
        consumer_tag=f"stream.subid-{view.subscription_id}",
        connection_name=view.connection_name,
        channel_number=0,
        channel_name=view.connection_name,
        user=view.user,
        peer_host=view.peer_host,
        peer_port=view.peer_port,
        prefetch_count=0,
        credit=view.credits,
        active=view.active,
        arguments=dict(view.properties),
        consumer_name=view.properties.get("name"),
        position=view.offset,
        lag=view.offset_lag,
        filter=None
        if spec is None
        else ConsumerFilterView(
            list(spec.values), spec.match_unfiltered, "all" if spec.match_all else "any"
        ),
        sql=None,
        filter_stats=sub.filter_stats(),
        ack_required=False,
        activity_status=view.activity_status,
        protocol="stream",
    )


def _consumer_view(
    queue: StreamQueue, consumer: ConsumerInfo, connections: dict[int, Connection]
) -> ConsumerView:
    spec = consumer.spec
    connection = connections.get(consumer.connection_id)
    position = consumer.position
    end = queue.stream.end_offset
    arguments: dict[str, Any] = {}
    if spec is not None:
        arguments["x-stream-filter"] = list(spec.values)
        if spec.match_unfiltered:
            arguments["x-stream-match-unfiltered"] = True
    if consumer.sql_text is not None:
        arguments["x-stream-filter-sql"] = consumer.sql_text
    if consumer.consumer_name is not None:
        arguments["x-stream-consumer-name"] = consumer.consumer_name
    conn_name = connection_name(connection) if connection is not None else ""
    peer_host, peer_port = split_peer(connection.peer if connection is not None else "")
    return ConsumerView(
        vhost=queue.vhost,
        stream=queue.name,
        consumer_tag=consumer.tag,
        connection_name=conn_name,
        channel_number=consumer.channel_id,
        channel_name=f"{conn_name} ({consumer.channel_id})" if connection is not None else "",
        user=connection.username if connection is not None else "",
        peer_host=peer_host,
        peer_port=peer_port,
        prefetch_count=consumer.prefetch,
        credit=consumer.credit,
        active=True,
        arguments=arguments,
        consumer_name=consumer.consumer_name,
        position=position,
        lag=max(0, end - position),
        filter=None
        if spec is None
        else ConsumerFilterView(
            list(spec.values), spec.match_unfiltered, "all" if spec.match_all else "any"
        ),
        sql=consumer.sql_text,
        filter_stats=consumer.filter_stats(),
    )


def _classic_consumer_view(
    queue: ClassicQueue, consumer: Any, connections: dict[int, Connection]
) -> ConsumerView:
    """A basic.consume on a classic or quorum queue (no offsets, no filter)."""
    conn = consumer.channel.connection
    connection = connections.get(conn.id)
    conn_name = connection_name(connection) if connection is not None else ""
    peer_host, peer_port = split_peer(connection.peer if connection is not None else "")
    channel_id = consumer.channel.id
    arguments: dict[str, Any] = {}
    if consumer.priority:
        arguments["x-priority"] = consumer.priority
    return ConsumerView(
        vhost=queue.vhost,
        stream=queue.name,
        consumer_tag=consumer.tag,
        connection_name=conn_name,
        channel_number=channel_id,
        channel_name=f"{conn_name} ({channel_id})" if connection is not None else "",
        user=connection.username if connection is not None else "",
        peer_host=peer_host,
        peer_port=peer_port,
        prefetch_count=consumer.prefetch,
        credit=consumer.credit,
        active=bool(consumer.active),
        arguments=arguments,
        consumer_name=None,
        position=0,
        lag=0,
        filter=None,
        sql=None,
        filter_stats=FilterStats(),
        ack_required=not consumer.no_ack,
        exclusive=bool(consumer.exclusive),
    )
