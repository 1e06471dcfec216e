"""One small driver per Python AMQP library for the shared scenario (client_scenario.py).

Each driver uses its library the way that library's documentation shows: pika's
BlockingConnection, aio-pika's robust-free connect, aiormq's channel methods, kombu's
Producer/Consumer over py-amqp. Publishing always uses publisher confirms.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import aio_pika
import aiormq
import kombu
import pika
from pamqp.commands import Basic

from .client_scenario import PREFETCH, QUIET, Delivery, make_delivery, timestamp_arg

CONSUME_TIMEOUT = 10.0
PROPS = ("content_type", "message_id", "correlation_id", "timestamp", "priority", "delivery_mode")


def _args(offset: Any) -> dict[str, Any]:
    return {} if offset is None else {"x-stream-offset": offset}


def _until_done(got: list[Delivery], count: int) -> Iterator[None]:
    """Yields (the caller waits for deliveries once per step) until `count` deliveries arrived
    and QUIET seconds passed since, or CONSUME_TIMEOUT passed."""
    deadline = time.monotonic() + CONSUME_TIMEOUT
    reached: float | None = None
    while True:
        now = time.monotonic()
        if len(got) >= count:
            if reached is None:
                reached = now
            if now - reached >= QUIET:
                return
        elif now > deadline:
            return
        yield


class PikaDriver:
    def __init__(self, url: str) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()

    def setup(self, exchange: str, queue: str, rk: str) -> None:
        self.ch.exchange_declare(exchange, "direct", durable=True)
        self.ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        self.ch.queue_bind(queue, exchange, rk)

    def publish(self, exchange: str, rk: str, specs: list[dict[str, Any]]) -> None:
        for spec in specs:
            props = pika.BasicProperties(**{k: spec[k] for k in (*PROPS, "headers")})
            # with confirms on, basic_publish returns only after the broker's ack
            self.ch.basic_publish(exchange, rk, spec["body"].encode(), props, mandatory=True)

    def consume(
        self,
        queue: str,
        offset: Any,
        count: int,
        after: list[dict[str, Any]],
        exchange: str,
        rk: str,
    ) -> list[Delivery]:
        ch = self.conn.channel()
        ch.basic_qos(prefetch_count=PREFETCH)
        got: list[Delivery] = []

        def on_message(c: Any, method: Any, props: Any, body: bytes) -> None:
            values = {k: getattr(props, k) for k in (*PROPS, "headers")}
            got.append(
                make_delivery(body, method.exchange, method.routing_key, method.redelivered, values)
            )
            c.basic_ack(method.delivery_tag)

        tag = ch.basic_consume(queue, on_message, arguments=_args(offset))
        self.publish(exchange, rk, after)
        for _ in _until_done(got, count):
            self.conn.process_data_events(time_limit=0.05)
        ch.basic_cancel(tag)
        ch.close()
        return got

    def close(self) -> None:
        self.conn.close()


class AiormqDriver:
    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: Any = None
        self.ch: Any = None

    async def setup(self, exchange: str, queue: str, rk: str) -> None:
        self.conn = await aiormq.connect(self.url)
        self.ch = await self.conn.channel(publisher_confirms=True)
        await self.ch.exchange_declare(exchange=exchange, exchange_type="direct", durable=True)
        await self.ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        await self.ch.queue_bind(queue, exchange, routing_key=rk)

    async def publish(self, exchange: str, rk: str, specs: list[dict[str, Any]]) -> None:
        for spec in specs:
            values = {k: spec[k] for k in (*PROPS, "headers")}
            values["timestamp"] = timestamp_arg(spec["timestamp"])
            confirm = await self.ch.basic_publish(
                spec["body"].encode(),
                exchange=exchange,
                routing_key=rk,
                properties=aiormq.spec.Basic.Properties(**values),
                mandatory=True,
            )
            assert isinstance(confirm, Basic.Ack), confirm

    async def consume(
        self,
        queue: str,
        offset: Any,
        count: int,
        after: list[dict[str, Any]],
        exchange: str,
        rk: str,
    ) -> list[Delivery]:
        ch = await self.conn.channel()
        await ch.basic_qos(prefetch_count=PREFETCH)
        got: list[Delivery] = []

        async def on_message(message: Any) -> None:
            props = message.header.properties
            values = {k: getattr(props, k) for k in (*PROPS, "headers")}
            d = message.delivery
            got.append(
                make_delivery(message.body, d.exchange, d.routing_key, d.redelivered, values)
            )
            await ch.basic_ack(d.delivery_tag)

        ok = await ch.basic_consume(queue, on_message, arguments=_args(offset))
        await self.publish(exchange, rk, after)
        for _ in _until_done(got, count):
            await asyncio.sleep(0.05)
        await ch.basic_cancel(ok.consumer_tag)
        await ch.close()
        return got

    async def close(self) -> None:
        await self.conn.close()


class AioPikaDriver:
    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: Any = None
        self.ch: Any = None

    async def setup(self, exchange: str, queue: str, rk: str) -> None:
        self.conn = await aio_pika.connect(self.url)
        self.ch = await self.conn.channel(publisher_confirms=True)
        self.exchange = await self.ch.declare_exchange(
            exchange, aio_pika.ExchangeType.DIRECT, durable=True
        )
        q = await self.ch.declare_queue(queue, durable=True, arguments={"x-queue-type": "stream"})
        await q.bind(self.exchange, rk)

    async def publish(self, exchange: str, rk: str, specs: list[dict[str, Any]]) -> None:
        for spec in specs:
            message = aio_pika.Message(
                spec["body"].encode(),
                headers=spec["headers"],
                content_type=spec["content_type"],
                message_id=spec["message_id"],
                correlation_id=spec["correlation_id"],
                timestamp=timestamp_arg(spec["timestamp"]),
                priority=spec["priority"],
                delivery_mode=aio_pika.DeliveryMode(spec["delivery_mode"]),
            )
            confirm = await self.exchange.publish(message, routing_key=rk, mandatory=True)
            assert isinstance(confirm, Basic.Ack), confirm

    async def consume(
        self,
        queue: str,
        offset: Any,
        count: int,
        after: list[dict[str, Any]],
        exchange: str,
        rk: str,
    ) -> list[Delivery]:
        ch = await self.conn.channel()
        await ch.set_qos(prefetch_count=PREFETCH)
        q = await ch.get_queue(queue, ensure=False)
        got: list[Delivery] = []

        async def on_message(message: Any) -> None:
            values = {k: getattr(message, k) for k in (*PROPS, "headers")}
            values["delivery_mode"] = int(values["delivery_mode"])
            got.append(
                make_delivery(
                    message.body, message.exchange, message.routing_key, message.redelivered, values
                )
            )
            await message.ack()

        tag = await q.consume(on_message, arguments=_args(offset))
        await self.publish(exchange, rk, after)
        for _ in _until_done(got, count):
            await asyncio.sleep(0.05)
        await q.cancel(tag)
        await ch.close()
        return got

    async def close(self) -> None:
        await self.conn.close()


class KombuDriver:
    """kombu over py-amqp; stream arguments go through queue_arguments/consumer_arguments."""

    def __init__(self, url: str) -> None:
        self.conn = kombu.Connection(
            "py" + url, transport_options={"confirm_publish": True}, connect_timeout=5
        )
        self.conn.connect()
        self.exchange: kombu.Exchange | None = None

    def _queue(self, queue: str, rk: str, offset: Any = None) -> kombu.Queue:
        return kombu.Queue(
            queue,
            self.exchange,
            routing_key=rk,
            durable=True,
            queue_arguments={"x-queue-type": "stream"},
            consumer_arguments=_args(offset),
        )

    def setup(self, exchange: str, queue: str, rk: str) -> None:
        self.exchange = kombu.Exchange(exchange, "direct", durable=True)
        self._queue(queue, rk)(self.conn.default_channel).declare()

    def publish(self, exchange: str, rk: str, specs: list[dict[str, Any]]) -> None:
        producer = kombu.Producer(self.conn.default_channel, exchange=self.exchange)
        for spec in specs:
            producer.publish(
                spec["body"].encode(),
                routing_key=rk,
                headers=spec["headers"],
                content_type=spec["content_type"],
                content_encoding="binary",
                priority=spec["priority"],
                delivery_mode=spec["delivery_mode"],
                message_id=spec["message_id"],
                correlation_id=spec["correlation_id"],
                timestamp=spec["timestamp"],  # py-amqp sends the property from an int
                mandatory=True,
            )

    def consume(
        self,
        queue: str,
        offset: Any,
        count: int,
        after: list[dict[str, Any]],
        exchange: str,
        rk: str,
    ) -> list[Delivery]:
        got: list[Delivery] = []

        def on_message(message: Any) -> None:
            info = message.delivery_info
            values = {k: message.properties.get(k) for k in PROPS}
            values["headers"] = message.headers
            got.append(
                make_delivery(
                    message.body, info["exchange"], info["routing_key"], info["redelivered"], values
                )
            )
            message.ack()

        channel = self.conn.channel()
        consumer = kombu.Consumer(
            channel,
            queues=[self._queue(queue, rk, offset)],
            on_message=on_message,
            prefetch_count=PREFETCH,
        )
        with consumer:
            self.publish(exchange, rk, after)
            for _ in _until_done(got, count):
                with contextlib.suppress(TimeoutError):
                    self.conn.drain_events(timeout=0.05)
        channel.close()
        return got

    def close(self) -> None:
        self.conn.release()
