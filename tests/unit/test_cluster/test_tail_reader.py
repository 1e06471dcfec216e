"""One reader of the tails for all of a node's elections: a hundred elections waiting cost
etcd one request at a time, and each still sees the tails as they were after it asked."""

from __future__ import annotations

import asyncio

import pytest

from sievemq.cluster.coordination import EtcdUnavailable, KeyValue
from sievemq.cluster.tails import TAILS, TailReader, tail_prefix


def _kv(key: str) -> KeyValue:
    return KeyValue(key, b"{}", 1, 1, 1, 0)


class Etcd:
    """Holds the tails; each range request waits until the test lets it answer."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.requests = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.gate = asyncio.Event()
        self.fail: Exception | None = None

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        assert prefix == TAILS
        self.requests += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        snapshot = list(self.keys)  # etcd reads when the request arrives
        try:
            await self.gate.wait()
            if self.fail is not None:
                raise self.fail
            return [_kv(k) for k in snapshot], 1
        finally:
            self.in_flight -= 1


def _reader(etcd: Etcd) -> TailReader:
    return TailReader(etcd)  # type: ignore[arg-type]


async def test_a_hundred_elections_asking_at_once_cost_one_request() -> None:
    etcd = Etcd()
    etcd.keys = [tail_prefix("/", f"s{i}") + "b" for i in range(100)]
    etcd.gate.set()
    reader = _reader(etcd)
    answers = await asyncio.gather(*(reader.read(tail_prefix("/", f"s{i}")) for i in range(100)))
    assert etcd.requests == 1
    assert [[kv.key for kv in kvs] for kvs in answers] == [[k] for k in etcd.keys]


async def test_who_asks_during_a_read_gets_the_next_one_and_sees_what_was_written() -> None:
    etcd = Etcd()
    reader = _reader(etcd)
    prefix = tail_prefix("/", "cs-1")
    first = asyncio.ensure_future(reader.read(prefix))
    await asyncio.sleep(0.01)  # the first read is in flight: no tail yet
    etcd.keys.append(prefix + "c")  # an election writes its tail, then asks
    later = [asyncio.ensure_future(reader.read(prefix)) for _ in range(10)]
    await asyncio.sleep(0.01)
    assert etcd.most_in_flight == 1  # the next read waits for the first
    etcd.gate.set()
    assert await first == []
    assert [[kv.key for kv in kvs] for kvs in await asyncio.gather(*later)] == [[prefix + "c"]] * 10
    assert etcd.requests == 2 and etcd.most_in_flight == 1


async def test_an_unavailable_etcd_reaches_every_waiter_and_the_next_read_tries_again() -> None:
    etcd = Etcd()
    etcd.fail = EtcdUnavailable("no etcd endpoint answered")
    etcd.gate.set()
    reader = _reader(etcd)
    waiting = [reader.read(tail_prefix("/", "q")) for _ in range(3)]
    for outcome in await asyncio.gather(*waiting, return_exceptions=True):
        assert isinstance(outcome, EtcdUnavailable)
    etcd.fail = None
    etcd.keys = [tail_prefix("/", "q") + "a"]
    assert [kv.key for kv in await reader.read(tail_prefix("/", "q"))] == etcd.keys


async def test_a_cancelled_waiter_does_not_cancel_the_read_of_the_others() -> None:
    etcd = Etcd()
    reader = _reader(etcd)
    gone = asyncio.ensure_future(reader.read(TAILS))
    staying = asyncio.ensure_future(reader.read(TAILS))
    await asyncio.sleep(0.01)
    gone.cancel()
    etcd.gate.set()
    assert await staying == []
    with pytest.raises(asyncio.CancelledError):
        await gone


async def test_close_ends_the_waits() -> None:
    etcd = Etcd()
    reader = _reader(etcd)
    waiting = asyncio.ensure_future(reader.read(TAILS))
    await asyncio.sleep(0.01)
    reader.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting
