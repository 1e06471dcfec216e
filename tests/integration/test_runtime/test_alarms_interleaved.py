"""A publisher that interleaves large messages over channels is still held by an alarm.

A connection is held between messages when it can be; a client whose channels always have a
message half received at the end of a read used to never be held. Now, once an alarm is on,
at most ``max_pending_content_bytes`` more bytes are read before it is held anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from pamqp import body, commands, frame, header

from sievemq.testing import RawClient, running_gateway
from sievemq.testing.wait import eventually

pytestmark = pytest.mark.timeout(60)

PART = 32 * 1024  # each message: two body frames of PART bytes
MESSAGES = 400  # about 26 MB in all
LIMIT = 256 * 1024  # max_pending_content_bytes


def interleaved() -> Iterator[bytes]:
    """Frames of two channels such that after every frame some message is half received."""

    def start(channel: int) -> bytes:
        method = frame.marshal(commands.Basic.Publish(exchange="", routing_key="s"), channel)
        head = frame.marshal(
            header.ContentHeader(0, 2 * PART, commands.Basic.Properties()), channel
        )
        return method + head

    def part(channel: int) -> bytes:
        return frame.marshal(body.ContentBody(b"x" * PART), channel)

    yield start(1) + start(2)
    for i in range(MESSAGES // 2):
        last = i == MESSAGES // 2 - 1
        yield part(1) + part(2) + part(1)  # channel 1 complete, channel 2 half way
        if not last:
            yield start(1)
        yield part(2)  # channel 2 complete, channel 1 half way (unless last)
        if not last:
            yield start(2)


async def test_an_interleaving_publisher_is_held_after_a_bounded_read(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", max_pending_content_bytes=LIMIT) as gw:
        node, facade, port = gw.node, gw.facade, gw.port
        facade.create_stream("/", "s")

        def count() -> int:
            return int(facade.get_stream("/", "s").messages)

        client = await asyncio.to_thread(RawClient, "127.0.0.1", port)
        await asyncio.to_thread(client.handshake)
        await asyncio.to_thread(client.open_channel, 1)
        await asyncio.to_thread(client.open_channel, 2)
        data = b"".join(interleaved())
        node.on_alarms(("disk",))
        sending = asyncio.ensure_future(asyncio.to_thread(client.sock.sendall, data))
        conn = next(iter(node.connections))
        await eventually(lambda: conn.blocked)
        await asyncio.sleep(0.5)
        held = count()
        # held after about LIMIT bytes (plus one read): far from everything that was sent
        assert held * 2 * PART <= LIMIT + 2 * 1024 * 1024, held
        assert not sending.done(), "the client could not send everything while held"
        assert count() == held

        node.on_alarms(())  # the alarm clears: everything is read and stored
        await asyncio.wait_for(sending, 20)
        await eventually(lambda: count() == MESSAGES)
        assert not conn.blocked
        client.sock.close()
