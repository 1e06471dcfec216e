"""Filter statistics of stream-protocol subscriptions, read over the admin HTTP API: an rstream
consumer with a filter counts chunks skipped by the Bloom filter, records matched and
messages delivered exactly as an AMQP 0-9-1 consumer with the same filter does, and both add
to the stream's totals (what Prometheus and the dashboard show)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pika
from rstream import (
    ConsumerOffsetSpecification,
    FilterConfiguration,
    MessageContext,
    OffsetType,
    RawMessage,
)

from sievemq.gateway.session.stream.filter_stats import READ_FIELDS
from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q
from sievemq.testing.pika_client import connect
from sievemq.testing.stream_client import consumer, producer
from sievemq.testing.wait import eventually

BATCHES = 10  # one chunk each: the producer waits for each batch's confirms
PER_BATCH = 20
RED = (0, 5)  # the batches whose messages all carry "red"; the others carry "blue"
COUNTED = (*READ_FIELDS, "messages_delivered")  # what both kinds of consumer count


async def _publish(server: ServerProcess, stream: str) -> None:
    async def value(msg: Any) -> str:
        return "red" if msg.publishing_id // PER_BATCH in RED else "blue"

    async with producer(server, filter_value_extractor=value) as p:
        await p.create_stream(stream)
        confirmed: list[int] = []
        for b in range(BATCHES):
            batch = [
                RawMessage(b"%d-%d" % (b, i) + b"x" * 200, publishing_id=b * PER_BATCH + i)
                for i in range(PER_BATCH)
            ]
            await p.send_batch(stream, batch, on_publish_confirm=lambda s: confirmed.append(1))  # type: ignore[arg-type]
            await eventually(lambda: len(confirmed) == (b + 1) * PER_BATCH)  # noqa: B023


def _amqp_consumer(server: ServerProcess, stream: str, expect: int) -> pika.BlockingConnection:
    conn = connect(server)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    got: list[bytes] = []
    ch.basic_consume(
        stream,
        lambda c, m, p, body: got.append(body),
        arguments={"x-stream-offset": "first", "x-stream-filter": "red"},
    )
    deadline = time.monotonic() + 10
    while len(got) < expect and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    conn.process_data_events(time_limit=0.2)
    assert len(got) == expect and all(b.split(b"-")[0] in (b"0", b"5") for b in got)
    return conn


async def test_filtered_stream_subscription_counts_like_an_amqp_filtered_consumer(
    server: ServerProcess, qname: str
) -> None:
    await _publish(server, qname)
    red = len(RED) * PER_BATCH
    amqp = _amqp_consumer(server, qname, red)
    got: list[int] = []

    async def on_message(msg: Any, ctx: MessageContext) -> None:
        got.append(ctx.offset)

    try:
        async with consumer(server) as c:
            await c.subscribe(
                qname,
                on_message,
                decoder=None,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
                filter_input=FilterConfiguration(
                    values_to_filter=["red"], predicate=lambda m: True
                ),
            )
            await eventually(lambda: len(got) >= red)
            await asyncio.sleep(0.2)
            with client(server) as http:
                views = http.get(f"/api/streams/%2F/{q(qname)}/consumers").json()
                stream = http.get(f"/api/streams/%2F/{q(qname)}").json()
    finally:
        amqp.close()
    assert sorted(got) == [o for b in RED for o in range(b * PER_BATCH, (b + 1) * PER_BATCH)]
    by_protocol = {v["protocol"]: v["filter_stats"] for v in views}
    assert set(by_protocol) == {"AMQP 0-9-1", "stream"}, views
    s, a = by_protocol["stream"], by_protocol["AMQP 0-9-1"]
    # 8 blue chunks skipped by the Bloom filter without reading them, 2 red ones read
    assert s["chunks_skipped"] == BATCHES - len(RED)
    assert s["records_skipped_by_bloom"] == (BATCHES - len(RED)) * PER_BATCH
    assert s["records_matched"] == s["messages_delivered"] == red
    assert 0 < s["bytes_read"] < BATCHES * PER_BATCH * 200
    # an unfiltered reader reads all 10 chunks: the 8 skipped ones are what filtering saved
    assert s["bytes_unfiltered"] > BATCHES * PER_BATCH * 200 > s["bytes_read"]
    assert s["bytes_delivered"] > red * 200
    assert {k: s[k] for k in COUNTED} == {k: a[k] for k in COUNTED}
    totals = stream["filter_stats"]
    for k in COUNTED:  # the stream's totals hold both consumers' counts
        assert totals[k] == s[k] + a[k], k
