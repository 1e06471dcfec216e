"""A stream declared or deleted over HTTP (``PUT``/``DELETE /api/queues/...`` and
``/api/streams/...``) has its files created, and the definitions change fdatasynced, in a
worker thread, like every admin change (issue 21 item 3); also under ``--fsync never``,
where a new stream's files used to be created on the event loop. The seam: creating a
stream file sleeps 1 s; another connection is served meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import pytest

from sievemq.storage import Durability
from sievemq.storage import stream as stream_module
from sievemq.storage.layout import stream_directory
from sievemq.testing import running_gateway
from sievemq.testing.wait import eventually

from .slow_sync import HOLD_S, SLOW_SYNC_S, SlowDefinitionsSync, _ticker, publish_timed

pytestmark = pytest.mark.timeout(90)


class SlowFileCreation:
    """``storage.stream._ensure_file_header`` (what creates a stream's segment and index
    files) sleeping ``SLOW_SYNC_S`` first for a file that does not exist yet."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self._real: Callable[[Path, bytes], None] = stream_module._ensure_file_header

    def __call__(self, path: Path, magic: bytes) -> None:
        if not Path(path).exists():
            self.threads.append(threading.get_ident())
            time.sleep(SLOW_SYNC_S)
        self._real(path, magic)


@contextlib.asynccontextmanager
async def other_and_admin(
    gw: Any,
) -> AsyncIterator[tuple[aio_pika.abc.AbstractChannel, httpx.AsyncClient]]:
    """Another connection's confirming channel (with stream "busy" declared) and an admin
    HTTP client, both on the in-process gateway ``gw``."""
    other = await aio_pika.connect(gw.url)
    async with (
        other,
        httpx.AsyncClient(base_url=gw.admin_url, auth=("guest", "guest"), timeout=30) as http,
    ):
        och = await other.channel(publisher_confirms=True)
        await och.declare_queue("busy", durable=True, arguments={"x-queue-type": "stream"})
        yield och, http


@pytest.mark.parametrize(
    ("path", "durability"),
    [("/api/streams/%2F/new", Durability.NEVER), ("/api/queues/%2F/new", Durability.BATCH)],
)
async def test_an_http_declare_creates_the_files_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, durability: Durability
) -> None:
    data = tmp_path / "data"
    body: dict[str, object] = {"arguments": {"x-queue-type": "stream"}}
    if path.startswith("/api/queues"):
        body["durable"] = True
    async with running_gateway(data, durability=durability) as gw:
        loop = asyncio.get_running_loop()
        async with other_and_admin(gw) as (och, http):
            # the first request of a route pays for one-time set-up: not measured here
            warm = await http.put(path.replace("/new", "/warm"), json=body)
            assert warm.status_code == 201, warm.text
            slow = SlowFileCreation()
            monkeypatch.setattr(stream_module, "_ensure_file_header", slow)
            lateness: list[float] = []
            ticks = asyncio.ensure_future(_ticker(loop, lateness))
            started = time.monotonic()
            declare = asyncio.ensure_future(http.put(path, json=body))
            await eventually(lambda: bool(slow.threads))  # the files are being created
            served = await publish_timed(och, "busy")
            assert not declare.done(), "answered before its files were made"
            answer = await declare
            took = time.monotonic() - started
            ticks.cancel()
            assert answer.status_code == 201, answer.text
            assert took >= SLOW_SYNC_S
            assert threading.get_ident() not in slow.threads, "files created on the loop"
            assert max(served) < SLOW_SYNC_S / 2, served
            assert max(lateness) < SLOW_SYNC_S / 2, f"loop blocked {max(lateness):.2f}s"
            monkeypatch.undo()
            assert (stream_directory(data, "/", "new")).is_dir()
            await och.default_exchange.publish(aio_pika.Message(b"stored"), "new")
            gone = await http.delete(path)
            assert gone.status_code == 204
            assert "new" not in gw.broker.vhost("/").queues
            missing = await http.delete("/api/streams/%2F/new")
            assert missing.status_code == 404


async def test_http_exchange_and_binding_changes_sync_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each is answered only once its definitions line is fdatasynced (held here), and the
    loop serves another connection meanwhile."""
    async with running_gateway(tmp_path / "data") as gw, other_and_admin(gw) as (och, http):
        binding = "/api/bindings/%2F/e/x1/q/busy"
        changes = [
            ("put", "/api/exchanges/%2F/x1", {"type": "fanout", "durable": True}, 201),
            ("post", binding, {"routing_key": "k"}, 201),
            ("delete", binding + "/k", None, 204),
            ("delete", "/api/exchanges/%2F/x1", None, 204),
        ]
        for method, path, body, status in changes:
            slow = SlowDefinitionsSync()
            slow.hold()
            monkeypatch.setattr(os, "fdatasync", slow)
            kwargs = {} if body is None else {"json": body}
            change = asyncio.ensure_future(http.request(method, path, **kwargs))
            await eventually(lambda held=slow: bool(held.threads))  # its sync is under way
            served = await publish_timed(och, "busy", 2)
            assert not change.done(), f"{method} {path} answered before its sync"
            assert threading.get_ident() not in slow.threads
            slow.release()
            assert (await change).status_code == status, (method, path)
            assert max(served) < HOLD_S, served
            monkeypatch.undo()
