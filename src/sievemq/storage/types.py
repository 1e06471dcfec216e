"""What publishers store (Message) and what readers get back (Record)."""

from __future__ import annotations

from typing import NamedTuple

# Record kinds (docs/storage-format.md "Record kinds"):
KIND_AMQP091 = 0  # properties = AMQP 0-9-1 content-header property bytes, body = the body
# a stream-protocol publish: body = the client's payload byte for byte (AMQP 1.0 by
# convention, never parsed on write); properties = the publisher tag (u64 publishing id +
# publisher reference, UTF-8) or empty; exchange and routing key are empty
KIND_STREAM = 1


class Message(NamedTuple):
    """One published message as the gateway hands it to the store."""

    filter_values: tuple[str, ...]  # () = no filter value
    exchange: str
    routing_key: str
    properties: bytes  # raw content-header property flags + list, as published
    body: bytes
    kind: int = KIND_AMQP091


class Record(NamedTuple):
    """One stored message with its offset and its chunk's timestamp."""

    offset: int
    timestamp_ms: int
    filter_values: tuple[str, ...]
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes
    kind: int = KIND_AMQP091
