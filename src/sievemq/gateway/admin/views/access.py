"""Views of who may do what: vhosts, users, permissions, limits, policies, parameters and
the definitions document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sievemq.gateway.model.users import Permission

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")
LIMITS_COMPONENT = "vhost-limits"  # vhost limits as RabbitMQ's runtime parameter


@dataclass
class VhostView:
    name: str
    description: str
    tags: list[str]
    default_queue_type: str
    messages: int
    streams: int
    exchanges: int
    connections: int
    messages_ready: int = 0
    messages_unacknowledged: int = 0
    length_rates: dict[str, float] = field(default_factory=dict)


@dataclass
class UserView:
    name: str
    password_hash: str
    hashing_algorithm: str
    tags: list[str]
    limits: dict[str, Any] = field(default_factory=dict)


@dataclass
class PermissionView:
    user: str
    vhost: str
    configure: str
    write: str
    read: str


@dataclass
class Principal:
    """An authenticated user as the admin plane sees it."""

    name: str
    tags: list[str]
    permissions: dict[str, PermissionView]

    @property
    def is_administrator(self) -> bool:
        return "administrator" in self.tags

    @property
    def may_monitor(self) -> bool:
        return "administrator" in self.tags or "monitoring" in self.tags

    @property
    def may_manage(self) -> bool:
        """May use the management UI/API at all (RabbitMQ: any of these tags)."""
        return bool(set(self.tags) & {"administrator", "monitoring", "management", "policymaker"})

    def may_see(self, vhost: str) -> bool:
        return self.may_monitor or vhost in self.permissions

    def allows(self, vhost: str, kind: str, name: str) -> bool:
        perm = self.permissions.get(vhost)
        if perm is None:
            return False
        return Permission(perm.configure, perm.write, perm.read).allows(kind, name)


@dataclass
class PolicyView:
    """A policy or operator policy, as ``/api/policies`` shows it (``apply-to`` spelled
    ``apply_to`` here)."""

    vhost: str
    name: str
    pattern: str
    apply_to: str
    definition: dict[str, Any]
    priority: int | float

    def to_json(self) -> dict[str, Any]:
        """As RabbitMQ shows it (``/api/policies``, definitions files)."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": self.definition,
            "priority": self.priority,
        }


@dataclass
class ParameterView:
    """A runtime parameter (component, vhost, name, value) or a global one (no component)."""

    component: str
    vhost: str
    name: str
    value: Any


@dataclass
class Definitions:
    """RabbitMQ's definitions document (the subset SieveMQ holds)."""

    rabbit_version: str
    rabbitmq_version: str
    product_name: str
    product_version: str
    users: list[dict[str, Any]]
    vhosts: list[dict[str, Any]]
    permissions: list[dict[str, Any]]
    topic_permissions: list[dict[str, Any]]
    parameters: list[dict[str, Any]]
    global_parameters: list[dict[str, Any]]
    policies: list[dict[str, Any]]
    queues: list[dict[str, Any]]
    exchanges: list[dict[str, Any]]
    bindings: list[dict[str, Any]]
