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

ROLES = ("writer", "replica")
# where a quorum queue's members are changed (``admin_api/quorum_members.py``)
QUORUM_HINT = " (a quorum queue's members: sievemq queues add_member / delete_member)"
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


def known_vhost(f: BrokerFacade, raw: str) -> str:
    """The vhost named in the path; 404 naming it when there is none."""
    vhost = name(raw)
    if not f.vhost_exists(vhost):
        raise ApiError(404, "not_found", f"no vhost '{vhost}'")
    return vhost


def wrong_kind(vhost: str, queue: str, kind: str, wanted: str) -> ApiError:
    """400 for a change or status asked of a queue of another type than ``wanted``."""
    of = "a stream" if kind == "stream" else f"a {kind} queue"
    why = "only quorum queues have members" if wanted == "quorum" else "only streams have replicas"
    if kind == "quorum" and wanted == "stream":
        why += QUORUM_HINT
    return ApiError(400, "bad_request", f"queue '{queue}' in vhost '{vhost}' is {of}: {why}")


def members_of(f: BrokerFacade, vhost: str, queue: str, wanted: str = "stream") -> list[str]:
    """The members of a stream (or a quorum queue: ``wanted``), leader first; 404 naming it
    when there is none, 400 for a queue of another type."""
    remote = f.cluster.remote_queues(vhost) if f.cluster is not None else []
    kinds = [q.type for q in remote if q.name == queue]
    with contextlib.suppress(NotFound):
        kinds.append(f.get_queue(vhost, queue).type)  # one of this node's
    if not kinds and f.stream_member(vhost, queue) is not None:
        kinds.append("stream")
    if kinds and kinds[0] != wanted:
        raise wrong_kind(vhost, queue, kinds[0], wanted)
    found = f.cluster.queue_members(vhost, queue) if f.cluster is not None else None
    if found is not None:
        return found[0]
    if kinds:  # a single node's (or one not recorded yet)
        return [f.node_name]
    what = "stream" if wanted == "stream" else "queue"
    raise ApiError(404, "not_found", f"no {what} '{queue}' in vhost '{vhost}'")


@router.get("/queues/{vhost}/{stream}/replicas")
async def stream_status(
    request: Request, f: Facade, vhost: str, stream: str, who: User
) -> list[dict[str, Any]]:
    """Every member of the stream, leader first, each with its node's figures now."""
    v, s = known_vhost(f, vhost), name(stream)
    require_vhost(who, v)
    mine = f.stream_member(v, s)
    if getattr(request.state, "cluster_peer", False):
        return [] if mine is None else [_row(mine)]  # another node asks for this one's part
    row = None if mine is None else _row(mine)
    return await member_rows(request, f, members_of(f, v, s), row, ROLES, FIGURES)


async def member_rows(
    request: Request,
    f: BrokerFacade,
    members: list[str],
    mine: dict[str, Any] | None,
    roles: tuple[str, str],
    figures: tuple[str, ...],
) -> list[dict[str, Any]]:
    """Each member's row, leader first: this node's (``mine``) and the other live nodes'
    parts asked at once; a member whose node did not answer is ``online: false`` with its
    ``figures`` null (``roles``: the leader's and the others')."""
    peers = peers_of(request, f)
    rows = {} if mine is None else {str(mine["node"]): mine}
    if peers is not None:
        listing = await peers.gather(request_path(request))
        rows.update({str(i.get("node")): i for i in listing.items if i.get("node") not in rows})
    out = []
    for position, node in enumerate(members):
        row = rows.get(node)
        if row is None:
            row = {"node": node, "role": roles[0 if position == 0 else 1], "online": False}
            row.update(dict.fromkeys(figures))
        out.append(row)
    return out


def refused(error: Exception) -> ApiError:
    """A refused change as an answer naming what is wrong."""
    text = str(getattr(error, "explanation", error))
    if isinstance(error, NotFound):
        return ApiError(404, "not_found", text)
    if isinstance(error, Conflict):
        return ApiError(409, "conflict", text)
    return ApiError(400, "bad_request", text)


def change_names(
    f: BrokerFacade, who: Principal, vhost: str, queue: str, node: str, wanted: str = "stream"
) -> tuple[str, str, str]:
    """The change's names, once the caller may make it; on a single node the only member
    is the node itself (404 for any other)."""
    v, q, n = known_vhost(f, vhost), name(queue), name(node)
    require_vhost(who, v, write=True)
    if f.cluster is None:
        members_of(f, v, q, wanted)
        if n != f.node_name:
            raise ApiError(404, "not_found", f"no cluster node '{n}'")
    return v, q, n


@router.put("/queues/{vhost}/{stream}/replicas/{node}", status_code=201)
async def add_replica(f: Facade, vhost: str, stream: str, node: str, who: Admin) -> Response:
    """Make ``node`` a replica of the stream (201; 204 when it already is a member). The
    node copies the stream from its first chunk in the background."""
    v, s, n = change_names(f, who, vhost, stream, node)
    if f.cluster is None:
        return Response(status_code=204)  # the node itself: already the stream's member
    try:
        added = await f.cluster.add_replica(v, s, n)
    except (NotFound, Conflict, BadRequest) as error:
        raise refused(error) from None
    return Response(status_code=201 if added else 204)


@router.delete("/queues/{vhost}/{stream}/replicas/{node}", status_code=204)
async def delete_replica(f: Facade, vhost: str, stream: str, node: str, who: Admin) -> Response:
    """Stop ``node``'s replica and remove its copy; the leader cannot be removed (409)."""
    v, s, n = change_names(f, who, vhost, stream, node)
    try:
        if f.cluster is None:
            raise Conflict(f"node '{n}' leads stream '{s}' in vhost '{v}': it cannot be removed")
        await f.cluster.delete_replica(v, s, n)
    except (NotFound, Conflict, BadRequest) as error:
        raise refused(error) from None
    return Response(status_code=204)
