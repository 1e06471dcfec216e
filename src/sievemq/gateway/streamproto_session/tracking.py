"""A stream's side files, shipped by a cluster leader on each replica's subscription.

Two things a stream keeps beside its segments must be a replica's too, or a replica that
becomes the leader would not have them: the named-consumer offsets (``offsets.log``) and
the registered SQL subscriptions (``subscriptions.json``, whose slots the bits in the chunks'
extra blobs mean: a new leader that numbered them afresh would read old bits against other
expressions). They are not in the chunks (the chunk format and every reader of it stay as
they are: docs/cluster.md says why), so the leader sends them on the replica's subscription
(``sievemq-replica=true``) in SieveMQ's own frames: the whole of each when the replica
subscribes (it may have missed changes while away), then each change as it is written
(TRACKING: offsets; SUBSCRIPTIONS: the registry file). The replica (``cluster/replication``)
applies them to its copy with ``apply``. Cold path: once per named consumer's commit (one
per loop turn at most) or registration, never per message.
"""

from __future__ import annotations

import contextlib

from sievemq.filtering.subscriptions import registry, write_file
from sievemq.gateway.streamproto_session.ports import ConnectionPort
from sievemq.storage import Stream
from sievemq.streamproto import wire


class SideFileShipping:
    """Ships one stream's offsets and registry to one replica subscription until
    ``detach``."""

    def __init__(self, conn: ConnectionPort, stream: Stream) -> None:
        self._conn = conn
        self._stream = stream
        self._offsets = stream.offsets
        self._registry = registry(stream)
        self._offsets.listeners.append(self._offset)
        self._registry.listeners.append(self._subscriptions)
        conn.write(wire.tracking(True, self._offsets.items().items()))
        if not self._registry.disabled:
            with contextlib.suppress(FileNotFoundError):  # (nothing registered, ever)
                conn.write(wire.subscriptions(self._registry.path.read_bytes()))
        # the committed offset, as it moves (a gated stream's listeners hear it in commit,
        # on the event loop; an ungated one's on the appending thread: then nothing is sent)
        stream.add_listener(self._committed)
        conn.write(wire.committed(stream.committed_offset))

    def _committed(self, offset: int) -> None:
        if self._stream.gated and self._conn.alive:
            self._conn.write(wire.committed(offset))

    def _offset(self, name: str, offset: int | None) -> None:
        if self._conn.alive:
            self._conn.write(wire.tracking(False, ((name, offset),)))

    def _subscriptions(self, raw: bytes) -> None:
        if self._conn.alive:
            self._conn.write(wire.subscriptions(raw))

    def detach(self) -> None:
        self._stream.remove_listener(self._committed)
        if self._offset in self._offsets.listeners:
            self._offsets.listeners.remove(self._offset)
        if self._subscriptions in self._registry.listeners:
            self._registry.listeners.remove(self._subscriptions)


def apply(stream: Stream, key: int, body: bytes) -> bool:
    """A replica: apply a TRACKING or SUBSCRIPTIONS frame from the leader to its copy
    (offsets fdatasynced as the copy's ``--fsync`` says; the registry written durably);
    False for any other frame. Raises ``wire.FrameError``, OSError, StorageError."""
    if key == wire.TRACKING:
        snapshot, items = wire.parse_tracking(body)
        offsets = stream.offsets
        if snapshot:
            offsets.replace_all({name: at for name, at in items if at is not None})
        else:
            for name, at in items:
                if at is None:
                    offsets.delete(name)
                else:
                    offsets.set(name, at)
        return True
    if key == wire.COMMITTED:
        stream.commit(wire.parse_committed(body))  # (a copy is gated: ``gate_copy``)
        return True
    if key == wire.SUBSCRIPTIONS:
        write_file(stream.directory, wire.parse_subscriptions(body))
        return True
    return False
