"""A crash at any step of a delete (stream, classic queue, vhost) leaves the object either
fully there with its data or fully gone, as the client's answer said (issue 21 item 2).

The steps of a delete: the object goes in memory and its definitions line is written (not
yet fdatasynced); its directory is renamed to a tombstone; the fdatasync runs in a worker
thread and the client gets its answer; a background thread removes the tombstone. The
definitions fdatasync is held (``SlowDefinitionsSync.hold``) so the test can stand in each
window and take what a crash there leaves on disk: a copy of the data directory, with
``definitions.log`` cut back to its last fdatasynced length (the change's line lost, as a
power cut may lose it) or kept whole (the line reached the disk on its own). A broker then
starts on each copy.

- line lost, tombstone there: the delete was never answered; the object is back, with its
  messages, and no tombstone is left;
- line kept, tombstone there (before or after the answer): the object is gone, and so is
  its tombstone;
- and the tombstone is never removed before the delete is durable.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import pytest

from sievemq.gateway.model import definitions
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.vhost import VirtualHost
from sievemq.storage import layout
from sievemq.storage.layout import QUEUES_DIR, STREAMS_DIR, TOMBSTONE_PREFIX
from sievemq.testing import running_gateway
from sievemq.testing.wait import eventually
from tests.integration.test_runtime.slow_sync import SlowDefinitionsSync

pytestmark = pytest.mark.timeout(120)

STREAM = {"x-queue-type": "stream"}


def tombstones(data: Path) -> list[Path]:
    return [
        p
        for kind in (STREAMS_DIR, QUEUES_DIR)
        for p in (data / kind).glob(f"*/{TOMBSTONE_PREFIX}*")
    ]


def crash_copy(data: Path, to: Path, synced_length: int | None) -> Path:
    """What a crash now leaves: the data directory, its definitions log cut back to the
    length last fdatasynced (None: the whole log reached the disk)."""
    shutil.copytree(data, to)
    if synced_length is not None:
        os.truncate(to / "definitions.log", synced_length)
    return to


def after_restart(data: Path) -> dict[str, int]:
    """Every queue of every vhost with its message count, after a start on ``data``."""
    broker = Broker(data)
    try:
        return {
            f"{v.name}/{name}": q.message_count
            for v in broker.vhosts.values()
            for name, q in [*v.queues.items(), *v.classic.queues.items()]
        }
    finally:
        broker.close()


async def fill(url: str) -> None:
    """Stream s and durable classic queue c in vhost /, stream vs in vhost v: 3 each."""
    for vhost, names in (("%2F", ("s", "c")), ("v", ("vs",))):
        conn = await aio_pika.connect(url.rsplit("/", 1)[0] + "/" + vhost)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            for name in names:
                args = {} if name == "c" else STREAM
                await ch.declare_queue(name, durable=True, arguments=args)
                for i in range(3):
                    message = aio_pika.Message(b"%d" % i, delivery_mode=2)
                    await ch.default_exchange.publish(message, name)


async def delete_in_windows(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    delete: Callable[[str, str], Awaitable[object]],
    gone: set[str],
) -> None:
    data = tmp_path / "data"
    async with running_gateway(data) as gw:
        async with httpx.AsyncClient(auth=("guest", "guest")) as http:
            r = await http.put(f"{gw.admin_url}/api/vhosts/v")
            assert r.status_code == 201
            perms = {"configure": ".*", "write": ".*", "read": ".*"}
            r = await http.put(f"{gw.admin_url}/api/permissions/v/guest", json=perms)
            assert r.status_code in (201, 204)
        await fill(gw.url)
        before = {"//s": 3, "//c": 3, "v/vs": 3}
        synced = (data / "definitions.log").stat().st_size  # each change waited its sync
        slow = SlowDefinitionsSync()
        slow.hold()
        monkeypatch.setattr(os, "fdatasync", slow)
        removal = threading.Event()  # the background removal waits for the test too
        real_rmtree = shutil.rmtree

        def held_rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
            if TOMBSTONE_PREFIX in str(path):
                removal.wait(30)
            real_rmtree(path, *args, **kwargs)

        monkeypatch.setattr(shutil, "rmtree", held_rmtree)
        deleting = asyncio.ensure_future(delete(gw.url, gw.admin_url))
        await eventually(lambda: len(tombstones(data)) == len(gone))  # renamed, not durable
        await asyncio.sleep(0.05)
        assert not deleting.done(), "answered before the delete was durable"
        lost = crash_copy(data, tmp_path / "line-lost", synced)
        kept = crash_copy(data, tmp_path / "line-kept", None)
        await asyncio.to_thread(layout.wait_discarded)
        assert len(tombstones(data)) == len(gone), "removed before the delete was durable"
        slow.release()
        await deleting  # the answer: the delete is durable now
        answered = crash_copy(data, tmp_path / "answered", None)  # tombstones still there
        assert len(tombstones(answered)) == len(gone)
        removal.set()
        monkeypatch.undo()
        await asyncio.to_thread(layout.wait_discarded)
        assert tombstones(data) == []
    assert after_restart(lost) == before
    assert tombstones(lost) == []
    left = {k: n for k, n in before.items() if k not in gone}
    for copy in (kept, answered, data):
        assert after_restart(copy) == left, copy.name
        assert tombstones(copy) == [], copy.name


@pytest.mark.parametrize("queue", ["s", "c"])  # a stream, a durable classic queue
async def test_queue_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queue: str) -> None:
    async def delete(url: str, admin: str) -> None:
        conn = await aio_pika.connect(url)
        async with conn:
            await (await conn.channel()).queue_delete(queue)

    await delete_in_windows(tmp_path, monkeypatch, delete, {f"//{queue}"})


async def test_vhost_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def delete(url: str, admin: str) -> None:
        async with httpx.AsyncClient(auth=("guest", "guest"), timeout=30) as http:
            r = await http.delete(f"{admin}/api/vhosts/v")
            assert r.status_code == 204

    await delete_in_windows(tmp_path, monkeypatch, delete, {"v/vs"})


def vhost_state(data: Path, vhost: str) -> dict[str, Any]:
    """What a start on ``data`` holds of ``vhost``: whether it exists, its queues with their
    message counts, its durable exchanges, guest's permission in it, and (after that start
    wrote back what it dropped) the stored records and files that still name it."""
    broker = Broker(data)
    try:
        v = broker.vhosts.get(vhost)
        state: dict[str, Any] = {
            "exists": v is not None,
            "queues": {}
            if v is None
            else {n: q.message_count for n, q in [*v.queues.items(), *v.classic.queues.items()]},
            "exchange": v is not None and "vx" in v.exchanges,
            "permission": any(vhost in u.permissions for u in broker.users),
        }
    finally:
        broker.close()
    stored = definitions.load(data) or {}
    state["records"] = sorted(
        section
        for section in ("queues", "exchanges", "bindings")
        for item in stored.get(section, [])
        if item["vhost"] == vhost
    )
    state["files"] = sorted(
        p.name for kind in (STREAMS_DIR, QUEUES_DIR) for p in (data / kind / vhost).glob("*")
    )
    return state


async def test_vhost_delete_cut_between_its_line_and_its_queues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vhost's own line goes first: a crash (SIGKILL: what was written stays; or a power
    cut: the unsynced lines are lost) before, between or after its queues' deletions leaves
    the vhost whole with its data, or gone with all its queues, files and permissions."""
    data = tmp_path / "data"
    async with running_gateway(data) as gw:
        async with httpx.AsyncClient(auth=("guest", "guest"), timeout=30) as http:
            r = await http.put(f"{gw.admin_url}/api/vhosts/v")
            assert r.status_code == 201
            perms = {"configure": ".*", "write": ".*", "read": ".*"}
            r = await http.put(f"{gw.admin_url}/api/permissions/v/guest", json=perms)
            assert r.status_code in (201, 204)
            conn = await aio_pika.connect(gw.url.rsplit("/", 1)[0] + "/v")
            async with conn:
                ch = await conn.channel(publisher_confirms=True)
                x = await ch.declare_exchange("vx", aio_pika.ExchangeType.DIRECT, durable=True)
                for name, args in (("vs", STREAM), ("vc", {})):
                    q = await ch.declare_queue(name, durable=True, arguments=args)
                    await q.bind(x, name)
                    for i in range(3):
                        await x.publish(aio_pika.Message(b"%d" % i, delivery_mode=2), name)
            whole = {"vs": 3, "vc": 3}
            synced = (data / "definitions.log").stat().st_size
            slow = SlowDefinitionsSync()
            slow.hold()  # the answer waits: every copy below is of a delete not yet answered
            monkeypatch.setattr(os, "fdatasync", slow)
            cuts: list[tuple[Path, Path]] = []  # (killed: log whole, power cut: log synced)
            real_delete_queue = VirtualHost.delete_queue

            def cut_then_delete(self: VirtualHost, name: str, *args: Any, **kwargs: Any) -> Any:
                if self.name == "v":
                    n = len(cuts)
                    killed = crash_copy(data, tmp_path / f"killed-{n}", None)
                    cuts.append((killed, crash_copy(data, tmp_path / f"power-{n}", synced)))
                return real_delete_queue(self, name, *args, **kwargs)

            monkeypatch.setattr(VirtualHost, "delete_queue", cut_then_delete)
            deleting = asyncio.ensure_future(http.delete(f"{gw.admin_url}/api/vhosts/v"))
            await eventually(lambda: len(cuts) == 2)
            await asyncio.sleep(0.05)
            assert not deleting.done(), "answered before the delete was durable"
            slow.release()
            assert (await deleting).status_code == 204
            monkeypatch.undo()
        await asyncio.to_thread(layout.wait_discarded)
    gone = {
        "exists": False,
        "queues": {},
        "exchange": False,
        "permission": False,
        "records": [],
        "files": [],
    }
    there = {
        "exists": True,
        "queues": whole,
        "exchange": True,
        "permission": True,
        "records": ["bindings", "bindings", "exchanges", "queues", "queues"],
        "files": ["vc", "vs"],
    }
    for killed, power_cut in cuts:
        # killed after the vhost's line (and, for the second, one queue's): gone whole
        assert vhost_state(killed, "v") == gone, killed.name
        assert tombstones(killed) == [], killed.name
        # the unsynced lines lost: the delete never happened, the data is all there
        assert vhost_state(power_cut, "v") == there, power_cut.name
        assert tombstones(power_cut) == [], power_cut.name
    assert vhost_state(data, "v") == gone  # answered: gone for good
