"""Memoised decoding of what repeats from one publish to the next.

HOT PATH. A publisher sends the same Basic.Publish arguments over and over, and often the
same property list; decoding and structurally checking them once per distinct byte string,
not once per message, is the cheapest way through the publish path. A property list that is
new (an application's messages each carry their own message-id, timestamp or headers) costs
ONE pass of ``amqp.properties.check_properties``, which also finds the filter header, and its
longstr filter value is parsed once per distinct value. Every memo is bounded (cleared when
full) and holds only results of pure functions of the bytes, so a hit is the same answer the
full decoder would give. Anything that raises is never cached: the caller falls back to the
regular path, which raises the same error at the same point. Property lists pass the
headers table limits, so their memo is kept per ``TableLimits``: two servers in one process
with different limits never answer from each other's checks.
"""

from __future__ import annotations

import struct
from typing import Final

from sievemq.amqp import errors, hotcodec, properties
from sievemq.amqp.tables import DEFAULT_LIMITS, TableLimits
from sievemq.gateway.model.stream.arguments import parse_filter_values
from sievemq.gateway.runtime.direct_replies import PSEUDO_BYTES as _REPLY_TO_PSEUDO

FILTER_HEADER: Final = "x-stream-filter-value"
_FILTER_HEADER_BYTES: Final = FILTER_HEADER.encode()
_CACHE_MAX: Final = 1024
PUBLISH_ID: Final = hotcodec.BASIC_PUBLISH_PREFIX  # the first bytes of a publish payload

_LONGSTR: Final = 0x53  # the 'S' field type
_U32 = struct.Struct(">I").unpack_from

_publishes: dict[bytes, tuple[str, str, bool]] = {}
_properties: dict[bytes, tuple[str, ...]] = {}  # checked under DEFAULT_LIMITS
_properties_by_limits: dict[TableLimits, dict[bytes, tuple[str, ...]]] = {
    DEFAULT_LIMITS: _properties
}
_longstr_values: dict[bytes, tuple[str, ...]] = {}  # raw longstr filter value -> its values

# the memo lookups alone, for a caller that inlines the hit (the channel's publish path):
# None when the bytes are not known (call ``publish_args`` / ``property_filter_values``).
# The memos are cleared in place, never replaced, so these stay bound to the live dicts.
known_publish = _publishes.get
known_properties = _properties.get


def properties_memo(limits: TableLimits) -> dict[bytes, tuple[str, ...]]:
    """The property-list memo of one set of table limits (its ``get`` is a channel's inline
    lookup); an entry in it passed exactly these limits."""
    memo = _properties_by_limits.get(limits)
    if memo is None:
        memo = _properties_by_limits.setdefault(limits, {})
    return memo


def publish_args(payload: bytes) -> tuple[str, str, bool] | None:
    """(exchange, routing key, mandatory) of a Basic.Publish payload; None: use the slow path."""
    got = _publishes.get(payload)
    if got is not None:
        return got
    try:
        publish = hotcodec.decode_basic_publish(payload)
    except errors.AMQPError:
        return None
    if publish.immediate:
        return None
    got = (publish.exchange, publish.routing_key, publish.mandatory)
    if len(_publishes) >= _CACHE_MAX:
        _publishes.clear()
    _publishes[payload] = got
    return got


def property_filter_values(
    props: bytes, limits: TableLimits = DEFAULT_LIMITS
) -> tuple[str, ...] | None:
    """The filter values of a well-formed property list; None: use the slow path.

    ``limits``: the headers table limits (a server runs with one set; the memo holds only
    property lists that passed them).

    A property list seen before is answered from the memo. A new one is checked and its
    filter header found in ONE pass (``check_properties`` with the key); a longstr value is
    parsed once per distinct value (an application's messages share a few filter values
    while every property list differs).
    """
    got = properties_memo(limits).get(props)
    if got is not None:
        return got
    return new_property_filter_values(props, limits)


def new_property_filter_values(
    props: bytes, limits: TableLimits = DEFAULT_LIMITS
) -> tuple[str, ...] | None:
    """``property_filter_values`` for bytes the memo does not hold (``known_properties``
    said None): checked, read and remembered without looking the memo up again.

    A property list that names the direct reply-to pseudo-queue anywhere is never
    remembered: its publish takes the slow path, which rewrites the reply-to property."""
    if _REPLY_TO_PSEUDO in props:
        return None
    try:
        at = properties.check_properties(props, _FILTER_HEADER_BYTES, limits)
        if at < 0:
            values: tuple[str, ...] = ()
        elif props[at] == _LONGSTR:
            size = _U32(props, at + 1)[0]
            raw = props[at + 5 : at + 5 + size]
            cached = _longstr_values.get(raw)
            if cached is None:
                cached = parse_filter_values(properties.header_at(props, at))
                if len(_longstr_values) >= _CACHE_MAX:
                    _longstr_values.clear()
                _longstr_values[raw] = cached
            values = cached
        else:
            values = parse_filter_values(properties.header_at(props, at))
    except errors.AMQPError:
        return None
    memo = properties_memo(limits)
    if len(memo) >= _CACHE_MAX:
        memo.clear()
    memo[props] = values
    return values


def filter_values(props: bytes) -> tuple[str, ...]:
    """Filter values of a message from its raw properties (406 when malformed)."""
    if _FILTER_HEADER_BYTES in props:
        return parse_filter_values(properties.read_header(props, FILTER_HEADER))
    return ()
