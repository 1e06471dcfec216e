"""The stream protocol's Create and Delete never wait on the event loop for the definitions
log's fdatasync: the change is applied at once, its response waits for the fdatasync, run in a
worker thread (the same group commit as AMQP declares: test_declare_off_loop.py). A failed
fdatasync closes the connection and the change is never answered as done."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from sievemq.testing import running_gateway
from sievemq.testing.stream_client import in_process_stream_client
from sievemq.testing.wait import eventually

from .slow_sync import SLOW_SYNC_S, SlowDefinitionsSync, _ticker

pytestmark = pytest.mark.timeout(90)


async def test_create_and_delete_wait_for_their_sync_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_gateway(tmp_path / "data") as gw, in_process_stream_client(gw) as client:
        loop = asyncio.get_running_loop()
        slow = SlowDefinitionsSync()
        monkeypatch.setattr(os, "fdatasync", slow)
        lateness: list[float] = []
        ticks = asyncio.ensure_future(_ticker(loop, lateness))
        # each sync is held until released: "not answered yet" is checked while it is
        # certainly still under way, and for SLOW_SYNC_S of loop time
        slow.hold()
        create = asyncio.ensure_future(client.create_stream("s1"))
        await eventually(lambda s=slow: len(s.threads) == 1)  # its sync has started
        assert "s1" in gw.broker.vhost("/").queues  # applied at once
        await asyncio.sleep(SLOW_SYNC_S)
        assert not create.done(), "create answered before its sync"
        slow.release()
        await create
        slow.hold()
        delete = asyncio.ensure_future(client.delete_stream("s1"))
        await eventually(lambda s=slow: len(s.threads) == 2)
        assert "s1" not in gw.broker.vhost("/").queues
        await asyncio.sleep(SLOW_SYNC_S)
        assert not delete.done(), "delete answered before its sync"
        slow.release()
        await delete
        ticks.cancel()
        # a sync on the loop would hold it for HOLD_S (nobody could release it)
        assert max(lateness) < SLOW_SYNC_S, f"loop blocked {max(lateness):.2f}s"
        assert len(slow.threads) == 2 and threading.get_ident() not in slow.threads
        assert slow.timed_out == 0


async def test_a_failed_sync_closes_the_stream_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_gateway(tmp_path / "data") as gw, in_process_stream_client(gw) as client:
        failing = SlowDefinitionsSync(0.05, OSError(errno.EIO, "Input/output error"))
        monkeypatch.setattr(os, "fdatasync", failing)
        # the connection goes, unanswered (a timeout would mean it was kept waiting)
        with pytest.raises(BaseException) as gone:
            await asyncio.wait_for(client.create_stream("lost"), 15)
        assert not isinstance(gone.value, TimeoutError), "no answer and no close"
        monkeypatch.undo()
        assert failing.threads  # the sync was tried (and failed)
