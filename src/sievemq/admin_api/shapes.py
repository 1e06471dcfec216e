"""The facade's typed views in the shapes of RabbitMQ's management API (field names and
nesting as a RabbitMQ 3.10 node answers, plus RabbitMQ 4's stream fields)."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from sievemq.gateway.admin.views import (
    BindingView,
    ChannelView,
    ConnectionView,
    ConsumerView,
    ExchangeView,
    OverviewView,
    QueueView,
    RemoteQueueView,
    SacGroupView,
    StreamClientView,
    StreamConsumerView,
    StreamPublisherView,
    StreamView,
    UserView,
    VhostView,
)

EMULATED_RABBITMQ_VERSION = "3.13.7"


def details(rate: float) -> dict[str, float]:
    return {"rate": float(rate)}


def _lengths(messages: int, ready: int, unacked: int, rates: dict[str, float]) -> dict[str, Any]:
    """RabbitMQ's three queue lengths, each with its rate (negative while it shrinks)."""
    return {
        "messages": messages,
        "messages_details": details(rates.get("messages", 0.0)),
        "messages_ready": ready,
        "messages_ready_details": details(rates.get("messages_ready", 0.0)),
        "messages_unacknowledged": unacked,
        "messages_unacknowledged_details": details(rates.get("messages_unacknowledged", 0.0)),
    }


def queue(v: StreamView, consumers: list[ConsumerView], node: str, detail: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "arguments": v.arguments,
        "auto_delete": v.auto_delete,
        "consumers": v.consumers,
        "durable": v.durable,
        "effective_policy_definition": v.effective_policy_definition,
        "exclusive": v.exclusive,
        "leader": node,
        "members": [node],
        "memory": 0,
        "message_stats": {
            "publish": v.published,
            "publish_details": details(v.publish_rate),
            "deliver_get": v.delivered,
            "deliver_get_details": details(v.deliver_rate),
            "deliver": v.delivered,
            "deliver_details": details(v.deliver_rate),
            "ack": v.acked,
            "ack_details": details(v.ack_rate),
        },
        **_lengths(
            v.messages,
            v.messages - v.messages_unacknowledged,
            v.messages_unacknowledged,
            v.length_rates,
        ),
        "name": v.name,
        "node": node,
        "online": [node],
        "operator_policy": v.operator_policy,
        "policy": v.policy,
        "readers": {node: v.consumers},
        "state": "running",
        "type": "stream",
        "vhost": v.vhost,
        # RabbitMQ 4's stream fields
        "segments": v.segments,
        "first_timestamp": v.first_timestamp_ms,
        "committed_offset": v.last_offset,
        # what only SieveMQ knows
        "sievemq": {
            "bytes": v.bytes,
            "chunks": v.chunks,
            "first_offset": v.first_offset,
            "last_offset": v.last_offset,
            "last_timestamp": v.last_timestamp_ms,
            "filter_size_bytes": v.filter_size_bytes,
            "filter_stats": dict(vars(v.filter_stats)),
        },
    }
    if detail:
        out["consumer_details"] = [consumer(c, node) for c in consumers]
        out["deliveries"] = []
        out["incoming"] = []
    return out


def classic_message_stats(v: QueueView) -> dict[str, Any]:
    """RabbitMQ's per-queue counters, each with its rate."""
    return _stats(v.message_counts(), v.rates)


