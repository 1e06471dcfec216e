"""HTTP basic authentication against the gateway's users, and RabbitMQ's tag rules.

``administrator`` may do everything; ``monitoring`` may read everything; ``management`` and
``policymaker`` see and change only the vhosts they have a permission in, within their
configure/write/read regexes. A user without any of these tags may not use the HTTP API.
guest stays loopback-only here too (the login fails from elsewhere, as on AMQP).
"""

from __future__ import annotations

import base64
import binascii
import re

from fastapi import Request

from sievemq.admin_api.errors import REALM, ApiError, not_authorised
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import PEER_HEADER, RELAY_USER_HEADER, Principal

# who a request from another cluster node is: it lists this node's own items, unfiltered
CLUSTER_PEER = Principal(name="cluster node", tags=["administrator"], permissions={})
# what another node may ask with the cluster secret: the lists it merges, and closing a
# connection (nothing else: the secret is no administrator's password)
PEER_PATHS = re.compile(
    r"/api/(connections(/[^/]+(/channels)?)?|channels(/[^/]+)?|consumers(/[^/]+)?"
    r"|vhosts/[^/]+/(connections|channels))"
)
# ... and read only: each node's part of a stream's or a quorum queue's status
# (``admin_api/replicas.py``, ``quorum_members.py``) and its own streams (``admin_api/
# streams.py``'s lists)
PEER_READS = re.compile(
    r"/api/(queues/[^/]+/[^/]+/replicas|queues/quorum/[^/]+/[^/]+/status"
    r"|streams(/[^/]+)?|streams/[^/]+/[^/]+/consumers)"
)


# what another node may ask for one of its users (``RELAY_USER_HEADER``): a get, a purge, a
# delete or a browse of a queue this node leads, and the stream API's per-stream routes of a
# stream it leads, checked here against that user's permissions
_STREAM = r"/api/streams/[^/]+/[^/]+"
_OFFSET = _STREAM + r"/consumers/[^/]+/offset"
RELAY_PATHS = {
    "POST": re.compile(r"/api/queues/[^/]+/[^/]+/(get|stream)"),
    "DELETE": re.compile(rf"/api/queues/[^/]+/[^/]+(/contents)?|{_STREAM}|{_OFFSET}"),
    "GET": re.compile(
        rf"{_STREAM}(/messages|/consumers|/offsets|/subscriptions|/filter-advice)?|{_OFFSET}"
    ),
    "PUT": re.compile(_OFFSET),
}


def facade_of(request: Request) -> BrokerFacade:
    """The broker facade ``create_app`` was given (the ``Facade`` dependency)."""
    facade: BrokerFacade = request.app.state.facade
    return facade


def _login_failed() -> ApiError:
    return ApiError(401, "not_authorized", "Login failed")


def authenticate(request: Request) -> Principal:
    """The principal of a request; 401 without credentials (empty body + challenge), with
    bad ones, or without a management tag. Another cluster node's request carries the
    cluster secret instead (``PEER_HEADER``) and is marked ``request.state.cluster_peer``."""
    presented = request.headers.get(PEER_HEADER)
    if presented is not None:
        peers = facade_of(request).peers
        if peers is None or not peers.is_peer(presented):
            raise _login_failed()
        relayed_for = request.headers.get(RELAY_USER_HEADER)
        if relayed_for is not None:
            return _relayed(request, relayed_for)
        path = _raw_path(request)
        reads = request.method == "GET" and PEER_READS.fullmatch(path)
        if not reads and (
            request.method not in ("GET", "DELETE") or not PEER_PATHS.fullmatch(path)
        ):
            raise not_authorised("The cluster secret opens the cluster-wide lists only")
        request.state.cluster_peer = True
        return CLUSTER_PEER
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token:
        raise ApiError(401, None, headers={"www-authenticate": REALM})
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise _login_failed() from None
    username, sep, password = decoded.partition(":")
    if not sep:
        raise _login_failed()
    host = request.client.host if request.client is not None else ""
    principal = facade_of(request).authenticate(username, password, host)
    if principal is None:
        raise _login_failed()
    if not principal.may_manage:
        raise not_authorised("Not management user")
    return principal


def _raw_path(request: Request) -> str:
    """The path as sent (``%2F`` stays one segment: the vhost ``/``)."""
    raw = request.scope.get("raw_path")
    return (raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path).split("?")[0]


def _relayed(request: Request, username: str) -> Principal:
    """A request another node relays for its user (that node checked the login): done as
    that user, whose permissions the routes check here again."""
    allowed = RELAY_PATHS.get(request.method)
    if allowed is None or not allowed.fullmatch(_raw_path(request)):
        raise not_authorised(
            "The cluster secret relays a queue's get, purge, delete, browse and the stream "
            "API's per-stream routes only"
        )
    principal = facade_of(request).principal_of(username)
    if principal is None:
        raise _login_failed()
    request.state.cluster_peer = True  # relayed no further
    return principal


async def user(request: Request) -> Principal:
    """Dependency: any management user."""
    return authenticate(request)


async def monitor(request: Request) -> Principal:
    """Dependency: a user that may read everything (monitoring or administrator)."""
    principal = authenticate(request)
    if not principal.may_monitor:
        raise not_authorised("Not monitor user")
    return principal


async def admin(request: Request) -> Principal:
    """Dependency: an administrator."""
    principal = authenticate(request)
    if not principal.is_administrator:
        raise not_authorised("Not administrator user")
    return principal


async def policymaker(request: Request) -> Principal:
    """Dependency: a user that may manage policies (policymaker or administrator)."""
    principal = authenticate(request)
    if not (principal.is_administrator or "policymaker" in principal.tags):
        raise not_authorised("Not policymaker user")
    return principal


def require_vhost(principal: Principal, vhost: str, write: bool = False) -> None:
    """Reading a vhost: monitoring/administrator or a permission in it; changing: a
    permission in it (administrators too, as in RabbitMQ)."""
    if write:
        if vhost not in principal.permissions:
            raise not_authorised(f"access to vhost '{vhost}' refused for user '{principal.name}'")
        return
    if not principal.may_see(vhost):
        raise not_authorised("Not_Authorized")


def require(principal: Principal, vhost: str, kind: str, resource: str, name: str) -> None:
    """A configure/write/read permission on a resource; RabbitMQ's refusal text."""
    if not principal.allows(vhost, kind, name):
        raise not_authorised(
            f"access to {resource} '{name}' in vhost '{vhost}' refused for user '{principal.name}'"
        )
