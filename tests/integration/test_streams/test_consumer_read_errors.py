"""A consumer whose reads fail is cancelled by the server, once, with one log line.

A corrupt record can surface as struct.error (not a ValueError); it used to escape the
delivery turn into the event loop, and the consumer stalled without the client knowing.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from sievemq.storage import StreamReader
from sievemq.testing import running_gateway

pytestmark = pytest.mark.timeout(120)  # a hang guard, with room for a starved machine


@pytest.mark.parametrize(
    "error", [struct.error("unpack requires a buffer of 8 bytes"), ValueError("bad record")]
)
async def test_a_failing_read_cancels_the_consumer(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: Exception,
) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        conn = await aio_pika.connect(gw.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            await ch.set_qos(prefetch_count=10)
            queue = await ch.declare_queue("s", durable=True, arguments={"x-queue-type": "stream"})
            await ch.default_exchange.publish(aio_pika.Message(b"m0"), "s")
            got: list[bytes] = []
            cancelled = asyncio.Event()

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                got.append(message.body)
                await message.ack()

            tag = await queue.consume(on_message, arguments={"x-stream-offset": "first"})
            async with asyncio.timeout(5):
                while got != [b"m0"]:
                    await asyncio.sleep(0.02)

            def broken(self: StreamReader, *args: Any, **kwargs: Any) -> Any:
                raise error

            monkeypatch.setattr(StreamReader, "read", broken)
            underlay = await ch.get_underlay_channel()
            underlay.on_consumer_cancel_callbacks.add(lambda frame: cancelled.set())
            caplog.set_level(logging.ERROR, logger="sievemq")
            await ch.default_exchange.publish(aio_pika.Message(b"m1"), "s")  # wakes the consumer
            async with asyncio.timeout(5):
                await cancelled.wait()
            await asyncio.sleep(0.2)
            failures = [r for r in caplog.records if "read failed" in r.getMessage()]
            assert len(failures) == 1, [r.getMessage() for r in caplog.records]
            assert tag in failures[0].getMessage()
            assert got == [b"m0"]
            assert not ch.is_closed  # only the consumer goes, not the channel
