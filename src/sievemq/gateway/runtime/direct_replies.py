"""The server's direct reply-to names: which channel a reply published to one goes to.

RabbitMQ's direct reply-to (``amq.rabbitmq.reply-to``) gives a requesting channel a name of
its own, ``amq.rabbitmq.reply-to.<channel>.<key>``; a reply published to that name on the
default exchange goes straight to the channel's reply consumer, with no queue in between.
The ``<channel>`` part encodes this server instance, the connection and the channel number
(so a cluster can tell which node holds it); the ``<key>`` part is 128 random bits, so a
name cannot be guessed from another one. A name is valid while its consumer lives; a reply
to an unknown or retired name is not delivered (and returned when mandatory).
"""

from __future__ import annotations

import base64
import secrets
import struct
from typing import Final, Protocol

PSEUDO_QUEUE: Final = "amq.rabbitmq.reply-to"
NAME_PREFIX: Final = PSEUDO_QUEUE + "."
PSEUDO_BYTES: Final = PSEUDO_QUEUE.encode()  # in a property list: maybe a direct reply-to

_CHANNEL = struct.Struct(">6sQH")  # server instance, connection id, channel number


class ReplyTarget(Protocol):
    """A channel's reply consumer (``session.direct_reply.ReplyConsumer``)."""

    def deliver_reply(self, routing_key: str, properties: bytes, body: bytes) -> bool:
        """Write the reply to the client; False when the channel is going away."""
        ...


class DirectReplies:
    """The live reply names of one server (its ``Node`` holds one)."""

    def __init__(self) -> None:
        self._instance = secrets.token_bytes(6)
        self._targets: dict[str, ReplyTarget] = {}

    @property
    def instance(self) -> bytes:
        """This server's part of its reply names (a cluster node advertises it)."""
        return self._instance

    def register(self, target: ReplyTarget, connection_id: int, channel: int) -> str:
        """A new reply name for the consumer ``target`` of that connection's channel."""
        where = _CHANNEL.pack(self._instance, connection_id, channel)
        encoded = base64.urlsafe_b64encode(where).decode("ascii").rstrip("=")
        name = f"{NAME_PREFIX}{encoded}.{secrets.token_urlsafe(16)}"
        self._targets[name] = target
        return name

    def unregister(self, name: str) -> None:
        self._targets.pop(name, None)

    def target(self, name: str) -> ReplyTarget | None:
        """The live consumer of ``name``, or None."""
        return self._targets.get(name)

    def __len__(self) -> int:
        return len(self._targets)


def channel_of(name: str) -> tuple[bytes, int, int] | None:
    """(server instance, connection id, channel number) that a reply name encodes, or None
    when it is not one of ours."""
    if not name.startswith(NAME_PREFIX):
        return None
    encoded, _, key = name[len(NAME_PREFIX) :].partition(".")
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        instance, connection_id, channel = _CHANNEL.unpack(raw)
    except (ValueError, struct.error):
        return None
    return (instance, connection_id, channel) if key else None
