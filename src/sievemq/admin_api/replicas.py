"""A stream's replicas over HTTP: ``rabbitmq-streams stream_status / add_replica /
delete_replica`` (RabbitMQ's management API has no such endpoints; docs/admin-api.md).

``GET /api/queues/{vhost}/{name}/replicas`` lists every member (the leader, ``writer``, then
the replicas) with the figures the node holding it reports now: this node's own member, and
the other live nodes' asked at once over their admin APIs with the cluster secret (as the
cluster-wide connection lists are); a member whose node is stopped or did not answer is
listed ``online: false`` without figures. ``PUT`` and ``DELETE .../replicas/{node}`` change
the stream's record in etcd (``cluster/replica_ops.py``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import APIRouter, Request, Response

from sievemq.admin_api.auth import require_vhost
from sievemq.admin_api.cluster_lists import peers_of, request_path
from sievemq.admin_api.deps import Admin, Facade, User
from sievemq.admin_api.errors import ApiError
from sievemq.admin_api.paths import name
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import (
    BadRequest,
    Conflict,
    NotFound,
    Principal,
    StreamMemberView,
)

router = APIRouter(prefix="/api", tags=["SieveMQ stream API"])

FIGURES = (
    "epoch",
    "offset",
    "committed_offset",
    "first_offset",
    "readers",
    "segments",
    "messages",
    "bytes",
)


def _row(member: StreamMemberView) -> dict[str, Any]:
    return {**vars(member), "online": True}


def _vhost(f: BrokerFacade, raw: str) -> str:
    vhost = name(raw)
    if not f.vhost_exists(vhost):
        raise ApiError(404, "not_found", f"no vhost '{vhost}'")
    return vhost


def _members(f: BrokerFacade, vhost: str, stream: str) -> list[str]:
    """The stream's members, leader first; 404 naming the stream when there is none, 400
    for a classic or quorum queue."""
    remote = f.cluster.remote_queues(vhost) if f.cluster is not None else []
    kinds = [q.type for q in remote if q.name == stream]
    with contextlib.suppress(NotFound):
        kinds.append(f.get_queue(vhost, stream).type)  # one of this node's
    if kinds and kinds[0] != "stream":
        raise ApiError(
            400,
            "bad_request",
            f"queue '{stream}' in vhost '{vhost}' is a {kinds[0]} queue: only streams have "
            "replicas",
        )
    found = f.cluster.queue_members(vhost, stream) if f.cluster is not None else None
    if found is not None:
        return found[0]
    if f.stream_member(vhost, stream) is not None:  # a single node's (or one not recorded yet)
        return [f.node_name]
    raise ApiError(404, "not_found", f"no stream '{stream}' in vhost '{vhost}'")


@router.get("/queues/{vhost}/{stream}/replicas")
async def stream_status(
    request: Request, f: Facade, vhost: str, stream: str, who: User
) -> list[dict[str, Any]]:
    """Every member of the stream, leader first, each with its node's figures now."""
    v, s = _vhost(f, vhost), name(stream)
    require_vhost(who, v)
    mine = f.stream_member(v, s)
    if getattr(request.state, "cluster_peer", False):
        return [] if mine is None else [_row(mine)]  # another node asks for this one's part
    members = _members(f, v, s)
    peers = peers_of(request, f)
    rows = {} if mine is None else {mine.node: _row(mine)}
    if peers is not None:
        listing = await peers.gather(request_path(request))
        rows.update({str(i.get("node")): i for i in listing.items if i.get("node") not in rows})
    out = []
    for position, node in enumerate(members):
        row = rows.get(node)
        if row is None:
            row = {"node": node, "role": "writer" if position == 0 else "replica", "online": False}
            row.update(dict.fromkeys(FIGURES))
        out.append(row)
    return out


def _refused(error: Exception) -> ApiError:
    """A refused change as an answer naming what is wrong."""
    text = str(getattr(error, "explanation", error))
    if isinstance(error, NotFound):
        return ApiError(404, "not_found", text)
    if isinstance(error, Conflict):
        return ApiError(409, "conflict", text)
    return ApiError(400, "bad_request", text)


def _change(
    f: BrokerFacade, who: Principal, vhost: str, stream: str, node: str
) -> tuple[str, str, str]:
    """The change's names, once the caller may make it; on a single node the only member
    is the node itself (404 for any other)."""
    v, s, n = _vhost(f, vhost), name(stream), name(node)
    require_vhost(who, v, write=True)
    if f.cluster is None:
        _members(f, v, s)
        if n != f.node_name:
            raise ApiError(404, "not_found", f"no cluster node '{n}'")
    return v, s, n


@router.put("/queues/{vhost}/{stream}/replicas/{node}", status_code=201)
async def add_replica(f: Facade, vhost: str, stream: str, node: str, who: Admin) -> Response:
    """Make ``node`` a replica of the stream (201; 204 when it already is a member). The
    node copies the stream from its first chunk in the background."""
    v, s, n = _change(f, who, vhost, stream, node)
    if f.cluster is None:
        return Response(status_code=204)  # the node itself: already the stream's member
    try:
        added = await f.cluster.add_replica(v, s, n)
    except (NotFound, Conflict, BadRequest) as error:
        raise _refused(error) from None
    return Response(status_code=201 if added else 204)


@router.delete("/queues/{vhost}/{stream}/replicas/{node}", status_code=204)
async def delete_replica(f: Facade, vhost: str, stream: str, node: str, who: Admin) -> Response:
    """Stop ``node``'s replica and remove its copy; the leader cannot be removed (409)."""
    v, s, n = _change(f, who, vhost, stream, node)
    try:
        if f.cluster is None:
            raise Conflict(f"node '{n}' leads stream '{s}' in vhost '{v}': it cannot be removed")
        await f.cluster.delete_replica(v, s, n)
    except (NotFound, Conflict, BadRequest) as error:
        raise _refused(error) from None
    return Response(status_code=204)
