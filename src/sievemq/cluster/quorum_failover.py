"""Quorum queues in a failover: ``cluster.failover``'s ``Copies`` for records of ``type: quorum``.

A replica keeps its copy of a quorum queue's log exactly where, and as, a local durable
quorum queue of that name keeps its own (``layout.queue_directory``: the contract with the
quorum replication, ``cluster/quorum_replication.py``). So an election compares what the
copies hold, and the winner opens its copy as the queue (``ClassicVhost.open_copy``), whose
recovery rebuilds the state: every message not settled is ready; what the old leader had
handed out comes back redelivered and counted as returned (its consumers went with it), the
counts kept (``storage/queue_log.py``, ``counts``); the delivery limit holds.

**Tails.** A copy's end is the next log id it lacks (ids only grow: the last record's id, or
the delivered mark or purge floor past it, + 1), and its epoch is the epoch that wrote its
last entry, from the ``epochs`` history kept beside the log (``cluster.epochs``; a copy
without one is epoch 1). The winner writes the history with its end as the new epoch's start.

**The old leader returning.** It gives the queue up (its consumers are cancelled, the queue
leaves its definitions, its bindings stay) and drops its copy: the replication copies the
leader's log afresh. A stream's old leader cuts its copy back to the shared history instead;
a queue's log is not a prefix of its successor's (settlements change old entries, the new
leader's counts differ), and a quorum queue is small, so a fresh copy is the safe way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from sievemq.cluster.epochs import History, last_epoch, read_history, write_history
from sievemq.cluster.failover import Following
from sievemq.cluster.placement import Placement
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.definitions import decode_value
from sievemq.storage import layout
from sievemq.storage.queue_log import last_id_of

log = logging.getLogger("sievemq.cluster")

Queue = tuple[str, str]


class QuorumFollower(Following, Protocol):
    """A quorum queue's follower (``quorum_replication.Follower``), as a failover drives it."""

    hold: bool  # an election of the queue runs here: follow nobody

    def retarget(self) -> None:
        """Stop feeding at once (the copy's end stays put)."""
        ...


class QuorumFollowing(Protocol):
    """The quorum replication (``cluster/quorum_replication.py``'s ``QuorumReplication``), as
    a failover needs it: its followers by queue, and stopping one."""

    @property
    def followers(self) -> Mapping[Queue, QuorumFollower]:
        """The followers keeping this node's copies, by queue."""
        ...

    async def release(self, queue: Queue) -> None:
        """Stop following and close the copy (this node leads the queue now)."""
        ...


class QuorumCopies:
    """This node's copies of quorum queues (``failover.Copies``)."""

    def __init__(
        self, placement: Placement, broker: Broker, following: QuorumFollowing | None = None
    ) -> None:
        self.placement = placement
        self.broker = broker
        # the quorum replication, once it runs on this node: without it, a copy is whatever
        # the queue's directory holds
        self.following = following

    def _directory(self, queue: Queue) -> Path:
        return layout.queue_directory(self.broker.data_dir, *queue)

    def holds_copy(self, queue: Queue) -> bool:
        if self.following is not None and queue in self.following.followers:
            return True
        return self._directory(queue).is_dir()

    def follower(self, queue: Queue) -> Following | None:
        return None if self.following is None else self.following.followers.get(queue)

    def followers(self) -> Iterator[tuple[Queue, Following]]:
        if self.following is not None:
            yield from self.following.followers.items()

    def hold(self, queue: Queue, held: bool) -> None:
        """Stop following while the members compare (or follow again). A feed already open
        goes on after the leader's lease lapsed (the leader cut from etcd only still ships
        and, until it fences, confirms): a copy that went on taking entries after its tail
        was written would make the old leader's last confirms rest on a copy the election
        did not count (the chaos suite found such a copy ahead of the new leader's)."""
        follower = None if self.following is None else self.following.followers.get(queue)
        if follower is not None:
            follower.hold = held
            if held:
                follower.retarget()
            else:  # the time held is no silence of the leader's
                follower.listen_anew()

    def tail(self, queue: Queue) -> tuple[int, int]:
        directory = self._directory(queue)
        end = last_id_of(directory) + 1 if directory.is_dir() else 0
        return last_epoch(read_history(directory), end), end

    async def promote(
        self, queue: Queue, record: dict[str, Any], history: History, floor: int | None
    ) -> None:
        """The copy becomes the queue this node leads: what the election knows a majority
        holds (ids below ``floor``) is committed at once, the rest as the replicas
        acknowledge it (an old leader's last entries may be held by no majority)."""
        vhost, name = queue
        if self.following is not None:
            await self.following.release(queue)
        directory = self._directory(queue)
        directory.mkdir(parents=True, exist_ok=True)
        write_history(directory, history)
        local = self.broker.vhosts.get(vhost)
        if local is None:
            log.error("quorum queue '%s': no vhost '%s' on this node to lead it in", name, vhost)
            return
        arguments = dict(decode_value(record.get("arguments") or {}))
        arguments.setdefault("x-queue-type", "quorum")
        if floor is not None:  # (read when the record's ``led`` gates it, just below)
            self.placement.promoted(queue, floor)
        queue_ = local.classic.open_copy(name, arguments)
        log.warning(
            "quorum queue '%s' in vhost '%s' rebuilt from this node's copy: %d ready",
            name,
            vhost,
            queue_.message_count,
        )
        self.placement.led(queue, record)  # gated for commit by majority, as a stream

    def hand_over(self, queue: Queue, record: dict[str, Any]) -> bool:
        """Another node leads the queue this node holds: give it up, drop the copy (the
        replication copies the leader's afresh when this node is still a member)."""
        vhost, name = queue
        local = self.broker.vhosts.get(vhost)
        if local is None or local.classic.detach(name) is None:
            return False
        directory = self._directory(queue)
        tombstone = layout.bury(directory)
        if tombstone is not None:
            layout.remove_later(tombstone)
        return True
