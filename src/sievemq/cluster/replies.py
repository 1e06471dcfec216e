"""Direct reply-to across nodes: a reply published on one node reaches its requester on another.

A requester's reply name (``amq.rabbitmq.reply-to.<channel>.<key>``,
``gateway/runtime/direct_replies.py``) encodes the server instance that made it; every node
advertises its instance in its etcd record (``advertised.replies``, hex). A reply published
to the default exchange with a name no queue and no consumer of this node takes, whose
instance is another live node's, is forwarded to that node over the link: one plain (not
pinned, not confirming) link channel per (node, vhost), a basic.publish with the exchange
and routing key as published, the property bytes and the body as received. There the link
channel routes it as any publish: the name's consumer gets it, or it is dropped (the
requester went away meanwhile). As direct reply-to on one node, a reply is at most once:
the client's confirm goes out when it is handed to the link, and a reply whose node is
gone or unknown is unroutable here (returned when mandatory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pamqp.commands as spec

from sievemq.amqp import codec, hotcodec
from sievemq.cluster.link import LinkChannel, Links
from sievemq.gateway.runtime.direct_replies import channel_of

REPLIES = "replies"  # the key of a node's instance in its record's ``advertised``


class ReplyForwarder:
    """Forwards replies to the node whose instance a reply name encodes (see the module)."""

    def __init__(
        self, me: str, links: Links, live: Callable[[], dict[str, dict[str, Any]]]
    ) -> None:
        self.me = me
        self.links = links
        self._live = live  # the live nodes' published records, by name
        self._channels: dict[tuple[str, str], LinkChannel] = {}

    def node_of(self, name: str) -> str | None:
        """The live node other than this one that made reply name ``name``, else None."""
        where = channel_of(name)
        if where is None:
            return None
        instance = where[0].hex()
        for node, record in self._live().items():
            advertised = record.get("advertised") or {}
            if node != self.me and advertised.get(REPLIES) == instance:
                return node
        return None

    def forward(self, vhost: str, name: str, props: bytes, body: bytes) -> bool:
        """Send the reply to its requester's node; False when no live node made ``name``."""
        node = self.node_of(name)
        if node is None:
            return False
        channel = self._channels.get((node, vhost))
        if channel is None or channel.closed:
            channel = self.links.open_channel(node, vhost, self)
            self._channels[(node, vhost)] = channel
        method = codec.encode_method(channel.number, spec.Basic.Publish(routing_key=name))
        channel.writelines(
            hotcodec.encode_content([method], channel.number, props, body, channel.frame_max)
        )
        return True

    # the link channel's receiver: nothing comes back on it (no confirms, no mandatory)
    def link_frames(self, channel: LinkChannel, got: list[tuple[int, bytes]]) -> None:
        return None

    def link_closed(self, channel: LinkChannel, code: int, text: str) -> None:
        for key, held in list(self._channels.items()):
            if held is channel:
                del self._channels[key]
