"""What publishers store (Message) and what readers get back (Record)."""

from __future__ import annotations

from typing import NamedTuple


class Message(NamedTuple):
    """One published message as the gateway hands it to the store."""

    filter_values: tuple[str, ...]  # () = no filter value
    exchange: str
    routing_key: str
    properties: bytes  # raw content-header property flags + list, as published
    body: bytes


class Record(NamedTuple):
    """One stored message with its offset and its chunk's timestamp."""

    offset: int
    timestamp_ms: int
    filter_values: tuple[str, ...]
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes
