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
        elif props[at] == _LONGSTR:  # a value seen before: its parse, without a call
            seen = _longstr_values.get(props[at + 5 : at + 5 + _U32(props, at + 1)[0]])
            values = _values_at(props, at) if seen is None else seen
        else:
            values = _values_at(props, at)
    except errors.AMQPError:
        return None
    memo = properties_memo(limits)
    if len(memo) >= _CACHE_MAX:
        memo.clear()
    memo[props] = values
    return values


# The filter header's key as it appears in a headers table: its shortstr length, then the name.
_FILTER_KEY_BYTES: Final = bytes([len(_FILTER_HEADER_BYTES)]) + _FILTER_HEADER_BYTES
# Where a forwarding node tells the leader the filter values are (the content header's weight,
# always 0 from clients): 0 unknown (check the list), 1 none, n the value's type octet at n - 2.
MARK_UNKNOWN: Final = 0
MARK_NONE: Final = 1
_MARK_MAX: Final = 0xFFFF


def filter_values_at(props: bytes, at: int) -> tuple[str, ...] | None:
    """The filter values of the header value whose type octet is at ``at``, from a property
    list already checked (by the node a link channel forwards for); None: not readable there."""
    try:
        return _values_at(props, at)
    except (errors.AMQPError, IndexError, struct.error):
        return None


def _values_at(props: bytes, at: int) -> tuple[str, ...]:
    """The filter values of the header value at ``at``; a longstr is parsed once per value."""
    if props[at] == _LONGSTR:
        size = _U32(props, at + 1)[0]
        raw = props[at + 5 : at + 5 + size]
        cached = _longstr_values.get(raw)
        if cached is None:
            cached = parse_filter_values(properties.header_at(props, at))
            if len(_longstr_values) >= _CACHE_MAX:
                _longstr_values.clear()
            _longstr_values[raw] = cached
        return cached
    return parse_filter_values(properties.header_at(props, at))


def filter_mark(props: bytes, values: tuple[str, ...]) -> int:
    """The mark a forwarding node sends with a checked property list whose filter values are
    ``values`` (see ``MARK_*``), so the leader takes them without checking the list again.

    The first bytes that read as the filter key are taken only if the value after them gives
    exactly ``values``: the leader then stores what this node found, whatever else is there."""
    if not values:
        return MARK_NONE
    at = props.find(_FILTER_KEY_BYTES)
    if at < 0:
        return MARK_UNKNOWN
    at += len(_FILTER_KEY_BYTES)
    if at + 2 > _MARK_MAX:
        return MARK_UNKNOWN
    try:
        there = _values_at(props, at)
    except (errors.AMQPError, IndexError, struct.error):
        return MARK_UNKNOWN
    return at + 2 if there is values or there == values else MARK_UNKNOWN


def filter_values(props: bytes) -> tuple[str, ...]:
    """Filter values of a message from its raw properties (406 when malformed)."""
    if _FILTER_HEADER_BYTES in props:
        return parse_filter_values(properties.read_header(props, FILTER_HEADER))
    return ()
