"""A quorum queue's members over HTTP: RabbitMQ's ``rabbitmq-queues quorum_status /
add_member / delete_member``, at the paths of RabbitMQ's management API (docs/admin-api.md).

``GET /api/queues/quorum/{vhost}/{name}/status`` lists every member (the leader, then the
followers) with what the node holding it reports now: its role, the leader's epoch, the last
log id it holds, where the committed ids end (the leader's), its live records, and whether
its node answered (the other live nodes are asked at once with the cluster secret, as for a
stream's status). ``POST .../replicas/add`` and ``DELETE .../replicas/delete`` (a JSON body
``{"node": NAME}``, as RabbitMQ's) change the queue's record in etcd by compare-and-swap
(``cluster/replica_ops.py``): an added member copies the queue's log from the leader and
then follows it; a removed one stops and its copy goes; the leader cannot be removed.
``POST /api/queues/quorum/replicas/on/{node}/grow`` and ``DELETE .../on/{node}/shrink``
(``rabbitmq-queues grow / shrink``) do the same for every quorum queue (of the vhosts and
names matching the patterns) at once and answer each queue's result.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api.auth import require_vhost
from sievemq.admin_api.bodies import json_body
from sievemq.admin_api.deps import Admin, Facade, User
from sievemq.admin_api.errors import ApiError, bad_request
from sievemq.admin_api.paths import name
from sievemq.admin_api.rabbit.common import TAG
from sievemq.admin_api.replicas import change_names, known_vhost, member_rows, members_of, refused
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import BadRequest, Conflict, NotFound, Principal

router = APIRouter(prefix="/api", tags=[TAG])

QUORUM = "quorum"
ROLES = ("leader", "follower")
FIGURES = ("epoch", "log_end", "commit_end", "messages")


@router.get("/queues/quorum/{vhost}/{queue}/status")
async def quorum_status(
    request: Request, f: Facade, vhost: str, queue: str, who: User
) -> list[dict[str, Any]]:
    """Every member of the quorum queue, leader first, each with its node's figures now."""
    v, q = known_vhost(f, vhost), name(queue)
    require_vhost(who, v)
    found = f.quorum_member(v, q)
    mine = None if found is None else {**vars(found), "online": True}
    if getattr(request.state, "cluster_peer", False):
        return [] if mine is None else [mine]  # another node asks for this one's part
    return await member_rows(request, f, members_of(f, v, q, QUORUM), mine, ROLES, FIGURES)


async def _names(
    request: Request, f: BrokerFacade, who: Principal, vhost: str, queue: str
) -> tuple[str, str, str]:
    """The queue's and the body's node's names, once the caller may change it."""
    body = await json_body(request)
    node = body.get("node") if isinstance(body, dict) else None
    if not isinstance(node, str) or not node:
        raise bad_request('the body names no node: {"node": NAME}')
    return change_names(f, who, vhost, queue, node, QUORUM)


@router.post("/queues/quorum/{vhost}/{queue}/replicas/add", status_code=201)
async def add_member(request: Request, f: Facade, vhost: str, queue: str, who: Admin) -> Response:
    """Make the body's ``node`` a member of the quorum queue (201; 204 when it already is
    one, as RabbitMQ's add is idempotent). It copies the queue's log in the background."""
    v, q, n = await _names(request, f, who, vhost, queue)
    if f.cluster is None:
        return Response(status_code=204)  # the node itself: already the queue's member
    try:
        added = await f.cluster.add_member(v, q, n)
    except (NotFound, Conflict, BadRequest) as error:
        raise refused(error) from None
    return Response(status_code=201 if added else 204)


@router.delete("/queues/quorum/{vhost}/{queue}/replicas/delete", status_code=204)
async def delete_member(
    request: Request, f: Facade, vhost: str, queue: str, who: Admin
) -> Response:
    """Stop the body's ``node``'s copy and remove it; the leader cannot be removed (409)."""
    v, q, n = await _names(request, f, who, vhost, queue)
    try:
        if f.cluster is None:
            raise Conflict(
                f"cluster node '{n}' leads quorum queue '{q}' in vhost '{v}': the leader "
                "cannot be removed (delete the quorum queue instead)"
            )
        await f.cluster.delete_member(v, q, n)
    except (NotFound, Conflict, BadRequest) as error:
        raise refused(error) from None
    return Response(status_code=204)


@router.post("/queues/quorum/replicas/on/{node}/grow")
async def grow(request: Request, f: Facade, node: str, who: Admin) -> list[dict[str, Any]]:
    """A member on ``node`` for every quorum queue matching the body's ``vhost_pattern``
    and ``queue_pattern`` (unanchored, default every one): with ``strategy`` ``all`` each
    that lacks one, ``even`` only those with an even number of members. An administrator's
    (as RabbitMQ's, whatever the vhosts' permissions)."""
    body = await json_body(request)
    if not isinstance(body, dict) or body.get("strategy") not in ("all", "even"):
        raise bad_request('strategy must be "all" or "even"')
    try:
        vhosts = re.compile(str(body.get("vhost_pattern", ".*")))
        names = re.compile(str(body.get("queue_pattern", ".*")))
    except re.error as error:
        raise bad_request(f"not a regular expression: {error}") from None
    n = _node(f, node, running=True)
    cluster = f.cluster
    out: list[dict[str, Any]] = []
    if cluster is None:
        return out  # a single node: its queues have it as their member already
    for vhost, queue, members in cluster.quorum_queues():
        if not (vhosts.search(vhost) and names.search(queue)) or n in members:
            continue
        if body["strategy"] == "even" and len(members) % 2:
            continue
        change = cluster.add_member(vhost, queue, n)
        out.append(await _each(vhost, queue, len(members), 1, change))
    return out


@router.delete("/queues/quorum/replicas/on/{node}/shrink")
async def shrink(f: Facade, node: str, who: Admin) -> list[dict[str, Any]]:
    """``node``'s member removed from every quorum queue it is a member of (not those it
    leads: each such is an error naming it); a stopped node's too (a dead node's members
    are what a shrink is for)."""
    n = _node(f, node, running=False)
    cluster = f.cluster
    out: list[dict[str, Any]] = []
    if cluster is None:
        return out  # a single node leads every queue it has: nothing to remove
    for vhost, queue, members in cluster.quorum_queues():
        if n in members:
            change = cluster.delete_member(vhost, queue, n)
            out.append(await _each(vhost, queue, len(members), -1, change))
    return out


def _node(f: BrokerFacade, node: str, running: bool) -> str:
    """The node named in the path: 404 when it never joined, 409 when it must run and
    does not."""
    n = name(node)
    known = {v.name: v.running for v in f.cluster.node_views()} if f.cluster else {}
    known.setdefault(f.node_name, True)
    if n not in known:
        raise ApiError(404, "not_found", f"no cluster node '{n}'")
    if running and not known[n]:
        raise ApiError(
            409,
            "conflict",
            f"cluster node '{n}' is not running: a member is added on a running node",
        )
    return n


async def _each(
    vhost: str, queue: str, size: int, delta: int, change: Awaitable[Any]
) -> dict[str, Any]:
    """One queue's result as ``rabbitmq-queues grow / shrink`` list it: its size after."""
    row: dict[str, Any] = {"vhost": vhost, "name": queue, "size": size + delta, "result": "ok"}
    try:
        await change
    except (NotFound, Conflict, BadRequest) as error:
        row.update(size=size, result=f"error: {getattr(error, 'explanation', error)}")
    return row
