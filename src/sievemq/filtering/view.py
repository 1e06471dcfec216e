"""SQL filters over stored messages: a MessageView on raw property bytes, and the predicate.

HOT PATH: ``sql_predicate`` is called for every candidate record of a consumer with
``x-stream-filter-sql`` (after the Bloom skip) and, at append time, for every message of a
chunk while a registered subscription has not matched yet. The view decodes nothing up front:
a header is read from the raw property bytes only when the expression asks for it (and
``read_header`` decodes nothing unless the name occurs in the bytes); when an expression
names several headers the headers table is decoded once per message instead; basic properties
are decoded only for expressions that use them. Evaluation errors (a malformed header
included) make the message "not delivered" and are counted on the filter, never raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sievemq.amqp.properties import decode_properties, read_header
from sievemq.filtering.sql import SqlFilter

_PAMQP_NAMES = {"type": "message_type"}  # SQL name -> pamqp Basic.Properties attribute

# more names than this: one full headers decode per message beats one scan per name
_TABLE_DECODE_FROM = 3


class StoredMessage(Protocol):
    """What storage hands over: a ``Message`` (append time) or a ``Record`` (read time)."""

    @property
    def filter_values(self) -> tuple[str, ...]: ...

    @property
    def exchange(self) -> str: ...

    @property
    def routing_key(self) -> str: ...

    @property
    def properties(self) -> bytes: ...


class RawMessageView:
    """A MessageView re-pointed at one stored message at a time (one object per filter)."""

    __slots__ = ("_headers", "_properties", "_props", "exchange", "routing_key", "tags")

    def __init__(self) -> None:
        self._props = b""
        self._headers: dict[str, object] | None = None
        self._properties: object | None = None
        self.tags: tuple[str, ...] = ()
        self.routing_key = ""
        self.exchange = ""

    def header(self, name: str) -> object | None:
        return read_header(self._props, name)

    def property(self, name: str) -> object | None:
        props = self._properties
        if props is None:
            props = self._properties = decode_properties(self._props)
        return getattr(props, _PAMQP_NAMES.get(name, name), None)


class _TableView(RawMessageView):
    """For expressions naming many headers: decode the headers table once per message."""

    __slots__ = ()

    def header(self, name: str) -> object | None:
        headers = self._headers
        if headers is None:
            decoded = self.property("headers")
            headers = self._headers = dict(decoded) if isinstance(decoded, dict) else {}
        return headers.get(name)


def sql_predicate(sql: SqlFilter) -> Callable[[StoredMessage], bool]:
    """``predicate(record) -> bool`` evaluating ``sql`` on a stored message (hot path)."""
    view = _TableView() if len(sql.header_names) >= _TABLE_DECODE_FROM else RawMessageView()
    evaluate = sql.evaluate
    resets = bool(sql.property_names) or len(sql.header_names) >= _TABLE_DECODE_FROM

    if resets:

        def predicate(message: StoredMessage) -> bool:
            view._props = message.properties
            view._headers = None
            view._properties = None
            view.tags = message.filter_values
            view.routing_key = message.routing_key
            view.exchange = message.exchange
            return evaluate(view)

        return predicate

    def predicate_plain(message: StoredMessage) -> bool:
        view._props = message.properties
        view.tags = message.filter_values
        view.routing_key = message.routing_key
        view.exchange = message.exchange
        return evaluate(view)

    return predicate_plain
