"""kill -9 the gateway while a publisher with confirms is running.

Rounds on the SAME data directory: each round starts the server, publishes with a window of
unconfirmed messages, SIGKILLs the server once enough confirms arrived, restarts it and reads
the whole stream. Every message confirmed in any round so far must be there exactly once, in
publish order, byte-identical. Unconfirmed messages may or may not be there, but nothing is
duplicated, reordered or corrupted.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pamqp import body as pbody
from pamqp import commands, frame
from pamqp import header as pheader

from sievemq.testing import AsyncRawClient, RawClient, ServerProcess

pytestmark = pytest.mark.timeout(120)

QUEUE = "kill-stream"


def body_of(rnd: int, i: int) -> bytes:
    digest = hashlib.sha256(f"{rnd}:{i}".encode()).hexdigest().encode()
    return f"{rnd}:{i}:".encode() + digest * (1 + i % 4)


def parse_body(body: bytes) -> tuple[int, int]:
    rnd, i, _ = body.split(b":", 2)
    key = (int(rnd), int(i))
    assert body == body_of(*key), f"corrupted message {body[:60]!r}"
    return key


@dataclass
class Round:
    kill_after: int  # SIGKILL once this many messages are confirmed
    window: int  # unconfirmed messages in flight
    confirmed: set[int] = field(default_factory=set)
    sent: int = 0


async def publish_until_killed(server: ServerProcess, rnd: int, plan: Round) -> None:
    client = await AsyncRawClient.connect(server.host, server.amqp_port)
    await client.handshake()
    await client.open_channel(1)
    declare = commands.Queue.Declare(
        queue=QUEUE, durable=True, arguments={"x-queue-type": "stream"}
    )
    assert isinstance(await client.rpc(declare, 1), commands.Queue.DeclareOk)
    assert isinstance(await client.rpc(commands.Confirm.Select(), 1), commands.Confirm.SelectOk)

    def publish_frames(i: int) -> bytes:
        data = body_of(rnd, i)
        return (
            frame.marshal(commands.Basic.Publish(exchange="", routing_key=QUEUE), 1)
            + frame.marshal(pheader.ContentHeader(0, len(data), commands.Basic.Properties()), 1)
            + frame.marshal(pbody.ContentBody(data), 1)
        )

    unconfirmed: set[int] = set()
    killed = False
    try:
        while not killed:
            burst = b""
            while len(unconfirmed) < plan.window:
                unconfirmed.add(plan.sent)
                burst += publish_frames(plan.sent)
                plan.sent += 1
            client.send(burst)
            # wait for at least one confirm before topping the window up again
            value = await client.next_method()
            while True:
                if isinstance(value, commands.Basic.Ack):
                    tag = value.delivery_tag
                    covered = (
                        {i for i in unconfirmed if i + 1 <= tag} if value.multiple else {tag - 1}
                    )
                    plan.confirmed |= covered & unconfirmed
                    unconfirmed -= covered
                elif isinstance(value, commands.Basic.Nack):
                    tag = value.delivery_tag
                    unconfirmed -= (
                        {i for i in unconfirmed if i + 1 <= tag} if value.multiple else {tag - 1}
                    )
                else:
                    raise AssertionError(f"unexpected {value!r}")
                if len(plan.confirmed) >= plan.kill_after:
                    server.kill()
                    killed = True
                    break
                if len(unconfirmed) < plan.window // 2:
                    break
                value = await client.next_method()
    finally:
        await client.close()


def read_stream(server: ServerProcess, expected_at_least: int) -> list[bytes]:
    """All message bodies of the stream, in offset order."""
    client = RawClient(server.host, server.amqp_port)
    client.handshake()
    client.open_channel(1)
    client.start_consumer(1, QUEUE, {"x-stream-offset": "first"}, prefetch=2000)
    got = client.collect(1, expected_at_least, quiet=0.5, timeout=30)
    client.close()
    return [body for _m, _p, body in got]


@pytest.mark.parametrize("fsync", ["batch", "always"])
def test_confirmed_messages_survive_sigkill(tmp_path: Path, fsync: str) -> None:
    server = ServerProcess(tmp_path / "data", extra_args=("--fsync", fsync)).start()
    plans = [
        Round(kill_after=100, window=64),
        Round(kill_after=1000, window=256),
        Round(kill_after=5000, window=512),
        # mid-batch: a large window, so many messages are in flight at the kill
        Round(kill_after=300, window=3000),
    ]
    try:
        for rnd, plan in enumerate(plans):
            started = time.monotonic()
            asyncio.run(publish_until_killed(server, rnd, plan))
            assert not server.running
            server.restart()
            must_have = [
                (r, i) for r, p in enumerate(plans[: rnd + 1]) for i in sorted(p.confirmed)
            ]
            bodies = read_stream(server, len(must_have))
            keys = [parse_body(b) for b in bodies]
            assert len(keys) == len(set(keys)), "duplicated messages after recovery"
            assert keys == sorted(keys), "messages out of publish order after recovery"
            missing = set(must_have) - set(keys)
            assert not missing, (
                f"round {rnd}: {len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
            )
            print(
                f"round {rnd}: sent {plan.sent}, confirmed {len(plan.confirmed)}, "
                f"stream holds {len(keys)}, {time.monotonic() - started:.1f}s"
            )
        assert server.stop() == 0
    finally:
        if server.running:
            server.kill()
