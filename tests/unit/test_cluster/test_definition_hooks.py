"""The two hooks a cluster node uses: the definitions store's observer (every change as it
is made) and ``DefinitionsSync.also_wait`` (a change's reply also waits for etcd)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sievemq.gateway.model.definitions import DefinitionStore
from sievemq.gateway.runtime.definitions_sync import DefinitionsSync


def test_the_observer_sees_each_change_once(tmp_path: Path) -> None:
    seen: list[tuple[str, str, str | None, Any]] = []
    with DefinitionStore(tmp_path) as store:
        store.observer = lambda *change: seen.append(change)
        queue = {"vhost": "/", "name": "q", "arguments": {}}
        store.put("queues", queue)
        store.put("queues", dict(queue))  # unchanged: nothing to tell
        store.delete("queues", queue)
        store.commit()
    assert seen == [
        ("put", "queues", '["/","q"]', queue),
        ("del", "queues", '["/","q"]', None),
    ]


async def test_a_change_waits_for_what_it_also_waits_for(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    with DefinitionStore(tmp_path) as store:
        sync = DefinitionsSync(store, loop)
        began = sync.begin()
        store.put("queues", {"vhost": "/", "name": "q", "arguments": {}})
        store.commit()
        etcd: asyncio.Future[None] = loop.create_future()
        sync.also_wait(etcd)
        pending = sync.end(began)
        assert pending is not None
        await asyncio.sleep(0.05)
        assert not pending.done()  # the fdatasync may be done: etcd is not
        etcd.set_result(None)
        await asyncio.wait_for(pending, 10)
        # nothing written, but something to wait for: still a future, and its failure
        began = sync.begin()
        refused: asyncio.Future[None] = loop.create_future()
        sync.also_wait(refused)
        failing = sync.end(began)
        assert failing is not None
        refused.set_exception(RuntimeError("etcd said no"))
        with pytest.raises(RuntimeError, match="etcd said no"):
            await asyncio.wait_for(failing, 10)
        assert sync.end(sync.begin()) is None  # and none left over


async def test_a_flush_syncs_and_leaves_what_a_change_waits_for_to_it(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    with DefinitionStore(tmp_path) as store:
        sync = DefinitionsSync(store, loop)
        etcd: asyncio.Future[None] = loop.create_future()
        began = sync.begin()
        store.put("queues", {"vhost": "/", "name": "q", "arguments": {}})
        store.commit()
        sync.also_wait(etcd)  # an HTTP change between its write and its wait
        store.defer_sync = True  # a change applied from another node meanwhile
        store.put("exchanges", {"vhost": "/", "name": "x"})
        store.commit()
        flushed = sync.flush()
        assert flushed is not None
        await asyncio.wait_for(flushed, 10)
        assert not store.owes_sync
        pending = sync.end(began)
        assert pending is not None and not pending.done()  # still waits for etcd
        etcd.set_result(None)
        await asyncio.wait_for(pending, 10)
