"""A stream's member on this node, as ``rabbitmq-streams stream_status`` shows each member."""

from __future__ import annotations

from sievemq.gateway.admin.base import AdminBase
from sievemq.gateway.admin.views import StreamMemberView


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
