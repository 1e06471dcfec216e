"""A single active consumer that never answers ConsumerUpdate: after the server's timeout
(SIEVEMQ_STREAM_CONSUMER_UPDATE_TIMEOUT_S, 1 s here) the group moves on to the next consumer
(a real rstream client) and the server logs why. The silent member is a raw socket client."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
)

from sievemq.streamproto import wire
from sievemq.testing import ServerProcess
from sievemq.testing.stream_client import (
    RawStreamClient,
    consumer,
    from_first,
    open_client,
    producer,
    sac,
    send_confirmed,
    string,
)
from sievemq.testing.wait import eventually

pytestmark = pytest.mark.timeout(60)

TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SIEVEMQ_STREAM_CONSUMER_UPDATE_TIMEOUT_S", str(TIMEOUT_S))
        with ServerProcess(tmp_path_factory.mktemp("sac-timeout") / "data") as proc:
            yield proc
            assert proc.running, proc.stderr()


async def _join(
    c: Consumer, stream: str, props: dict[str, str], got: list[int], at: list[float]
) -> None:
    """An rstream member of the group: offsets it receives go to ``got``, the loop time of
    each arrival to ``at``; when activated it starts from the first message."""
    loop = asyncio.get_running_loop()

    async def on_message(msg: Any, ctx: MessageContext) -> None:
        got.append(ctx.offset)
        at.append(loop.time())

    await c.subscribe(
        stream,
        on_message,
        properties=props,
        offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        consumer_update_listener=from_first,
    )


def _subscribe(raw: RawStreamClient, sid: int, stream: str, props: dict[str, str]) -> None:
    body = struct.pack(">B", sid) + string(stream)
    body += struct.pack(">HH", wire.OFFSET_FIRST, 10)  # offset spec first, credit 10
    body += struct.pack(">i", len(props))
    for key, value in props.items():
        body += string(key) + string(value)
    raw.request(wire.SUBSCRIBE, body)
    key, _, answer = raw.read_frame()
    assert key == wire.SUBSCRIBE | wire.RESPONSE
    assert struct.unpack_from(">H", answer, 4)[0] == wire.OK


async def _next_frame(raw: RawStreamClient, want: int) -> bytes:
    """The body of the next frame with key ``want`` (read off the event loop)."""
    while True:
        key, _, body = await asyncio.to_thread(raw.read_frame)
        if key == want:
            return body


async def _frames_until_answer(raw: RawStreamClient) -> list[int]:
    """Ask for something (ExchangeCommandVersions) and return the keys of every frame that
    came before its answer: proof the connection still works, and what it was sent."""
    raw.request(wire.EXCHANGE_COMMAND_VERSIONS, struct.pack(">i", 0))
    keys = []
    while True:
        key, _, _ = await asyncio.to_thread(raw.read_frame)
        if key == wire.EXCHANGE_COMMAND_VERSIONS | wire.RESPONSE:
            return keys
        keys.append(key)


async def test_a_consumer_that_never_answers_its_activation_is_passed_over(
    quick: ServerProcess, qname: str
) -> None:
    loop = asyncio.get_running_loop()
    async with producer(quick) as p:
        await p.create_stream(qname)
        await send_confirmed(p, qname, [AMQPMessage(body=f"m{i}".encode()) for i in range(5)])
    raw = RawStreamClient(quick)
    try:
        assert raw.open() == wire.OK
        # before the subscribe is sent: the server's timer cannot have started earlier, so
        # the gap to the first delivery is at least the timeout however slow this machine is
        asked_at = loop.time()
        _subscribe(raw, 1, qname, sac("mute"))
        body = await _next_frame(raw, wire.CONSUMER_UPDATE)
        _corr, sid, active = struct.unpack_from(">IBB", body)
        assert (sid, active) == (1, 1)  # asked to become active: it never answers
        got: list[int] = []
        at: list[float] = []
        async with consumer(quick) as c:
            await _join(c, qname, sac("mute"), got, at)
            await eventually(lambda: len(got) >= 5, timeout=10)
            await asyncio.sleep(0.2)
        assert got == [0, 1, 2, 3, 4]
        # nothing reached the newcomer while it was still the silent one's turn
        assert at[0] - asked_at >= TIMEOUT_S, at[0] - asked_at
        # the silent client keeps its connection and got no message
        assert wire.DELIVER not in await _frames_until_answer(raw)
    finally:
        raw.close()
    assert (
        f"single active consumer 'mute' on stream '{qname}' in vhost '/': subscription 1 did "
        "not answer its activation within 1 s; passed over for the next consumer"
    ) in quick.stderr()


async def test_a_consumer_that_never_answers_its_step_down_is_treated_as_inactive(
    quick: ServerProcess, qname: str
) -> None:
    """Partition 1 of a super stream: alone, the raw client is active; when an rstream
    consumer joins, the choice moves to it (index 1 mod 2) and the raw one is asked to step
    down. It never answers; after the timeout the newcomer is activated anyway."""
    ss = qname[-20:]
    partition = f"{ss}-1"
    client = await open_client(quick)
    try:
        await client.create_super_stream(ss, [f"{ss}-0", partition], ["0", "1"])
    finally:
        await client.close()
    async with producer(quick) as p:
        await send_confirmed(p, partition, [AMQPMessage(body=b"x") for _ in range(5)])
    loop = asyncio.get_running_loop()
    raw = RawStreamClient(quick)
    try:
        assert raw.open() == wire.OK
        _subscribe(raw, 1, partition, sac("g", **{"super-stream": ss}))
        body = await _next_frame(raw, wire.CONSUMER_UPDATE)
        corr, sid, active = struct.unpack_from(">IBB", body)
        assert (sid, active) == (1, 1)
        raw.send(wire.CONSUMER_UPDATE | wire.RESPONSE, struct.pack(">IHH", corr, wire.OK, 0))
        await _next_frame(raw, wire.DELIVER)  # active: it gets the partition's messages
        got: list[int] = []
        at: list[float] = []
        async with consumer(quick) as c:
            # before the newcomer subscribes: the server's step-down timer starts later
            asked_at = loop.time()
            await _join(c, partition, sac("g", **{"super-stream": ss}), got, at)
            body = await _next_frame(raw, wire.CONSUMER_UPDATE)
            _corr, sid, active = struct.unpack_from(">IBB", body)
            assert (sid, active) == (1, 0)  # step down: never answered
            await eventually(lambda: len(got) >= 5, timeout=10)
        assert got == [0, 1, 2, 3, 4]
        assert at[0] - asked_at >= TIMEOUT_S, at[0] - asked_at  # the newcomer waited it out
    finally:
        raw.close()
    assert (
        f"single active consumer 'g' on stream '{partition}' in vhost '/': subscription 1 "
        "did not answer its step-down within 1 s; treated as inactive"
    ) in quick.stderr()
