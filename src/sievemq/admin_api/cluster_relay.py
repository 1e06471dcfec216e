"""A get, purge, delete or browse of a queue another cluster node leads: done by its leader.

``POST /api/queues/VHOST/NAME/get``, ``DELETE /api/queues/VHOST/NAME/contents``,
``DELETE /api/queues/VHOST/NAME`` and ``GET /api/streams/VHOST/NAME/messages`` (and
LavinMQ's ``POST /api/queues/VHOST/NAME/stream``) work on the queue itself, which only its
leader holds. A node that does not lead the queue sends the client's request, as the client sent
it, to the leader's admin API (``BrokerFacade.peers``, ``cluster/admin_peers.py``) with the
cluster secret and the user's name, and answers what the leader answered: the leader runs
the same route for the same user (checking that user's permissions again), so the answer is
the one a client of the leader gets, byte for byte. Publishes are not relayed so: they are
routed where they arrive and forwarded over the inter-node link, as AMQP publishes are.
"""

from __future__ import annotations

from fastapi import Request, Response

from sievemq.admin_api.cluster_lists import peers_of, request_path
from sievemq.admin_api.errors import ApiError
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import NotFound, Principal, RelayedRequest, RemoteQueueView


def led_elsewhere(f: BrokerFacade, vhost: str, queue: str) -> RemoteQueueView | None:
    """The queue another cluster node leads under this name (None: none does; a stream
    this node was just elected to lead is listed as remote until its copy is open)."""
    for remote in f.cluster.remote_queues(vhost) if f.cluster is not None else []:
        if remote.name == queue and remote.leader != f.node_name:
            return remote
    return None


def _down(remote: RemoteQueueView) -> ApiError:
    """RabbitMQ's answer when a queue's node is away (as AMQP gets it through any node)."""
    return ApiError(
        404,
        "not_found",
        f"NOT_FOUND - home node '{remote.leader}' of durable queue '{remote.name}' in vhost "
        f"'{remote.vhost}' is down or inaccessible",
    )


async def on_leader(
    request: Request, f: BrokerFacade, who: Principal, vhost: str, queue: str
) -> Response:
    """The client's request done by the queue's leader, when another node leads it; else
    NotFound (no node leads it, or this request was itself relayed here)."""
    peers = peers_of(request, f)
    remote = led_elsewhere(f, vhost, queue)
    if peers is None or remote is None:
        raise NotFound(f"no queue '{queue}' in vhost '{vhost}'")
    if not remote.leader_running:
        raise _down(remote)
    relayed = RelayedRequest(
        method=request.method,
        path=request_path(request),
        query=request.url.query,
        body=await request.body(),
        user=who.name,
    )
    answer = await peers.relay(remote.leader, relayed)
    if answer is None:
        raise _down(remote)
    return Response(answer.body, status_code=answer.status, media_type=answer.content_type)
