"""RabbitMQ's resource permissions on AMQP: configure / write / read regexes per user+vhost.

What needs which (as ``rabbit_channel``): exchange.declare/delete and queue.declare/delete
need *configure* on the resource; basic.publish *write* on the exchange; basic.consume *read*
on the queue; queue.bind/unbind *write* on the queue and *read* on the exchange; exchange.bind
*write* on the destination and *read* on the source. The default exchange is checked as
``amq.default``. A refusal is a channel error 403 ``ACCESS_REFUSED - access to queue 's' in
vhost '/' refused for user 'bob'``. Passive declares check nothing.
"""

from __future__ import annotations

from sievemq.amqp.errors import AccessRefused
from sievemq.gateway.model.users import User


def check(user: User | None, vhost: str, kind: str, resource: str, name: str) -> None:
    """Raise 403 unless ``user`` may ``kind`` (configure/write/read) the named resource
    (``None``, a user not authenticated or since deleted, may do nothing)."""
    if resource == "exchange" and name == "":
        name = "amq.default"  # the default exchange's name for permissions, as RabbitMQ's
    perm = user.permissions.get(vhost) if user is not None else None
    if perm is None or not perm.allows(kind, name):
        username = user.name if user is not None else ""
        raise AccessRefused(
            f"access to {resource} '{name}' in vhost '{vhost}' refused for user '{username}'"
        )
