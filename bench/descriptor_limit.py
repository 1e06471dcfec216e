"""50,000 streams in a process that may open 1,024 descriptors (issue 21); JSON to stdout.

    python -m bench.descriptor_limit [--n 50000] [--limit 1024] [--concurrency 16]
                                     [--sample 1000] [--deadline-s 1800]

Starts ``sievemq serve`` with ``RLIMIT_NOFILE`` set to ``--limit``, soft and hard (so it cannot
raise it), and over one aio-pika connection with ``--concurrency`` channels at once: declares
``--n`` streams, publishes one confirmed message to each, then reads the first message back
from ``--sample`` random ones (``x-stream-offset: first``). The server's descriptors
(``/proc/PID/fd``) are sampled every 0.2 s all along (the peak is reported beside
``/api/nodes``' ``fd_total`` and ``sockets_total``), and a fresh connection is opened every
500 streams, as clients keep arriving. Bounded in time: past ``--deadline-s`` the declares
stop and the JSON says how many were done. A nack, a closed channel or a lost message fails
the run.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import aio_pika

from bench._util import machine
from sievemq.testing import ServerProcess


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class PeakSampler(threading.Thread):
    """The most descriptors the server held, sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            self.peak = max(self.peak, fds(self.pid))


def node_figures(server: ServerProcess) -> dict[str, int]:
    auth = base64.b64encode(b"guest:guest").decode()
    req = urllib.request.Request(
        server.admin_url + "/api/nodes", headers={"Authorization": f"Basic {auth}"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        node = json.load(resp)[0]
    return {k: int(node[k]) for k in ("fd_used", "fd_total", "sockets_used", "sockets_total")}


async def declare_and_publish(
    url: str, n: int, concurrency: int, deadline: float
) -> tuple[int, int, float]:
    """Streams declared and confirmed (all of 0..done-1), arrivals, seconds taken."""
    conn = await aio_pika.connect(url)
    next_index = 0
    done = 0
    arrivals = 0
    start = time.perf_counter()

    async def worker() -> None:
        nonlocal next_index, done, arrivals
        ch = await conn.channel(publisher_confirms=True)
        while next_index < n and time.monotonic() < deadline:
            i = next_index
            next_index += 1
            name = f"many-{i}"
            await ch.declare_queue(name, durable=True, arguments={"x-queue-type": "stream"})
            await ch.default_exchange.publish(aio_pika.Message(f"message {i}".encode()), name)
            done += 1
            if i % 500 == 0:  # a client arriving meanwhile: connects, confirms one, leaves
                other = await aio_pika.connect(url)
                och = await other.channel(publisher_confirms=True)
                await och.default_exchange.publish(aio_pika.Message(b"arrival"), f"many-{i}")
                await other.close()
                arrivals += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - start
    await conn.close()
    return done, arrivals, seconds


async def read_sample(url: str, indexes: list[int]) -> float:
    """Read the first message of each sampled stream; seconds taken."""
    conn = await aio_pika.connect(url)
    ch = await conn.channel()
    await ch.set_qos(prefetch_count=1)
    start = time.perf_counter()
    for i in indexes:
        queue = await ch.get_queue(f"many-{i}", ensure=False)
        async with queue.iterator(arguments={"x-stream-offset": "first"}) as it:
            async for message in it:
                if message.body != f"message {i}".encode():
                    raise AssertionError(f"many-{i}: read back {message.body!r}")
                await message.ack()
                break
    seconds = time.perf_counter() - start
    await conn.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--limit", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--deadline-s", type=float, default=1800.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sievemq-fdlimit-") as tmp:
        server = ServerProcess(Path(tmp) / "data", fd_limit=args.limit).start()
        sampler = PeakSampler(server.pid)
        sampler.start()
        try:
            budget = node_figures(server)
            deadline = time.monotonic() + args.deadline_s
            done, arrivals, seconds = asyncio.run(
                declare_and_publish(server.url, args.n, args.concurrency, deadline)
            )
            after = node_figures(server)
            sample = random.Random(1).sample(range(done), min(args.sample, done))
            read_s = asyncio.run(read_sample(server.url, sample))
        finally:
            sampler.stopped.set()
            sampler.join()
            code = server.stop(timeout=600)
        stderr = server.stderr()
    result: dict[str, Any] = {
        "machine": machine(),
        "limit": args.limit,
        "streams_wanted": args.n,
        "streams_declared_and_confirmed": done,
        "arrived_connections": arrivals,
        "declare_publish_s": round(seconds, 1),
        "ms_per_stream": round(1000 * seconds / max(done, 1), 2),
        "read_sample": len(sample),
        "read_sample_ms_each": round(1000 * read_s / max(len(sample), 1), 2),
        "budget": budget,
        "after": after,
        "peak_fds": sampler.peak,
        "exit_code": code,
        "internal_errors_logged": stderr.count("INTERNAL_ERROR"),
        "descriptor_warnings_logged": stderr.count("out of file descriptors"),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
