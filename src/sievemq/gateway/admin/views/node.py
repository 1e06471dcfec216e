"""Views of the node as a whole: listeners, totals, the overview and write latencies."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sievemq.storage import FilterStats


@dataclass
class ListenerView:
    protocol: str
    ip_address: str
    port: int


@dataclass(frozen=True)
class ClusterNodeView:
    """A cluster member as etcd shows it: ``record`` is what a live node last published
    (uptime, fd and memory use, listeners), empty for a stopped one."""

    name: str
    running: bool
    local: bool
    record: dict[str, Any]
    # what the node last published of its totals (its overview's counters, rates and
    # lengths, its queues' figures) and when (seconds since the epoch; None: never)
    totals: dict[str, Any] = field(default_factory=dict)
    published: float | None = None


@dataclass(frozen=True)
class RemoteQueueView:
    """A queue another cluster node leads, as its etcd record says, with its message
    figures as the leader last published them (``figures`` empty when it has not yet)."""

    vhost: str
    name: str
    type: str
    leader: str
    epoch: int
    arguments: dict[str, Any]
    leader_running: bool
    figures: dict[str, Any] = field(default_factory=dict)
    figures_published: float | None = None  # seconds since the epoch


class ClusterPort(Protocol):
    """What the admin plane may ask of the cluster (``sievemq.cluster`` implements it)."""

    @property
    def cluster_name(self) -> str: ...

    def node_views(self) -> list[ClusterNodeView]: ...

    def remote_queues(self, vhost: str | None) -> list[RemoteQueueView]:
        """The queues other nodes lead (of ``vhost``, or every vhost)."""
        ...

    def queue_members(self, vhost: str, name: str) -> tuple[list[str], list[str]] | None:
        """A recorded queue's members (leader, then replicas) and those running now."""
        ...

    def link_views(self) -> list[dict[str, Any]]:
        """This node's inter-node links: peer, vhost, bytes buffered, flow, channels."""
        ...

    def queue_epoch(self, vhost: str, name: str) -> int | None:
        """A recorded queue's leader epoch (None: not recorded)."""
        ...

    def add_replica(self, vhost: str, name: str, node: str) -> Awaitable[bool]:
        """Make ``node`` a replica of the stream (False: it already is a member);
        ``NotFound``, ``Conflict`` or ``BadRequest`` naming what is wrong."""
        ...

    def delete_replica(self, vhost: str, name: str, node: str) -> Awaitable[None]:
        """Stop ``node``'s replica and remove its copy; the leader is a ``Conflict``."""
        ...

    def add_member(self, vhost: str, name: str, node: str) -> Awaitable[bool]:
        """Make ``node`` a member of the quorum queue (False: it already is one); refusals
        as ``add_replica``'s."""
        ...

    def delete_member(self, vhost: str, name: str, node: str) -> Awaitable[None]:
        """Stop ``node``'s copy of the quorum queue and remove it; the leader is a
        ``Conflict``."""
        ...

    def quorum_queues(self) -> list[tuple[str, str, list[str]]]:
        """Every recorded quorum queue (not being deleted): vhost, name and members
        (leader first), sorted."""
        ...

    def quorum_copy(self, vhost: str, name: str) -> QuorumCopyView | None:
        """This node's copy of a quorum queue another node leads (None: it follows none)."""
        ...


@dataclass(frozen=True)
class StreamMemberView:
    """One member of a stream as the node holding it sees it (``rabbitmq-streams
    stream_status``): the leader (``writer``) or a replica's copy."""

    node: str
    role: str  # "writer" or "replica"
    epoch: int
    offset: int  # the last offset held (-1: none)
    committed_offset: int  # the last offset a reader may see (-1: none)
    first_offset: int
    readers: int  # consumers and Stream-protocol subscriptions reading this copy
    segments: int
    messages: int
    bytes: int


@dataclass(frozen=True)
class QuorumCopyView:
    """A replica's copy of a quorum queue's log: the last log id it holds (every live
    record at or below it) and how many live records it holds."""

    log_end: int
    messages: int


@dataclass(frozen=True)
class QuorumMemberView:
    """One member of a quorum queue as the node holding it sees it (``rabbitmq-queues
    quorum_status``): the leader or a follower's copy of its log."""

    node: str
    role: str  # "leader" or "follower"
    epoch: int  # the leader's epoch (Raft's term)
    log_end: int  # the last log id held (0: none yet)
    commit_end: int | None  # the last id a majority holds (the leader's view; None: follower)
    messages: int  # live records in the log (persistent messages not settled)


# the header a node's request to another node's admin API carries the cluster secret in
PEER_HEADER = "x-sievemq-cluster-secret"
# the header a relayed request (a get, purge or browse of a queue the receiving node leads)
# names the user it is done for in; it comes with the cluster secret only
RELAY_USER_HEADER = "x-sievemq-cluster-user"
# the header naming the nodes a cluster-wide listing left out (they did not answer in time)
PARTIAL_HEADER = "x-sievemq-partial"


@dataclass
class PeerListing:
    """Items the other cluster nodes listed, and the nodes that did not answer in time."""

    items: list[dict[str, Any]]
    missing: list[str]


class AdminPeersPort(Protocol):
    """The other nodes' admin APIs, for cluster-wide listings (``cluster/admin_peers.py``)."""

    def is_peer(self, presented: str) -> bool:
        """Whether a request's node-to-node credential is the cluster secret."""
        ...

    async def gather(self, path: str) -> PeerListing:
        """``GET path`` (a list) on every other live node."""
        ...

    async def find(self, path: str) -> tuple[str, dict[str, Any]] | None:
        """The first other node answering ``GET path`` with an object, and that object."""
        ...

    async def delete(self, node: str, path: str, reason: str | None) -> int:
        """``DELETE path`` on ``node``; its HTTP status (503: not reached)."""
        ...

    async def relay(self, node: str, request: RelayedRequest) -> RelayedAnswer | None:
        """``request`` done on ``node`` for its user; its answer (None: not reached)."""
        ...


@dataclass(frozen=True)
class RelayedRequest:
    """A client's HTTP request about a queue another node leads, as sent there."""

    method: str
    path: str  # as the client sent it, percent-encoded
    query: str
    body: bytes
    user: str


@dataclass(frozen=True)
class RelayedAnswer:
    """What the queue's leader answered a relayed request: passed on as it is."""

    status: int
    body: bytes
    content_type: str


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
    filter_stats: FilterStats


@dataclass
class HistoryPointView:
    """One round of the rate sampler, node-wide: the overview's message rates and queue
    lengths at ``timestamp`` (the dashboard draws the last minutes from these)."""

    timestamp: float  # seconds since the epoch
    rates: dict[str, float]  # publish, confirm, deliver_get, ack, redeliver (per second)
    messages: int
    messages_unacknowledged: int


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


@dataclass
class DescriptorsView:
    """The process's descriptors (RabbitMQ's ``fd_used``/``fd_total``) and the client
    connections' share of them (``sockets_used``/``sockets_total``)."""

    fd_used: int
    fd_total: int
    sockets_used: int
    sockets_total: int
