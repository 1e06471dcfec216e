"""What publishers, subscriptions and the shared node need from a connection (no circles)."""

from __future__ import annotations

from typing import Any, Protocol


class ConnectionPort(Protocol):
    """A stream-protocol connection as its publishers and subscriptions see it."""

    alive: bool
    writing_paused: bool
    max_chunk_bytes: int
    deliver_version: int  # 2 when the client listed Deliver v2 in ExchangeCommandVersions

    def write(self, data: bytes) -> None: ...
    def write_parts(self, parts: list[bytes | memoryview]) -> None: ...
    def drop_subscription(self, sub: Any, notify: bool) -> None: ...
    def stop_reading(self) -> None: ...
    def take_publish_credits(self, n: int) -> None: ...
    def return_publish_credits(self, n: int) -> None: ...
    def apply_alarms(self, reasons: tuple[str, ...]) -> None: ...
    def close(self, code: int, reason: str) -> None: ...


class GroupMember(Protocol):
    """A subscription's place in a single-active-consumer group (``sac.SacMember``)."""

    def leave(self) -> None: ...


class GroupedSubscription(Protocol):
    """What the single-active-consumer coordinator needs of a subscription."""

    subscription_id: int
    holding: bool
    sac: GroupMember | None

    def activate(self, offset: Any) -> None: ...
