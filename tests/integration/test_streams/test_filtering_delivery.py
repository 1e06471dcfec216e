"""Filtered delivery through the real connection handler, with statistics read from the facade.

A real client (aiormq) talks to the in-process listener; the expected deliveries are computed
from what was published with the filter rule (docs/compatibility.md "Filtering"), and the
skipping is proved with the readers' byte counters: a consumer that skips the big chunks
reads fewer bytes than one of their bodies.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiormq
import pytest
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from sievemq.storage import Message
from sievemq.testing import RunningGateway, running_gateway
from sievemq.testing.aiormq_client import FV, Collector, consume

pytestmark = pytest.mark.timeout(60)

Item = tuple[Any, bytes]  # (x-stream-filter-value or None, body)


async def declare(url: str, name: str, **arguments: Any) -> aiormq.abc.AbstractConnection:
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream", **arguments})
    return conn


async def publish_batch(ch: aiormq.abc.AbstractChannel, queue: str, items: list[Item]) -> None:
    """Publish concurrently (so the batch tends to share chunks) and wait for every confirm."""

    def props(fv: Any) -> Basic.Properties:
        return Basic.Properties(headers={} if fv is None else {FV: fv})

    await asyncio.gather(
        *(ch.basic_publish(body, routing_key=queue, properties=props(fv)) for fv, body in items)
    )


def expected(
    published: list[Item], wanted: set[str], unfiltered: bool = False, match_all: bool = False
) -> list[tuple[int, bytes]]:
    out = []
    for offset, (fv, body) in enumerate(published):
        have = set() if fv in (None, "") else ({fv} if isinstance(fv, str) else set(fv))
        ok = (wanted <= have if match_all else bool(wanted & have)) if have else unfiltered
        if ok:
            out.append((offset, body))
    return out


def got(collector: Collector) -> list[tuple[int, bytes]]:
    return [(o, b) for o, _, b in collector.got]


@pytest.fixture
async def srv(tmp_path: Path) -> Any:
    async with running_gateway(tmp_path / "data") as server:
        yield server


async def test_stream_filtering_internals_scenario(srv: RunningGateway) -> None:
    """RabbitMQ's 'Stream Filtering Internals': one chunk per region, one consumer per region,
    then unfiltered and mixed chunks; match-unfiltered adds the messages without a value."""
    conn = await declare(srv.url, "regions")
    ch = await conn.channel()
    big = b"B" * 20_000
    published: list[Item] = []
    batches: list[list[Item]] = [
        [("AMER", big + b"%d" % i) for i in range(10)],
        [("APAC", b"apac-%d" % i) for i in range(10)],
        [("EMEA", big + b"%d" % i) for i in range(10)],
        [(None, b"plain-%d" % i) for i in range(5)],
        [("AMER", b"a"), ("EMEA", b"e"), (None, b"n"), ("APAC", b"p")],
    ]
    for batch in batches:
        await publish_batch(ch, "regions", batch)
        published += batch
    first = {"x-stream-offset": "first"}
    consumers = {
        "AMER": await consume(srv.url, "regions", {**first, "x-stream-filter": "AMER"}),
        "APAC": await consume(srv.url, "regions", {**first, "x-stream-filter": "APAC"}),
        "EMEA": await consume(srv.url, "regions", {**first, "x-stream-filter": "EMEA"}),
        "AMER+": await consume(
            srv.url,
            "regions",
            {**first, "x-stream-filter": "AMER", "x-stream-match-unfiltered": True},
        ),
    }
    wants = {
        "AMER": expected(published, {"AMER"}),
        "APAC": expected(published, {"APAC"}),
        "EMEA": expected(published, {"EMEA"}),
        "AMER+": expected(published, {"AMER"}, unfiltered=True),
    }
    for key, (_, collector) in consumers.items():
        await collector.wait_for(len(wants[key]))
    await asyncio.sleep(0.1)  # nothing more may arrive
    for key, (_, collector) in consumers.items():
        assert got(collector) == wants[key], key
        for _, header, _ in collector.got:  # each delivery carries its own filter value
            assert header in (key.rstrip("+"), None)
    assert len(wants["AMER+"]) == 11 + 6

    # the APAC reader skipped the AMER and EMEA chunks without reading their 20 KB bodies
    views = {
        v.filter.values[0] + ("+" if v.filter.match_unfiltered else ""): v
        for v in srv.facade.list_consumers("/", "regions")
    }
    apac = asdict(views["APAC"].filter_stats)
    assert apac["chunks_skipped"] >= 2
    assert apac["bytes_read"] < len(big)
    assert apac["messages_delivered"] == 11
    assert apac["records_skipped_by_bloom"] >= 20
    emea = asdict(views["EMEA"].filter_stats)
    assert emea["bytes_read"] > 10 * len(big)  # it did read its own chunks
    stream = asdict(srv.facade.get_stream("/", "regions").filter_stats)
    per_consumer = [asdict(v.filter_stats) for v in views.values()]
    for key in ("chunks_scanned", "chunks_skipped", "bytes_read", "messages_delivered"):
        assert stream[key] == sum(c[key] for c in per_consumer), key
    assert stream["bytes_delivered"] > 20 * len(big)  # AMER and EMEA delivered their big bodies
    for c, _ in consumers.values():
        await c.close()
    await conn.close()


@pytest.mark.parametrize(
    ("wanted", "match_type", "unfiltered"),
    [
        (["a"], "any", False),
        (["a", "b"], "any", False),
        (["a", "b"], "all", False),
        (["a", "c"], "all", True),
        (["c"], None, True),
    ],
)
async def test_several_values_with_any_and_all(
    srv: RunningGateway, wanted: list[str], match_type: str | None, unfiltered: bool
) -> None:
    conn = await declare(srv.url, "multi")
    ch = await conn.channel()
    published: list[Item] = [
        (["a", "b"], b"ab"),
        ("a", b"a"),
        (["b", "c"], b"bc"),
        (None, b"none"),
        (["a", "b", "c"], b"abc"),
        ("", b"empty"),
        (["c", "a"], b"ca"),
        ("b", b"b"),
    ]
    for i in range(0, len(published), 3):  # a few chunks, several values in each
        await publish_batch(ch, "multi", published[i : i + 3])
    arguments: dict[str, Any] = {
        "x-stream-offset": "first",
        "x-stream-filter": wanted if len(wanted) > 1 else wanted[0],
        "x-stream-match-unfiltered": unfiltered,
    }
    if match_type is not None:
        arguments["x-filter-match-type"] = match_type
    want = expected(published, set(wanted), unfiltered, match_type == "all")
    c, collector = await consume(srv.url, "multi", arguments)
    await collector.wait_for(len(want))
    await asyncio.sleep(0.1)
    assert got(collector) == want
    by_offset = {o: h for o, h, _ in collector.got}
    for offset, _ in want:  # the array header comes back as it was published
        fv = published[offset][0]
        assert by_offset[offset] == (fv if fv is not None else None)
    await c.close()
    await conn.close()


async def test_prefetch_counts_only_delivered_messages(srv: RunningGateway) -> None:
    conn = await declare(srv.url, "credit")
    ch = await conn.channel()
    items: list[Item] = [("hit" if i % 10 == 0 else "miss", b"%d" % i) for i in range(200)]
    await publish_batch(ch, "credit", items)
    c, collector = await consume(
        srv.url,
        "credit",
        {"x-stream-offset": "first", "x-stream-filter": "hit"},
        prefetch=3,
        ack=False,
    )
    await collector.wait_for(3)
    await asyncio.sleep(0.2)
    # three matches delivered, none of the 18 misses in between used up credit
    assert collector.offsets == [0, 10, 20]
    await collector.channel.basic_ack(0, multiple=True)
    await collector.wait_for(6)
    await asyncio.sleep(0.1)
    assert collector.offsets == [0, 10, 20, 30, 40, 50]
    await c.close()
    await conn.close()


async def test_a_million_misses_do_not_delay_the_next_match(srv: RunningGateway) -> None:
    conn = await declare(srv.url, "sparse")
    ch = await conn.channel()
    stream = srv.queue("sparse").stream
    miss = [Message((f"v{i % 50}",), "", "sparse", b"", b"") for i in range(5_000)]
    for _ in range(200):  # 1M non-matching messages in 200 chunks, written as the appender does
        stream.append(miss)
    assert stream.end_offset == 1_000_000
    c, collector = await consume(
        srv.url, "sparse", {"x-stream-offset": "first", "x-stream-filter": "rare"}
    )
    started = time.perf_counter()
    await publish_batch(ch, "sparse", [("rare", b"found")])
    await collector.wait_for(1, timeout=5)
    elapsed = time.perf_counter() - started
    assert collector.got == [(1_000_000, "rare", b"found")]
    # a read of the 1M misses takes many seconds; the Bloom skip (counted below) takes ms,
    # so the bound leaves room for a loaded machine
    assert elapsed < 2.0, elapsed
    stats = asdict(srv.facade.list_consumers("/", "sparse")[0].filter_stats)
    assert stats["chunks_skipped"] == 200
    assert stats["records_skipped_by_bloom"] == 1_000_000
    assert stats["bytes_read"] < 200 * 200  # headers and Bloom bits only
    await c.close()
    await conn.close()


def raw_props(fv: str) -> bytes:
    """Content-header property bytes as a client sends them (what the stream stores)."""
    return ContentHeader(0, 0, Basic.Properties(headers={FV: fv})).marshal()[12:]


async def test_filter_with_each_offset_form(srv: RunningGateway) -> None:
    conn = await declare(srv.url, "offsets")
    ch = await conn.channel()
    stream = srv.queue("offsets").stream
    now = int(time.time() * 1000)
    published: list[Item] = []
    ages_ms = [3 * 3600_000, 2 * 3600_000, 1800_000, 60_000]
    for batch, age in enumerate(ages_ms):  # four chunks of 6, as the appender writes them
        items: list[Item] = [("x" if i % 2 == 0 else "y", b"%d-%d" % (batch, i)) for i in range(6)]
        stream.append(
            [Message((fv,), "", "offsets", raw_props(fv), body) for fv, body in items],
            timestamp_ms=now - age,
        )
        published += items
    xs = expected(published, {"x"})
    two_hours_ago = datetime.fromtimestamp((now - 2 * 3600_000) // 1000, UTC)
    cases: list[tuple[Any, int]] = [
        ("first", 0),
        (13, 13),  # inside the third chunk: the records before 13 are not delivered
        (two_hours_ago, 6),  # an AMQP timestamp: from the first chunk not older
        ("1h", 12),  # an interval: chunks of the last hour
        ("last", 18),  # the last chunk, filtered
    ]
    for offset, start in cases:
        c, collector = await consume(
            srv.url, "offsets", {"x-stream-offset": offset, "x-stream-filter": "x"}
        )
        want = [e for e in xs if e[0] >= start]
        await collector.wait_for(len(want))
        await asyncio.sleep(0.05)
        assert got(collector) == want, offset
        await c.close()
    # next: only what is published from now on, filtered
    c_next, nxt = await consume(
        srv.url, "offsets", {"x-stream-offset": "next", "x-stream-filter": "x"}
    )
    await asyncio.sleep(0.05)
    assert nxt.got == []
    await publish_batch(ch, "offsets", [("y", b"new-y"), ("x", b"new-x")])
    await nxt.wait_for(1)
    await asyncio.sleep(0.05)
    assert got(nxt) == [(25, b"new-x")]
    await c_next.close()
    await conn.close()
