"""The chaos workload's quorum queue clients, each recording what it did.

- ``QuorumPublisher``: aiormq, confirms, persistent ``LABEL:SEQ`` to a quorum queue. A nack,
  a return (the node did not route to the queue for a moment), a dropped connection or a
  confirm that does not come in time sends the same SEQ again through the next node of its
  list: at least once, so a message may be stored twice, never lost once confirmed.
- ``QuorumConsumer``: pika, manual acks, through the next node of its list after a drop. It
  acks, or (``requeue_every``) gives back each Nth SEQ on its first delivery (``basic.nack``
  with requeue), and keeps every delivery with its ``x-delivery-count``.
- ``drain``: every message left in the queue, read once healed (the checkers' read-back).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import aiormq
import aiormq.abc
import pika
from pika.exceptions import AMQPError

from sievemq.testing import ServerProcess
from tests.integration.test_cluster.fault_load import Background

from .workload import CONNECT_ERRORS, parse

CONFIRM_TIMEOUT_S = 10.0  # a publish unconfirmed this long is sent again elsewhere


def connect(node: ServerProcess) -> pika.BlockingConnection:
    params = pika.URLParameters(node.url + "?connection_attempts=1&socket_timeout=5")
    params.blocked_connection_timeout = 30
    return pika.BlockingConnection(params)


@dataclass
class QuorumPublisher(Background):
    """Publishes ``LABEL:SEQ`` with confirms to ``queue``, through ``nodes[0]`` first (aiormq:
    a confirm that does not come within ``CONFIRM_TIMEOUT_S``, a publish held for a majority
    that is not there, counts as a drop)."""

    nodes: list[ServerProcess]
    queue: str
    label: str
    pause_s: float = 0.0
    confirmed: list[int] = field(default_factory=list)
    confirm_times: list[float] = field(default_factory=list)
    sent: set[int] = field(default_factory=set)
    nacks: int = 0
    drops: int = 0
    errors: list[str] = field(default_factory=list)
    _next: int = 0
    _retry: int | None = None  # sent, neither confirmed nor given up: sent again first
    _at: int = 0  # index of the node it publishes through
    _attempts: int = 0  # sends so far: each one's message id is unique (``SEQ.ATTEMPT``)

    @property
    def name(self) -> str:
        return self.label

    def count(self) -> int:
        return len(self.confirmed)

    def attempted(self) -> set[int]:
        return set(self.sent)

    def _run(self) -> None:
        asyncio.run(self._publish_all())

    async def _publish_all(self) -> None:
        while not self._stop.is_set():
            node = self.nodes[self._at % len(self.nodes)]
            connection = None
            try:
                connection = await asyncio.wait_for(aiormq.connect(node.url), CONFIRM_TIMEOUT_S)
                channel = await asyncio.wait_for(connection.channel(), CONFIRM_TIMEOUT_S)
                await self._publish(channel)
            except Exception as error:  # any failure: the same SEQ through the next node
                self.drops += 1
                self.errors.append(f"{type(error).__name__}: {error}"[:200])
                self._at += 1
                await asyncio.sleep(0.2)
            finally:
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(connection.close(), 5)

    async def _publish(self, channel: aiormq.abc.AbstractChannel) -> None:
        while not self._stop.is_set():
            if self._retry is None:
                self._retry = self._next
                self._next += 1
            seq = self._retry
            self.sent.add(seq)
            self._attempts += 1
            # a resend is another message of the same body: its own id tells the copies apart
            props = aiormq.spec.Basic.Properties(
                delivery_mode=2, message_id=f"{seq}.{self._attempts}"
            )
            try:
                confirm = await asyncio.wait_for(
                    channel.basic_publish(
                        f"{self.label}:{seq}".encode(),
                        routing_key=self.queue,
                        properties=props,
                        mandatory=True,
                    ),
                    CONFIRM_TIMEOUT_S,
                )
            except aiormq.exceptions.DeliveryError:  # a nack (or a return)
                self.nacks += 1
                raise
            if not isinstance(confirm, aiormq.spec.Basic.Ack):
                self.nacks += 1
                raise RuntimeError(f"{seq} not confirmed: {confirm!r}"[:200])
            self._retry = None
            self.confirmed.append(seq)
            self.confirm_times.append(time.monotonic())
            if self.pause_s:
                await asyncio.sleep(self.pause_s)


@dataclass
class QuorumDelivery:
    t: float  # time.monotonic() when it arrived
    consumer: str
    connection: int  # the consumer's connections so far: one connection's order is the server's
    label: str
    seq: int
    message_id: str  # the publisher's send it is (``SEQ.ATTEMPT``)
    count: int  # x-delivery-count (0 when absent)
    redelivered: bool
    settled: str  # "ack" or "requeue"


@dataclass
class QuorumConsumer(Background):
    """Consumes ``queue`` with manual acks through ``nodes[0]`` first."""

    nodes: list[ServerProcess]
    queue: str
    label: str
    requeue_every: int = 0  # give back each SEQ divisible by it, on its first delivery
    prefetch: int = 20
    deliveries: list[QuorumDelivery] = field(default_factory=list)
    connections: int = 0
    errors: list[str] = field(default_factory=list)
    _given_back: set[tuple[str, int]] = field(default_factory=set)

    def _run(self) -> None:
        at = 0
        while not self._stop.is_set():
            node = self.nodes[at % len(self.nodes)]
            try:
                conn = connect(node)
            except CONNECT_ERRORS as error:
                self.errors.append(f"connect: {error!r}"[:200])
                at += 1
                self._stop.wait(0.3)
                continue
            self.connections += 1
            try:
                ch = conn.channel()
                ch.basic_qos(prefetch_count=self.prefetch)
                for method, props, body in ch.consume(self.queue, inactivity_timeout=0.3):
                    if self._stop.is_set():
                        break
                    if method is None:
                        continue
                    self._got(ch, method, props, body)
            except (AMQPError, OSError, ValueError) as error:
                self.errors.append(f"consume: {error!r}"[:200])
                at += 1
                self._stop.wait(0.3)
            finally:
                if conn.is_open:
                    with contextlib.suppress(AMQPError, OSError):
                        conn.close()

    def _got(self, ch: Any, method: Any, props: pika.BasicProperties, body: bytes) -> None:
        label, seq = parse(body)
        count = int((props.headers or {}).get("x-delivery-count", 0))
        give_back = (
            self.requeue_every > 0
            and seq % self.requeue_every == 0
            and (label, seq) not in self._given_back
        )
        self.deliveries.append(
            QuorumDelivery(
                time.monotonic(),
                self.label,
                self.connections,
                label,
                seq,
                str(props.message_id),
                count,
                bool(method.redelivered),
                "requeue" if give_back else "ack",
            )
        )
        if give_back:
            self._given_back.add((label, seq))
            ch.basic_nack(method.delivery_tag, requeue=True)
        else:
            ch.basic_ack(method.delivery_tag)


def drain(node: ServerProcess, queue: str, idle_s: float, timeout_s: float) -> list[QuorumDelivery]:
    """Every message left in ``queue``, acked, through ``node``: until nothing more came for
    ``idle_s`` (or ``timeout_s`` at most)."""
    got: list[QuorumDelivery] = []
    conn = connect(node)
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        deadline = time.monotonic() + timeout_s
        idle_since = time.monotonic()
        for method, props, body in ch.consume(queue, inactivity_timeout=0.2):
            now = time.monotonic()
            if method is not None:
                idle_since = now
                label, seq = parse(body)
                count = int((props.headers or {}).get("x-delivery-count", 0))
                redelivered = bool(method.redelivered)
                message_id = str(props.message_id)
                got.append(
                    QuorumDelivery(
                        now, "drain", 1, label, seq, message_id, count, redelivered, "ack"
                    )
                )
                ch.basic_ack(method.delivery_tag)
            if now - idle_since >= idle_s or now > deadline:
                break
        ch.cancel()
    finally:
        conn.close()
    return got
