"""The tails elections offer (``sievemq/tails/VHOST/NAME/NODE``), read from etcd by one
reader for all of a node's elections.

A node that loses the leader of a hundred streams runs as many elections at once. Each used
to read its stream's tails on its own every 0.05 s; a 30-minute chaos run saw such a node's
etcd connection pool time out, and its elections fail, while its loop ran seconds late. One
reader makes the node's reads of the tails one request at a time, however many elections
wait.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from sievemq.cluster.coordination import EtcdClient, KeyValue
from sievemq.cluster.membership import ROOT

TAILS = ROOT + "tails/"


def tail_prefix(vhost: str, name: str) -> str:
    return TAILS + quote(vhost, safe="") + "/" + quote(name, safe="") + "/"


class TailReader:
    """Reads every tail for whoever asks, one request in flight at a time. Who asks gets a
    read that began after it asked (it sees the tail it has just written), shared with
    everyone who asked before that read began."""

    def __init__(self, client: EtcdClient) -> None:
        self.client = client
        self._next: asyncio.Future[list[KeyValue]] | None = None  # not begun yet
        self._one_at_a_time = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def read(self, prefix: str) -> list[KeyValue]:
        """The tails under ``prefix`` (``tail_prefix``), as etcd holds them now; raises
        what the etcd client raises."""
        answer = self._next
        if answer is None:
            answer = self._next = asyncio.get_running_loop().create_future()
            task = asyncio.ensure_future(self._read(answer))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        kvs = await asyncio.shield(answer)  # (one waiter cancelled: the others still read)
        return [kv for kv in kvs if kv.key.startswith(prefix)]

    async def _read(self, answer: asyncio.Future[list[KeyValue]]) -> None:
        try:
            async with self._one_at_a_time:
                if self._next is answer:  # who asks from now on waits for the next read
                    self._next = None
                kvs, _ = await self.client.get_prefix(TAILS)
        except asyncio.CancelledError:
            if self._next is answer:
                self._next = None
            answer.cancel()
            raise
        except Exception as error:  # (every waiter gets it)
            answer.set_exception(error)
            answer.exception()  # (retrieved: nobody may be waiting any more)
        else:
            answer.set_result(kvs)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
