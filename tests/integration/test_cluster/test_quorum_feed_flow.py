"""The quorum feed's flow control: three real nodes, a real etcd; aiormq.

A replica SIGSTOPped reads nothing, so the leader's link connection to it backs up; the
leader must then stop shipping to it (``cluster/quorum_replication.Feed``: changes kept up to
a bound, then read again from the log once the link drains) instead of buffering every
change for it. Publishers send far more than that bound through the leader while the other
replica makes the majority; the leader's resident memory (``/proc/PID/statm``, sampled all
along) grows by much less than what was published, and the replica, SIGCONTed, catches up
to the leader's live records.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any

import aiormq
import pytest

from sievemq.testing import ServerProcess

from .cluster_helpers import WAIT_S, queues, until
from .test_quorum_replication import copy_of, declare

NAMES = ("a", "b", "c")
QUEUE = "flow"
BODY = 128 * 1024
MESSAGES = 800  # 100 MiB published while the replica is stopped
KEPT = 20  # published last and left in the queue
WINDOW = 16  # publishes in flight
GROWTH_LIMIT = 40 << 20  # the leader's resident memory may grow by this much at most

pytestmark = pytest.mark.timeout(600)


def resident(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakSampler:
    """The highest resident size of a process, sampled every 20 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start = self.peak = resident(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, resident(self.pid))

    def stop(self) -> int:
        """The growth: peak minus the size at the start."""
        self._stop.set()
        self._thread.join()
        return self.peak - self.start


async def publish(node: ServerProcess, bodies: list[bytes]) -> None:
    """Persistent publishes with confirms, ``WINDOW`` in flight; a nacked one is sent again
    (the leader nacks, writing nothing, while its 2 s lease is late on a loaded machine)."""
    connection = await aiormq.connect(node.url)
    try:
        channel = await connection.channel()
        props = aiormq.spec.Basic.Properties(delivery_mode=2)

        async def confirmed(body: bytes) -> None:
            deadline = time.monotonic() + WAIT_S
            while True:
                try:
                    await channel.basic_publish(body, routing_key=QUEUE, properties=props)
                    return
                except aiormq.exceptions.DeliveryError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)

        for at in range(0, len(bodies), WINDOW):
            await asyncio.gather(*(confirmed(body) for body in bodies[at : at + WINDOW]))
    finally:
        await connection.close()


async def publish_and_consume(node: ServerProcess, count: int, waiting: int) -> None:
    """``count`` big messages published and, as they come, consumed and acked, with the
    ``waiting`` messages the queue held before."""
    got = asyncio.Event()
    received = 0
    connection = await aiormq.connect(node.url)
    try:
        channel = await connection.channel()
        await channel.basic_qos(prefetch_count=WINDOW)

        async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
            nonlocal received
            await channel.basic_ack(message.delivery.delivery_tag)
            received += 1
            if received >= count + waiting:
                got.set()

        consume = await channel.basic_consume(QUEUE, on_message)
        bodies = [i.to_bytes(4, "big") * (BODY // 4) for i in range(count)]
        await publish(node, bodies)
        await asyncio.wait_for(got.wait(), 120)
        await channel.basic_cancel(consume.consumer_tag)
    finally:
        await connection.close()


def test_a_stopped_replica_does_not_make_the_leader_buffer(
    nodes: dict[str, ServerProcess],
) -> None:
    a, c = nodes["a"], nodes["c"]
    declare(a, QUEUE)

    def online() -> Any:
        return queues(a).get(QUEUE, {}).get("online") == list(NAMES)

    until(online, "the queue's three members are online")
    asyncio.run(publish(a, [b"before"]))
    until(lambda: copy_of(c, QUEUE) == copy_of(a, QUEUE), "c holds the first message")
    sampler = PeakSampler(a.pid)
    os.kill(c.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        asyncio.run(publish_and_consume(a, MESSAGES, waiting=1))
        asyncio.run(publish(a, [f"kept {i}".encode() for i in range(KEPT)]))
        took = time.monotonic() - started
    finally:
        growth = sampler.stop()
        os.kill(c.pid, signal.SIGCONT)
    print(f"leader's resident memory grew by {growth / (1 << 20):.1f} MiB in {took:.1f} s")
    assert growth < GROWTH_LIMIT, (
        f"the leader grew by {growth >> 20} MiB while {MESSAGES * BODY >> 20} MiB were "
        f"published in {took:.1f} s to a quorum queue whose replica c was stopped"
    )
    leader = copy_of(a, QUEUE)
    # (a set: a publish written, held for the majority and nacked as the leader fenced, is
    # there twice once sent again)
    assert set(leader.values()) == {f"kept {i}".encode() for i in range(KEPT)}
    until(lambda: copy_of(c, QUEUE) == leader, "c caught up with the leader's live records")
    assert copy_of(nodes["b"], QUEUE) == leader
