"""A stream's named consumers: their committed offsets and SQL subscriptions."""

from __future__ import annotations

from sievemq.amqp.errors import NotFound, PreconditionFailed
from sievemq.filtering.subscriptions import registry
from sievemq.gateway.admin.base import AdminBase
from sievemq.gateway.admin.views import ConsumerOffsetView, SubscriptionView
from sievemq.gateway.model.stream.arguments import MAX_CONSUMER_NAME_BYTES


class OffsetsAdmin(AdminBase):
    """Named consumers' offsets and subscriptions."""

    def list_consumer_offsets(self, vhost: str, stream: str) -> dict[str, int]:
        """Committed offsets of the stream's named consumers (last offset each is done with)."""
        return self._queue(vhost, stream).consumer_offsets()

    def consumer_offsets(self, vhost: str, stream: str) -> list[ConsumerOffsetView]:
        queue = self._queue(vhost, stream)
        end = queue.end_offset  # surveyed, not opened, for an idle stream (storage.survey)
        return [
            ConsumerOffsetView(stream, vhost, name, offset, max(0, end - offset - 1))
            for name, offset in sorted(queue.consumer_offsets().items())
        ]

    def get_consumer_offset(self, vhost: str, stream: str, consumer: str) -> int:
        offset = self._queue(vhost, stream).stream.offsets.get(consumer)
        if offset is None:
            raise NotFound(f"no offset for consumer '{consumer}' on stream '{stream}'")
        return offset

    def set_consumer_offset(self, vhost: str, stream: str, consumer: str, offset: int) -> None:
        """Store a committed offset: the consumer resumes at ``offset + 1`` on its next
        consume (a live consumer of that name overwrites it with its own commits)."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise PreconditionFailed(f"offset must be an integer >= 0, got {offset!r}")
        if not consumer or len(consumer.encode("utf-8")) > MAX_CONSUMER_NAME_BYTES:
            raise PreconditionFailed("consumer name must be 1 to 255 bytes")
        self._queue(vhost, stream).stream.offsets.set(consumer, offset)

    def delete_consumer_offset(self, vhost: str, stream: str, consumer: str) -> None:
        """Forget the consumer: its offset and its registered SQL subscription."""
        queue = self._queue(vhost, stream)
        if queue.stream.offsets.get(consumer) is None:
            raise NotFound(f"no offset for consumer '{consumer}' on stream '{stream}'")
        queue.stream.offsets.delete(consumer)
        registry(queue.stream).forget(consumer)

    def list_subscriptions(self, vhost: str, stream: str) -> list[SubscriptionView]:
        """The stream's registered SQL subscriptions, with the slot their chunk bit uses."""
        queue = self._queue(vhost, stream)
        return [
            SubscriptionView(i, s.name, s.expression, s.active)
            for i, s in enumerate(registry(queue.stream).slots)
        ]
