"""Views of queues, streams and exchanges: their state, messages read from them, named
consumers and filter advice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sievemq.gateway.model.classic.queue import message_stats as classic_message_stats
from sievemq.storage import FilterStats


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
    filter_stats: FilterStats
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
    # ready messages (and body bytes) held in memory, and those read back from disk when
    # the head reaches them (RabbitMQ's messages_ram / messages_paged_out)
    messages_ram: int = 0
    message_bytes_ram: int = 0
    messages_paged_out: int = 0
    message_bytes_paged_out: int = 0
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


GET_ACKMODES = (
    "ack_requeue_true",
    "ack_requeue_false",
    "reject_requeue_true",
    "reject_requeue_false",
)


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


BROWSE_MAX_LIMIT = 1000


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
