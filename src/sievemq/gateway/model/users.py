"""Users, passwords and vhost permissions.

Passwords are kept as salted SHA-256 (as RabbitMQ's default hashing), compared in constant
time. Permissions are simple: a user may use the vhosts listed for them. ``guest`` may only
log in from a loopback address, as in RabbitMQ.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

TAGS = ("administrator", "monitoring", "management", "policymaker")


def hash_password(password: str, salt: bytes | None = None) -> str:
    """``<salt hex>$<sha256(salt + password) hex>``."""
    salt = os.urandom(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode("utf-8")).hexdigest()
    return f"{salt.hex()}${digest}"


def check_password(stored: str, password: str) -> bool:
    salt_hex, _, _ = stored.partition("$")
    try:
        salt = bytes.fromhex(salt_hex)
    except ValueError:
        return False
    return hmac.compare_digest(stored, hash_password(password, salt))


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback addresses."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host == "localhost"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


@dataclass
class User:
    name: str
    password_hash: str
    tags: tuple[str, ...] = ()
    vhosts: set[str] = field(default_factory=set)
    loopback_only: bool = False

    @property
    def is_administrator(self) -> bool:
        return "administrator" in self.tags

    def may_connect_from(self, host: str) -> bool:
        return not self.loopback_only or is_loopback(host)

    def may_use(self, vhost: str) -> bool:
        return vhost in self.vhosts

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "password_hash": self.password_hash,
            "tags": list(self.tags),
            "vhosts": sorted(self.vhosts),
            "loopback_only": self.loopback_only,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> User:
        return cls(
            name=str(data["name"]),
            password_hash=str(data["password_hash"]),
            tags=tuple(data.get("tags", ())),
            vhosts=set(data.get("vhosts", ())),
            loopback_only=bool(data.get("loopback_only", False)),
        )


class Users:
    """The user database of a broker."""

    def __init__(self) -> None:
        self._users: dict[str, User] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._users

    def __iter__(self) -> Iterator[User]:
        return iter(sorted(self._users.values(), key=lambda u: u.name))

    def get(self, name: str) -> User | None:
        return self._users.get(name)

    def add(
        self,
        name: str,
        password: str,
        tags: tuple[str, ...] = (),
        vhosts: set[str] | None = None,
        loopback_only: bool = False,
    ) -> User:
        """Create or replace a user."""
        user = User(name, hash_password(password), tuple(tags), set(vhosts or ()), loopback_only)
        self._users[name] = user
        return user

    def put(self, user: User) -> None:
        self._users[user.name] = user

    def delete(self, name: str) -> bool:
        return self._users.pop(name, None) is not None

    def authenticate(self, username: str, password: str) -> User | None:
        """The user when the password matches, else None (unknown users are None too)."""
        user = self._users.get(username)
        if user is None:
            hash_password(password)  # similar time whether or not the user exists
            return None
        return user if check_password(user.password_hash, password) else None

    def set_permission(self, username: str, vhost: str) -> None:
        self._users[username].vhosts.add(vhost)

    def clear_permission(self, username: str, vhost: str) -> None:
        user = self._users.get(username)
        if user is not None:
            user.vhosts.discard(vhost)

    def forget_vhost(self, vhost: str) -> None:
        for user in self._users.values():
            user.vhosts.discard(vhost)
