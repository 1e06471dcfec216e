"""What the clients of a chaos run do while faults come and go, each recording what it did.

- AMQP 0-9-1 publishers: ``fault_load.Publisher`` (pika, confirms, one message at a time),
  through the stream's leader and through a node that forwards to it.
- Stream-protocol publishers (rstream) with a publisher name, so the leader deduplicates
  by publishing id, and without one; each resends what it was not sure of after a dropped
  connection with the same id (dedup: never stored twice; plain: maybe twice).
- ``StreamReader``: an AMQP consumer of a stream, named (resumes by name) or filtered
  (``x-stream-filter``), that keeps every offset it got per connection.
- ``Declarer``: declares and deletes durable queues through any node, keeping which
  declare-oks and delete-oks it got.

Every body is ``LABEL:SEQ`` (one label per publisher), so a read-back tells who sent what.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pika
from pika.adapters.utils.connection_workflow import AMQPConnectorException
from pika.exceptions import AMQPError
from rstream import (
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    RawMessage,
    amqp_decoder,
)

from sievemq.testing import ServerProcess
from tests.integration.test_cluster.fault_load import Background

STREAM_SEND_TIMEOUT_S = 10  # one confirm; a dropped leader fails the send sooner

# what a pika connect raises when a node is down, cut off or too slow (a handshake timeout
# is an AMQPConnectorException, not an AMQPError: it ended the declarer's thread once)
CONNECT_ERRORS = (AMQPError, OSError, AMQPConnectorException)


def parse(body: bytes) -> tuple[str, int]:
    """``LABEL:SEQ`` -> (label, seq); ValueError for anything else."""
    label, _, seq = body.decode().rpartition(":")
    if not label:
        raise ValueError(f"not a workload body: {body[:60]!r}")
    return label, int(seq)


def failure(phase: str, took_s: float, error: BaseException) -> str:
    """A client's failure as kept in its ``errors``: the step, when it failed (UTC, to
    match the nodes' logs), how long the step had run, the error."""
    at = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
    return f"{phase} at {at}Z after {took_s:.1f} s: {type(error).__name__}: {error}"[:200]


@dataclass
class StreamPublisher(Background):
    """rstream publishing ``LABEL:SEQ`` with confirms to ``queue``; publishing id SEQ + 1."""

    node: ServerProcess
    queue: str  # a stream
    label: str
    dedup: bool  # publisher name given: the leader drops an id it already stored
    pause_s: float = 0.0
    confirmed: list[int] = field(default_factory=list)
    confirm_times: list[float] = field(default_factory=list)
    in_doubt: list[int] = field(default_factory=list)  # sent, no confirm (resent later)
    sent: set[int] = field(default_factory=set)
    drops: int = 0
    errors: list[str] = field(default_factory=list)
    _next: int = 0

    @property
    def name(self) -> str:
        return self.label

    def count(self) -> int:
        return len(self.confirmed)

    def _run(self) -> None:
        asyncio.run(self._publish())

    async def _publish(self) -> None:
        retry: list[int] = []
        while not self._stop.is_set():
            producer = Producer(
                self.node.host,
                self.node.stream_port,
                username="guest",
                password="guest",
                connection_name=self.label,
            )
            # which step failed, and when (UTC, as the nodes' logs): ``start`` is the
            # handshake with ``node``; the ``first send`` adds Metadata there, the connection
            # to the leader it names and the publisher's declare to a confirm's wait
            phase, began = "start", time.monotonic()
            try:
                await asyncio.wait_for(producer.start(), STREAM_SEND_TIMEOUT_S)
                phase, began = "first send", time.monotonic()
                while not self._stop.is_set():
                    seq = retry[0] if retry else self._take()
                    await self._send(producer, seq)
                    phase, began = "send", time.monotonic()
                    if retry:
                        retry.pop(0)
                    if self.pause_s:
                        await asyncio.sleep(self.pause_s)
            except Exception as error:  # any failure: reconnect and resend
                self.drops += 1
                self.errors.append(failure(phase, time.monotonic() - began, error))
                retry = sorted(set(retry) | set(self.in_doubt) - set(self.confirmed))
                await asyncio.sleep(0.3)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.close(), 5)

    def _take(self) -> int:
        seq = self._next
        self._next += 1
        return seq

    async def _send(self, producer: Producer, seq: int) -> None:
        self.sent.add(seq)
        if seq not in self.in_doubt:
            self.in_doubt.append(seq)
        await asyncio.wait_for(
            producer.send_wait(
                self.queue,
                RawMessage(f"{self.label}:{seq}".encode(), publishing_id=seq + 1),
                publisher_name=self.label if self.dedup else None,
                timeout=STREAM_SEND_TIMEOUT_S,
            ),
            STREAM_SEND_TIMEOUT_S + 2,
        )
        self.in_doubt.remove(seq)
        self.confirmed.append(seq)
        self.confirm_times.append(time.monotonic())

    def attempted(self) -> set[int]:
        return set(self.sent)


