"""Views of the clients: AMQP 0-9-1 and stream-protocol connections, channels, consumers,
publishers and single-active-consumer groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sievemq.storage import FilterStats


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
    filter_stats: FilterStats
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
