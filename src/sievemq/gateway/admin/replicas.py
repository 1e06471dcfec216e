"""A stream's or a quorum queue's member on this node, as ``rabbitmq-streams stream_status``
and ``rabbitmq-queues quorum_status`` show each member."""

from __future__ import annotations

from sievemq.gateway.admin.base import AdminBase
from sievemq.gateway.admin.views import QuorumMemberView, StreamMemberView


class ReplicasAdmin(AdminBase):
    """This node's part of a stream's status; the cluster-wide list asks every node."""

    def stream_member(self, vhost: str, name: str) -> StreamMemberView | None:
        """The stream as this node holds it: its writer (a stream of this node) or a
        replica's copy (``QueueDirectory.replica_queue``); None when it holds neither."""
        held = self._held(vhost, name)
        if held is None:
            return None
        queue, role = held
        epoch = None if self.cluster is None else self.cluster.queue_epoch(vhost, name)
        stats = queue.stats()
        last = -1 if stats.last_offset is None else stats.last_offset
        return StreamMemberView(
            node=self.node_name,
            role=role,
            epoch=1 if epoch is None else epoch,
            offset=last,
            committed_offset=last,  # every chunk held is readable (commit by majority: to come)
            first_offset=stats.first_offset,
            readers=queue.consumer_count + self._stream_subscribers().get(id(queue), 0),
            segments=stats.segments,
            messages=stats.messages,
            bytes=stats.bytes,
        )

    def quorum_member(self, vhost: str, name: str) -> QuorumMemberView | None:
        """The quorum queue as this node holds it: the leader's queue (its log, and where
        its committed ids end) or a follower's copy; None when it holds neither."""
        v = self.broker.vhosts.get(vhost)
        queue = None if v is None else v.classic.queues.get(name)
        epoch = None if self.cluster is None else self.cluster.queue_epoch(vhost, name)
        if queue is not None and queue.kind == "quorum" and queue.log is not None:
            qlog = queue.log
            end = queue.commit_end
            return QuorumMemberView(
                node=self.node_name,
                role="leader",
                epoch=1 if epoch is None else epoch,
                log_end=qlog.last_id,
                # ungated (no replica): every record commits as written
                commit_end=qlog.last_id if end is None else min(end - 1, qlog.last_id),
                messages=qlog.live_count,
            )
        copy = None if self.cluster is None else self.cluster.quorum_copy(vhost, name)
        if copy is None:
            return None
        return QuorumMemberView(
            node=self.node_name,
            role="follower",
            epoch=1 if epoch is None else epoch,
            log_end=copy.log_end,
            commit_end=None,
            messages=copy.messages,
        )
