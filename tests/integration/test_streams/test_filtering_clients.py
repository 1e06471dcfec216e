"""Filtering with real client libraries (pika, aio-pika) against a real `sievemq serve` process.

Also the idle check: a filtered consumer waiting at the end of a stream must not make the
server spin, measured as the server's CPU time (utime + stime from /proc/PID/stat).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import aio_pika
import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import consume_expected

pytestmark = pytest.mark.timeout(60)

FV = "x-stream-filter-value"


def _params(srv: ServerProcess) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(host=srv.host, port=srv.amqp_port, connection_attempts=1)


def _server_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def test_pika_region_consumers_get_exactly_their_region(server: ServerProcess) -> None:
    conn = pika.BlockingConnection(_params(server))
    ch = conn.channel()
    ch.queue_declare("p-regions", durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    published: list[tuple[str | None, bytes]] = []
    for region in ("AMER", "APAC", "EMEA", None, "APAC"):
        for i in range(20):
            body = f"{region}-{i}".encode()
            headers = {} if region is None else {FV: region}
            ch.basic_publish("", "p-regions", body, pika.BasicProperties(headers=headers))
            published.append((region, body))
    for region, unfiltered in (("APAC", False), ("EMEA", True)):
        want = [
            (off, body)
            for off, (r, body) in enumerate(published)
            if r == region or (unfiltered and r is None)
        ]
        arguments = {
            "x-stream-offset": "first",
            "x-stream-filter": region,
            "x-stream-match-unfiltered": unfiltered,
        }
        ch.basic_qos(prefetch_count=7)
        # the expected deliveries, then half a second without more: it has sent all it will
        delivered = consume_expected(ch, "p-regions", len(want), arguments, quiet_s=0.5)
        assert all(props.headers.get(FV) in (region, None) for _m, props, _b in delivered)
        got = [(props.headers["x-stream-offset"], body) for _m, props, body in delivered]
        assert got == want, region
    conn.close()


async def test_aio_pika_arrays_with_all_and_any(server: ServerProcess) -> None:
    url = f"amqp://guest:guest@{server.host}:{server.amqp_port}/"
    async with await aio_pika.connect(url) as conn:
        ch = await conn.channel(publisher_confirms=True)
        await ch.set_qos(prefetch_count=50)
        queue = await ch.declare_queue(
            "a-arrays",
            durable=True,
            arguments={"x-queue-type": "stream", "x-stream-filter-size-bytes": 1024},
        )
        values: list[Any] = [["red", "big"], "red", ["big", "blue"], None, ["blue", "red", "big"]]
        for i, fv in enumerate(values * 4):
            headers = {} if fv is None else {FV: fv}
            await ch.default_exchange.publish(
                aio_pika.Message(str(i).encode(), headers=headers), "a-arrays"
            )

        async def collect(arguments: dict[str, Any], n: int) -> list[int]:
            out: list[int] = []
            async with queue.iterator(arguments={"x-stream-offset": "first", **arguments}) as it:
                async for message in it:
                    await message.ack()
                    out.append(int(message.body))
                    if len(out) == n:
                        break
            return out

        all_ = {"x-stream-filter": ["red", "big"], "x-filter-match-type": "all"}
        assert await collect(all_, 8) == [i for i in range(20) if i % 5 in (0, 4)]
        any_ = {"x-stream-filter": ["blue", "nothing"], "x-filter-match-type": "any"}
        assert await collect(any_, 8) == [i for i in range(20) if i % 5 in (2, 4)]


async def test_waiting_filtered_consumer_uses_no_cpu(server: ServerProcess) -> None:
    url = f"amqp://guest:guest@{server.host}:{server.amqp_port}/"
    async with await aio_pika.connect(url) as conn:
        ch = await conn.channel(publisher_confirms=True)
        await ch.set_qos(prefetch_count=10)
        queue = await ch.declare_queue("idle", durable=True, arguments={"x-queue-type": "stream"})
        for i in range(200):
            await ch.default_exchange.publish(
                aio_pika.Message(b"noise", headers={FV: f"n{i % 7}"}), "idle"
            )
        got: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        await queue.consume(
            got.put, arguments={"x-stream-offset": "first", "x-stream-filter": "wanted"}
        )
        # it scans the 200 misses, then waits at the end: once done (however long that takes
        # on this machine) a whole second passes with next to no CPU; a server that polls
        # never has such a second
        deadline = time.monotonic() + 15
        while True:
            before = _server_cpu_seconds(server.proc.pid)
            await asyncio.sleep(1.0)
            used = _server_cpu_seconds(server.proc.pid) - before
            if used <= 0.03:
                break
            assert time.monotonic() < deadline, f"server used {used:.3f} s of CPU in a second"
        assert got.empty()
        sent = time.perf_counter()
        await ch.default_exchange.publish(aio_pika.Message(b"here", headers={FV: "wanted"}), "idle")
        message = await asyncio.wait_for(got.get(), 5)
        assert time.perf_counter() - sent < 1.0  # woken by the commit, not by polling
        assert message.body == b"here" and message.headers["x-stream-offset"] == 200
        await message.ack()
