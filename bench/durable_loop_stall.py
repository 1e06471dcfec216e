"""How long durability work holds the gateway's event loop: `python -m bench.durable_loop_stall`.

The gateway runs in this process (``sievemq.testing.running_gateway``); a ticker task on its
loop sleeps 1 ms at a time and records how late each wake-up is (``admin_loop_stall.Ticker``):
the worst lateness during an operation is the longest any other connection waited behind it.
The client is an aiormq/rstream client on the same loop (its own share is small and the
same before and after). Operations, each ``--runs`` times (median and max of the worst
lateness per operation):

- ``stream_declare``: queue.declare of a new stream (its files and directory fsyncs);
- ``compaction``: the exchange declare that makes definitions.log's compaction due, with
  ``--streams`` streams declared (the rewrite covers them all);
- ``classic_delete``: queue.delete of a durable classic queue holding ``--classic-mib`` MiB
  of persistent messages (its segment files removed);
- ``sequence_rebuild``: the first QueryPublisherSequence of a stream of ``--named`` named
  messages with no snapshot (a restart after a crash).

Runs against whatever ``sievemq`` is importable, so the same file measures an older checkout
(``PYTHONPATH=<old>/src``). JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiormq
from rstream import Producer, RawMessage
from rstream.client import Client

from bench._util import machine
from bench.admin_loop_stall import Ticker
from sievemq.gateway.net.stream_protocol import stream_protocol_factory
from sievemq.gateway.streamproto_session.connection import StreamConnection
from sievemq.gateway.streamproto_session.node import StreamNode
from sievemq.testing import running_gateway

STREAM = {"x-queue-type": "stream"}


async def _stall(ticker: Ticker, op: Callable[[], Awaitable[Any]]) -> float:
    await asyncio.sleep(0.02)
    t0 = time.perf_counter()
    await op()
    t1 = time.perf_counter()
    await asyncio.sleep(0.01)  # a stall at the very end is seen by the next wake-up
    return ticker.worst(t0, t1)


def _summary(stalls: list[float]) -> dict[str, float]:
    return {
        "loop_worst_stall_median_ms": round(1000 * statistics.median(stalls), 2),
        "loop_worst_stall_max_ms": round(1000 * max(stalls), 2),
    }


async def _stream_port(gw: Any) -> tuple[int, Any]:
    snode = StreamNode(gw.node, gw.host, 1024 * 1024, 60, 5.0)
    factory = stream_protocol_factory(lambda: StreamConnection(snode), 1024 * 1024, 1 << 20)
    server = await asyncio.get_running_loop().create_server(factory, gw.host, 0)
    port = server.sockets[0].getsockname()[1]
    snode.advertised_port = port
    return port, server


async def stream_declares(runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        async with running_gateway(Path(tmp) / "data") as gw:
            ticker = Ticker()
            task = asyncio.ensure_future(ticker.run())
            conn = await aiormq.connect(gw.url)
            ch = await conn.channel()
            stalls = [
                await _stall(
                    ticker, lambda i=i: ch.queue_declare(f"s{i}", durable=True, arguments=STREAM)
                )
                for i in range(runs)
            ]
            await conn.close()
            ticker.stop = True
            await task
    return _summary(stalls)


async def compactions(runs: int, streams: int) -> dict[str, Any]:
    stalls: list[float] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            async with running_gateway(data) as gw:
                v = gw.broker.vhost("/")
                for i in range(streams):
                    v.declare_queue(f"s{i:05d}", arguments=STREAM)
                log = data / "definitions.log"
                conn = await aiormq.connect(gw.url)
                ch = await conn.channel()
                ticker = Ticker()
                task = asyncio.ensure_future(ticker.run())
                inode = os.stat(log).st_ino
                for i in range(100 * streams):
                    if i % 2:
                        op = ch.exchange_delete("x")
                    else:
                        op = ch.exchange_declare("x", exchange_type="fanout", durable=True)
                    t0 = time.perf_counter()
                    await op
                    t1 = time.perf_counter()
                    if os.stat(log).st_ino != inode:  # this change made the compaction due
                        await asyncio.sleep(0.05)
                        stalls.append(ticker.worst(t0, t1 + 0.05))
                        break
                await conn.close()
                ticker.stop = True
                await task
    return _summary(stalls) | {"streams": streams}


async def classic_deletes(runs: int, mib: int) -> dict[str, Any]:
    stalls: list[float] = []
    body = b"x" * 65536
    with tempfile.TemporaryDirectory() as tmp:
        async with running_gateway(Path(tmp) / "data") as gw:
            conn = await aiormq.connect(gw.url)
            ch = await conn.channel()
            await ch.confirm_delivery()
            ticker = Ticker()
            task = asyncio.ensure_future(ticker.run())
            for i in range(runs):
                await ch.queue_declare(f"c{i}", durable=True)
                props = aiormq.spec.Basic.Properties(delivery_mode=2)
                await asyncio.gather(
                    *(
                        ch.basic_publish(body, routing_key=f"c{i}", properties=props)
                        for _ in range(mib * 16)
                    )
                )
                stalls.append(await _stall(ticker, lambda i=i: ch.queue_delete(f"c{i}")))
            await conn.close()
            ticker.stop = True
            await task
    return _summary(stalls) | {"mib": mib}


async def sequence_rebuilds(runs: int, named: int) -> dict[str, Any]:
    stalls: list[float] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            async with running_gateway(data) as gw:
                port, server = await _stream_port(gw)
                async with Producer(gw.host, port, username="guest", password="guest") as p:
                    await p.create_stream("s")
                    queue = gw.broker.vhost("/").queues["s"]
                    for start in range(0, named, 1000):
                        batch = range(start + 1, min(named, start + 1000) + 1)
                        await p.send_batch(
                            "s",
                            [RawMessage(b"m", publishing_id=i) for i in batch],
                            publisher_name="ref",
                        )
                        while queue.end_offset < start - 20_000:  # keep the backlog small
                            await asyncio.sleep(0.01)
                    while queue.end_offset < named:
                        await asyncio.sleep(0.05)
                server.close()
            # no snapshot (the in-process listener never writes one): as after a crash
            async with running_gateway(data) as gw:
                port, server = await _stream_port(gw)
                client = Client(gw.host, port, frame_max=1024 * 1024, heartbeat=60)
                await client.start()
                await client.authenticate(vhost="/", username="guest", password="guest")
                ticker = Ticker()
                task = asyncio.ensure_future(ticker.run())
                got: list[int] = []

                async def query(client: Client = client, got: list[int] = got) -> None:
                    got.append(await client.query_publisher_sequence("s", "ref"))

                stalls.append(await _stall(ticker, query))
                assert got == [named], got
                ticker.stop = True
                await task
                await client.close()
                server.close()
    return _summary(stalls) | {"named": named}


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"benchmark": "durable_loop_stall", "machine": machine()}
    only = set(args.only.split(",")) if args.only else None
    if only is None or "stream_declare" in only:
        out["stream_declare"] = await stream_declares(args.runs)
    if only is None or "compaction" in only:
        out["compaction"] = await compactions(max(1, args.runs // 5), args.streams)
    if only is None or "classic_delete" in only:
        out["classic_delete"] = await classic_deletes(args.runs, args.classic_mib)
    if only is None or "sequence_rebuild" in only:
        out["sequence_rebuild"] = await sequence_rebuilds(max(1, args.runs // 5), args.named)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--classic-mib", type=int, default=16)
    parser.add_argument("--named", type=int, default=200_000)
    parser.add_argument("--only", default="", help="comma-separated operations")
    print(json.dumps(asyncio.run(amain(parser.parse_args())), indent=1))


if __name__ == "__main__":
    main()
