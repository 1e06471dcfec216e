"""Typed read views and commands over the broker, for the admin plane.

The admin API imports only this module. Every view is a dataclass (FastAPI turns them into
the OpenAPI schemas of SieveMQ's own endpoints; the RabbitMQ-shaped answers are built from
them in ``admin_api``). Refusals raise the same ``amqp.errors`` classes as the AMQP side
(404 NotFound, 406 PreconditionFailed, 403 AccessRefused, 540 NotImplemented_ ...), whose
``explanation`` is the text RabbitMQ would send; the API maps them to HTTP statuses.

Everything here runs on the event loop and never blocks on the network. Reading messages
(``browse``) reads the stream files with ``pread`` under a time budget and a byte cap.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import hashlib
import json
import logging
import platform
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from pamqp.commands import Basic

from sievemq.amqp import properties as amqp_properties
from sievemq.amqp.errors import (
    AccessRefused,
    AMQPError,
    ConnectionForced,
    NotAllowed,
    NotFound,
    NotImplemented_,
    PreconditionFailed,
    ResourceLocked,
)
from sievemq.filtering.sql import CompileError, compile_filter
from sievemq.filtering.subscriptions import registry
from sievemq.filtering.view import sql_predicate
from sievemq.gateway.model import policies
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.classic.arguments import (
    CLASSIC_TYPE_NAME,
    QUORUM_TYPE_NAME,
    validate_declare,
)
from sievemq.gateway.model.classic.queue import MESSAGE_STATS_KEYS, ClassicQueue
from sievemq.gateway.model.classic.queue import message_stats as classic_message_stats
from sievemq.gateway.model.exchanges import EXCHANGE_TYPES, Exchange
from sievemq.gateway.model.routing import Binding
from sievemq.gateway.model.stream.arguments import (
    DEFAULT_QUEUE_TYPE,
    MAX_CONSUMER_NAME_BYTES,
    STREAM_TYPE_ALIASES,
    parse_filter_values,
    purge_not_supported,
    validate_stream_declare,
)
from sievemq.gateway.model.stream.queue import ConsumerInfo, FilterStats, StreamQueue
from sievemq.gateway.model.users import (
    HASHING_ALGORITHMS,
    SHA256,
    Permission,
    User,
    check_regex,
    hash_password,
    valid_hash,
)
from sievemq.gateway.model.vhost import VirtualHost
from sievemq.gateway.net.tcp_info import socket_counts
from sievemq.gateway.rates import SAMPLE_INTERVAL_S, Key, RateSampler
from sievemq.gateway.runtime.alarms import ResourceAlarms, blocked_reason, total_memory
from sievemq.gateway.session.connection import Connection
from sievemq.gateway.streamproto_session import sac
from sievemq.gateway.streamproto_session.connection import StreamConnection
from sievemq.gateway.streamproto_session.node import StreamNode
from sievemq.gateway.streamproto_session.subscription import Subscription
from sievemq.storage import FilterSpec, Message, Record
from sievemq.storage.advice import false_positive_rate, stream_filter_advice
from sievemq.streamproto.convert import to_amqp091
from sievemq.units import parse_memory_watermark, parse_size

if TYPE_CHECKING:
    from sievemq.gateway.runtime.node import Node
    from sievemq.gateway.session.channel import Channel

RABBITMQ_MAX_FILTER_BYTES = 255  # larger filters are a SieveMQ extension
PRODUCT = "SieveMQ"
log = logging.getLogger(__name__)
BROWSE_MAX_LIMIT = 1000
# filter advice reads up to 1,000 chunk headers: computed at most once per this many seconds
# per stream and parameters (a dashboard refreshes every 5 s), the last answer meanwhile
ADVICE_CACHE_S = 30.0
ADVICE_CACHE_MAX = 256
_advice_clock = time.monotonic  # (a test's clock)
BROWSE_MAX_BYTES = 4 * 1024 * 1024
BROWSE_TIME_BUDGET_S = 0.05

__all__ = [
    "BROWSE_MAX_LIMIT",
    "EXCHANGE_TYPES",
    "USER_LIMITS",
    "VHOST_LIMITS",
    "AMQPError",
    "AccessRefused",
    "BrokerFacade",
    "HistogramView",
    "NotAllowed",
    "NotFound",
    "NotImplemented_",
    "PreconditionFailed",
    "QueueView",
]


# --------------------------------------------------------------------------- views


@dataclass
class FilterStatsView:
    """Filter and delivery counters, of a stream or of one consumer (docs/admin-api.md)."""

    chunks_scanned: int = 0
    chunks_skipped: int = 0
    chunks_false_positive: int = 0
    chunks_skipped_subscription: int = 0
    records_matched: int = 0
    records_skipped: int = 0
    records_skipped_by_bloom: int = 0
    bytes_read: int = 0
    messages_delivered: int = 0
    bytes_delivered: int = 0
    sql_errors: int = 0


@dataclass
class StreamView:
    """One stream queue: its arguments, storage facts, rates and filter statistics."""

    vhost: str
    name: str
    arguments: dict[str, Any]
    messages: int
    bytes: int
    segments: int
    chunks: int
    first_offset: int
    last_offset: int | None
    first_timestamp_ms: int | None
    last_timestamp_ms: int | None
    consumers: int
    published: int  # messages appended since the stream was created (its end offset)
    publish_rate: float
    delivered: int
    deliver_rate: float
    filter_size_bytes: int
    filter_stats: FilterStatsView
    messages_unacknowledged: int = 0  # delivered to AMQP consumers, credit not back yet
    acked: int = 0  # AMQP consumers' deliveries settled by basic.ack (RabbitMQ's ``ack``)
    ack_rate: float = 0.0
    # per second over the last RATE_WINDOW_S: messages, messages_ready, messages_unacknowledged
    length_rates: dict[str, float] = field(default_factory=dict)
    durable: bool = True
    auto_delete: bool = False
    exclusive: bool = False
    type: str = "stream"
    policy: str | None = None
    operator_policy: str | None = None
    effective_policy_definition: dict[str, Any] = field(default_factory=dict)


@dataclass
class QueueView:
    """A classic or quorum queue (SieveMQ's queue log; no filtering statistics)."""

    vhost: str
    name: str
    type: str  # classic | quorum
    durable: bool
    auto_delete: bool
    exclusive: bool
    arguments: dict[str, Any]
    messages: int
    messages_ready: int
    messages_unacknowledged: int
    bytes: int
    consumers: int
    published: int = 0
    publish_rate: float = 0.0
    delivered: int = 0  # consumer deliveries and basic.get, all taken
    deliver_rate: float = 0.0
    got: int = 0  # of them by basic.get with acks
    got_no_ack: int = 0
    delivered_no_ack: int = 0  # to consumers without acks
    redelivered: int = 0
    get_empty: int = 0
    acked: int = 0  # client acks
    policy: str | None = None
    operator_policy: str | None = None
    effective_policy_definition: dict[str, Any] = field(default_factory=dict)
    # per second over the last RATE_WINDOW_S, keyed by RabbitMQ's message_stats names
    rates: dict[str, float] = field(default_factory=dict)
    # and of its lengths: messages, messages_ready, messages_unacknowledged
    length_rates: dict[str, float] = field(default_factory=dict)

    def message_counts(self) -> dict[str, int]:
        """RabbitMQ's per-queue ``message_stats`` counters."""
        return classic_message_stats(self)


@dataclass
class GotMessage:
    """One message of POST /api/queues/{vhost}/{name}/get, as RabbitMQ shows it."""

    payload_bytes: int
    redelivered: bool
    exchange: str
    routing_key: str
    message_count: int  # ready messages left after this one was taken
    properties: dict[str, Any]
    payload: str
    payload_encoding: Literal["string", "base64"]


VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")
LIMITS_COMPONENT = "vhost-limits"  # vhost limits as RabbitMQ's runtime parameter
GET_ACKMODES = (
    "ack_requeue_true",
    "ack_requeue_false",
    "reject_requeue_true",
    "reject_requeue_false",
)


@dataclass
class ConsumerFilterView:
    values: list[str]
    match_unfiltered: bool
    match_type: Literal["any", "all"]


@dataclass
class ConsumerView:
    vhost: str
    stream: str
    consumer_tag: str
    connection_name: str
    channel_number: int
    channel_name: str
    user: str
    peer_host: str
    peer_port: int
    prefetch_count: int
    credit: int
    active: bool
    arguments: dict[str, Any]
    consumer_name: str | None
    position: int  # the next offset it will read
    lag: int  # messages stored after its position
    filter: ConsumerFilterView | None
    sql: str | None
    filter_stats: FilterStatsView
    ack_required: bool = True
    exclusive: bool = False
    activity_status: str = ""  # "" = up when active, waiting when not
    protocol: str = "AMQP 0-9-1"  # or "stream" for a stream-protocol subscription


@dataclass
class ConnectionView:
    name: str
    id: int
    user: str
    vhost: str
    peer_host: str
    peer_port: int
    host: str
    port: int
    ssl: bool
    client_properties: dict[str, Any]
    user_provided_name: str | None
    channels: int
    channel_max: int
    frame_max: int
    timeout: int
    connected_at: int  # ms since the epoch
    state: str  # running | blocked | closing
    blocked_reason: str
    protocol: str = "AMQP 0-9-1"
    auth_mechanism: str = "PLAIN"
    type: str = "network"
    # the socket's counts (None where the kernel has no TCP_INFO) and the octets' rates
    recv_oct: int | None = None
    send_oct: int | None = None
    recv_cnt: int | None = None
    send_cnt: int | None = None
    recv_oct_rate: float = 0.0
    send_oct_rate: float = 0.0


@dataclass
class StreamClientView:
    """Who a stream-protocol consumer or publisher belongs to (RabbitMQ's
    ``connection_details``) and where it reads or writes."""

    vhost: str
    stream: str
    connection_name: str
    user: str
    peer_host: str
    peer_port: int


@dataclass
class StreamConsumerView(StreamClientView):
    """One Subscribe of a stream-protocol connection (RabbitMQ's stream consumer metrics)."""

    subscription_id: int
    credits: int
    consumed: int  # messages delivered
    offset: int  # the next offset it would receive
    offset_lag: int  # messages stored after it
    properties: dict[str, str]
    active: bool
    activity_status: str  # up | single_active | waiting (RabbitMQ's)
    group: str | None  # its single-active-consumer group's name


@dataclass
class StreamPublisherView(StreamClientView):
    publisher_id: int
    reference: str
    published: int
    confirmed: int
    errored: int


@dataclass
class SacMemberView:
    subscription_id: int
    connection_name: str
    user: str
    state: str  # active | activating | waiting | deactivating
    active: bool


@dataclass
class SacGroupView:
    """A single-active-consumer group: one name on one stream (or super-stream partition)."""

    vhost: str
    stream: str
    name: str
    partition_index: int  # -1 unless the members subscribed as a super-stream partition
    consumers: list[SacMemberView]


@dataclass
class ChannelView:
    name: str
    connection_name: str
    number: int
    user: str
    vhost: str
    peer_host: str
    peer_port: int
    prefetch_count: int
    global_prefetch_count: int
    consumer_count: int
    confirm: bool
    messages_unacknowledged: int
    messages_unconfirmed: int
    state: str


@dataclass
class ExchangeView:
    vhost: str
    name: str
    type: str
    durable: bool
    auto_delete: bool
    internal: bool
    arguments: dict[str, Any]
    policy: str | None = None


@dataclass
class BindingView:
    vhost: str
    source: str
    destination: str
    destination_type: str
    routing_key: str
    arguments: dict[str, Any]
    properties_key: str


@dataclass
class VhostView:
    name: str
    description: str
    tags: list[str]
    default_queue_type: str
    messages: int
    streams: int
    exchanges: int
    connections: int
    messages_ready: int = 0
    messages_unacknowledged: int = 0
    length_rates: dict[str, float] = field(default_factory=dict)


@dataclass
class UserView:
    name: str
    password_hash: str
    hashing_algorithm: str
    tags: list[str]
    limits: dict[str, Any] = field(default_factory=dict)


@dataclass
class PermissionView:
    user: str
    vhost: str
    configure: str
    write: str
    read: str


@dataclass
class ListenerView:
    protocol: str
    ip_address: str
    port: int


@dataclass
class Totals:
    connections: int
    channels: int
    consumers: int
    exchanges: int
    queues: int
    vhosts: int
    users: int
    messages: int
    bytes: int
    published: int
    publish_rate: float
    delivered: int
    deliver_rate: float
    # RabbitMQ's overview message_stats (every queue type, plus the node's confirms and
    # unroutable publishes) and their rates per second
    message_stats: dict[str, int] = field(default_factory=dict)
    messages_unacknowledged: int = 0  # classic and quorum deliveries not settled yet
    message_rates: dict[str, float] = field(default_factory=dict)
    # the same counters per queue type (classic, quorum, stream) for Prometheus
    by_type: dict[str, dict[str, int]] = field(default_factory=dict)
    # messages received / routed / confirmed, once each, per protocol ("amqp091": AMQP
    # 0-9-1 and HTTP publishes; "stream": the stream protocol's) for Prometheus
    by_protocol: dict[str, dict[str, int]] = field(default_factory=dict)
    # rates of the queue totals: messages, messages_ready, messages_unacknowledged
    length_rates: dict[str, float] = field(default_factory=dict)


@dataclass
class OverviewView:
    product_name: str
    product_version: str
    node: str
    uptime_ms: int
    listeners: list[ListenerView]
    totals: Totals
    alarms: list[str]
    filter_stats: FilterStatsView


@dataclass
class Principal:
    """An authenticated user as the admin plane sees it."""

    name: str
    tags: list[str]
    permissions: dict[str, PermissionView]

    @property
    def is_administrator(self) -> bool:
        return "administrator" in self.tags

    @property
    def may_monitor(self) -> bool:
        return "administrator" in self.tags or "monitoring" in self.tags

    @property
    def may_manage(self) -> bool:
        """May use the management UI/API at all (RabbitMQ: any of these tags)."""
        return bool(set(self.tags) & {"administrator", "monitoring", "management", "policymaker"})

    def may_see(self, vhost: str) -> bool:
        return self.may_monitor or vhost in self.permissions

    def allows(self, vhost: str, kind: str, name: str) -> bool:
        perm = self.permissions.get(vhost)
        if perm is None:
            return False
        return Permission(perm.configure, perm.write, perm.read).allows(kind, name)


@dataclass
class BrowsedMessage:
    offset: int
    timestamp_ms: int
    exchange: str
    routing_key: str
    filter_values: list[str]
    properties: dict[str, Any]
    payload: str
    payload_encoding: Literal["string", "base64"]
    payload_bytes: int


@dataclass
class BrowseResult:
    """Messages read without consuming. ``next_offset`` is where to continue; ``complete``
    is False when the scan stopped at the limit, the byte cap or the time budget."""

    messages: list[BrowsedMessage]
    next_offset: int
    end_offset: int
    complete: bool
    stopped_by: Literal["end", "limit", "bytes", "time"]


@dataclass
class ConsumerOffsetView:
    stream: str
    vhost: str
    consumer: str
    offset: int
    lag: int


@dataclass
class FilterAdviceView:
    vhost: str
    name: str
    target_false_positive_rate: float
    recommended_filter_size_bytes: int
    expected_false_positive_rate: float
    reachable: bool
    distinct_values_per_chunk_p95: float
    chunks_sampled: int
    current_filter_size_bytes: int
    current_false_positive_rate: float
    rabbitmq_compatible: bool


@dataclass
class SubscriptionView:
    slot: int
    consumer: str
    expression: str
    active: bool


@dataclass
class Definitions:
    """RabbitMQ's definitions document (the subset SieveMQ holds)."""

    rabbit_version: str
    rabbitmq_version: str
    product_name: str
    product_version: str
    users: list[dict[str, Any]]
    vhosts: list[dict[str, Any]]
    permissions: list[dict[str, Any]]
    topic_permissions: list[dict[str, Any]]
    parameters: list[dict[str, Any]]
    global_parameters: list[dict[str, Any]]
    policies: list[dict[str, Any]]
    queues: list[dict[str, Any]]
    exchanges: list[dict[str, Any]]
    bindings: list[dict[str, Any]]


@dataclass
class PolicyView:
    """A policy or operator policy, as ``/api/policies`` shows it (``apply-to`` spelled
    ``apply_to`` here)."""

    vhost: str
    name: str
    pattern: str
    apply_to: str
    definition: dict[str, Any]
    priority: int | float

    def to_json(self) -> dict[str, Any]:
        """As RabbitMQ shows it (``/api/policies``, definitions files)."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": self.definition,
            "priority": self.priority,
        }


@dataclass
class ParameterView:
    """A runtime parameter (component, vhost, name, value) or a global one (no component)."""

    component: str
    vhost: str
    name: str
    value: Any


@dataclass
class HistogramView:
    """A latency histogram: cumulative (upper bound in seconds, count) pairs, sum, count."""

    buckets: list[tuple[float, int]]
    sum: float
    count: int


@dataclass
class WriteLatencyView:
    append: HistogramView
    fsync: HistogramView


class BadRequest(PreconditionFailed):
    """Input the admin plane refuses (HTTP 400 bad_request); nothing was changed."""


# --------------------------------------------------------------------------- the facade


class BrokerFacade:
    """What the admin plane may see and do."""

    def __init__(
        self,
        broker: Broker,
        version: str = "0.1.0",
        alarms: ResourceAlarms | None = None,
        node: Node | None = None,
    ) -> None:
        self.broker = broker
        self.version = version
        self.started = time.time()
        self.alarms = alarms
        self.node = node
        self.listeners: list[ListenerView] = []
        self.stream_node: StreamNode | None = None  # the stream-protocol listener's state
        self.node_name = "sievemq@" + (platform.node() or "localhost")
        self._rates = RateSampler()
        self.sampler: asyncio.Task[None] | None = None
        # the sampler's last round: the queues' rates summed, node-wide and per vhost (the
        # rate of a sum is the sum of the rates; an idle stream, not open, adds 0)
        self._summed_rates: dict[str, float] = {}
        self._vhost_rates: dict[str, dict[str, float]] = {}
        # filter advice per (vhost, stream, target, chunks): (computed at, its queue, view)
        self._advice: dict[tuple[str, str, float, int], tuple[float, Any, FilterAdviceView]] = {}

    # ------------------------------------------------------------------ auth

    def authenticate(self, username: str, password: str, peer_host: str) -> Principal | None:
        """The user when the password matches and it may log in from ``peer_host``."""
        user = self.broker.authenticate(username, password)
        if user is None or not user.may_connect_from(peer_host):
            return None
        return _principal(user)

    # ------------------------------------------------------------------ overview

    def overview(self, streams: list[StreamView] | None = None) -> OverviewView:
        """Totals over every stream (``streams``: the views of all of them, when the caller
        already has them)."""
        now = time.time()
        queues = list(self.broker.queues())
        subscribed = self._stream_subscribers()
        views = (
            streams
            if streams is not None
            else [self._stream_view(q, now, subscribed) for q in queues]
        )
        connections = self._connections()
        totals = Totals(
            connections=len(connections),
            channels=sum(len(c.channels) for c in connections),
            consumers=sum(q.consumer_count for q in queues) + sum(subscribed.values()),
            exchanges=sum(len(v.exchanges) for v in self.broker.vhosts.values()),
            queues=len(queues),
            vhosts=len(self.broker.vhosts),
            users=len(list(self.broker.users)),
            messages=sum(v.messages for v in views),
            bytes=sum(v.bytes for v in views),
            published=sum(v.published for v in views),
            publish_rate=round(sum(v.publish_rate for v in views), 1),
            delivered=sum(v.delivered for v in views),
            deliver_rate=round(sum(v.deliver_rate for v in views), 1),
        )
        by_type = self._counts_by_type(views)
        stats = {k: sum(t[k] for t in by_type.values()) for k in _classic_counts_keys()}
        counters = self.broker.counters
        unroutable = counters.returned_unroutable + counters.dropped_unroutable
        # messages published, once each however many queues took a copy (RabbitMQ's
        # overview counts them at the channel), over both protocols
        stats["publish"] = counters.received + counters.stream_received
        stats["confirm"] = counters.confirmed
        stats["return_unroutable"] = counters.returned_unroutable
        stats["drop_unroutable"] = counters.dropped_unroutable
        totals.by_protocol = {
            "amqp091": {
                "received": counters.received,
                "routed": counters.received - unroutable,
                "confirmed": counters.confirmed,
            },
            "stream": {
                "received": counters.stream_received,
                "routed": counters.stream_routed,
                "confirmed": counters.stream_confirmed,
            },
        }
        totals.message_stats = stats
        totals.by_type = by_type
        totals.published = stats["publish"]
        totals.delivered = stats["deliver_get"]
        for vh in self.broker.vhosts.values():
            totals.queues += len(vh.classic.queues)
            for cq in vh.classic.queues.values():
                totals.consumers += cq.consumer_count
                totals.messages += cq.message_count + cq.outstanding
                totals.messages_unacknowledged += cq.outstanding
                totals.bytes += cq.ready_bytes
        totals.messages_unacknowledged += sum(v.messages_unacknowledged for v in views)
        node_counts = {k: stats[k] for k in _NODE_COUNTS}
        rates = {
            **self._summed_rates,
            **self._rates.rates(("o",), *_split(node_counts), now, len(node_counts)),
        }
        totals.message_rates = {k: rates.get(k, 0.0) for k in stats}
        totals.length_rates = {k: rates.get(k, 0.0) for k in LENGTHS}
        totals.publish_rate = totals.message_rates["publish"]
        totals.deliver_rate = totals.message_rates["deliver_get"]
        summed = FilterStats()
        sums = vars(summed)
        for q in queues:
            for name, value in vars(q.filter_stats).items():
                sums[name] += value
        return OverviewView(
            product_name=PRODUCT,
            product_version=self.version,
            node=self.node_name,
            uptime_ms=int((now - self.started) * 1000),
            listeners=list(self.listeners),
            totals=totals,
            alarms=self.active_alarms(),
            filter_stats=FilterStatsView(**summed.as_dict()),
        )

    def _counts_by_type(self, streams: list[StreamView]) -> dict[str, dict[str, int]]:
        """message_stats counters summed per queue type; a stream's deliveries are
        consumer deliveries with acks (streams have no basic.get)."""
        zero = dict.fromkeys(_classic_counts_keys(), 0)
        out = {"classic": dict(zero), "quorum": dict(zero), "stream": dict(zero)}
        for v in self.broker.vhosts.values():
            for q in v.classic.queues.values():
                sums = out["quorum" if q.kind == "quorum" else "classic"]
                for k, n in classic_message_stats(q).items():
                    sums[k] += n
        st = out["stream"]
        for sv in streams:
            st["publish"] += sv.published
            st["deliver"] += sv.delivered
            st["deliver_get"] += sv.delivered
            st["ack"] += sv.acked
        for kind, counts in self.broker.counters.retired.items():  # deleted queues' counts
            for k, n in counts.items():
                out[kind][k] += n
        return out

    def active_alarms(self) -> list[str]:
        if self.alarms is None:
            return []
        return list(self.alarms.snapshot().get("active", []))

    def vhost_exists(self, vhost: str) -> bool:
        return vhost in self.broker.vhosts

    # ------------------------------------------------------------------ streams

    def list_streams(self, vhost: str | None = None) -> list[StreamView]:
        return list(self.iter_streams(vhost))

    def iter_streams(self, vhost: str | None = None) -> Iterator[StreamView]:
        """The streams' views one at a time, so that a caller on the event loop can yield
        to it between them. The set of streams is taken when iteration starts; a stream
        deleted before its turn is left out."""
        now = time.time()
        queues = [q for q in self.broker.queues() if vhost is None or q.vhost == vhost]
        subscribed = self._stream_subscribers()
        for q in queues:
            if self._still_declared(q):
                yield self._stream_view(q, now, subscribed)

    def _still_declared(self, queue: Any) -> bool:
        v = self.broker.vhosts.get(queue.vhost)
        if v is None:
            return False
        return v.queues.get(queue.name) is queue or v.classic.queues.get(queue.name) is queue

    def get_stream(self, vhost: str, name: str) -> StreamView:
        return self._stream_view(self._queue(vhost, name), time.time(), self._stream_subscribers())

    def stream_exists(self, vhost: str, name: str) -> bool:
        v = self.broker.vhosts.get(vhost)
        return v is not None and name in v.queues

    def declare_stream(
        self,
        vhost: str,
        name: str,
        arguments: dict[str, Any] | None = None,
        durable: bool = True,
        auto_delete: bool = False,
        exclusive: bool = False,
    ) -> bool:
        """queue.declare with the AMQP rules and texts; True when it was created."""
        v = self.broker.vhost(vhost)
        existed = name in v.queues
        v.declare_queue(
            name,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=dict(arguments or {}),
        )
        return not existed

    def create_stream(
        self, vhost: str, name: str, arguments: dict[str, Any] | None = None
    ) -> StreamView:
        """Declare (or idempotently redeclare) a stream; ``x-queue-type`` defaults to stream."""
        args = dict(arguments or {})
        args.setdefault("x-queue-type", "stream")
        self.declare_stream(vhost, name, args)
        return self.get_stream(vhost, name)

    def list_queues(self, vhost: str | None = None) -> list[QueueView]:
        """The classic and quorum queues (streams are ``list_streams``)."""
        return list(self.iter_queues(vhost))

    def iter_queues(self, vhost: str | None = None) -> Iterator[QueueView]:
        """``list_queues`` one view at a time (see ``iter_streams``)."""
        now = time.time()
        queues = [
            q
            for v in self._vhosts(vhost)
            for q in sorted(v.classic.queues.values(), key=lambda q: q.name)
        ]
        for q in queues:
            if self._still_declared(q):
                yield self._queue_view(q, now)

    def get_queue(self, vhost: str, name: str) -> QueueView:
        """A classic or quorum queue; 404 for a stream or a missing queue."""
        q = self.broker.vhost(vhost).classic.queues.get(name)
        if q is None:
            raise NotFound(f"no queue '{name}' in vhost '{vhost}'")
        return self._queue_view(q, time.time())

    def get_messages(
        self,
        vhost: str,
        name: str,
        count: int,
        ackmode: str,
        encoding: str = "auto",
        truncate: int | None = None,
    ) -> list[GotMessage]:
        """RabbitMQ's POST .../get on a classic or quorum queue: take up to ``count`` ready
        messages (as basic.get would), then settle them all by ``ackmode``: requeued
        (``ack_requeue_true``, ``reject_requeue_true``: back at their places, redelivered),
        acknowledged (``ack_requeue_false``) or rejected (``reject_requeue_false``:
        dead-lettered when the queue says so). ``encoding`` auto shows a UTF-8 payload as
        a string and anything else as base64; ``truncate`` cuts the shown payload."""
        if ackmode not in GET_ACKMODES:
            raise BadRequest(f"unknown ackmode '{ackmode}'")
        if encoding not in ("auto", "base64"):
            raise BadRequest(f"unknown encoding '{encoding}'")
        q = self._settled_classic(self.broker.vhost(vhost), name)
        taken = []
        out: list[GotMessage] = []
        for _ in range(max(0, count)):
            msg = q.take()
            if msg is None:
                break
            if ackmode == "ack_requeue_false":
                q.got_no_ack += 1  # RabbitMQ takes these with basic.get no-ack
            else:
                q.got += 1
            taken.append(msg)
            body = msg.body if truncate is None else msg.body[: max(0, truncate)]
            text: str | None = None
            if encoding == "auto":
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
            out.append(
                GotMessage(
                    payload_bytes=len(msg.body),
                    redelivered=msg.redelivered,
                    exchange=msg.exchange,
                    routing_key=msg.routing_key,
                    message_count=q.message_count,
                    properties=decode_properties(msg.properties),
                    payload=text if text is not None else base64.b64encode(body).decode(),
                    payload_encoding="string" if text is not None else "base64",
                )
            )
        if taken:
            if ackmode.endswith("requeue_true"):
                q.requeue(taken)
            elif ackmode == "ack_requeue_false":
                q.ack(taken, client=False)
            else:
                q.reject(taken)
        return out

    def purge_queue(self, vhost: str, name: str) -> int:
        """queue.purge of a classic or quorum queue: drop its ready messages (unacked ones
        stay); how many. A stream is 540 (as on AMQP), a missing queue 404, another
        connection's exclusive queue 405."""
        v = self.broker.vhost(vhost)
        if name in v.queues:
            raise purge_not_supported(name, vhost)
        return self._settled_classic(v, name).purge()

    def _settled_classic(self, v: VirtualHost, name: str) -> ClassicQueue:
        """A classic or quorum queue for an admin get or purge: 404 when missing, 405 when
        another connection's exclusive queue; what publishes left buffered for it is
        enqueued first."""
        q = v.classic.queues.get(name)
        if q is None:
            raise NotFound(f"no queue '{name}' in vhost '{v.name}'")
        if q.owner is not None:
            raise ResourceLocked(
                f"cannot obtain exclusive access to locked queue '{name}' in vhost '{v.name}'"
            )
        if self.node is not None:
            self.node.flush_classic(q)
        return q

    def delete_queue(self, vhost: str, name: str) -> None:
        """Delete a queue of any type; 404 when missing."""
        v = self.broker.vhost(vhost)
        v.find_queue(name)
        v.delete_queue(name)

    def delete_stream(self, vhost: str, name: str) -> int:
        v = self.broker.vhost(vhost)
        v.get_queue(name)  # 404 when missing
        return v.delete_queue(name)

    # ------------------------------------------------------------------ consumers

    def list_consumers(
        self, vhost: str | None = None, stream: str | None = None
    ) -> list[ConsumerView]:
        """Live consumers with their filter, lag and filter statistics."""
        if stream is not None:
            in_vhost = self.broker.vhost(vhost or "/")
            if stream in in_vhost.classic.queues:
                queues = []
            else:
                queues = [self._queue(vhost or "/", stream)]  # 404 when neither
        else:
            queues = [q for q in self.broker.queues() if vhost is None or q.vhost == vhost]
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

    # ------------------------------------------------------------------ connections

    def _connections(self) -> list[Connection]:
        if self.node is None:
            return []
        return sorted(
            (c for c in self.node.connections if isinstance(c, Connection) and c.opened),
            key=lambda c: c.id,
        )

    def _stream_connections(self) -> list[StreamConnection]:
        """Open stream-protocol connections (past Open), oldest first."""
        if self.stream_node is None:
            return []
        return sorted(
            (
                c
                for c in self.stream_node.connections
                if isinstance(c, StreamConnection) and c.alive and c.vhost is not None
            ),
            key=lambda c: c.id,
        )

    # ------------------------------------------------------------------ stream protocol

    def _stream_subscribers(self) -> dict[int, int]:
        """Stream-protocol subscriptions per stream, keyed by ``id()`` of the stream's queue
        (a stream deleted and declared again is a new queue; its old subscriptions are
        closed). They count in a stream's ``consumers``, as RabbitMQ's stream plugin
        registers its consumers with the queue."""
        counts: dict[int, int] = {}
        for conn in self._stream_connections():
            for sub in list(conn.subscriptions.values()):
                if sub.active:
                    counts[id(sub.queue)] = counts.get(id(sub.queue), 0) + 1
        return counts

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
                        _stream_connection_name(m.conn)
                        if isinstance(m.conn, StreamConnection)
                        else ""
                    ),
                    user=_user_of(m.conn),
                    state=_SAC_STATES[m.state],
                    active=m.state == sac.ACTIVE,
                )
                for m in group.members
            ]
            views.append(SacGroupView(group_vhost, stream, name, group.partition_index, members))
        return views

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
            if _stream_connection_name(stream_conn) == name:
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
            if _connection_name(conn) == name:
                return conn
        raise NotFound(f"no connection '{name}'")

    def close_connection(self, name: str, reason: str | None = None) -> None:
        """Close with 320 CONNECTION_FORCED and the reason (RabbitMQ's default text); a
        stream-protocol connection is dropped (its clients see a broken connection)."""
        for stream_conn in self._stream_connections():
            if _stream_connection_name(stream_conn) == name:
                stream_conn.abort()
                return
        conn = self._connection(name)
        conn.close(ConnectionForced(reason or "Closed via management plugin"))

    def list_channels(
        self, vhost: str | None = None, connection: str | None = None
    ) -> list[ChannelView]:
        if connection is not None and any(
            _stream_connection_name(c) == connection for c in self._stream_connections()
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

    # ------------------------------------------------------------------ exchanges, bindings

    def list_exchanges(self, vhost: str | None = None) -> list[ExchangeView]:
        return [_exchange_view(x) for v in self._vhosts(vhost) for x in v.exchanges.values()]

    def get_exchange(self, vhost: str, name: str) -> ExchangeView:
        return _exchange_view(self.broker.vhost(vhost).get_exchange(name))

    def declare_exchange(
        self,
        vhost: str,
        name: str,
        type: str,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> bool:
        """exchange.declare's rules and texts; True when it was created."""
        v = self.broker.vhost(vhost)
        existed = name in v.exchanges
        v.declare_exchange(
            name,
            type,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=dict(arguments or {}),
        )
        return not existed

    def delete_exchange(self, vhost: str, name: str, if_unused: bool = False) -> None:
        v = self.broker.vhost(vhost)
        v.get_exchange(name)
        v.delete_exchange(name, if_unused)

    def list_bindings(
        self,
        vhost: str | None = None,
        source: str | None = None,
        destination: str | None = None,
        destination_type: str | None = None,
    ) -> list[BindingView]:
        """Bindings as RabbitMQ lists them: each queue's implicit default-exchange binding
        first, then the declared ones."""
        out: list[BindingView] = []
        for v in self._vhosts(vhost):
            implicit = [
                BindingView(v.name, "", q, "queue", q, {}, _properties_key(q, {}))
                for q in sorted([*v.queues, *v.classic.queues])
            ]
            declared = sorted(
                (_binding_view(v.name, b) for b in v.bindings()),
                key=lambda b: (b.source, b.destination_type, b.destination, b.routing_key),
            )
            out.extend(implicit + declared)
        return [
            b
            for b in out
            if (source is None or b.source == source)
            and (destination is None or b.destination == destination)
            and (destination_type is None or b.destination_type == destination_type)
        ]

    def bind(
        self,
        vhost: str,
        source: str,
        destination_type: str,
        destination: str,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> str:
        """queue.bind / exchange.bind; returns the binding's properties key."""
        v = self.broker.vhost(vhost)
        args = dict(arguments or {})
        if destination_type == "queue":
            v.bind_queue(destination, source, routing_key, args)
        elif destination_type == "exchange":
            v.bind_exchange(destination, source, routing_key, args)
        else:
            raise PreconditionFailed(f"unknown destination type '{destination_type}'")
        return _properties_key(routing_key, args)

    def unbind(
        self, vhost: str, source: str, destination_type: str, destination: str, props: str
    ) -> None:
        """Remove the binding with this properties key; 404 when there is none."""
        for b in self.list_bindings(vhost, source, destination, destination_type):
            if b.properties_key == props and b.source != "":
                v = self.broker.vhost(vhost)
                if destination_type == "queue":
                    v.unbind_queue(destination, source, b.routing_key, b.arguments)
                else:
                    v.unbind_exchange(destination, source, b.routing_key, b.arguments)
                return
        raise NotFound(f"no binding '{props}'")

    # ------------------------------------------------------------------ publish

    async def publish(
        self,
        vhost: str,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: dict[str, Any] | None = None,
    ) -> bool:
        """Route and store one message; returns once every routed stream confirmed it
        stored (False when nothing routed). ``x-stream-filter-value`` in the headers is
        the message's filter value, as on AMQP. 406 for bad properties."""
        if self.node is None:
            raise PreconditionFailed("publishing needs a running node")
        v = self.broker.vhost(vhost)
        props = encode_properties(properties or {})
        headers = dict((properties or {}).get("headers") or {})
        values = parse_filter_values(headers.get("x-stream-filter-value"))
        queues = v.route(exchange, routing_key, lambda: headers)
        counters = self.broker.counters
        counters.received += 1
        if not queues:
            counters.dropped_unroutable += 1
            return False
        message = Message(values, exchange, routing_key, props, body)
        sink = _OneShotSink(len(queues))
        for queue in queues:
            self.node.appender(queue).submit(message, sink, 1)
        if not await sink.wait():
            raise PreconditionFailed("the message could not be stored")
        return True

    # ------------------------------------------------------------------ browse

    def browse(
        self,
        vhost: str,
        name: str,
        offset: int | None = None,
        timestamp_ms: int | None = None,
        limit: int = 20,
        filter_values: list[str] | None = None,
        match_unfiltered: bool = False,
        sql: str | None = None,
        newest_first: bool = False,
        max_bytes: int = BROWSE_MAX_BYTES,
        encoding: Literal["auto", "base64"] = "auto",
    ) -> BrowseResult:
        """Read up to ``limit`` messages without consuming, from ``offset`` (or the first at
        or after ``timestamp_ms``; without either: the first, or with ``newest_first`` the
        newest ``limit``). Bounded by ``max_bytes`` of payload and a time budget."""
        queue = self._queue(vhost, name)
        if not 1 <= limit <= BROWSE_MAX_LIMIT:
            raise BadRequest(f"limit must be between 1 and {BROWSE_MAX_LIMIT}, got {limit}")
        if offset is not None and offset < 0:
            raise BadRequest(f"offset must be >= 0, got {offset}")
        predicate = None
        if sql:
            try:
                predicate = sql_predicate(compile_filter(sql))
            except CompileError as error:
                raise BadRequest(f"invalid sql: {error}") from None
        spec = None
        if filter_values:
            spec = FilterSpec(tuple(filter_values), match_unfiltered, False)
        stream = queue.stream
        end = stream.end_offset
        reader = stream.reader()
        try:
            if offset is not None:
                reader.seek_offset(offset)
            elif timestamp_ms is not None:
                reader.seek_timestamp(timestamp_ms)
            elif newest_first and spec is None and predicate is None:
                reader.seek_offset(max(stream.first_offset, end - limit))
            else:
                reader.seek_first()
            return _read_bounded(
                reader, end, limit, spec, predicate, max_bytes, encoding, queue.name
            )
        finally:
            reader.close()

    # ------------------------------------------------------------------ vhosts

    def list_vhosts(self) -> list[VhostView]:
        conns = self._connections()
        views = []
        for v in self.broker.vhosts.values():
            classic = v.classic.queues.values()
            unacked = sum(q.outstanding for q in classic)
            messages = (
                sum(q.message_count for q in v.queues.values())
                + sum(q.message_count for q in classic)
                + unacked
            )
            views.append(
                VhostView(
                    name=v.name,
                    description="Default virtual host" if v.name == "/" else "",
                    tags=[],
                    default_queue_type=DEFAULT_QUEUE_TYPE,
                    messages=messages,
                    streams=len(v.queues),
                    exchanges=len(v.exchanges),
                    connections=sum(1 for c in conns if c.vhost_name == v.name),
                    messages_ready=messages - unacked,
                    messages_unacknowledged=unacked,
                    length_rates=self._vhost_rates.get(v.name, dict.fromkeys(LENGTHS, 0.0)),
                )
            )
        return views

    def add_vhost(self, name: str) -> bool:
        """Create a vhost; True when it was created."""
        if not name:
            raise BadRequest("vhost name must not be empty")
        existed = name in self.broker.vhosts
        self.broker.add_vhost(name)
        return not existed

    def delete_vhost(self, name: str) -> None:
        """Close the vhost's connections and delete it (inside ``unsynced``: the definitions
        fdatasync is left to ``synced``; the queues' files go in a background thread)."""
        if self.node is not None:
            forced = ConnectionForced(f"vhost '{name}' is deleted")
            for conn in [c for c in self._connections() if c.vhost_name == name]:
                conn.close(forced)
        self.broker.delete_vhost(name)

    # ------------------------------------------------------------------ durability off the loop

    @contextlib.contextmanager
    def unsynced(self) -> Iterator[None]:
        """Definitions changes inside the block are written, but their fdatasync is left
        to ``synced()`` (to run in a worker thread, not on the event loop)."""
        store = self.broker.store
        store.defer_sync = True
        try:
            yield
        finally:
            store.defer_sync = False

    async def synced(self) -> None:
        """Wait until every definitions change so far is on disk (fdatasync in a thread,
        group-committed with the AMQP channels' changes when a node runs)."""
        if self.node is not None:
            pending = self.node.definitions_sync.wait()
            if pending is not None:
                await asyncio.shield(pending)
            return
        sync = self.broker.store.take_sync()
        if sync is not None:
            await asyncio.to_thread(sync)

    # ------------------------------------------------------------------ limits

    def vhost_limits(self, vhost: str | None = None) -> list[tuple[str, dict[str, int]]]:
        """(vhost, its limits) of every vhost with a limit (or of ``vhost``: 404 if none)."""
        if vhost is not None:
            v = self.broker.vhost(vhost)
            return [(v.name, dict(v.limits))] if v.limits else []
        return [(n, dict(v.limits)) for n, v in sorted(self.broker.vhosts.items()) if v.limits]

    def set_vhost_limit(self, vhost: str, name: str, value: int) -> None:
        """max-connections or max-queues; a negative value means no limit (as RabbitMQ)."""
        if name not in VHOST_LIMITS:
            raise BadRequest(f"unknown vhost limit '{name}'")
        self.broker.vhost(vhost).limits[name] = value
        self.broker.save_definitions()

    def clear_vhost_limit(self, vhost: str, name: str) -> None:
        if self.broker.vhost(vhost).limits.pop(name, None) is not None:
            self.broker.save_definitions()

    def user_limits(self, user: str | None = None) -> list[tuple[str, dict[str, int]]]:
        """(user, its limits) of every user with a limit (or of ``user``: 404 if none)."""
        if user is not None:
            u = self.broker.users.get(user)
            if u is None:
                raise NotFound(f"no user '{user}'")
            return [(u.name, dict(u.limits))] if u.limits else []
        return [(u.name, dict(u.limits)) for u in self.broker.users if u.limits]

    def set_user_limit(self, user: str, name: str, value: int) -> None:
        """max-connections or max-channels; a negative value means no limit."""
        if name not in USER_LIMITS:
            raise BadRequest(f"unknown user limit '{name}'")
        u = self.broker.users.get(user)
        if u is None:
            raise NotFound(f"no user '{user}'")
        u.limits[name] = value
        self.broker.save_definitions()

    def clear_user_limit(self, user: str, name: str) -> None:
        u = self.broker.users.get(user)
        if u is None:
            raise NotFound(f"no user '{user}'")
        if u.limits.pop(name, None) is not None:
            self.broker.save_definitions()

    # ------------------------------------------------------------------ users, permissions

    def list_users(self) -> list[UserView]:
        return [_user_view(u) for u in self.broker.users]

    def get_user(self, name: str) -> UserView:
        user = self.broker.users.get(name)
        if user is None:
            raise NotFound(f"no user '{name}'")
        return _user_view(user)

    def put_user(
        self,
        name: str,
        password: str | None = None,
        tags: Iterable[str] = (),
        password_hash: str | None = None,
        hashing_algorithm: str = SHA256,
    ) -> bool:
        """Create or update a user (password, or a hash in RabbitMQ's format, or neither to
        keep the current one); True when created. Permissions are kept."""
        if not name:
            raise BadRequest("user name must not be empty")
        tag_list = _check_tags(tags)
        existing = self.broker.users.get(name)
        if password is not None:
            stored, algorithm = hash_password(password), SHA256
        elif password_hash is not None:
            if hashing_algorithm not in HASHING_ALGORITHMS:
                raise BadRequest(f"unsupported hashing_algorithm '{hashing_algorithm}'")
            if not valid_hash(password_hash, hashing_algorithm):
                raise BadRequest("password_hash is not a valid hash")
            stored, algorithm = password_hash, hashing_algorithm
        elif existing is not None:
            stored, algorithm = existing.password_hash, existing.hashing_algorithm
        else:
            raise BadRequest("password or password_hash must be set")
        self.broker.users.put(
            User(
                name,
                stored,
                tag_list,
                dict(existing.permissions) if existing else {},
                existing.loopback_only if existing else False,
                algorithm,
                dict(existing.limits) if existing else {},
            )
        )
        self.broker.save_definitions()
        return existing is None

    def delete_user(self, name: str) -> None:
        if not self.broker.users.delete(name):
            raise NotFound(f"no user '{name}'")
        self.broker.save_definitions()

    def list_permissions(
        self, vhost: str | None = None, user: str | None = None
    ) -> list[PermissionView]:
        return [
            PermissionView(u.name, v, p.configure, p.write, p.read)
            for u in self.broker.users
            if user is None or u.name == user
            for v, p in sorted(u.permissions.items())
            if vhost is None or v == vhost
        ]

    def get_permission(self, vhost: str, user: str) -> PermissionView:
        found = self.list_permissions(vhost, user)
        if not found:
            raise NotFound(f"no permission for '{user}' in vhost '{vhost}'")
        return found[0]

    def set_permission(
        self,
        user: str,
        vhost: str,
        configure: str = ".*",
        write: str = ".*",
        read: str = ".*",
    ) -> bool:
        """Set a user's permission in a vhost; True when it was new. 400 for a bad regex."""
        if user not in self.broker.users:
            raise NotFound(f"no user '{user}'")
        self.broker.vhost(vhost)
        for kind, pattern in (("configure", configure), ("write", write), ("read", read)):
            problem = check_regex(pattern)
            if problem is not None:
                raise BadRequest(f"invalid {kind} regex '{pattern}': {problem}")
        u = self.broker.users.get(user)
        assert u is not None
        new = vhost not in u.permissions
        self.broker.users.set_permission(user, vhost, Permission(configure, write, read))
        self.broker.save_definitions()
        return new

    def clear_permission(self, user: str, vhost: str) -> None:
        if not self.broker.users.clear_permission(user, vhost):
            raise NotFound(f"no permission for '{user}' in vhost '{vhost}'")
        self.broker.save_definitions()

    # ------------------------------------------------------------------ definitions

    def export_definitions(self, vhost: str | None = None) -> Definitions:
        stored = self.broker.definitions()
        exchanges = [
            {k: x[k] for k in ("name", "vhost", "type", "durable", "auto_delete", "internal")}
            | {"arguments": _jsonable(x["arguments"])}
            for x in stored["exchanges"]
            if vhost is None or x["vhost"] == vhost
        ]
        queues = [
            {
                "name": q["name"],
                "vhost": q["vhost"],
                "durable": True,
                "auto_delete": bool(q.get("auto_delete", False)),
                "arguments": _jsonable(q["arguments"]),
            }
            | ({"type": str(q["type"])} if "type" in q else {})
            for q in stored["queues"]
            if vhost is None or q["vhost"] == vhost
        ]
        bindings = [
            {
                "source": b["source"],
                "vhost": b["vhost"],
                "destination": b["destination"],
                "destination_type": b["destination_type"],
                "routing_key": b["routing_key"],
                "arguments": _jsonable(b["arguments"]),
            }
            for b in stored["bindings"]
            if vhost is None or b["vhost"] == vhost
        ]
        users = [
            {
                "name": u.name,
                "password_hash": u.password_hash,
                "hashing_algorithm": u.hashing_algorithm,
                "tags": list(u.tags),
                "limits": dict(u.limits),
            }
            for u in self.broker.users
        ]
        return Definitions(
            rabbit_version=self.version,
            rabbitmq_version=self.version,
            product_name=PRODUCT,
            product_version=self.version,
            users=users if vhost is None else [],
            vhosts=[{"name": n} for n in self.broker.vhosts if vhost is None or n == vhost],
            permissions=[dict(p.__dict__) for p in self.list_permissions(vhost)],
            topic_permissions=[],
            parameters=[p.__dict__ for p in self.list_parameters(vhost=vhost)],
            global_parameters=(
                [{"name": p.name, "value": p.value} for p in self.list_global_parameters()]
                if vhost is None
                else []
            ),
            policies=[p.to_json() for p in self.list_policies(vhost)],
            queues=queues,
            exchanges=exchanges,
            bindings=bindings,
        )

    def import_definitions(self, data: dict[str, Any], vhost: str | None = None) -> None:
        """Merge a RabbitMQ definitions document. Everything is checked first; a document
        with objects SieveMQ cannot hold (queues of other types, topic permissions,
        parameters of components such as shovel or federation), bad hashes, bad regexes or
        bad policies is refused as a whole (400 naming them) and nothing is applied."""
        plan = _DefinitionsPlan(self, data, vhost)
        plan.check()
        plan.apply()

    # ------------------------------------------------------------------ policies, parameters

    def list_policies(self, vhost: str | None = None, operator: bool = False) -> list[PolicyView]:
        """Policies (or operator policies) of every vhost or of one, by vhost and name."""
        out: list[PolicyView] = []
        for v in self._vhosts(vhost):
            table = v.operator_policies if operator else v.policies
            out.extend(_policy_view(p) for _, p in sorted(table.items()))
        return out

    def get_policy(self, vhost: str, name: str, operator: bool = False) -> PolicyView:
        v = self.broker.vhost(vhost)
        policy = (v.operator_policies if operator else v.policies).get(name)
        if policy is None:
            raise NotFound(f"no policy '{name}' in vhost '{vhost}'")
        return _policy_view(policy)

    def put_policy(
        self, vhost: str, name: str, body: Any, operator: bool = False, apply: bool = True
    ) -> bool:
        """Validate (400 with RabbitMQ's text), store, and apply to the vhost's queues and
        exchanges (``apply=False``: the caller runs ``policy_steps``); True when new."""
        v = self.broker.vhost(vhost)
        try:
            policy = policies.parse(vhost, name, body, operator)
        except policies.PolicyError as error:
            raise BadRequest(error.reason) from None
        created = v.set_policy(policy, operator, apply)
        self.broker.save_policy(vhost, name, operator)
        return created

    def delete_policy(
        self, vhost: str, name: str, operator: bool = False, apply: bool = True
    ) -> None:
        if not self.broker.vhost(vhost).clear_policy(name, operator, apply):
            raise NotFound(f"no policy '{name}' in vhost '{vhost}'")
        self.broker.save_policy(vhost, name, operator)

    def policy_steps(self, vhost: str) -> Iterator[None]:
        """Re-apply the vhost's policies one object at a time (see ``VirtualHost``)."""
        v = self.broker.vhosts.get(vhost)
        return iter(()) if v is None else v.policy_steps()

    def list_parameters(
        self, component: str | None = None, vhost: str | None = None
    ) -> list[ParameterView]:
        """RabbitMQ's runtime parameters: operator policies and vhost limits (the only
        components a broker without the shovel and federation plugins has)."""
        out: list[ParameterView] = []
        for v in self._vhosts(vhost):
            if component in (None, policies.OPERATOR_COMPONENT):
                out.extend(
                    ParameterView(policies.OPERATOR_COMPONENT, v.name, n, p.value())
                    for n, p in sorted(v.operator_policies.items())
                )
            if component in (None, LIMITS_COMPONENT) and v.limits:
                out.append(ParameterView(LIMITS_COMPONENT, v.name, "limits", dict(v.limits)))
        return out

    def get_parameter(self, component: str, vhost: str, name: str) -> ParameterView:
        for p in self.list_parameters(component, vhost):
            if p.name == name:
                return p
        raise NotFound(f"no parameter '{name}' of component '{component}' in vhost '{vhost}'")

    def put_parameter(
        self, component: str, vhost: str, name: str, value: Any, apply: bool = True
    ) -> bool:
        """Set an operator policy or the vhost's limits; other components are unknown here
        (400 as RabbitMQ without the plugin answers). True when it is new."""
        if component == "policy":
            raise BadRequest("policies may not be set using this method")
        v = self.broker.vhost(vhost)
        if component == policies.OPERATOR_COMPONENT:
            return self.put_policy(vhost, name, value, operator=True, apply=apply)
        if component != LIMITS_COMPONENT:
            raise BadRequest(f"Validation failed\n\ncomponent {component} not found\n")
        if not isinstance(value, dict):
            raise BadRequest(f"Validation failed\n\nlimits must be a dictionary: {value!r}\n")
        for key, limit in value.items():
            if key not in VHOST_LIMITS:
                raise BadRequest(
                    f"Validation failed\n\nUnrecognised terms "
                    f"{policies.erlang_term({key: limit})} in limits\n"
                )
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise BadRequest(
                    f"Validation failed\n\n{key} should be a number, actually was "
                    f"{policies.erlang_term(limit)}\n"
                )
        created = not v.limits
        v.limits = {str(k): int(n) for k, n in value.items()}
        self.broker.save_definitions()
        return created

    def delete_parameter(self, component: str, vhost: str, name: str, apply: bool = True) -> None:
        self.get_parameter(component, vhost, name)  # 404 first
        if component == policies.OPERATOR_COMPONENT:
            self.delete_policy(vhost, name, operator=True, apply=apply)
            return
        self.broker.vhost(vhost).limits = {}
        self.broker.save_definitions()

    def list_global_parameters(self) -> list[ParameterView]:
        return [
            ParameterView("", "", n, value)
            for n, value in sorted(self.broker.global_parameters.items())
        ]

    def get_global_parameter(self, name: str) -> ParameterView:
        if name not in self.broker.global_parameters:
            raise NotFound(f"no global parameter '{name}'")
        return ParameterView("", "", name, self.broker.global_parameters[name])

    def put_global_parameter(self, name: str, value: Any) -> bool:
        created = name not in self.broker.global_parameters
        self.broker.global_parameters[name] = value
        self.broker.save_global_parameter(name)
        return created

    def delete_global_parameter(self, name: str) -> None:
        if self.broker.global_parameters.pop(name, None) is None:
            raise NotFound(f"no global parameter '{name}'")
        self.broker.save_global_parameter(name)

    # ------------------------------------------------------------------ named consumers

    def list_consumer_offsets(self, vhost: str, stream: str) -> dict[str, int]:
        """Committed offsets of the stream's named consumers (last offset each is done with)."""
        return self._queue(vhost, stream).consumer_offsets()

    def consumer_offsets(self, vhost: str, stream: str) -> list[ConsumerOffsetView]:
        queue = self._queue(vhost, stream)
        end = queue.end_offset  # surveyed, not opened, for an idle stream (storage.survey)
        return [
            ConsumerOffsetView(stream, vhost, name, offset, max(0, end - offset - 1))
            for name, offset in sorted(queue.consumer_offsets().items())
        ]

    def get_consumer_offset(self, vhost: str, stream: str, consumer: str) -> int:
        offset = self._queue(vhost, stream).stream.offsets.get(consumer)
        if offset is None:
            raise NotFound(f"no offset for consumer '{consumer}' on stream '{stream}'")
        return offset

    def set_consumer_offset(self, vhost: str, stream: str, consumer: str, offset: int) -> None:
        """Store a committed offset: the consumer resumes at ``offset + 1`` on its next
        consume (a live consumer of that name overwrites it with its own commits)."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise PreconditionFailed(f"offset must be an integer >= 0, got {offset!r}")
        if not consumer or len(consumer.encode("utf-8")) > MAX_CONSUMER_NAME_BYTES:
            raise PreconditionFailed("consumer name must be 1 to 255 bytes")
        self._queue(vhost, stream).stream.offsets.set(consumer, offset)

    def delete_consumer_offset(self, vhost: str, stream: str, consumer: str) -> None:
        """Forget the consumer: its offset and its registered SQL subscription."""
        queue = self._queue(vhost, stream)
        if queue.stream.offsets.get(consumer) is None:
            raise NotFound(f"no offset for consumer '{consumer}' on stream '{stream}'")
        queue.stream.offsets.delete(consumer)
        registry(queue.stream).forget(consumer)

    def list_subscriptions(self, vhost: str, stream: str) -> list[SubscriptionView]:
        """The stream's registered SQL subscriptions, with the slot their chunk bit uses."""
        queue = self._queue(vhost, stream)
        return [
            SubscriptionView(i, s.name, s.expression, s.active)
            for i, s in enumerate(registry(queue.stream).slots)
        ]

    def filter_advice(
        self, vhost: str, name: str, target_fpr: float = 0.01, chunks: int = 1000
    ) -> FilterAdviceView:
        """The x-stream-filter-size-bytes that meets ``target_fpr`` for the newest chunks.

        Distinct values per chunk are estimated from the chunks' stored Bloom bits, so this
        reads headers only (up to ``chunks`` of them, on the event loop), and at most once
        per ``ADVICE_CACHE_S`` for the same stream and parameters: within that, the last
        answer is returned. 406 for a target outside (0, 1) or a non-positive chunk count.
        """
        queue = self._queue(vhost, name)
        if not 0.0 < target_fpr < 1.0:
            raise PreconditionFailed(f"target_fpr must be between 0 and 1, got {target_fpr}")
        if chunks < 1:
            raise PreconditionFailed(f"chunks must be at least 1, got {chunks}")
        key = (vhost, name, target_fpr, chunks)
        now = _advice_clock()
        cached = self._advice.get(key)
        if cached is not None and cached[1] is queue and now - cached[0] < ADVICE_CACHE_S:
            return cached[2]  # a dashboard polling it every few seconds reads headers once
        view = self._filter_advice(queue, target_fpr, chunks)
        if len(self._advice) >= ADVICE_CACHE_MAX:
            self._advice.clear()
        self._advice[key] = (now, queue, view)
        return view

    def _filter_advice(
        self, queue: StreamQueue, target_fpr: float, chunks: int
    ) -> FilterAdviceView:
        stream = queue.stream
        advice = stream_filter_advice(stream.directory, target_fpr, chunks, stream.end_offset)
        current = stream.config.filter_size_bytes
        return FilterAdviceView(
            vhost=queue.vhost,
            name=queue.name,
            target_false_positive_rate=target_fpr,
            recommended_filter_size_bytes=advice.size_bytes,
            expected_false_positive_rate=advice.expected_false_positive_rate,
            reachable=advice.reachable,
            distinct_values_per_chunk_p95=advice.distinct_values_per_chunk,
            chunks_sampled=advice.chunks_sampled,
            current_filter_size_bytes=current,
            current_false_positive_rate=false_positive_rate(
                current, advice.distinct_values_per_chunk
            ),
            rabbitmq_compatible=advice.size_bytes <= RABBITMQ_MAX_FILTER_BYTES,
        )

    # ------------------------------------------------------------------ metrics

    def write_latencies(self) -> WriteLatencyView:
        """Append-batch and fdatasync latency histograms of every stream of this node."""
        if self.node is None:
            empty = HistogramView([(float("inf"), 0)], 0.0, 0)
            return WriteLatencyView(empty, empty)
        lat = self.node.latencies
        return WriteLatencyView(
            HistogramView(lat.append.cumulative(), lat.append.sum, lat.append.count),
            HistogramView(lat.fsync.cumulative(), lat.fsync.sum, lat.fsync.count),
        )

    def publishers(self) -> int:
        """Channels that have published at least once (RabbitMQ's ``publishers``)."""
        return sum(1 for c in self._connections() for ch in c.channels.values() if ch.has_published)

    # ------------------------------------------------------------------ alarms

    def set_alarm_limits(
        self,
        memory_high_watermark: str | float | None = None,
        disk_free_limit: str | int | None = None,
    ) -> dict[str, Any]:
        """Change the alarm limits at runtime (``rabbitmqctl set_vm_memory_high_watermark`` /
        ``set_disk_free_limit``); the alarms are re-checked at once. 406 for a bad value."""
        if self.alarms is None:
            raise PreconditionFailed("resource alarms are not running")
        try:
            memory = (
                None
                if memory_high_watermark is None
                else parse_memory_watermark(memory_high_watermark).limit(total_memory())
            )
            disk = None if disk_free_limit is None else parse_size(disk_free_limit)
        except ValueError as error:
            raise PreconditionFailed(str(error)) from None
        self.alarms.set_limits(memory_limit=memory, disk_free_limit=disk)
        return self.alarms.snapshot()

    # ------------------------------------------------------------------ helpers

    def _queue(self, vhost: str, name: str) -> StreamQueue:
        return self.broker.vhost(vhost).get_queue(name)

    def _vhosts(self, vhost: str | None) -> list[Any]:
        if vhost is None:
            return list(self.broker.vhosts.values())
        return [self.broker.vhost(vhost)]

    def _queue_view(self, q: ClassicQueue, now: float) -> QueueView:
        ready = q.message_count
        rates = self._classic_rates(q, now)
        return QueueView(
            vhost=q.vhost,
            name=q.name,
            type=str(q.kind),
            durable=bool(q.durable),
            auto_delete=bool(q.auto_delete),
            exclusive=bool(q.exclusive),
            arguments=_jsonable(dict(q.arguments.table)),
            policy=q.policy,
            operator_policy=q.operator_policy,
            effective_policy_definition=dict(q.effective_policy),
            messages=ready + q.outstanding,
            messages_ready=ready,
            messages_unacknowledged=q.outstanding,
            bytes=q.ready_bytes,
            consumers=q.consumer_count,
            published=q.published,
            publish_rate=rates["publish"],
            delivered=q.delivered,
            deliver_rate=rates["deliver_get"],
            got=q.got,
            got_no_ack=q.got_no_ack,
            delivered_no_ack=q.delivered_no_ack,
            redelivered=q.redelivered,
            get_empty=q.get_empty,
            acked=q.acked,
            rates=rates,
            length_rates={k: rates[k] for k in LENGTHS},
        )

    def _classic_rates(self, q: ClassicQueue, now: float) -> dict[str, float]:
        """A classic or quorum queue's message_stats and lengths' rates, by RabbitMQ's names."""
        outstanding = q.outstanding
        return self._with_lengths(
            _queue_key(q), classic_message_stats(q), q.message_count + outstanding, outstanding, now
        )

    def _stream_rates(
        self, queue: StreamQueue, messages: int, unacked: int, now: float
    ) -> dict[str, float]:
        """A stream's publish, deliver and ack rates (``publish``, ``deliver_get``, ``ack``)
        and its lengths'."""
        counts = {
            "publish": queue.end_offset,
            "deliver_get": queue.filter_stats.messages_delivered,
            "ack": queue.acked,
        }
        return self._with_lengths(_queue_key(queue), counts, messages, unacked, now)

    def _with_lengths(
        self, key: Key, counts: dict[str, int], messages: int, unacked: int, now: float
    ) -> dict[str, float]:
        """The rates of ``counts`` and of RabbitMQ's three lengths (``messages``,
        ``messages_ready``, ``messages_unacknowledged``: negative while they shrink)."""
        names = (*counts, *LENGTHS)
        values = (*counts.values(), messages, messages - unacked, unacked)
        return self._rates.rates(key, names, values, now, len(counts))

    def _stream_view(
        self, queue: StreamQueue, now: float, subscribed: dict[int, int]
    ) -> StreamView:
        """``subscribed``: stream-protocol subscriptions by ``id()`` of their queue."""
        stats = queue.stats()  # surveyed, not opened, for an idle stream (storage.survey)
        published = stats.first_offset + stats.messages
        delivered = queue.filter_stats.messages_delivered
        unacked = sum(max(0, c.prefetch - c.credit) for c in queue.consumers)
        rates = self._stream_rates(queue, stats.messages, unacked, now)
        return StreamView(
            vhost=queue.vhost,
            name=queue.name,
            arguments=_jsonable(dict(queue.arguments.table)),
            policy=queue.policy,
            operator_policy=queue.operator_policy,
            effective_policy_definition=dict(queue.effective_policy),
            messages=stats.messages,
            bytes=stats.bytes,
            segments=stats.segments,
            chunks=stats.chunks,
            first_offset=stats.first_offset,
            last_offset=stats.last_offset,
            first_timestamp_ms=stats.first_timestamp_ms,
            last_timestamp_ms=stats.last_timestamp_ms,
            consumers=queue.consumer_count + subscribed.get(id(queue), 0),
            published=published,
            publish_rate=rates["publish"],
            delivered=delivered,
            deliver_rate=rates["deliver_get"],
            filter_size_bytes=queue.filter_size_bytes,
            filter_stats=FilterStatsView(**vars(queue.filter_stats)),
            messages_unacknowledged=unacked,
            acked=queue.acked,
            ack_rate=rates["ack"],
            length_rates={k: rates[k] for k in LENGTHS},
        )

    # ------------------------------------------------------------------ the rate sampler

    def start_sampling(self, interval_s: float = SAMPLE_INTERVAL_S) -> asyncio.Task[None]:
        """Sample every counter and length every ``interval_s`` on the running loop (as
        RabbitMQ's ``collect_statistics_interval``), so that a first request already
        answers real rates. Cancel the task (or ``stop_sampling``) to end it."""
        if self.sampler is None or self.sampler.done():
            self.sampler = asyncio.get_running_loop().create_task(self._sample_forever(interval_s))
        return self.sampler

    async def stop_sampling(self) -> None:
        task, self.sampler = self.sampler, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _sample_forever(self, interval_s: float) -> None:
        slice_s = 0.004  # at most this much sampling between two loop turns
        while True:
            started = time.perf_counter()
            last = started
            try:
                for _ in self.sample_steps():
                    if time.perf_counter() - last >= slice_s:
                        await asyncio.sleep(0)
                        last = time.perf_counter()
            except Exception:  # a bug here must not end the rates for good: log, go on
                log.exception("a round of the admin rate sampler failed")
            await asyncio.sleep(max(0.0, interval_s - (time.perf_counter() - started)))

    def sample_steps(self) -> Iterator[None]:
        """One round of samples: every stream that is open (one that is not cannot change),
        classic and quorum queue and connection; the queues' rates are summed for the
        overview and the vhosts. Yields after each queue, so the caller can give the loop a
        turn; the samples of objects gone since the last round are dropped at the end."""
        keys: set[Key] = {("o",)}
        summed: dict[str, float] = dict.fromkeys((*_classic_counts_keys(), *LENGTHS), 0.0)
        per_vhost: dict[str, dict[str, float]] = {}

        def add(vhost: str, rates: dict[str, float]) -> None:
            in_vhost = per_vhost.setdefault(vhost, dict.fromkeys(LENGTHS, 0.0))
            for name in LENGTHS:
                in_vhost[name] += rates[name]
            for name, rate in rates.items():
                if name in summed:
                    summed[name] += rate

        for q in list(self.broker.queues()):
            if q.opened_stream is not None and self._still_declared(q):
                messages = q.stats().messages
                unacked = sum(max(0, c.prefetch - c.credit) for c in q.consumers)
                rates = self._stream_rates(q, messages, unacked, time.time())
                rates["deliver"] = rates["deliver_get"]  # a stream's deliveries: consumers'
                add(q.vhost, rates)
                keys.add(_queue_key(q))
            yield
        for v in list(self.broker.vhosts.values()):
            for cq in list(v.classic.queues.values()):
                if self._still_declared(cq):
                    add(cq.vhost, self._classic_rates(cq, time.time()))
                    keys.add(_queue_key(cq))
                yield
        self._summed_rates = {k: round(r, 1) for k, r in summed.items()}
        self._vhost_rates = {
            v: {k: round(r, 1) for k, r in rates.items()} for v, rates in per_vhost.items()
        }
        node_counts = {k: getattr(self.broker.counters, a) for k, a in _NODE_COUNTERS.items()}
        node_counts["publish"] += self.broker.counters.stream_received
        self._rates.rates(("o",), *_split(node_counts), time.time(), len(node_counts))
        yield
        keys.update(("x", conn.name) for conn in self.list_connections())
        self._rates.forget(keys)


# --------------------------------------------------------------------------- helpers


def _classic_counts_keys() -> tuple[str, ...]:
    return MESSAGE_STATS_KEYS


LENGTHS = ("messages", "messages_ready", "messages_unacknowledged")  # RabbitMQ's queue lengths
# the overview's message_stats counted by the node (not the queues), and where
_NODE_COUNTERS = {
    "publish": "received",  # plus stream_received
    "confirm": "confirmed",
    "return_unroutable": "returned_unroutable",
    "drop_unroutable": "dropped_unroutable",
}
_NODE_COUNTS = tuple(_NODE_COUNTERS)


def _split(counts: dict[str, int]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    return tuple(counts), tuple(counts.values())


_OCTETS = ("recv_oct", "send_oct")


def _queue_key(queue: StreamQueue | ClassicQueue) -> Key:
    """The rate sampler's key of one queue (a queue of the same name declared again after a
    delete starts from its own first sample: the key holds the object's identity)."""
    return ("q", queue.vhost, queue.name, str(id(queue)))


def _policy_view(p: policies.Policy) -> PolicyView:
    return PolicyView(p.vhost, p.name, p.pattern, p.apply_to, dict(p.definition), p.priority)


def _principal(user: User) -> Principal:
    return Principal(
        user.name,
        list(user.tags),
        {
            v: PermissionView(user.name, v, p.configure, p.write, p.read)
            for v, p in user.permissions.items()
        },
    )


def _check_tags(tags: Iterable[str]) -> tuple[str, ...]:
    out = []
    for tag in tags:
        if not isinstance(tag, str):
            raise BadRequest(f"tags must be strings, got {tag!r}")
        tag = tag.strip()
        if tag:
            out.append(tag)
    return tuple(out)


def _user_view(u: User) -> UserView:
    return UserView(u.name, u.password_hash, u.hashing_algorithm, list(u.tags))


def _jsonable(value: Any) -> Any:
    """Field-table values as JSON (bytes as text when UTF-8, timestamps as epoch seconds)."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp())
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def _properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """RabbitMQ's binding key: the routing key (``~`` when empty), plus a hash of the
    arguments when there are any."""
    key = routing_key.replace("%", "%25").replace("/", "%2F") if routing_key else "~"
    if not arguments:
        return key
    digest = hashlib.sha256(
        json.dumps(_jsonable(arguments), sort_keys=True).encode("utf-8")
    ).digest()
    return key + "~" + base64.urlsafe_b64encode(digest[:16]).decode("ascii").rstrip("=")


def _binding_view(vhost: str, b: Binding) -> BindingView:
    args = _jsonable(dict(b.arguments))
    return BindingView(
        vhost,
        b.source,
        b.destination,
        b.destination_kind,
        b.routing_key,
        args,
        _properties_key(b.routing_key, dict(b.arguments)),
    )


def _exchange_view(x: Exchange) -> ExchangeView:
    return ExchangeView(
        x.vhost,
        x.name,
        x.type,
        x.durable,
        x.auto_delete,
        x.internal,
        _jsonable(x.arguments),
        x.policy,
    )


def _split_peer(peer: str) -> tuple[str, int]:
    host, _, port = peer.rpartition(":")
    try:
        return host, int(port)
    except ValueError:
        return peer, 0


def _local(conn: Connection | StreamConnection) -> tuple[str, int]:
    transport = conn.transport
    sock = transport.get_extra_info("sockname") if transport is not None else None
    if isinstance(sock, tuple) and len(sock) >= 2:
        return str(sock[0]), int(sock[1])
    return "", 0


def _connection_name(conn: Connection) -> str:
    """RabbitMQ's ``peer_host:peer_port -> host:port``."""
    host, port = _local(conn)
    return f"{conn.peer} -> {host}:{port}"


def _connection_view(conn: Connection) -> ConnectionView:
    peer_host, peer_port = _split_peer(conn.peer)
    host, port = _local(conn)
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
        name=_connection_name(conn),
        id=conn.id,
        user=conn.username,
        vhost=conn.vhost_name,
        peer_host=peer_host,
        peer_port=peer_port,
        host=host,
        port=port,
        ssl=ssl,
        client_properties=_jsonable(conn.client_properties),
        user_provided_name=provided if isinstance(provided, str) else None,
        channels=len(conn.channels),
        channel_max=conn.channel_max,
        frame_max=conn.frame_max,
        timeout=conn.heartbeat,
        connected_at=int(getattr(conn, "connected_at", time.time()) * 1000),
        state=state,
        blocked_reason=conn.blocked_reason,
    )


def _stream_connection_name(conn: StreamConnection) -> str:
    """RabbitMQ names stream connections like AMQP ones: ``peer_host:peer_port -> host:port``."""
    host, port = _local(conn)
    return f"{conn.peer_host}:{conn.peer_port} -> {host}:{port}"


_SAC_STATES = {
    sac.ACTIVE: "active",
    sac.ACTIVATING: "activating",
    sac.INACTIVE: "waiting",
    sac.DEACTIVATING: "deactivating",
}


def _matches(view: StreamClientView, vhost: str | None, stream: str | None) -> bool:
    return (vhost is None or view.vhost == vhost) and (stream is None or view.stream == stream)


def _user_of(conn: object) -> str:
    user = getattr(conn, "user", None)
    return user.name if isinstance(user, User) else ""


def _stream_client(conn: StreamConnection, vhost: str, stream: str) -> dict[str, Any]:
    return {
        "vhost": vhost,
        "stream": stream,
        "connection_name": _stream_connection_name(conn),
        "user": _user_of(conn),
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
        filter_stats=FilterStatsView(**sub.filter_stats()),
        ack_required=False,
        activity_status=view.activity_status,
        protocol="stream",
    )


def _stream_connection_view(conn: StreamConnection) -> ConnectionView:
    host, port = _local(conn)
    transport = conn.transport
    ssl = transport is not None and transport.get_extra_info("sslcontext") is not None
    provided = conn.client_properties.get("connection_name")
    return ConnectionView(
        name=_stream_connection_name(conn),
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
    peer_host, peer_port = _split_peer(conn.peer)
    confirm = ch.confirm
    return ChannelView(
        name=f"{_connection_name(conn)} ({ch.id})",
        connection_name=_connection_name(conn),
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
    conn_name = _connection_name(connection) if connection is not None else ""
    peer_host, peer_port = _split_peer(connection.peer if connection is not None else "")
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
        filter_stats=FilterStatsView(**consumer.filter_stats()),
    )


def _classic_consumer_view(
    queue: ClassicQueue, consumer: Any, connections: dict[int, Connection]
) -> ConsumerView:
    """A basic.consume on a classic or quorum queue (no offsets, no filter)."""
    conn = consumer.channel.connection
    connection = connections.get(conn.id)
    conn_name = _connection_name(connection) if connection is not None else ""
    peer_host, peer_port = _split_peer(connection.peer if connection is not None else "")
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
        filter_stats=FilterStatsView(**FilterStats().as_dict()),
        ack_required=not consumer.no_ack,
        exclusive=bool(consumer.exclusive),
    )


class _OneShotSink:
    """A ConfirmSink for one HTTP publish routed to ``n`` streams."""

    def __init__(self, n: int) -> None:
        self._left = n
        self._ok = True
        self._future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def settle_confirms(self, seqs: list[int], ok: bool) -> None:
        self._left -= len(seqs)
        self._ok = self._ok and ok
        if self._left <= 0 and not self._future.done():
            self._future.set_result(self._ok)

    async def wait(self) -> bool:
        return await self._future


_PROPERTY_NAMES = {
    "content_type": str,
    "content_encoding": str,
    "headers": dict,
    "delivery_mode": int,
    "priority": int,
    "correlation_id": str,
    "reply_to": str,
    "expiration": str,
    "message_id": str,
    "timestamp": int,
    "type": str,
    "user_id": str,
    "app_id": str,
}


def encode_properties(properties: dict[str, Any]) -> bytes:
    """JSON message properties (RabbitMQ's management names) as raw AMQP property bytes."""
    kwargs: dict[str, Any] = {}
    for key, value in properties.items():
        kind = _PROPERTY_NAMES.get(key)
        if kind is None:
            raise BadRequest(f"unknown message property '{key}'")
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise BadRequest(f"message property '{key}' must be an integer")
        if kind is not int and not isinstance(value, kind):
            raise BadRequest(f"message property '{key}' must be a {kind.__name__}")
        if key == "timestamp":
            value = datetime.datetime.fromtimestamp(value, datetime.UTC)
        kwargs[key] = value
    try:
        return bytes(Basic.Properties(**kwargs).marshal())
    except (TypeError, ValueError) as error:
        raise BadRequest(f"bad message properties: {error}") from None


def decode_properties(props: bytes) -> dict[str, Any]:
    """Raw property bytes as the JSON object RabbitMQ's management API shows."""
    try:
        decoded = amqp_properties.decode_properties(props)
    except AMQPError:
        return {}
    out: dict[str, Any] = {}
    for key in _PROPERTY_NAMES:
        value = getattr(decoded, key, None)
        if value is not None and value != {}:
            out[key] = _jsonable(value)
    return out


def _read_bounded(
    reader: Any,
    end: int,
    limit: int,
    spec: FilterSpec | None,
    predicate: Any,
    max_bytes: int,
    encoding: str,
    stream_name: str = "",
) -> BrowseResult:
    # Only a filtered scan is cut by time: it may read many chunks to find few matches. An
    # unfiltered page is bounded by ``limit`` and ``max_bytes`` alone, so a slow machine
    # still answers the whole page (a dashboard's "newest 20" needs two reads of 16 chunks).
    # Even a filtered scan reads once, so a stalled loop never answers an empty page.
    filtering = spec is not None or predicate is not None
    reads = 0
    deadline = time.monotonic() + BROWSE_TIME_BUDGET_S
    out: list[BrowsedMessage] = []
    used = 0
    stopped: Literal["end", "limit", "bytes", "time"] = "end"
    while True:
        if reader.position >= end:
            stopped = "end"
            break
        if len(out) >= limit:
            stopped = "limit"
            break
        if filtering and reads and time.monotonic() > deadline:
            stopped = "time"
            break
        records: list[Record] = reader.read(limit - len(out), spec, predicate, max_chunks=16)
        reads += 1
        records = [r for r in records if r.offset < end]
        for record in records:
            if out and used + len(record.body) > max_bytes:
                stopped = "bytes"
                break
            used += len(record.body)
            out.append(_browsed(record, encoding, stream_name))
        else:
            if not records and reader.at_end:
                stopped = "end"
                break
            continue
        break
    next_offset = out[-1].offset + 1 if stopped in ("bytes", "limit") and out else reader.position
    if stopped == "end":
        next_offset = max(next_offset, min(reader.position, end))
    return BrowseResult(out, next_offset, end, stopped == "end", stopped)


def _browsed(record: Record, encoding: str, stream_name: str = "") -> BrowsedMessage:
    payload: str
    kind: Literal["string", "base64"]
    if record.kind:  # a stream-protocol payload: shown as a 0-9-1 consumer would get it
        exchange, routing_key, props, body = to_amqp091(
            record.body, stream_name, record.filter_values
        )
        record = record._replace(
            exchange=exchange, routing_key=routing_key, properties=props, body=body
        )
    if encoding == "auto":
        try:
            payload, kind = record.body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            payload, kind = base64.b64encode(record.body).decode("ascii"), "base64"
    else:
        payload, kind = base64.b64encode(record.body).decode("ascii"), "base64"
    return BrowsedMessage(
        offset=record.offset,
        timestamp_ms=record.timestamp_ms,
        exchange=record.exchange,
        routing_key=record.routing_key,
        filter_values=list(record.filter_values),
        properties=decode_properties(record.properties),
        payload=payload,
        payload_encoding=kind,
        payload_bytes=len(record.body),
    )


# --------------------------------------------------------------------------- definitions

_UNSUPPORTED_SECTIONS = ("topic_permissions",)
_KNOWN_COMPONENTS = (policies.OPERATOR_COMPONENT, LIMITS_COMPONENT)


def _definition_queue_kind(q: dict[str, Any]) -> str:
    """stream, classic, quorum (or the unknown name) of a queue in a definitions file: its
    ``x-queue-type``, else its ``type``, else classic (RabbitMQ's files before 3.13)."""
    raw = (q.get("arguments") or {}).get("x-queue-type", q.get("type")) or "classic"
    text = str(raw)
    if text in STREAM_TYPE_ALIASES:
        return "stream"
    if text in ("classic", CLASSIC_TYPE_NAME):
        return "classic"
    if text in ("quorum", QUORUM_TYPE_NAME):
        return "quorum"
    return text


class _DefinitionsPlan:
    """Check a whole definitions document, then apply it (all or nothing)."""

    def __init__(self, facade: BrokerFacade, data: dict[str, Any], vhost: str | None) -> None:
        self.facade = facade
        self.data = data
        self.vhost = vhost

    def _section(self, key: str) -> list[dict[str, Any]]:
        items = self.data.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise BadRequest(f"'{key}' must be a list of objects")
        if self.vhost is not None:
            return [dict(i, vhost=self.vhost) for i in items]
        return items

    def check(self) -> None:
        if not isinstance(self.data, dict):
            raise BadRequest("definitions must be a JSON object")
        problems: list[str] = []
        for key in _UNSUPPORTED_SECTIONS:
            items = self.data.get(key) or []
            if items:
                problems.append(f"{key} ({len(items)})")
        components: dict[str, int] = {}
        for p in self._section("parameters"):
            if p.get("component") not in _KNOWN_COMPONENTS:
                key = str(p.get("component"))
                components[key] = components.get(key, 0) + 1
        problems.extend(
            f"parameters of component '{c}' ({n})" for c, n in sorted(components.items())
        )
        for q in self._section("queues"):
            if _definition_queue_kind(q) not in ("stream", "classic", "quorum"):
                problems.append(
                    f"queue '{q.get('name')}' in vhost '{q.get('vhost')}' of type "
                    f"'{_definition_queue_kind(q)}'"
                )
        if problems:
            raise BadRequest("definitions refused, SieveMQ cannot hold: " + "; ".join(problems))
        known_vhosts = set(self.facade.broker.vhosts) | {
            str(v.get("name")) for v in self._section("vhosts")
        }
        if self.vhost is not None:
            known_vhosts.add(self.vhost)
        for u in self._section("users"):
            if not isinstance(u.get("name"), str) or not u["name"]:
                raise BadRequest("a user without a name")
            algorithm = u.get("hashing_algorithm", SHA256)
            if "password" in u and "password_hash" not in u:
                continue
            if not valid_hash(str(u.get("password_hash", "")), str(algorithm)):
                raise BadRequest(f"user '{u['name']}': bad password_hash or hashing_algorithm")
            tags = u.get("tags", [])
            if isinstance(tags, str):
                tags = [t for t in tags.split(",") if t]
            _check_tags(tags)
        users = {u.name for u in self.facade.broker.users} | {
            str(u.get("name")) for u in self._section("users")
        }
        for p in self._section("permissions"):
            if p.get("user") not in users:
                raise BadRequest(f"permission for unknown user '{p.get('user')}'")
            if p.get("vhost") not in known_vhosts:
                raise BadRequest(f"permission in unknown vhost '{p.get('vhost')}'")
            for kind in ("configure", "write", "read"):
                problem = check_regex(str(p.get(kind, "")))
                if problem is not None:
                    raise BadRequest(f"invalid {kind} regex '{p.get(kind)}': {problem}")
        for key in ("queues", "exchanges", "bindings", "policies", "parameters"):
            for item in self._section(key):
                if item.get("vhost") not in known_vhosts:
                    raise BadRequest(f"{key[:-1]} in unknown vhost '{item.get('vhost')}'")
        for item in self._section("policies"):
            self._policy(item, item, operator=False)
        for item in self._section("parameters"):
            if item.get("component") == policies.OPERATOR_COMPONENT:
                self._policy(item, item.get("value"), operator=True)
            elif not isinstance(item.get("value"), dict) or not all(
                k in VHOST_LIMITS and isinstance(n, int) and not isinstance(n, bool)
                for k, n in item["value"].items()
            ):
                raise BadRequest(
                    f"vhost-limits of vhost '{item.get('vhost')}': an object of "
                    f"{', '.join(VHOST_LIMITS)} integers, not {item.get('value')!r}"
                )
        for item in self.data.get("global_parameters") or []:
            if not isinstance(item, dict) or "name" not in item or "value" not in item:
                raise BadRequest("a global parameter needs a name and a value")
        for x in self._section("exchanges"):
            if x.get("type") not in EXCHANGE_TYPES:
                raise BadRequest(f"exchange '{x.get('name')}' of unknown type '{x.get('type')}'")
        for q in self._section("queues"):
            kind = _definition_queue_kind(q)
            try:
                if kind == "stream":
                    validate_stream_declare(
                        str(q["name"]),
                        str(q["vhost"]),
                        bool(q.get("durable", True)),
                        False,
                        bool(q.get("auto_delete", False)),
                        dict(q.get("arguments") or {}),
                    )
                else:
                    validate_declare(
                        "quorum" if kind == "quorum" else "classic",
                        str(q["name"]),
                        str(q["vhost"]),
                        bool(q.get("durable", True)),
                        False,
                        bool(q.get("auto_delete", False)),
                        dict(q.get("arguments") or {}),
                    )
            except AMQPError as error:
                raise BadRequest(error.explanation) from None
            except KeyError as error:
                raise BadRequest(f"queue without {error}") from None

    @staticmethod
    def _policy(item: dict[str, Any], body: Any, operator: bool) -> policies.Policy:
        kind = "operator policy" if operator else "policy"
        try:
            return policies.parse(str(item.get("vhost")), str(item.get("name")), body, operator)
        except policies.PolicyError as error:
            raise BadRequest(
                f"{kind} '{item.get('name')}' in vhost '{item.get('vhost')}': {error.reason}"
            ) from None

    def apply(self) -> None:
        f = self.facade
        if self.vhost is None:
            for v in self._section("vhosts"):
                f.broker.add_vhost(str(v["name"]))
            for g in self.data.get("global_parameters") or []:
                f.broker.global_parameters[str(g["name"])] = g["value"]
        # policies before the queues, so that those are declared under them
        for item in self._section("policies"):
            f.broker.vhost(str(item["vhost"])).set_policy(self._policy(item, item, False))
        for item in self._section("parameters"):
            vhost = f.broker.vhost(str(item["vhost"]))
            if item["component"] == policies.OPERATOR_COMPONENT:
                vhost.set_policy(self._policy(item, item["value"], True), operator=True)
            else:
                vhost.limits = {str(k): int(n) for k, n in item["value"].items()}
        for u in self._section("users"):
            tags = u.get("tags", [])
            if isinstance(tags, str):
                tags = [t for t in tags.split(",") if t]
            if "password_hash" in u:
                f.put_user(
                    u["name"],
                    tags=tags,
                    password_hash=str(u["password_hash"]),
                    hashing_algorithm=str(u.get("hashing_algorithm", SHA256)),
                )
            else:
                f.put_user(u["name"], password=str(u.get("password", "")), tags=tags)
        for p in self._section("permissions"):
            f.set_permission(
                str(p["user"]),
                str(p["vhost"]),
                str(p.get("configure", "")),
                str(p.get("write", "")),
                str(p.get("read", "")),
            )
        for x in self._section("exchanges"):
            f.declare_exchange(
                str(x["vhost"]),
                str(x["name"]),
                str(x["type"]),
                durable=bool(x.get("durable", True)),
                auto_delete=bool(x.get("auto_delete", False)),
                internal=bool(x.get("internal", False)),
                arguments=dict(x.get("arguments") or {}),
            )
        for q in self._section("queues"):
            arguments = dict(q.get("arguments") or {})
            kind = _definition_queue_kind(q)
            vhost = f.broker.vhost(str(q["vhost"]))
            if "x-queue-type" not in arguments and vhost.classic.kind_of(None) != kind:
                # RabbitMQ's file says the type in "type" (or nothing: classic); this
                # server's default queue type may be another
                arguments["x-queue-type"] = kind
            f.declare_stream(
                str(q["vhost"]),
                str(q["name"]),
                arguments,
                durable=bool(q.get("durable", True)),
                auto_delete=bool(q.get("auto_delete", False)),
            )
        for b in self._section("bindings"):
            f.bind(
                str(b["vhost"]),
                str(b["source"]),
                str(b.get("destination_type", "queue")),
                str(b["destination"]),
                str(b.get("routing_key", "")),
                dict(b.get("arguments") or {}),
            )
        f.broker.save_definitions()  # the policies, parameters and limits set above
