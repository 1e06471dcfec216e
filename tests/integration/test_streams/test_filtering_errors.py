"""Every bad filter input gets a 406 that names the problem, and nothing bad is stored.

Publishing: the channel closes with ``PRECONDITION_FAILED - invalid x-stream-filter-value:
<why>``, the rejected message is not in the stream, and the messages confirmed before it are
still delivered. Consuming: malformed filter arguments close the channel with 406 naming the
argument. Declaring: filter sizes outside 16..4096 bytes are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiormq
import aiormq.exceptions
import pytest
from pamqp.commands import Basic

from sievemq.testing import RunningGateway, running_gateway
from sievemq.testing.aiormq_client import FV, consume, raw_publish

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def srv(tmp_path: Path) -> Any:
    async with running_gateway(tmp_path / "data") as server:
        yield server


async def _stream_with_good_messages(srv: RunningGateway, name: str) -> None:
    conn = await aiormq.connect(srv.url)
    ch = await conn.channel()
    await ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    for fv in ("good", ["good", "also"], None):
        headers = {} if fv is None else {FV: fv}
        await ch.basic_publish(
            b"ok", routing_key=name, properties=Basic.Properties(headers=headers)
        )
    await conn.close()


async def _assert_only_good_messages(srv: RunningGateway, name: str) -> None:
    assert srv.queue(name).message_count == 3
    c, collector = await consume(srv.url, name, {"x-stream-offset": "first"})
    await collector.wait_for(3)
    assert [(o, h) for o, h, _ in collector.got] == [(0, "good"), (1, ["good", "also"]), (2, None)]
    await c.close()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (7, "expected longstr or array of longstr, got"),
        ({"a": "b"}, "expected longstr or array of longstr, got table"),
        (True, "expected longstr or array of longstr, got bool"),
        (["a", 1], "element 1: expected longstr"),
        (["a", ""], "element 1: empty value"),
        (["a", ["b"]], "element 1: expected longstr, got array"),
        ("x" * 4097, "4097 bytes, at most 4096 are allowed"),
        ("é" * 2049, "4098 bytes, at most 4096 are allowed"),
        ("nul\x00inside", "contains NUL"),
        ([f"v{i}" for i in range(65)], "65 values, at most 64"),
    ],
)
async def test_bad_filter_value_closes_the_channel_and_stores_nothing(
    srv: RunningGateway, value: Any, why: str
) -> None:
    await _stream_with_good_messages(srv, "pub")
    conn = await aiormq.connect(srv.url)
    ch = await conn.channel()
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
        await ch.basic_publish(
            b"bad", routing_key="pub", properties=Basic.Properties(headers={FV: value})
        )
    text = str(info.value)
    assert "PRECONDITION_FAILED - invalid x-stream-filter-value: " in text
    assert why in text
    # the connection survives: a new channel publishes fine
    ch2 = await conn.channel()
    assert isinstance(await ch2.basic_publish(b"after", routing_key="elsewhere"), Basic.Ack)
    await conn.close()
    await _assert_only_good_messages(srv, "pub")


async def test_filter_value_that_is_not_utf8_is_refused(srv: RunningGateway) -> None:
    await _stream_with_good_messages(srv, "utf")
    close = await raw_publish(
        srv.port, "utf", "\u00ff\u00ff", (b"\xc3\xbf\xc3\xbf", b"\xff\xfe\xff\xfe")
    )
    assert close.reply_code == 406
    assert (
        close.reply_text == "PRECONDITION_FAILED - invalid x-stream-filter-value: not valid UTF-8"
    )
    assert (close.class_id, close.method_id) == (60, 40)
    await _assert_only_good_messages(srv, "utf")


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"x-stream-filter": []}, "invalid arg 'x-stream-filter' for queue 'c' in vhost '/': "),
        ({"x-stream-filter": []}, "empty array of filter values"),
        ({"x-stream-filter": 3}, "{unacceptable_type,"),
        ({"x-stream-filter": ["a", 2]}, "element 1: expected longstr"),
        ({"x-stream-filter": ""}, "empty value"),
        ({"x-stream-filter": ["a", "x" * 4097]}, "element 1: 4097 bytes"),
        ({"x-stream-filter": "a", "x-stream-match-unfiltered": "yes"}, "x-stream-match-unfiltered"),
        ({"x-stream-filter": "a", "x-filter-match-type": "most"}, "unknown match type 'most'"),
        ({"x-stream-filter": "a", "x-filter-match-type": 1}, "x-filter-match-type"),
    ],
)
async def test_bad_consumer_filter_arguments_get_406(
    srv: RunningGateway, arguments: dict[str, Any], why: str
) -> None:
    conn = await aiormq.connect(srv.url)
    ch = await conn.channel()
    await ch.queue_declare("c", durable=True, arguments={"x-queue-type": "stream"})
    await ch.basic_qos(prefetch_count=10)

    async def never(message: Any) -> None:
        raise AssertionError("no delivery expected")

    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
        await ch.basic_consume("c", never, arguments=arguments)
    assert "PRECONDITION_FAILED - " in str(info.value)
    assert why in str(info.value)
    assert srv.queue("c").consumer_count == 0
    await conn.close()


@pytest.mark.parametrize("size", [0, 15, 4097, "big"])
async def test_filter_size_outside_16_to_4096_is_refused(srv: RunningGateway, size: Any) -> None:
    conn = await aiormq.connect(srv.url)
    ch = await conn.channel()
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
        await ch.queue_declare(
            "sized",
            durable=True,
            arguments={"x-queue-type": "stream", "x-stream-filter-size-bytes": size},
        )
    assert "x-stream-filter-size-bytes" in str(info.value)
    await conn.close()
    assert srv.facade.list_streams() == []


@pytest.mark.parametrize("size", [16, 255, 256, 4096])
async def test_filter_sizes_up_to_4096_are_used_for_every_chunk(
    srv: RunningGateway, size: int
) -> None:
    conn = await aiormq.connect(srv.url)
    ch = await conn.channel()
    name = f"sized-{size}"
    await ch.queue_declare(
        name, durable=True, arguments={"x-queue-type": "stream", "x-stream-filter-size-bytes": size}
    )
    await ch.basic_publish(b"m", routing_key=name, properties=Basic.Properties(headers={FV: "v"}))
    await conn.close()
    from sievemq.storage.advice import recent_blooms

    queue = srv.queue(name)
    assert [len(b) for b in recent_blooms(queue.stream.directory)] == [size]
    c, collector = await consume(
        srv.url, name, {"x-stream-offset": "first", "x-stream-filter": "v"}
    )
    await collector.wait_for(1)
    assert collector.bodies == [b"m"]
    await c.close()
