"""Server side of connection negotiation: Start, Start-Ok credentials, Tune, Tune-Ok.

Cold path (once per connection), built on pamqp commands. What is advertised and the tuning
limits are in docs/compatibility.md, "Connections and channels"; the rules for the client's
Tune-Ok follow RabbitMQ (a value above ours is 530 NOT_ALLOWED, 0 means "no limit", i.e. ours).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from pamqp import commands, common

from sievemq.amqp import errors, tables
from sievemq.amqp.frames import FRAME_MIN_SIZE

CHANNEL_MAX: Final = 2047
FRAME_MAX: Final = 131072
HEARTBEAT: Final = 60
MECHANISMS: Final = ("PLAIN", "AMQPLAIN")

# RabbitMQ 3.13's server capabilities, in its order, each true because SieveMQ honours it
# (tests/unit/test_amqp/test_negotiation.py names the test that shows each one works)
CAPABILITIES: Final[dict[str, bool]] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,  # x-priority on classic and quorum queue consumers
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,  # amq.rabbitmq.reply-to (gateway/session/direct_reply.py)
}


def server_properties(product: str, version: str) -> common.FieldTable:
    """The server-properties table of Connection.Start."""
    return {
        "product": product,
        "version": version,
        "platform": "Python",
        "information": "AMQP 0-9-1 gateway for stream queues with broker-side filtering",
        "capabilities": dict(CAPABILITIES),
    }


def start(product: str = "SieveMQ", version: str = "0.1.0") -> commands.Connection.Start:
    """Connection.Start offering PLAIN and AMQPLAIN."""
    return commands.Connection.Start(
        version_major=0,
        version_minor=9,
        server_properties=server_properties(product, version),
        mechanisms=" ".join(MECHANISMS),
        locales="en_US",
    )


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client logged in with (the password stays in memory only)."""

    mechanism: str
    username: str
    password: str


def credentials(start_ok: commands.Connection.StartOk) -> Credentials:
    """Parse the SASL response of Start-Ok (PLAIN or AMQPLAIN).

    An unknown mechanism or an unreadable response is 403 ACCESS_REFUSED at connection level,
    as RabbitMQ does (authentication_failure_close).
    """
    mechanism = start_ok.mechanism or ""
    response = start_ok.response
    raw = response.encode("utf-8") if isinstance(response, str) else bytes(response or b"")
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) != 3:
            raise errors.ConnectionAccessRefused("malformed PLAIN response", 10, 11)
        username, password = parts[1], parts[2]
    elif mechanism == "AMQPLAIN":
        username, password = _amqplain(raw)
    else:
        raise errors.ConnectionAccessRefused(
            f"unsupported authentication mechanism '{mechanism}'", 10, 11
        )
    try:
        return Credentials(mechanism, username.decode("utf-8"), password.decode("utf-8"))
    except UnicodeDecodeError:
        raise errors.ConnectionAccessRefused("credentials are not UTF-8", 10, 11) from None


def _amqplain(raw: bytes) -> tuple[bytes, bytes]:
    """AMQPLAIN: a field table without its length prefix, with LOGIN and PASSWORD."""
    try:
        table = tables.decode_table(struct.pack(">I", len(raw)) + raw, what="AMQPLAIN response")[0]
    except errors.AMQPError as error:
        raise errors.ConnectionAccessRefused(
            f"malformed AMQPLAIN response: {error.explanation}", 10, 11
        ) from None
    login, password = table.get("LOGIN"), table.get("PASSWORD")
    values: list[bytes] = []
    for value in (login, password):
        if isinstance(value, str):
            values.append(value.encode("utf-8"))
        elif isinstance(value, bytes):
            values.append(value)
        else:
            raise errors.ConnectionAccessRefused("AMQPLAIN needs LOGIN and PASSWORD", 10, 11)
    return values[0], values[1]


@dataclass(frozen=True, slots=True)
class Tuning:
    """Negotiated connection limits."""

    channel_max: int
    frame_max: int
    heartbeat: int


def tune(
    channel_max: int = CHANNEL_MAX, frame_max: int = FRAME_MAX, heartbeat: int = HEARTBEAT
) -> commands.Connection.Tune:
    """Connection.Tune with the server's limits."""
    return commands.Connection.Tune(
        channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
    )


def negotiate(offer: commands.Connection.Tune, tune_ok: commands.Connection.TuneOk) -> Tuning:
    """Check the client's Tune-Ok against our Tune and return the limits both sides use.

    0 from the client means "no limit of my own", so ours applies. A channel_max or
    frame_max above ours, or a frame_max below 4096, is 530 NOT_ALLOWED. The heartbeat is the
    client's choice (0 turns heartbeats off), as in RabbitMQ.
    """
    channel_max = tune_ok.channel_max or offer.channel_max
    frame_max = tune_ok.frame_max or offer.frame_max
    if offer.channel_max and channel_max > offer.channel_max:
        raise errors.NotAllowed(f"channel_max={channel_max} > {offer.channel_max} max", 10, 31)
    if offer.frame_max and frame_max > offer.frame_max:
        raise errors.NotAllowed(f"frame_max={frame_max} > {offer.frame_max} max size", 10, 31)
    if frame_max < FRAME_MIN_SIZE:
        raise errors.NotAllowed(f"frame_max={frame_max} < {FRAME_MIN_SIZE} min size", 10, 31)
    return Tuning(channel_max=channel_max, frame_max=frame_max, heartbeat=tune_ok.heartbeat)
