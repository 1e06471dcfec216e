"""Users, passwords, tags and RabbitMQ's per-vhost permissions.

Passwords are stored in RabbitMQ's ``rabbit_password_hashing_sha256`` format,
base64(salt ‖ sha256(salt ‖ utf-8 password)) with a 4-byte random salt, so a definitions file
moves between RabbitMQ and SieveMQ both ways (``rabbit_password_hashing_sha512`` hashes from
such a file are accepted too). Hashes written by SieveMQ before this format (``<salt hex>$<hex>``)
still verify. A permission is RabbitMQ's triple of ``configure``/``write``/``read`` regular
expressions per (user, vhost); a user may open a vhost it has a permission for. ``guest`` may
only log in from a loopback address, as in RabbitMQ.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

SHA256 = "rabbit_password_hashing_sha256"
SHA512 = "rabbit_password_hashing_sha512"
_DIGESTS = {SHA256: hashlib.sha256, SHA512: hashlib.sha512}
HASHING_ALGORITHMS = tuple(_DIGESTS)


def hash_password(password: str, salt: bytes | None = None, algorithm: str = SHA256) -> str:
    """RabbitMQ's stored form: base64(salt ‖ H(salt ‖ utf-8 password))."""
    salt = os.urandom(4) if salt is None else salt
    digest = _DIGESTS[algorithm](salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def check_password(stored: str, password: str, algorithm: str = SHA256) -> bool:
    """Constant-time check of ``password`` against a stored hash (either format)."""
    if "$" in stored:  # SieveMQ's first format: <salt hex>$<sha256 hex>
        salt_hex, _, digest_hex = stored.partition("$")
        try:
            salt = bytes.fromhex(salt_hex)
        except ValueError:
            return False
        fresh = hashlib.sha256(salt + password.encode("utf-8")).hexdigest()
        return hmac.compare_digest(digest_hex, fresh)
    hasher = _DIGESTS.get(algorithm)
    if hasher is None:
        return False
    try:
        raw = base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(raw) < 5:
        return False
    return hmac.compare_digest(stored, hash_password(password, raw[:4], algorithm))


def valid_hash(stored: str, algorithm: str) -> bool:
    """True when ``stored`` is a well-formed hash of ``algorithm`` (definitions import)."""
    hasher = _DIGESTS.get(algorithm)
    if hasher is None:
        return False
    if stored == "":
        return True  # RabbitMQ: a user without a password (cannot log in with one)
    try:
        raw = base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(raw) == 4 + hasher().digest_size


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback addresses."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host == "localhost"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def check_regex(pattern: str) -> str | None:
    """None when ``pattern`` compiles, else the reason (for a 400 naming it)."""
    try:
        re.compile(pattern)
    except re.error as error:
        return str(error)
    return None


@dataclass(frozen=True)
class Permission:
    """RabbitMQ's permission of one user in one vhost: three regular expressions."""

    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    def allows(self, kind: str, name: str) -> bool:
        """Whether the ``configure``/``write``/``read`` regex matches the resource name, as
        RabbitMQ checks it: an unanchored search (``re:run``), and '' matches nothing."""
        pattern: str = getattr(self, kind)
        if pattern == "":
            return False
        return re.search(pattern, name) is not None

    def to_json(self) -> dict[str, str]:
        return {"configure": self.configure, "write": self.write, "read": self.read}


@dataclass
class User:
    name: str
    password_hash: str
    tags: tuple[str, ...] = ()
    permissions: dict[str, Permission] = field(default_factory=dict)
    loopback_only: bool = False
    hashing_algorithm: str = SHA256
    # RabbitMQ's user limits: max-connections, max-channels (absent or < 0: none)
    limits: dict[str, int] = field(default_factory=dict)

    @property
    def is_administrator(self) -> bool:
        return "administrator" in self.tags

    @property
    def vhosts(self) -> set[str]:
        """The vhosts this user has a permission in."""
        return set(self.permissions)

    def may_connect_from(self, host: str) -> bool:
        return not self.loopback_only or is_loopback(host)

    def may_use(self, vhost: str) -> bool:
        return vhost in self.permissions

    def check(self, password: str) -> bool:
        return check_password(self.password_hash, password, self.hashing_algorithm)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "password_hash": self.password_hash,
            "hashing_algorithm": self.hashing_algorithm,
            "tags": list(self.tags),
            "permissions": {v: p.to_json() for v, p in sorted(self.permissions.items())},
            "loopback_only": self.loopback_only,
            "limits": dict(sorted(self.limits.items())),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> User:
        permissions = {
            str(v): Permission(**{k: str(p[k]) for k in ("configure", "write", "read")})
            for v, p in dict(data.get("permissions") or {}).items()
        }
        for vhost in data.get("vhosts", ()):  # the first format: full access to listed vhosts
            permissions.setdefault(str(vhost), Permission())
        return cls(
            name=str(data["name"]),
            password_hash=str(data["password_hash"]),
            tags=tuple(data.get("tags", ())),
            permissions=permissions,
            loopback_only=bool(data.get("loopback_only", False)),
            hashing_algorithm=str(data.get("hashing_algorithm", SHA256)),
            limits={str(k): int(v) for k, v in dict(data.get("limits") or {}).items()},
        )


CLUSTER_USER_PREFIX = "cluster-link:"  # the trusted login of another cluster node


def cluster_user(username: str, password: str, secret: str | None) -> User | None:
    """Another cluster node's trusted login on the Stream-protocol port (a stream replica,
    ``cluster/replication.py``): user ``cluster-link:NODE``, the cluster secret as password
    (as the inter-node link logs in, ``gateway/session/peer.py``). The user is no user of
    this node: it may open any vhost with every permission; None when it does not match."""
    if secret is None or not username.startswith(CLUSTER_USER_PREFIX):
        return None
    if not hmac.compare_digest(password.encode("utf-8"), secret.encode("utf-8")):
        return None
    return User(username, "", ("administrator",))


class Users:
    """The user database of a broker."""

    def __init__(self) -> None:
        self._users: dict[str, User] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._users

    def __iter__(self) -> Iterator[User]:
        return iter(sorted(self._users.values(), key=lambda u: u.name))

    def __len__(self) -> int:
        return len(self._users)

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
        """Create or replace a user (full permissions in ``vhosts``)."""
        permissions = {v: Permission() for v in vhosts or ()}
        user = User(name, hash_password(password), tuple(tags), permissions, loopback_only)
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
        return user if user.check(password) else None

    def set_permission(
        self, username: str, vhost: str, permission: Permission | None = None
    ) -> None:
        self._users[username].permissions[vhost] = permission or Permission()

    def clear_permission(self, username: str, vhost: str) -> bool:
        user = self._users.get(username)
        return user is not None and user.permissions.pop(vhost, None) is not None

    def forget_vhost(self, vhost: str) -> None:
        for user in self._users.values():
            user.permissions.pop(vhost, None)