@dataclass
class Delivery:
    connection: int  # how many connections the reader had made when it got this
    offset: int
    label: str
    seq: int


@dataclass
class StreamReader(Background):
    """An AMQP consumer of ``stream`` through ``node``: named (the server keeps its offset
    and it resumes by name after a reconnect) or filtered (resumes after the last offset)."""

    node: ServerProcess
    stream: str
    label: str
    consumer_name: str = ""
    filter_value: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    connections: int = 0
    errors: list[str] = field(default_factory=list)

    def _arguments(self) -> dict[str, Any]:
        args: dict[str, Any] = {}
        if self.consumer_name:
            args["x-stream-consumer-name"] = self.consumer_name
            if not self.deliveries:
                args["x-stream-offset"] = "first"
        else:
            last = self.deliveries[-1].offset + 1 if self.deliveries else "first"
            args["x-stream-offset"] = last
        if self.filter_value:
            args["x-stream-filter"] = self.filter_value
        return args

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn = pika.BlockingConnection(
                    pika.URLParameters(self.node.url + "?connection_attempts=1")
                )
            except CONNECT_ERRORS as error:
                self.errors.append(f"connect: {error!r}"[:200])
                self._stop.wait(0.3)
                continue
            self.connections += 1
            try:
                ch = conn.channel()
                ch.basic_qos(prefetch_count=200)
                for method, props, body in ch.consume(
                    self.stream, arguments=self._arguments(), inactivity_timeout=0.3
                ):
                    if self._stop.is_set():
                        break
                    if method is None:
                        continue
                    label, seq = parse(body)
                    offset = int(props.headers["x-stream-offset"])
                    self.deliveries.append(Delivery(self.connections, offset, label, seq))
                    ch.basic_ack(method.delivery_tag)
            except (AMQPError, OSError, ValueError) as error:
                self.errors.append(f"consume: {error!r}"[:200])
                self._stop.wait(0.3)
            finally:
                if conn.is_open:
                    with contextlib.suppress(AMQPError, OSError):
                        conn.close()


def parse_any(data: bytes) -> tuple[str, int]:
    """A Stream-protocol delivery's body: as published by rstream (raw ``LABEL:SEQ``) or
    over AMQP 0-9-1 (stored as an AMQP 1.0 message)."""
    try:
        return parse(data)
    except (ValueError, UnicodeDecodeError):
        return parse(bytes(amqp_decoder(data).body))


