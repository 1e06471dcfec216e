"""``DELETE /api/vhosts/{v}`` never waits on the event loop for the disk.

The vhost goes in memory at once; the definitions log's fdatasync runs in a worker thread
and the 204 waits for it; the vhost's streams and classic queues are renamed to tombstones
and removed by a background thread. With both the definitions fdatasync and the removals
made to take 1 s, another connection is served meanwhile and the loop's timer stays on
time. A SIGKILL right after the 204 and a restart leave no trace of the vhost.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from pathlib import Path

import aio_pika
import httpx
import pika
import pytest

from sievemq.storage import layout
from sievemq.storage.layout import QUEUES_DIR, STREAMS_DIR
from sievemq.testing import ServerProcess, running_gateway
from sievemq.testing.wait import eventually

from .slow_sync import SLOW_SYNC_S, SlowDefinitionsSync, SlowRemoval, _ticker

pytestmark = pytest.mark.timeout(120)

STREAM = {"x-queue-type": "stream"}


def _fill_vhost(amqp_url: str) -> None:
    """A stream and a durable classic queue in vhost v1, each with messages on disk."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("s1", durable=True, arguments=STREAM)
    ch.queue_declare("c1", durable=True)
    for i in range(20):
        props = pika.BasicProperties(delivery_mode=2)
        ch.basic_publish("", "s1", b"s%d" % i, props)
        ch.basic_publish("", "c1", b"c%d" % i, props)
    conn.close()


def _vhost_dirs(data: Path) -> list[Path]:
    return [d for kind in (STREAMS_DIR, QUEUES_DIR) if (d := data / kind / "v1").exists()]


async def test_vhost_delete_waits_for_its_sync_without_blocking_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    async with running_gateway(data) as gw:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        async with httpx.AsyncClient(
            base_url=gw.admin_url, auth=("guest", "guest"), timeout=60
        ) as http:
            assert (await http.put("/api/vhosts/v1")).status_code == 201
            body = {"configure": ".*", "write": ".*", "read": ".*"}
            assert (await http.put("/api/permissions/v1/guest", json=body)).status_code == 201
            base = gw.url.rsplit("/", 1)[0]
            await asyncio.to_thread(_fill_vhost, f"{base}/v1")
            assert all(any(d.iterdir()) for d in _vhost_dirs(data))
            assert len(_vhost_dirs(data)) == 2

            other = await aio_pika.connect(gw.url)
            async with other:
                pub = await other.channel(publisher_confirms=True)
                await pub.declare_queue("busy", durable=True, arguments=STREAM)
                slow_sync = SlowDefinitionsSync()
                slow_removal = SlowRemoval()
                monkeypatch.setattr(os, "fdatasync", slow_sync)
                monkeypatch.setattr(shutil, "rmtree", slow_removal)
                lateness: list[float] = []
                ticks = asyncio.ensure_future(_ticker(loop, lateness))
                slow_sync.hold()  # held until released: no race with a timer
                delete = asyncio.ensure_future(http.delete("/api/vhosts/v1"))
                await eventually(lambda: bool(slow_sync.threads) and "v1" not in gw.broker.vhosts)
                # meanwhile the other connection publishes with confirms, at once
                confirmed = []
                for i in range(5):
                    t = time.monotonic()
                    await pub.default_exchange.publish(aio_pika.Message(b"m%d" % i), "busy")
                    confirmed.append(time.monotonic() - t)
                await asyncio.sleep(SLOW_SYNC_S)
                assert not delete.done(), "the 204 came before the definitions sync"
                slow_sync.release()
                answer = await delete
                answered = time.monotonic()
                assert answer.status_code == 204, answer.text
                await asyncio.to_thread(layout.wait_discarded)
                ticks.cancel()

                assert max(confirmed) < SLOW_SYNC_S / 2, confirmed
                assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
                assert slow_sync.threads and loop_thread not in slow_sync.threads
                assert slow_sync.timed_out == 0
                assert slow_sync.ended and min(slow_sync.ended) <= answered
                # both the stream's and the classic queue's files went, off the loop
                assert len(slow_removal.removed) == 2, slow_removal.removed
                assert loop_thread not in slow_removal.threads
                assert all(list(d.iterdir()) == [] for d in _vhost_dirs(data))
                assert (await http.get("/api/vhosts/v1")).status_code == 404


def test_no_trace_of_a_deleted_vhost_after_a_sigkill_right_after_the_answer(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with ServerProcess(data, extra_args=("--fsync", "always")) as server:
        amqp = f"amqp://guest:guest@{server.host}:{server.amqp_port}"
        with httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=30) as h:
            assert h.put("/api/vhosts/v1").status_code == 201
            body = {"configure": ".*", "write": ".*", "read": ".*"}
            assert h.put("/api/permissions/v1/guest", json=body).status_code == 201
            _fill_vhost(f"{amqp}/v1")
            assert h.delete("/api/vhosts/v1").status_code == 204
        server.kill()
        server.start()
        with httpx.Client(base_url=server.admin_url, auth=("guest", "guest"), timeout=30) as h:
            assert h.get("/api/vhosts/v1").status_code == 404
            assert "v1" not in [v["name"] for v in h.get("/api/vhosts").json()]
            assert [q for q in h.get("/api/queues").json() if q["vhost"] == "v1"] == []
            assert _vhost_dirs(data) == []  # no files, no tombstones, no empty directories
            # a new vhost of that name starts empty
            assert h.put("/api/vhosts/v1").status_code == 201
            body = {"configure": ".*", "write": ".*", "read": ".*"}
            assert h.put("/api/permissions/v1/guest", json=body).status_code == 201
        amqp = f"amqp://guest:guest@{server.host}:{server.amqp_port}"  # new ports
        conn = pika.BlockingConnection(pika.URLParameters(f"{amqp}/v1"))
        ch = conn.channel()
        s1 = ch.queue_declare("s1", durable=True, arguments=STREAM)
        c1 = ch.queue_declare("c1", durable=True)
        conn.close()
        assert s1.method.message_count == 0
        assert c1.method.message_count == 0
