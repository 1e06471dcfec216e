"""Named-consumer takeover happens only once the new consumer is positioned.

A consume with a name that is already active takes the name over (newest wins). If that
consume fails after its arguments were accepted (positioning the reader), the old consumer
must keep the name and keep delivering: it used to be retired and cancelled first.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from sievemq.amqp import errors
from sievemq.gateway.session import consume_methods
from sievemq.testing import running_gateway
from sievemq.testing.wait import eventually

pytestmark = pytest.mark.timeout(120)  # a hang guard, with room for a starved machine

ARGS: dict[str, Any] = {"x-stream-consumer-name": "billing", "x-stream-offset": "first"}


async def publish(ch: aio_pika.abc.AbstractChannel, bodies: list[bytes]) -> None:
    for body in bodies:
        await ch.default_exchange.publish(aio_pika.Message(body), "s")


async def test_failed_takeover_leaves_the_old_consumer_delivering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        url = gw.url
        old_conn = await aio_pika.connect(url)
        new_conn = await aio_pika.connect(url)
        async with old_conn, new_conn:
            pub = await old_conn.channel(publisher_confirms=True)
            await pub.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
            await publish(pub, [b"m0", b"m1"])

            old_ch = await old_conn.channel()
            await old_ch.set_qos(prefetch_count=10)
            got: list[bytes] = []
            cancelled: list[str] = []
            old_ch.close_callbacks.add(lambda *_: cancelled.append("channel closed"))

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                got.append(message.body)
                await message.ack()

            old_queue = await old_ch.get_queue("s", ensure=False)
            await old_queue.consume(on_message, arguments=ARGS)
            await eventually(lambda: got == [b"m0", b"m1"])

            def broken(reader: Any, spec: Any) -> None:
                raise errors.PreconditionFailed("positioning failed (test)", 60, 20)

            monkeypatch.setattr(consume_methods, "position_reader", broken)
            new_ch = await new_conn.channel()
            await new_ch.set_qos(prefetch_count=10)
            new_queue = await new_ch.get_queue("s", ensure=False)
            with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
                await new_queue.consume(on_message, arguments={"x-stream-consumer-name": "billing"})

            # the old consumer still owns the name and still gets new messages
            await publish(pub, [b"m2"])
            await eventually(lambda: got == [b"m0", b"m1", b"m2"])
            assert cancelled == []
            assert not old_ch.is_closed


async def test_takeover_resumes_from_the_old_consumers_commit(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        url = gw.url
        old_conn = await aio_pika.connect(url)
        new_conn = await aio_pika.connect(url)
        async with old_conn, new_conn:
            pub = await old_conn.channel(publisher_confirms=True)
            await pub.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
            await publish(pub, [b"m0", b"m1", b"m2", b"m3"])

            old_ch = await old_conn.channel()
            await old_ch.set_qos(prefetch_count=10)
            old_got: list[aio_pika.abc.AbstractIncomingMessage] = []

            async def keep(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                old_got.append(message)

            old_queue = await old_ch.get_queue("s", ensure=False)
            await old_queue.consume(keep, arguments=ARGS)
            await eventually(lambda: len(old_got) == 4)
            await old_got[0].ack()
            await old_got[1].ack()  # m0, m1 done; m2, m3 delivered but not acked

            new_ch = await new_conn.channel()
            await new_ch.set_qos(prefetch_count=10)
            new_got: list[bytes] = []

            async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                new_got.append(message.body)
                await message.ack()

            new_queue = await new_ch.get_queue("s", ensure=False)
            await new_queue.consume(take, arguments={"x-stream-consumer-name": "billing"})
            await eventually(lambda: len(new_got) == 2)
            await asyncio.sleep(0.2)
            assert new_got == [b"m2", b"m3"]  # right after the old consumer's commit
