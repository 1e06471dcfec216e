"""A cluster leader's named-consumer offsets, shipped on a replica's subscription.

A stream's offsets live in its ``offsets.log`` beside the segments, not in the chunks (the
chunk format and every reader of it stay as they are: docs/cluster.md says why). So that a
replica holds them too, the leader sends them on the replica's subscription
(``sievemq-replica=true``) as SieveMQ's own TRACKING frame: the whole set when the replica
subscribes (it may have missed changes while away), then each change as it is written. The
replica (``cluster/replication.py``) keeps them in its copy's own ``offsets.log``.
Cold path: once per named consumer's commit (one per loop turn at most), not per message.
"""

from __future__ import annotations

from sievemq.gateway.streamproto_session.ports import ConnectionPort
from sievemq.storage import OffsetStore
from sievemq.streamproto import wire


class OffsetShipping:
    """Ships one stream's offsets to one replica subscription until ``detach``."""

    def __init__(self, conn: ConnectionPort, store: OffsetStore) -> None:
        self._conn = conn
        self._store = store
        store.listeners.append(self._changed)
        conn.write(wire.tracking(True, store.items().items()))

    def _changed(self, name: str, offset: int | None) -> None:
        if self._conn.alive:
            self._conn.write(wire.tracking(False, ((name, offset),)))

    def detach(self) -> None:
        if self._changed in self._store.listeners:
            self._store.listeners.remove(self._changed)
