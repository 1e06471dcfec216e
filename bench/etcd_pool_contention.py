"""What many etcd requests at once cost a node's loop: `python -m bench.etcd_pool_contention`.

A node's ``EtcdClient`` sends every request through one httpx client (its default pool:
100 connections). A node that loses the leader of a few hundred streams at once runs as
many elections, each with its own requests (tails, withdrawals), and the 30-minute chaos
run 20261128T115849Z saw such a node's loop run 1-4.5 s late for minutes while every one
of its etcd requests ended in ``PoolTimeout`` (etcd itself answered the others at once).
httpcore's pool walks every queued request against every connection each time a request
starts or ends, so with more requests than connections its cost grows with the queue: the
loop gets late, answers are read late, timeouts fire, and the retries keep the queue long.

Here ``--requests`` tasks each POST in a loop (with a request timeout of 2 s, as
``EtcdClient``'s, and 0.5 s after a failure, as an election's withdrawal) to a local server
that answers each after ``--delay`` s, for ``--seconds``; a ticker on the same loop records
how late it wakes. ``--gate N``: at most N requests in the pool at once (an
``asyncio.Semaphore`` before the POST), the rest waiting in the semaphore's queue. One JSON
line per run on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpx

REQUEST_TIMEOUT_S = 2.0  # as coordination.REQUEST_TIMEOUT_S
RETRY_S = 0.5  # after a failed request, as failover.RETRY_S
TICK_S = 0.1


async def _answer_later(
    delay: float, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """A minimal HTTP/1.1 server: every request answered ``{}`` after ``delay``."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            await asyncio.sleep(delay)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        writer.close()


async def run(requests: int, delay: float, seconds: float, gate: int) -> dict[str, Any]:
    server = await asyncio.start_server(lambda r, w: _answer_later(delay, r, w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v3/kv/deleterange"
    client = httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S)
    limit = asyncio.Semaphore(gate) if gate else None
    loop = asyncio.get_running_loop()
    stop = loop.time() + seconds
    answered = failed = 0
    lags: list[float] = []

    async def post() -> None:
        if limit is None:
            await client.post(url, json={"key": "eA=="})
            return
        async with limit:
            await client.post(url, json={"key": "eA=="})

    async def requester() -> None:
        nonlocal answered, failed
        while loop.time() < stop:
            try:
                await post()
                answered += 1
            except httpx.HTTPError:
                failed += 1
                await asyncio.sleep(RETRY_S)

    async def ticker() -> None:
        last = loop.time()
        while loop.time() < stop:
            await asyncio.sleep(TICK_S)
            now = loop.time()
            lags.append(now - last - TICK_S)
            last = now

    cpu = time.process_time()
    await asyncio.gather(ticker(), *(requester() for _ in range(requests)))
    cpu = time.process_time() - cpu
    await client.aclose()
    server.close()
    return {
        "requests": requests,
        "delay_s": delay,
        "gate": gate,
        "seconds": seconds,
        "answered": answered,
        "failed": failed,
        "cpu_s": round(cpu, 2),
        "loop_late_max_s": round(max(lags), 2),
        "loop_late_mean_s": round(sum(lags) / len(lags), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[50, 250, 500])
    parser.add_argument("--delay", type=float, default=0.3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--gate", type=int, nargs="+", default=[0, 32])
    args = parser.parse_args()
    for gate in args.gate:
        for requests in args.requests:
            print(json.dumps(asyncio.run(run(requests, args.delay, args.seconds, gate))))


if __name__ == "__main__":
    main()
