"""What a SQL filter reads from a message: already-decoded values through a small protocol.

The gateway implements MessageView over a stored record (decoding only the headers the filter
names); DictMessageView is the plain implementation for tests and simple callers.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Protocol


class MessageView(Protocol):
    """Decoded message fields; ``header``/``property`` return None when absent."""

    @builtins.property
    def tags(self) -> tuple[str, ...]: ...

    @builtins.property
    def routing_key(self) -> str: ...

    @builtins.property
    def exchange(self) -> str: ...

    def header(self, name: str) -> object | None: ...

    def property(self, name: str) -> object | None: ...


class DictMessageView:
    """A MessageView over plain dicts."""

    __slots__ = ("_headers", "_properties", "exchange", "routing_key", "tags")

    def __init__(
        self,
        headers: Mapping[str, object] | None = None,
        properties: Mapping[str, object] | None = None,
        tags: tuple[str, ...] | str = (),
        routing_key: str = "",
        exchange: str = "",
    ) -> None:
        self._headers: Mapping[str, object] = headers if headers is not None else {}
        self._properties: Mapping[str, object] = properties if properties is not None else {}
        self.tags: tuple[str, ...] = (tags,) if isinstance(tags, str) else tuple(tags)
        self.routing_key = routing_key
        self.exchange = exchange

    def header(self, name: str) -> object | None:
        return self._headers.get(name)

    def property(self, name: str) -> object | None:
        return self._properties.get(name)
