"""The compaction of definitions.log (rewrite, fsync, rename, fsync of the directory) runs in
the definitions sync's worker thread, not on the event loop: with the compaction's fsync
made to take 1 s, other connections are served meanwhile, and the change that made it due
is answered only after it."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import aiormq
import pytest

from sievemq.gateway.model import definitions
from sievemq.testing import running_gateway

from .slow_sync import SLOW_SYNC_S, SlowFsync, _ticker

pytestmark = pytest.mark.timeout(120)


def compaction_file(target: str) -> bool:
    """The compaction's temp file, whose fsync is the slow one here."""
    return target.endswith(definitions.LOG_NAME + ".tmp")


async def test_compaction_runs_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(definitions, "_COMPACT_MIN", 64)
    async with running_gateway(tmp_path / "data") as gw:
        loop = asyncio.get_running_loop()
        store = gw.broker.store
        slow = SlowFsync(compaction_file)
        monkeypatch.setattr(os, "fsync", slow)
        churner = await aiormq.connect(gw.url)
        other = await aiormq.connect(gw.url)
        ch = await churner.channel()
        probe = await other.channel()
        lateness: list[float] = []
        ticks = asyncio.ensure_future(_ticker(loop, lateness))
        served: list[float] = []
        started = time.monotonic()
        for i in range(200):
            await ch.exchange_declare(f"x{i % 3}", exchange_type="fanout", durable=True)
            await ch.exchange_delete(f"x{i % 3}")
            if slow.threads and not served:
                # the compaction is under way: the other connection is served at once
                for _ in range(5):
                    t = time.monotonic()
                    await probe.exchange_declare("amq.direct", passive=True)
                    served.append(time.monotonic() - t)
            if store.compactions:
                break
        ticks.cancel()
        assert store.compactions == 1, "no compaction happened"
        assert time.monotonic() - started >= SLOW_SYNC_S
        assert slow.threads and threading.get_ident() not in slow.threads
        assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
        assert served and max(served) < SLOW_SYNC_S / 2, served
        await ch.exchange_declare("kept", exchange_type="topic", durable=True)
        await churner.close()
        await other.close()
    monkeypatch.undo()
    async with running_gateway(tmp_path / "data") as gw:
        assert "kept" in gw.broker.vhost("/").exchanges
        assert not any(f"x{i}" in gw.broker.vhost("/").exchanges for i in range(3))
