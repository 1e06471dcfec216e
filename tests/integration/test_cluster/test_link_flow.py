"""Flow control on the inter-node link (``cluster/link.py``, "Flow control").

Two real nodes and a real etcd (a 30 s lease: the leader is frozen for less than that, so
it stays the leader and the link stays up), a classic queue led by ``a`` and an aio-pika
client publishing 48 MiB through ``b`` with confirms, pipelined. With ``a`` SIGSTOPped, ``b``
holds the client (stops reading its socket) once its link to ``a`` is over the high-water
mark: the bytes it buffers for ``a`` stay near the mark, far under what the client sends.
Another client of ``b`` publishing to ``b``'s own queue meanwhile is not held. After SIGCONT
every message is confirmed and stored on ``a``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import pytest

from sievemq.cluster.link import HIGH_WATER_BYTES
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess

from .cluster_helpers import WAIT_S, channel, queues, started_nodes, until

BODY = 16 * 1024
COUNT = 3000  # 48 MiB: many times the mark and what the kernel's socket buffers hold
# one client read (and the slices of it already read) may go out after the mark was passed
SLACK_BYTES = 1024 * 1024


@pytest.fixture
def pair(etcd: EtcdProcess, tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    with started_nodes(etcd, tmp_path, ("a", "b"), ttl_s=30) as procs:
        yield procs


def publish_locally(node: ServerProcess) -> None:
    """Ten confirmed publishes to a queue ``node`` leads (pika raises on a nack)."""
    on = channel(node)
    on.queue_declare("local", durable=True)
    on.confirm_delivery()
    for i in range(10):
        on.basic_publish("", "local", f"{i}".encode(), mandatory=True)


async def link_to(client: httpx.AsyncClient, node: ServerProcess, peer: str) -> dict[str, Any]:
    """``node``'s link to ``peer`` as its ``/api/nodes/NAME`` shows it (``sievemq.links``)."""
    response = await client.get(f"{node.admin_url}/api/nodes/{node.data_dir.name}")
    response.raise_for_status()
    links = {link["node"]: link for link in response.json()["sievemq"]["links"]}
    return links.get(peer, {})


def test_a_frozen_leader_holds_its_publishers_and_b_buffers_a_bounded_amount(
    pair: dict[str, ServerProcess],
) -> None:
    a, b = pair["a"], pair["b"]
    channel(a).queue_declare("slow", durable=True)
    until(lambda: queues(b).get("slow", {}).get("leader") == "a", "b knows slow")
    body = b"x" * BODY

    async def scenario() -> tuple[list[Any], int, dict[str, Any]]:
        conn = await aio_pika.connect(b.url)
        async with conn, httpx.AsyncClient(auth=("guest", "guest"), timeout=10) as http:
            ch = await conn.channel(publisher_confirms=True)

            def publish(i: int) -> Any:
                message = aio_pika.Message(body, message_id=str(i))
                return ch.default_exchange.publish(message, "slow")

            warm = await asyncio.gather(*(publish(i) for i in range(20)))
            assert (await link_to(http, b, "a")).get("opened"), "the link to a is open"
            os.kill(a.pid, signal.SIGSTOP)
            try:
                sending = asyncio.ensure_future(
                    asyncio.gather(*(publish(i) for i in range(20, 20 + COUNT)))
                )
                peak = 0
                held: dict[str, Any] = {}
                deadline = time.monotonic() + WAIT_S
                while not held:  # until b holds the client
                    assert time.monotonic() < deadline, f"b never held its client ({peak} B)"
                    link = await link_to(http, b, "a")
                    peak = max(peak, link["buffered_bytes"])
                    if link["over_high_water"] and link["held_connections"]:
                        held = link
                    await asyncio.sleep(0.1)
                for _ in range(10):  # and keeps it held, its buffer bounded, for a while
                    link = await link_to(http, b, "a")
                    peak = max(peak, link["buffered_bytes"])
                    assert link["held_connections"] == 1
                    await asyncio.sleep(0.2)
                # meanwhile another client of b publishes to b's own queue: not held
                await asyncio.to_thread(publish_locally, b)
                assert not sending.done()
            finally:
                os.kill(a.pid, signal.SIGCONT)
            confirms = await asyncio.wait_for(sending, 4 * WAIT_S)
            return [*warm, *confirms], peak, held

    confirms, peak, held = asyncio.run(scenario())
    print(f"b's link to a: peak {peak} B buffered while held ({held})")
    assert [type(c).__name__ for c in confirms] == ["Ack"] * (20 + COUNT)
    assert HIGH_WATER_BYTES <= peak <= HIGH_WATER_BYTES + SLACK_BYTES, (peak, held)
    until(lambda: queues(a)["slow"]["messages"] == 20 + COUNT, "a holds every message")
