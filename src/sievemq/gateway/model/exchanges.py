"""Exchanges: their declared properties, their bindings as source, and their matcher."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sievemq.amqp.errors import AccessRefused, PreconditionFailed
from sievemq.gateway.model.replies import amqp_type, display_value, rs, type_class
from sievemq.gateway.model.routing import MATCHERS, Binding, Destination, HeadersFn, Matcher

EXCHANGE_TYPES = tuple(MATCHERS)
DEFAULT_EXCHANGE = ""
# Predeclared in every vhost: name -> type.
STANDARD_EXCHANGES = {
    "amq.direct": "direct",
    "amq.fanout": "fanout",
    "amq.topic": "topic",
    "amq.headers": "headers",
    "amq.match": "headers",
}


@dataclass
class Exchange:
    """One exchange of a vhost. ``bindings`` are those with this exchange as source."""

    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    vhost: str = "/"
    bindings: set[Binding] = field(default_factory=set, repr=False)
    matcher: Matcher = field(init=False, repr=False)
    # the policy that applies, if any, and the alternate exchange it names (the argument wins)
    policy: str | None = field(default=None, repr=False)
    policy_alternate: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.matcher = MATCHERS[self.type]()

    @property
    def builtin(self) -> bool:
        """The default exchange and the predeclared ``amq.*`` ones."""
        return self.name == DEFAULT_EXCHANGE or self.name in STANDARD_EXCHANGES

    def add_binding(self, binding: Binding) -> bool:
        """Add; False when an identical binding already exists (bind is idempotent)."""
        if binding in self.bindings:
            return False
        self.bindings.add(binding)
        self.matcher.add(binding)
        return True

    def remove_binding(self, binding: Binding) -> bool:
        if binding not in self.bindings:
            return False
        self.bindings.discard(binding)
        self.matcher.remove(binding)
        return True

    def match(self, routing_key: str, headers_fn: HeadersFn) -> Iterable[Destination]:
        return self.matcher.match(routing_key, headers_fn)

    def assert_equivalent(
        self,
        type_: str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any] | None,
    ) -> None:
        """406 ``inequivalent arg`` as ``rabbit_exchange:assert_equivalence``."""
        where = rs("exchange", self.name, self.vhost)
        for name, current, received in (
            ("type", self.type, type_),
            ("durable", self.durable, durable),
            ("auto_delete", self.auto_delete, auto_delete),
            ("internal", self.internal, internal),
        ):
            if current != received:
                raise PreconditionFailed(
                    f"inequivalent arg '{name}' for {where}: received "
                    f"'{display_value(received)}' but current is '{display_value(current)}'"
                )
        key = "alternate-exchange"
        old, new = self.arguments.get(key), (arguments or {}).get(key)
        if old is None and new is None:
            return
        if (
            old is not None
            and new is not None
            and type_class(old) == type_class(new)
            and old == new
        ):
            return
        raise PreconditionFailed(
            f"inequivalent arg '{key}' for {where}: received {_val(new)} but current is {_val(old)}"
        )


def _val(value: Any) -> str:
    if value is None:
        return "none"
    return f"the value '{display_value(value)}' of type '{amqp_type(value)}'"


def check_type(type_: str) -> str:
    """406 PRECONDITION_FAILED (a channel error) for an exchange type this broker does not
    know, as RabbitMQ since 3.12.x/3.13.x (rabbitmq-server#11214; 3.10 closed the whole
    connection with 503 COMMAND_INVALID)."""
    if type_ not in EXCHANGE_TYPES:
        raise PreconditionFailed(f"unknown exchange type '{type_}'")
    return type_


def check_not_default(name: str, vhost: str) -> None:
    """403 for any operation naming the default exchange."""
    if name == DEFAULT_EXCHANGE:
        raise AccessRefused("operation not permitted on the default exchange")


def check_name(name: str) -> None:
    """403 for declaring a new exchange in the reserved ``amq.`` namespace."""
    if name.startswith("amq."):
        raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")


def check_deletion(name: str, vhost: str) -> None:
    """403 for deleting a system exchange."""
    if name.startswith("amq."):
        raise AccessRefused(f"deletion of system {rs('exchange', name, vhost)} not allowed")
