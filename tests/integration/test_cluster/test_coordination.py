"""The etcd client against a real etcd: transactions, leases, watches, several endpoints."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sievemq.cluster.coordination import (
    EtcdClient,
    EtcdUnavailable,
    Lease,
    WatchBatch,
)
from sievemq.cluster.local import free_port
from sievemq.testing.etcd import EtcdProcess, running_etcd

WAIT_S = 30.0  # generous: a loaded machine; every wait returns as soon as its event comes


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    with running_etcd(tmp_path / "etcd") as server:
        yield server


async def test_create_if_absent_and_compare_and_swap(etcd: EtcdProcess) -> None:
    client = EtcdClient([etcd.url])
    try:
        assert await client.create("k", "first") is None
        held = await client.create("k", "second")
        assert held is not None and held.value == b"first"
        assert await client.compare_and_swap("k", held.mod_revision, "third")
        # a writer that read the old revision loses
        assert not await client.compare_and_swap("k", held.mod_revision, "fourth")
        now = await client.get("k")
        assert now is not None and now.value == b"third" and now.version == 2
        assert await client.compare_and_swap("absent", 0, "created")
    finally:
        await client.close()


async def test_a_dead_endpoint_is_skipped(etcd: EtcdProcess) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client = EtcdClient([dead, etcd.url])
    try:
        await client.put("k", "v")
        assert client.endpoint == etcd.url
        found = await client.get("k")
        assert found is not None and found.value == b"v"
    finally:
        await client.close()
    nobody = EtcdClient([dead])
    try:
        with pytest.raises(EtcdUnavailable, match="no etcd endpoint answered"):
            await nobody.get("k")
    finally:
        await nobody.close()


async def test_keys_go_with_their_lease(etcd: EtcdProcess) -> None:
    client = EtcdClient([etcd.url])
    try:
        lease = await client.grant(30)
        await client.put("leased", "v", lease)
        assert await client.keep_alive(lease) == 30
        await client.revoke(lease)
        assert await client.get("leased") is None
        assert await client.keep_alive(lease) == 0  # etcd no longer has it
    finally:
        await client.close()


async def test_a_lease_is_lost_when_etcd_is_gone_for_a_ttl(etcd: EtcdProcess) -> None:
    client = EtcdClient([etcd.url], timeout_s=0.5)
    lost: asyncio.Queue[str] = asyncio.Queue()
    try:
        lease = Lease(client, await client.grant(2), 2, lost.put_nowait)
        lease.start()
        etcd.kill()
        why = await asyncio.wait_for(lost.get(), WAIT_S)
        assert "etcd unreachable for 2 s" in why and lease.lost
        await lease.stop()
    finally:
        await client.close()


async def test_a_lease_outlives_a_loop_that_does_not_answer_for_twice_its_ttl(
    etcd: EtcdProcess,
) -> None:
    """A node whose loop lags (an election storm, a long catch-up) keeps its lease: the
    keeper renews it from a thread and connections of its own, so the node's loss is not
    what starts the next round of elections."""
    client = EtcdClient([etcd.url])
    lost: asyncio.Queue[str] = asyncio.Queue()
    try:
        lease_id = await client.grant(2)
        await client.put("leased", "v", lease_id)
        lease = Lease(client, lease_id, 2, lost.put_nowait)
        lease.start()
        time.sleep(4.5)  # the loop blocked: no task of it runs for over twice the TTL
        await asyncio.sleep(0.1)  # a loss told meanwhile would be delivered now
        assert lost.empty() and not lease.lost
        assert await client.get("leased") is not None  # etcd never let it expire
        assert asyncio.get_running_loop().time() - lease.renewed_at < 2
        await lease.stop()
        assert await client.get("leased") is None  # stopped: revoked, its keys gone
    finally:
        await client.close()


async def test_a_watch_resumes_from_its_revision_and_resets_when_history_is_gone(
    etcd: EtcdProcess,
) -> None:
    client = EtcdClient([etcd.url], timeout_s=0.5)
    batches: asyncio.Queue[WatchBatch] = asyncio.Queue()

    async def watch(start: int) -> None:
        async for batch in client.watch("p/", start):
            batches.put_nowait(batch)

    try:
        _, revision = await client.get_prefix("p/")
        await client.put("p/a", "1")
        task = asyncio.ensure_future(watch(revision + 1))
        first = await asyncio.wait_for(batches.get(), WAIT_S)
        assert [(e.kind, e.kv.key, e.kv.value) for e in first.events] == [("put", "p/a", b"1")]
        # etcd restarted on its data: the watch comes back from the next revision, with
        # nothing missed (written while it was away) and nothing repeated
        etcd.stop()
        etcd.start()
        writer = EtcdClient([etcd.url])
        await writer.put("p/b", "2")
        await writer.delete("p/a")
        seen = []
        while len(seen) < 2:
            batch = await asyncio.wait_for(batches.get(), WAIT_S)
            assert not batch.reset
            seen += [(e.kind, e.kv.key) for e in batch.events]
        assert seen == [("put", "p/b"), ("delete", "p/a")]
        # etcd back without its data: the watch reads the prefix anew
        etcd.stop()
        etcd.start(wipe=True)
        await writer.close()
        writer = EtcdClient([etcd.url])
        await writer.put("p/c", "3")
        while True:
            batch = await asyncio.wait_for(batches.get(), WAIT_S)
            if batch.reset:
                break
        keys = {e.kv.key for e in batch.events}
        if "p/c" not in keys:  # the reset was read before the put: the put follows
            batch = await asyncio.wait_for(batches.get(), WAIT_S)
            keys |= {e.kv.key for e in batch.events}
        assert keys == {"p/c"}
        await writer.close()
        task.cancel()
    finally:
        await client.close()


class _GarbageEndpoint:
    """An HTTP endpoint that answers 200 with a body that is not etcd's JSON."""

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc_info: object) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b"<html>not etcd</html>"
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()
        writer.close()


async def test_an_endpoint_answering_garbage_is_skipped_like_a_dead_one(
    etcd: EtcdProcess,
) -> None:
    async with _GarbageEndpoint() as garbage:
        client = EtcdClient([garbage, etcd.url])
        try:
            await client.put("k", "v")
            assert client.endpoint == etcd.url
        finally:
            await client.close()
        alone = EtcdClient([garbage])
        try:
            with pytest.raises(EtcdUnavailable, match="JSONDecodeError"):
                await alone.get("k")
        finally:
            await alone.close()


async def test_a_lease_keeper_fed_garbage_loses_the_lease_instead_of_dying(
    etcd: EtcdProcess,
) -> None:
    """A keeper that died on an unexpected answer would neither renew nor report the loss:
    the node would stay registered nowhere and never register again."""
    lost: asyncio.Queue[str] = asyncio.Queue()
    async with _GarbageEndpoint() as garbage:
        granting = EtcdClient([etcd.url])
        client = EtcdClient([garbage])
        try:
            lease = Lease(client, await granting.grant(2), 2, lost.put_nowait)
            lease.start()
            why = await asyncio.wait_for(lost.get(), WAIT_S)
            assert "etcd unreachable for 2 s" in why and lease.lost
            await lease.stop()
        finally:
            await client.close()
            await granting.close()
