"""Deduplicated AMQP 0-9-1 publishing into streams (the stream protocol's rule, over AMQP).

A publish whose headers carry ``x-sievemq-publisher`` (a reference, longstr of 1..255 bytes)
and ``x-sievemq-publishing-id`` (an integer >= 0) is deduplicated per stream exactly as a
named stream-protocol publisher is (RabbitMQ's rule): an id at or below the last id stored
for that reference on that stream is confirmed but not stored again. The headers stay in the
stored message, so the last id of each reference is durable with the data
(``storage.publishers`` rebuilds it from the records after a restart or a crash: a torn tail
takes its ids with it). Stream-protocol publishers and AMQP publishers share the table, so one
reference used by both is one sequence.

This is what the Spark sink builds its exactly-once writes on (docs/spark.md).
"""

from __future__ import annotations

from typing import Final

from sievemq.amqp import errors, properties
from sievemq.amqp.errors import PreconditionFailed

PUBLISHER_HEADER: Final = "x-sievemq-publisher"
PUBLISHING_ID_HEADER: Final = "x-sievemq-publishing-id"
MARKER: Final = b"x-sievemq-publish"  # in the bytes of every property list carrying either
MAX_REFERENCE_BYTES: Final = 255
_MAX_ID: Final = (1 << 63) - 1


def publisher_of(props: bytes) -> tuple[str, int] | None:
    """(reference, publishing id) of a published message; None without the headers.

    406 ``invalid x-sievemq-publisher: <why>`` (or ``...-publishing-id``) when malformed or
    when only one of the two is present. ``props`` passed the content-header checks.
    """
    if MARKER not in props:
        return None
    reference = properties.read_header(props, PUBLISHER_HEADER)
    pid = properties.read_header(props, PUBLISHING_ID_HEADER)
    if reference is None and pid is None:
        return None
    if isinstance(reference, bytes):
        try:
            reference = reference.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad(PUBLISHER_HEADER, "not valid UTF-8") from None
    if not isinstance(reference, str):
        why = "missing" if reference is None else f"expected longstr, got {type(reference)}"
        raise _bad(PUBLISHER_HEADER, why)
    size = len(reference.encode("utf-8"))
    if not 0 < size <= MAX_REFERENCE_BYTES:
        raise _bad(PUBLISHER_HEADER, f"{size} bytes, 1..{MAX_REFERENCE_BYTES} are allowed")
    if pid is None:
        raise _bad(PUBLISHING_ID_HEADER, f"missing (required with {PUBLISHER_HEADER})")
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise _bad(PUBLISHING_ID_HEADER, f"expected an integer, got {type(pid).__name__}")
    if not 0 <= pid <= _MAX_ID:
        raise _bad(PUBLISHING_ID_HEADER, f"{pid} is out of range 0..{_MAX_ID}")
    return reference, pid


def stored_tag(props: bytes) -> tuple[str, int] | None:
    """The (reference, id) of a stored AMQP record, None when it has none (never raises):
    what ``storage.publishers`` reads back from the data."""
    if MARKER not in props:
        return None
    try:
        return publisher_of(props)
    except errors.AMQPError:
        return None


def _bad(header: str, why: str) -> PreconditionFailed:
    return PreconditionFailed(f"invalid {header}: {why}")