def _stats(counts: dict[str, int], rates: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(counts):
        out[key] = counts[key]
        out[key + "_details"] = details(rates.get(key, 0.0))
    return out


def remote_queue(q: RemoteQueueView) -> dict[str, Any]:
    """A queue another cluster node leads: what its etcd record says, named by its leader
    (``node``), with the message figures its leader last published into etcd and their age
    (``sievemq.figures_age_ms``; none while the leader is down or has not published yet)."""
    online = [q.leader] if q.leader_running else []
    out = {
        "name": q.name,
        "vhost": q.vhost,
        "type": q.type,
        "durable": True,
        "auto_delete": False,
        "exclusive": False,
        "arguments": q.arguments,
        "node": q.leader,
        "leader": q.leader,
        "members": [q.leader],
        "online": online,
        "state": "running" if q.leader_running else "down",
        "leader_epoch": q.epoch,
        **q.figures,
    }
    if q.figures_published is not None:
        age = max(int((time.time() - q.figures_published) * 1000), 0)
        out["sievemq"] = {"figures_age_ms": age}
    return out


def classic_queue(
    v: QueueView, node: str, consumers: list[ConsumerView] | None = None
) -> dict[str, Any]:
    """A classic or quorum queue (SieveMQ's queue log) in RabbitMQ's shape; with
    ``consumers`` (a single queue's page) also its ``consumer_details``."""
    out = {
        "arguments": v.arguments,
        "auto_delete": v.auto_delete,
        "consumers": v.consumers,
        "durable": v.durable,
        "effective_policy_definition": v.effective_policy_definition,
        "exclusive": v.exclusive,
        "memory": 0,
        "message_bytes": v.bytes,
        "message_bytes_paged_out": v.message_bytes_paged_out,
        "message_bytes_ram": v.message_bytes_ram,
        "messages_paged_out": v.messages_paged_out,
        "messages_ram": v.messages_ram,
        **_lengths(v.messages, v.messages_ready, v.messages_unacknowledged, v.length_rates),
        "name": v.name,
        "node": node,
        "operator_policy": v.operator_policy,
        "policy": v.policy,
        "state": "running",
        "type": v.type,
        "vhost": v.vhost,
        "message_stats": classic_message_stats(v),
    }
    if consumers is not None:
        out["consumer_details"] = [consumer(c, node) for c in consumers]
        out["deliveries"] = []
        out["incoming"] = []
    return out


def consumer(c: ConsumerView, node: str) -> dict[str, Any]:
    return {
        "arguments": c.arguments,
        "ack_required": c.ack_required,
        "active": c.active,
        "activity_status": c.activity_status or ("up" if c.active else "waiting"),
        "channel_details": {
            "connection_name": c.connection_name,
            "name": c.channel_name,
            "node": node,
            "number": c.channel_number,
            "peer_host": c.peer_host,
            "peer_port": c.peer_port,
            "user": c.user,
        },
        "consumer_tag": c.consumer_tag,
        "exclusive": c.exclusive,
        "prefetch_count": c.prefetch_count,
        "queue": {"name": c.stream, "vhost": c.vhost},
        "sievemq": {
            "consumer_name": c.consumer_name,
            "position": c.position,
            "offset_lag": c.lag,
            "credit": c.credit,
            "filter": None if c.filter is None else dict(vars(c.filter)),
            "sql": c.sql,
            "filter_stats": dict(vars(c.filter_stats)),
        },
    }


def _stream_client(c: StreamClientView, node: str) -> dict[str, Any]:
    return {
        "connection_details": {
            "name": c.connection_name,
            "node": node,
            "peer_host": c.peer_host,
            "peer_port": c.peer_port,
            "user": c.user,
        },
        "queue": {"name": c.stream, "vhost": c.vhost},
    }


def stream_consumer(c: StreamConsumerView, node: str) -> dict[str, Any]:
    """As the stream management plugin's ``/api/stream/consumers``, plus ``active`` and
    ``activity_status`` (RabbitMQ's ``/api/consumers`` fields) and the group's name."""
    return {
        **_stream_client(c, node),
        "subscription_id": c.subscription_id,
        "credits": c.credits,
        "consumed": c.consumed,
        "offset": c.offset,
        "offset_lag": c.offset_lag,
        "properties": c.properties,
        "active": c.active,
        "activity_status": c.activity_status,
        "sievemq": {"single_active_consumer_group": c.group},
    }


def stream_publisher(p: StreamPublisherView, node: str) -> dict[str, Any]:
    return {
        **_stream_client(p, node),
        "publisher_id": p.publisher_id,
        "reference": p.reference,
        "published": p.published,
        "confirmed": p.confirmed,
        "errored": p.errored,
    }


def sac_group(g: SacGroupView) -> dict[str, Any]:
    """A SieveMQ extension (RabbitMQ lists groups only in ``rabbitmq-streams
    list_stream_consumer_groups``, whose column names these follow)."""
    return {
        "vhost": g.vhost,
        "stream": g.stream,
        "reference": g.name,
        "partition_index": g.partition_index,
        "consumers": [
            {
                "subscription_id": m.subscription_id,
                "connection_name": m.connection_name,
                "state": m.state,
                "active": m.active,
            }
            for m in g.consumers
        ],
    }


def connection(c: ConnectionView, node: str) -> dict[str, Any]:
    out = {
        "auth_mechanism": c.auth_mechanism,
        "channel_max": c.channel_max,
        "channels": c.channels,
        "client_properties": c.client_properties,
        "connected_at": c.connected_at,
        "frame_max": c.frame_max,
        "host": c.host,
        "name": c.name,
        "node": node,
        "peer_cert_issuer": None,
        "peer_cert_subject": None,
        "peer_cert_validity": None,
        "peer_host": c.peer_host,
        "peer_port": c.peer_port,
        "port": c.port,
        "protocol": c.protocol,
        "ssl": c.ssl,
        "state": c.state,
        "timeout": c.timeout,
        "type": c.type,
        "user": c.user,
        "user_provided_name": c.user_provided_name,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
    }
    if c.recv_oct is not None:  # the socket's counts (Linux TCP_INFO)
        out.update(
            recv_cnt=c.recv_cnt,
            recv_oct=c.recv_oct,
            recv_oct_details=details(c.recv_oct_rate),
            send_cnt=c.send_cnt,
            send_oct=c.send_oct,
            send_oct_details=details(c.send_oct_rate),
        )
    return out


def channel(c: ChannelView, node: str) -> dict[str, Any]:
    return {
        "acks_uncommitted": 0,
        "confirm": c.confirm,
        "connection_details": {
            "name": c.connection_name,
            "peer_host": c.peer_host,
            "peer_port": c.peer_port,
        },
        "consumer_count": c.consumer_count,
        "global_prefetch_count": c.global_prefetch_count,
        "messages_unacknowledged": c.messages_unacknowledged,
        "messages_uncommitted": 0,
        "messages_unconfirmed": c.messages_unconfirmed,
        "name": c.name,
        "node": node,
        "number": c.number,
        "prefetch_count": c.prefetch_count,
        "state": c.state,
        "transactional": False,
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
    }


def exchange(x: ExchangeView) -> dict[str, Any]:
    out = {
        "arguments": x.arguments,
        "auto_delete": x.auto_delete,
        "durable": x.durable,
        "internal": x.internal,
        "name": x.name,
        "type": x.type,
        "user_who_performed_action": "rmq-internal",
        "vhost": x.vhost,
    }
    if x.policy is not None:  # as RabbitMQ: only when one applies
        out["policy"] = x.policy
    return out


def user(u: UserView) -> dict[str, Any]:
    return {
        "name": u.name,
        "password_hash": u.password_hash,
        "hashing_algorithm": u.hashing_algorithm,
        "tags": u.tags,
        "limits": u.limits,
    }


def binding(b: BindingView) -> dict[str, Any]:
    return {
        "source": b.source,
        "vhost": b.vhost,
        "destination": b.destination,
        "destination_type": b.destination_type,
        "routing_key": b.routing_key,
        "arguments": b.arguments,
        "properties_key": b.properties_key,
    }


def vhost(v: VhostView, node: str) -> dict[str, Any]:
    return {
        "cluster_state": {node: "running"},
        "default_queue_type": v.default_queue_type,
        "description": v.description,
        **_lengths(v.messages, v.messages_ready, v.messages_unacknowledged, v.length_rates),
        "metadata": {
            "description": v.description,
            "tags": v.tags,
            "default_queue_type": v.default_queue_type,
        },
        "name": v.name,
        "tags": v.tags,
        "tracing": False,
    }


def overview(o: OverviewView, exchange_types: list[str]) -> dict[str, Any]:
    t = o.totals
    return {
        "management_version": EMULATED_RABBITMQ_VERSION,
        "rates_mode": "basic",
        "exchange_types": [
            {"name": name, "description": f"AMQP {name} exchange", "enabled": True}
            for name in exchange_types
        ],
        "product_version": o.product_version,
        "product_name": o.product_name,
        "rabbitmq_version": EMULATED_RABBITMQ_VERSION,
        "cluster_name": o.node,
        "erlang_version": "none",
        "disable_stats": False,
        "enable_queue_totals": True,
        "message_stats": _stats(t.message_stats, t.message_rates),
        "queue_totals": _lengths(
            t.messages,
            t.messages - t.messages_unacknowledged,
            t.messages_unacknowledged,
            t.length_rates,
        ),
        "object_totals": {
            "channels": t.channels,
            "connections": t.connections,
            "consumers": t.consumers,
            "exchanges": t.exchanges,
            "queues": t.queues,
        },
        "node": o.node,
        "listeners": [
            {"node": o.node, "protocol": li.protocol, "ip_address": li.ip_address, "port": li.port}
            for li in o.listeners
        ],
        "contexts": [
            {"node": o.node, "description": "SieveMQ admin", "path": "/", "port": str(li.port)}
            for li in o.listeners
            if li.protocol == "http"
        ],
        "sievemq": {
            "uptime_ms": o.uptime_ms,
            "alarms": o.alarms,
            "bytes": t.bytes,
            "vhosts": t.vhosts,
            "users": t.users,
            "filter_stats": asdict(o.filter_stats),
        },
    }
