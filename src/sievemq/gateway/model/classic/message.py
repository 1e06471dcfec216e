"""A queue's message and what a queue reads from its properties, apart from the queue's
logic (``queue.ClassicQueue``): the memory window and budget, ``publish_facts`` (cached per
property list) and ``QueueMessage``."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sievemq.amqp.errors import FrameError
from sievemq.amqp.properties import delivery_fields


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class MemoryWindow:
    """How many ready messages a queue holds in memory before persistent messages of a
    durable queue are kept on disk only (``--queue-memory-messages``), and the body bytes
    all durable queues of the node hold together (``--queue-memory-bytes``, the total of
    the node's ``MemoryBudget``)."""

    messages: int = 2048
    bytes: int = 64 * 1024 * 1024
    refill: int = 256  # messages read back per refill at least (one pread for adjacent ones)


DEFAULT_WINDOW = MemoryWindow()


class MemoryBudget:
    """The body bytes the durable classic/quorum queues of a node hold in memory together
    (``--queue-memory-bytes``), shared fairly: a queue stops loading bodies once it holds
    its share (the total over the queues sharing it) or once the node total is used, so
    memory stays bounded whatever the number of deep queues; past that, bodies are read back
    from the queues' logs. ``used`` is kept by the queues as their loaded bytes change."""

    __slots__ = ("queues", "total", "used")

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0  # body bytes the sharing queues hold in memory
        self.queues = 0  # queues sharing it

    @property
    def share(self) -> int:
        """What one queue may hold while the others hold theirs."""
        return self.total // (self.queues or 1)


class PublishFacts:
    """What the queue needs from a message's properties: persistence, priority, expiration."""

    __slots__ = ("expiration_ms", "persistent", "priority")

    def __init__(self, persistent: bool, priority: int, expiration_ms: int | None) -> None:
        self.persistent = persistent
        self.priority = priority
        self.expiration_ms = expiration_ms


_FACTS: dict[bytes, PublishFacts] = {}


def publish_facts(props: bytes) -> PublishFacts:
    """delivery-mode, priority and expiration from raw property bytes (cached per list)."""
    got = _FACTS.get(props)
    if got is not None:
        return got
    try:
        mode, priority, text = delivery_fields(props)
    except FrameError:  # checked on publish: only a damaged log could hold such bytes
        mode, priority, text = 0, 0, None
    expiration = int(text) if text is not None and text.isdigit() else None
    facts = PublishFacts(mode == 2, priority, expiration)
    if len(_FACTS) > 1024:
        _FACTS.clear()
    _FACTS[props] = facts
    return facts


class QueueMessage:
    """One message in a queue (ready or outstanding)."""

    __slots__ = (
        "body",
        "delivery_count",
        "enqueued_ms",
        "exchange",
        "expires_ms",
        "id",
        "logged",
        "priority",
        "properties",
        "redelivered",
        "routing_key",
    )

    def __init__(
        self,
        msg_id: int,
        exchange: str,
        routing_key: str,
        properties: bytes,
        body: bytes,
        enqueued_ms: int,
        expires_ms: int | None,
        priority: int,
        logged: bool,
    ) -> None:
        self.id = msg_id
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body
        self.enqueued_ms = enqueued_ms
        self.expires_ms = expires_ms
        self.priority = priority
        self.logged = logged
        self.redelivered = False
        self.delivery_count = 0

    def __lt__(self, other: QueueMessage) -> bool:
        return self.id < other.id