@dataclass
class StreamProtocolReader(Background):
    """An rstream Consumer of ``queue`` located through ``node`` (rstream reads a replica
    when Metadata lists one); after a closed connection it subscribes again from the offset
    after the last it got."""

    node: ServerProcess
    queue: str
    label: str
    deliveries: list[Delivery] = field(default_factory=list)
    connections: int = 0
    errors: list[str] = field(default_factory=list)

    def _run(self) -> None:
        asyncio.run(self._read())

    async def _read(self) -> None:
        while not self._stop.is_set():
            closed = asyncio.Event()

            async def on_close(info: Any, closed: asyncio.Event = closed) -> None:
                self.errors.append(f"closed: {info}"[:200])
                closed.set()

            reader = Consumer(
                self.node.host,
                self.node.stream_port,
                username="guest",
                password="guest",
                on_close_handler=on_close,
                connection_name=self.label,
            )
            self.connections += 1
            number = self.connections
            start = (
                ConsumerOffsetSpecification(OffsetType.OFFSET, self.deliveries[-1].offset + 1)
                if self.deliveries
                else ConsumerOffsetSpecification(OffsetType.FIRST, None)
            )

            async def on_message(data: bytes, ctx: MessageContext, number: int = number) -> None:
                label, seq = parse_any(data)
                self.deliveries.append(Delivery(number, ctx.offset, label, seq))

            try:
                await asyncio.wait_for(reader.start(), STREAM_SEND_TIMEOUT_S)
                await asyncio.wait_for(
                    reader.subscribe(self.queue, on_message, offset_specification=start),
                    STREAM_SEND_TIMEOUT_S,
                )
                while not self._stop.is_set() and not closed.is_set():
                    await asyncio.sleep(0.2)
            except Exception as error:  # any failure: subscribe again
                self.errors.append(f"{type(error).__name__}: {error}"[:200])
                await asyncio.sleep(0.3)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reader.close(), 5)


@dataclass
class Declarer(Background):
    """Declares durable queues (stream or classic) through a random node, and deletes some
    of them through another; keeps what it was told."""

    nodes: dict[str, ServerProcess]
    seed: int = 1
    pause_s: float = 0.3
    declared: dict[str, tuple[str, float]] = field(default_factory=dict)  # queue: (node, t)
    deleted: set[str] = field(default_factory=set)  # delete-ok came
    in_doubt: set[str] = field(default_factory=set)  # a delete with no answer
    refused: list[str] = field(default_factory=list)

    def expected(self) -> set[str]:
        """The queues that must exist: declared-ok, never (perhaps) deleted."""
        return set(self.declared) - self.deleted - self.in_doubt

    def _run(self) -> None:
        rng = random.Random(self.seed)
        n = 0
        while not self._stop.wait(self.pause_s):
            node_name = rng.choice(sorted(self.nodes))
            live = sorted(set(self.expected()))
            if live and rng.random() < 0.4:
                self._delete(node_name, rng.choice(live))
            else:
                n += 1
                kind = "stream" if n % 2 else "classic"
                self._declare(node_name, f"dq-{n}-{kind}", kind)

    def _channel(self, node: ServerProcess) -> tuple[pika.BlockingConnection, Any]:
        params = pika.URLParameters(node.url + "?connection_attempts=1&socket_timeout=5")
        params.blocked_connection_timeout = 10
        conn = pika.BlockingConnection(params)
        return conn, conn.channel()

    def _declare(self, node_name: str, queue: str, kind: str) -> None:
        try:
            conn, ch = self._channel(self.nodes[node_name])
        except CONNECT_ERRORS as error:
            self.refused.append(f"declare {queue} via {node_name}: {error!r}"[:200])
            return
        try:
            ch.queue_declare(queue, durable=True, arguments={"x-queue-type": kind})
            self.declared[queue] = (node_name, time.monotonic())
        except (AMQPError, OSError) as error:
            self.refused.append(f"declare {queue} via {node_name}: {error!r}"[:200])
        finally:
            with contextlib.suppress(AMQPError, OSError):
                conn.close()

    def _delete(self, node_name: str, queue: str) -> None:
        try:
            conn, ch = self._channel(self.nodes[node_name])
        except CONNECT_ERRORS as error:
            self.refused.append(f"delete {queue} via {node_name}: {error!r}"[:200])
            return
        self.in_doubt.add(queue)
        try:
            ch.queue_delete(queue)
            self.deleted.add(queue)
            self.in_doubt.discard(queue)
        except (AMQPError, OSError) as error:
            self.refused.append(f"delete {queue} via {node_name}: {error!r}"[:200])
        finally:
            with contextlib.suppress(AMQPError, OSError):
                conn.close()
