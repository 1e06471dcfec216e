"""A classic queue's files go off the event loop: at a connection's close (an auto-delete
queue whose last consumer that was) and at queue.delete, the directory is renamed to a
tombstone at once and a background thread removes it. With that removal made to take 1 s,
another connection is served meanwhile and the loop never stalls. (Exclusive queues hold
no files: they are never written to disk.)"""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path

import aio_pika
import pytest

from sievemq.storage import layout
from sievemq.storage.layout import QUEUES_DIR
from sievemq.testing import running_gateway

from .slow_sync import SLOW_SYNC_S, SlowRemoval, _ticker, publish_timed

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("how", ["connection-close", "queue-delete"])
async def test_a_classic_queues_files_go_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    data = tmp_path / "data"
    async with running_gateway(data) as gw:
        loop = asyncio.get_running_loop()
        other = await aio_pika.connect(gw.url)
        owner = await aio_pika.connect(gw.url)
        pub = await other.channel(publisher_confirms=True)
        await pub.declare_queue("busy", durable=True)
        och = await owner.channel(publisher_confirms=True)
        mine = await och.declare_queue("mine", durable=True, auto_delete=True)
        for _ in range(50):
            await och.default_exchange.publish(
                aio_pika.Message(b"x" * 1000, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                mine.name,
            )
        queues = data / QUEUES_DIR
        directory = queues / "%2F" / "mine"
        assert any(directory.iterdir())
        await och.set_qos(prefetch_count=1)

        async def hold(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            pass  # never acked

        await mine.consume(hold)
        slow = SlowRemoval(kinds=(QUEUES_DIR,))
        monkeypatch.setattr(shutil, "rmtree", slow)
        lateness: list[float] = []
        ticks = asyncio.ensure_future(_ticker(loop, lateness))
        if how == "connection-close":
            await owner.close()  # its consumer goes: the auto-delete queue goes
        else:
            await pub.queue_delete("mine")
        for _ in range(100):  # the server handles the close: renamed away at once
            if not directory.exists():
                break
            await asyncio.sleep(0.01)
        assert not directory.exists()
        served = await publish_timed(pub, "busy")
        await asyncio.to_thread(layout.wait_discarded)
        ticks.cancel()
        assert slow.removed, "the tombstone was not removed"
        assert threading.get_ident() not in slow.threads
        assert max(served) < SLOW_SYNC_S / 2, served
        assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
        assert sorted(p.name for p in (queues / "%2F").iterdir()) == ["busy"]
        assert "mine" not in gw.broker.vhost("/").classic.queues
        await other.close()
        if not owner.is_closed:
            await owner.close()
