"""Who may do what: vhosts, users, permissions and limits."""

from __future__ import annotations

from collections.abc import Iterable

from sievemq.amqp.errors import ConnectionForced, NotFound
from sievemq.gateway.admin.base import LENGTHS, AdminBase
from sievemq.gateway.admin.vhost_metadata import vhost_metadata
from sievemq.gateway.admin.views import (
    USER_LIMITS,
    VHOST_LIMITS,
    BadRequest,
    PermissionView,
    Principal,
    UserView,
    VhostView,
)
from sievemq.gateway.model.users import (
    HASHING_ALGORITHMS,
    SHA256,
    Permission,
    User,
    check_regex,
    hash_password,
    valid_hash,
)


class AccessAdmin(AdminBase):
    """Authentication, vhosts, users, permissions and limits."""

    def authenticate(self, username: str, password: str, peer_host: str) -> Principal | None:
        """The user when the password matches and it may log in from ``peer_host``."""
        user = self.broker.authenticate(username, password)
        if user is None or not user.may_connect_from(peer_host):
            return None
        return _principal(user)

    def principal_of(self, username: str) -> Principal | None:
        """A user by name, without a password: a request another cluster node relays for
        its logged-in user (``admin_api/cluster_relay.py``); None when there is no such user."""
        user = self.broker.users.get(username)
        return None if user is None else _principal(user)

    def list_vhosts(self) -> list[VhostView]:
        conns = self._connections()
        views = []
        for v in self.broker.vhosts.values():
            classic = v.classic.queues.values()
            unacked = sum(q.outstanding for q in classic)
            messages = (
                sum(q.message_count for q in v.queues.values())
                + sum(q.message_count for q in classic)
                + unacked
            )
            views.append(
                VhostView(
                    name=v.name,
                    description=v.description,
                    tags=list(v.tags),
                    default_queue_type=v.classic.default_type,
                    messages=messages,
                    streams=len(v.queues),
                    exchanges=len(v.exchanges),
                    connections=sum(1 for c in conns if c.vhost_name == v.name),
                    messages_ready=messages - unacked,
                    messages_unacknowledged=unacked,
                    length_rates=self._vhost_rates.get(v.name, dict.fromkeys(LENGTHS, 0.0)),
                )
            )
        return views

    def add_vhost(
        self,
        name: str,
        description: object = None,
        tags: object = None,
        default_queue_type: object = None,
    ) -> bool:
        """Create a vhost, or update the metadata given of an existing one (as RabbitMQ's
        PUT); True when it was created. Bad metadata is refused before anything changes."""
        if not name:
            raise BadRequest("vhost name must not be empty")
        metadata = vhost_metadata(description, tags, default_queue_type)
        existed = name in self.broker.vhosts
        if not existed:
            self.broker.add_vhost(name)
        self.broker.set_vhost_metadata(name, *metadata)
        return not existed

    def delete_vhost(self, name: str) -> None:
        """Close the vhost's connections and delete it (inside ``unsynced``: the definitions
        fdatasync is left to ``synced``; the queues' files go in a background thread)."""
        if self.node is not None:
            forced = ConnectionForced(f"vhost '{name}' is deleted")
            for conn in [c for c in self._connections() if c.vhost_name == name]:
                conn.close(forced)
        self.broker.delete_vhost(name)

    def vhost_limits(self, vhost: str | None = None) -> list[tuple[str, dict[str, int]]]:
        """(vhost, its limits) of every vhost with a limit (or of ``vhost``: 404 if none)."""
        if vhost is not None:
            v = self.broker.vhost(vhost)
            return [(v.name, dict(v.limits))] if v.limits else []
        return [(n, dict(v.limits)) for n, v in sorted(self.broker.vhosts.items()) if v.limits]

    def set_vhost_limit(self, vhost: str, name: str, value: int) -> None:
        """max-connections or max-queues; a negative value means no limit (as RabbitMQ)."""
        if name not in VHOST_LIMITS:
            raise BadRequest(f"unknown vhost limit '{name}'")
        self.broker.vhost(vhost).limits[name] = value
        self.broker.save_definitions()

    def clear_vhost_limit(self, vhost: str, name: str) -> None:
        if self.broker.vhost(vhost).limits.pop(name, None) is not None:
            self.broker.save_definitions()

    def user_limits(self, user: str | None = None) -> list[tuple[str, dict[str, int]]]:
        """(user, its limits) of every user with a limit (or of ``user``: 404 if none)."""
        if user is not None:
            u = self.broker.users.get(user)
            if u is None:
                raise NotFound(f"no user '{user}'")
            return [(u.name, dict(u.limits))] if u.limits else []
        return [(u.name, dict(u.limits)) for u in self.broker.users if u.limits]

    def set_user_limit(self, user: str, name: str, value: int) -> None:
        """max-connections or max-channels; a negative value means no limit."""
        if name not in USER_LIMITS:
            raise BadRequest(f"unknown user limit '{name}'")
        u = self.broker.users.get(user)
        if u is None:
            raise NotFound(f"no user '{user}'")
        u.limits[name] = value
        self.broker.save_definitions()

    def clear_user_limit(self, user: str, name: str) -> None:
        u = self.broker.users.get(user)
        if u is None:
            raise NotFound(f"no user '{user}'")
        if u.limits.pop(name, None) is not None:
            self.broker.save_definitions()

    def list_users(self) -> list[UserView]:
        return [_user_view(u) for u in self.broker.users]

    def get_user(self, name: str) -> UserView:
        user = self.broker.users.get(name)
        if user is None:
            raise NotFound(f"no user '{name}'")
        return _user_view(user)

    def put_user(
        self,
        name: str,
        password: str | None = None,
        tags: Iterable[str] = (),
        password_hash: str | None = None,
        hashing_algorithm: str = SHA256,
    ) -> bool:
        """Create or update a user (password, or a hash in RabbitMQ's format, or neither to
        keep the current one); True when created. Permissions are kept."""
        if not name:
            raise BadRequest("user name must not be empty")
        tag_list = check_tags(tags)
        existing = self.broker.users.get(name)
        if password is not None:
            stored, algorithm = hash_password(password), SHA256
        elif password_hash is not None:
            if hashing_algorithm not in HASHING_ALGORITHMS:
                raise BadRequest(f"unsupported hashing_algorithm '{hashing_algorithm}'")
            if not valid_hash(password_hash, hashing_algorithm):
                raise BadRequest("password_hash is not a valid hash")
            stored, algorithm = password_hash, hashing_algorithm
        elif existing is not None:
            stored, algorithm = existing.password_hash, existing.hashing_algorithm
        else:
            raise BadRequest("password or password_hash must be set")
        self.broker.users.put(
            User(
                name,
                stored,
                tag_list,
                dict(existing.permissions) if existing else {},
                existing.loopback_only if existing else False,
                algorithm,
                dict(existing.limits) if existing else {},
            )
        )
        self.broker.save_definitions()
        return existing is None

    def delete_user(self, name: str) -> None:
        if not self.broker.users.delete(name):
            raise NotFound(f"no user '{name}'")
        self.broker.save_definitions()

    def list_permissions(
        self, vhost: str | None = None, user: str | None = None
    ) -> list[PermissionView]:
        return [
            PermissionView(u.name, v, p.configure, p.write, p.read)
            for u in self.broker.users
            if user is None or u.name == user
            for v, p in sorted(u.permissions.items())
            if vhost is None or v == vhost
        ]

    def get_permission(self, vhost: str, user: str) -> PermissionView:
        found = self.list_permissions(vhost, user)
        if not found:
            raise NotFound(f"no permission for '{user}' in vhost '{vhost}'")
        return found[0]

    def set_permission(
        self,
        user: str,
        vhost: str,
        configure: str = ".*",
        write: str = ".*",
        read: str = ".*",
    ) -> bool:
        """Set a user's permission in a vhost; True when it was new. 400 for a bad regex."""
        if user not in self.broker.users:
            raise NotFound(f"no user '{user}'")
        self.broker.vhost(vhost)
        for kind, pattern in (("configure", configure), ("write", write), ("read", read)):
            problem = check_regex(pattern)
            if problem is not None:
                raise BadRequest(f"invalid {kind} regex '{pattern}': {problem}")
        u = self.broker.users.get(user)
        assert u is not None
        new = vhost not in u.permissions
        self.broker.users.set_permission(user, vhost, Permission(configure, write, read))
        self.broker.save_definitions()
        return new

    def clear_permission(self, user: str, vhost: str) -> None:
        if not self.broker.users.clear_permission(user, vhost):
            raise NotFound(f"no permission for '{user}' in vhost '{vhost}'")
        self.broker.save_definitions()


def _principal(user: User) -> Principal:
    return Principal(
        user.name,
        list(user.tags),
        {
            v: PermissionView(user.name, v, p.configure, p.write, p.read)
            for v, p in user.permissions.items()
        },
    )


def check_tags(tags: Iterable[str]) -> tuple[str, ...]:
    out = []
    for tag in tags:
        if not isinstance(tag, str):
            raise BadRequest(f"tags must be strings, got {tag!r}")
        tag = tag.strip()
        if tag:
            out.append(tag)
    return tuple(out)


def _user_view(u: User) -> UserView:
    return UserView(u.name, u.password_hash, u.hashing_algorithm, list(u.tags))
