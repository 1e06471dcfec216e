"""Cold methods through pamqp: every method frame that is not sent once per message.

Connection negotiation, channel open/close, declarations, consume, qos, cancel... are decoded
into pamqp command objects (``decode_method``) and encoded from them (``encode_method``).
The per-message frames are coded by hand in ``sievemq.amqp.hotcodec``; the raw property
bytes are read and spliced in ``sievemq.amqp.properties``.
"""

from __future__ import annotations

import struct

from pamqp import base, commands, frame

from sievemq.amqp import errors
from sievemq.amqp.hotcodec import method_id


def decode_method(payload: bytes) -> base.Frame:
    """Any method frame payload -> pamqp command object.

    Unknown (class, method) pairs raise 540 NOT_IMPLEMENTED; undecodable arguments 501.
    """
    class_id, mid = method_id(payload)
    cls: type[base.Frame] | None = commands.INDEX_MAPPING.get(class_id << 16 | mid)
    if cls is None:
        raise errors.NotImplemented_(f"unknown method {class_id}.{mid}", class_id, mid)
    method: base.Frame = cls()
    try:
        method.unmarshal(bytes(payload[4:]))
    except (struct.error, ValueError, TypeError, IndexError):
        raise errors.FrameError(f"cannot decode {cls.name}", class_id, mid) from None
    return method


def encode_method(channel: int, method: base.Frame) -> bytes:
    """A whole method frame for a pamqp command object."""
    return frame.marshal(method, channel)


__all__ = ["decode_method", "encode_method"]
