"""SieveMQ's stream API (docs/admin-api.md): what RabbitMQ's management API has no place for.

Per-stream facts, reading messages without consuming (by offset or timestamp, with the
consumers' value filter or an SQL filter, bounded by a limit, a byte cap and a time budget),
publishing one message, named consumer offsets with their lag, Bloom filter size advice; and
LavinMQ's ``POST /api/queues/{vhost}/{name}/stream`` browse shape.

In a cluster the lists show every live node's streams, and every per-stream route answers
for any stream on any node: a stream another node leads is answered by its leader
(``cluster_relay.py``: the same route, for the same user), except the message browsers,
which read this node's replica of it when it holds one (committed chunks only, as the
leader's readers see them).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from sievemq.admin_api.auth import require, require_vhost
from sievemq.admin_api.changes import saved
from sievemq.admin_api.cluster_lists import peers_of, request_path
from sievemq.admin_api.cluster_relay import led_elsewhere, on_leader
from sievemq.admin_api.deps import Facade, Heavy, User
from sievemq.admin_api.errors import bad_request, not_found
from sievemq.admin_api.paths import name
from sievemq.admin_api.slicing import JSON_ITEMS, Slicer
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import (
    BROWSE_MAX_LIMIT,
    PARTIAL_HEADER,
    BrowseResult,
    ConsumerOffsetView,
    ConsumerView,
    FilterAdviceView,
    Principal,
    StreamView,
    SubscriptionView,
)

router = APIRouter(prefix="/api", tags=["SieveMQ stream API"])
_STREAMS = TypeAdapter(list[StreamView])
_CONSUMERS = TypeAdapter(list[ConsumerView])


class StreamBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    arguments: dict[str, Any] = Field(default_factory=dict)


class MessageBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    payload: str = ""
    payload_encoding: Literal["string", "base64"] = "string"
    routing_key: str | None = None
    filter_value: str | list[str] | None = None
    properties: dict[str, Any] = Field(default_factory=dict)


class PublishAnswer(BaseModel):
    routed: bool
    stored: bool


class OffsetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    offset: int = Field(ge=0)


class LavinBrowse(BaseModel):
    model_config = ConfigDict(extra="allow")
    count: int = Field(default=1, ge=1, le=BROWSE_MAX_LIMIT)
    offset: str | int = "first"
    encoding: Literal["auto", "base64"] = "auto"


def _stream(f: BrokerFacade, who: Principal, vhost: str, stream: str) -> tuple[str, str]:
    v, s = name(vhost), name(stream)
    if not f.vhost_exists(v):
        raise not_found()
    require_vhost(who, v)
    return v, s


async def _elsewhere(
    request: Request, f: BrokerFacade, who: Principal, v: str, s: str
) -> Response | None:
    """The answer of the stream's leader to the same request when another node leads it;
    None when this node leads it, or no node does (the route answers, 404 for that)."""
    if f.stream_exists(v, s) or led_elsewhere(f, v, s) is None:
        return None
    return await on_leader(request, f, who, v, s)


@router.get("/streams", response_model=list[StreamView])
async def list_streams(request: Request, f: Facade, who: User, slicer: Heavy) -> Response:
    return await _stream_list(request, f, f.iter_streams(), who, slicer)


async def _stream_list(
    request: Request,
    f: BrokerFacade,
    views: Iterator[StreamView],
    who: Principal,
    slicer: Slicer,
) -> Response:
    """Built and serialized (by pydantic-core, in slices) between loop turns. On a cluster
    node, the other live nodes' own streams follow this node's (each stream is listed by
    the node that leads it; ``PARTIAL_HEADER`` names a node that did not answer)."""
    seen = [s for s in await slicer.collect(views) if who.may_see(s.vhost)]
    parts: list[bytes] = []
    for start in range(0, len(seen), JSON_ITEMS):
        parts.append(_STREAMS.dump_json(seen[start : start + JSON_ITEMS])[1:-1])
        await slicer.step()
    peers = peers_of(request, f)
    missing: list[str] = []
    if peers is not None:
        listing = await peers.gather(request_path(request))
        others = [i for i in listing.items if who.may_see(str(i.get("vhost")))]
        parts.append(json.dumps(others, separators=(",", ":")).encode()[1:-1])
        missing = listing.missing
    body = b"[" + b",".join(p for p in parts if p) + b"]"
    response = Response(body, media_type="application/json")
    if missing:
        response.headers[PARTIAL_HEADER] = ",".join(missing)
    return response


@router.get("/streams/{vhost}", response_model=list[StreamView])
async def list_vhost_streams(
    request: Request, f: Facade, vhost: str, who: User, slicer: Heavy
) -> Response:
    v = name(vhost)
    if not f.vhost_exists(v):
        raise not_found()
    require_vhost(who, v)
    return await _stream_list(request, f, f.iter_streams(v), who, slicer)


@router.get("/streams/{vhost}/{stream}", response_model=StreamView)
async def get_stream(
    request: Request, f: Facade, vhost: str, stream: str, who: User
) -> StreamView | Response:
    v, s = _stream(f, who, vhost, stream)
    return await _elsewhere(request, f, who, v, s) or f.get_stream(v, s)


@router.put("/streams/{vhost}/{stream}", status_code=201)
async def put_stream(f: Facade, vhost: str, stream: str, body: StreamBody, who: User) -> Response:
    """Create a stream with these arguments (``x-queue-type`` may be left out); 204 when
    an equivalent one exists, 400 with queue.declare's text otherwise."""
    v, s = _stream(f, who, vhost, stream)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "queue", s)
    arguments = {"x-queue-type": "stream", **body.arguments}
    # (its files are created, and the change fdatasynced, in a worker thread: ``saved``)
    return await saved(f, lambda: f.declare_stream(v, s, arguments))


@router.delete("/streams/{vhost}/{stream}", status_code=204)
async def delete_stream(
    request: Request, f: Facade, vhost: str, stream: str, who: User
) -> Response:
    """Delete the stream; one another node leads is deleted by it (everywhere)."""
    v, s = _stream(f, who, vhost, stream)
    require_vhost(who, v, write=True)
    require(who, v, "configure", "queue", s)
    relayed = await _elsewhere(request, f, who, v, s)
    if relayed is not None:
        return relayed

    def delete() -> None:
        f.delete_stream(v, s)  # 404 when it is not a stream

    return await saved(f, delete)


@router.get("/streams/{vhost}/{stream}/consumers", response_model=list[ConsumerView])
async def stream_consumers(
    request: Request, f: Facade, vhost: str, stream: str, who: User
) -> list[ConsumerView] | Response:
    """The stream's consumers on its leader and, on a cluster node, those of every node's
    replica of it (each node lists its own; ``PARTIAL_HEADER`` names one that did not
    answer)."""
    v, s = _stream(f, who, vhost, stream)
    peers = peers_of(request, f)
    if peers is None or (not f.holds_stream(v, s) and led_elsewhere(f, v, s) is None):
        return f.list_consumers(v, s)  # this node's own (404 when it holds no copy)
    own = f.list_consumers(v, s) if f.holds_stream(v, s) else []
    listing = await peers.gather(request_path(request))
    body = _CONSUMERS.dump_json(own)[1:-1]
    others = json.dumps(listing.items, separators=(",", ":")).encode()[1:-1]
    response = Response(b"[" + b",".join(p for p in (body, others) if p) + b"]")
    response.headers["content-type"] = "application/json"
    if listing.missing:
        response.headers[PARTIAL_HEADER] = ",".join(listing.missing)
    return response


@router.get("/streams/{vhost}/{stream}/messages", response_model=BrowseResult)
async def browse(
    request: Request,
    f: Facade,
    vhost: str,
    stream: str,
    who: User,
    offset: Annotated[
        str | None,
        Query(
            description="what x-stream-offset takes: first, last, next, an offset, an ISO 8601 "
            "timestamp, or an interval before now such as 30m"
        ),
    ] = None,
    timestamp: Annotated[int | None, Query(description="ms since the epoch")] = None,
    limit: Annotated[int, Query(ge=1, le=BROWSE_MAX_LIMIT)] = 20,
    filter: Annotated[list[str] | None, Query()] = None,
    match_unfiltered: bool = False,
    sql: str | None = None,
    newest: Annotated[
        bool, Query(description="without offset/timestamp: the newest `limit` messages")
    ] = False,
    encoding: Literal["auto", "base64"] = "auto",
    max_bytes: Annotated[int, Query(ge=1, le=16 * 1024 * 1024)] = 4 * 1024 * 1024,
) -> BrowseResult | Response:
    """Read messages without consuming. ``next_offset`` says where to continue when the
    scan stopped at the limit, the byte cap or the time budget (``stopped_by``). A stream
    another cluster node leads is read there (``cluster_relay.py``)."""
    v, s = _stream(f, who, vhost, stream)
    require(who, v, "read", "queue", s)
    if not f.holds_stream(v, s):  # neither leads it nor holds a replica: its leader reads it
        return await on_leader(request, f, who, v, s)
    values = [x for item in filter or [] for x in item.split(",") if x]
    return f.browse(
        v,
        s,
        offset=offset,
        timestamp_ms=timestamp,
        limit=limit,
        filter_values=values,
        match_unfiltered=match_unfiltered,
        sql=sql,
        newest_first=newest,
        max_bytes=max_bytes,
        encoding=encoding,
    )


@router.post("/streams/{vhost}/{stream}/messages", response_model=PublishAnswer)
async def publish_one(
    f: Facade, vhost: str, stream: str, body: MessageBody, who: User
) -> PublishAnswer:
    """Publish one message to the stream (through the default exchange); answers once it
    is stored. ``filter_value`` becomes the ``x-stream-filter-value`` header."""
    v, s = _stream(f, who, vhost, stream)
    require(who, v, "write", "exchange", "amq.default")
    remote = led_elsewhere(f, v, s)
    if remote is None or remote.type != "stream":
        f.get_stream(v, s)  # 404 unless this node holds it (else: forwarded to its leader)
    if body.payload_encoding == "base64":
        try:
            payload = base64.b64decode(body.payload, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("payload is not valid base64") from None
    else:
        payload = body.payload.encode("utf-8")
    properties = dict(body.properties)
    if body.filter_value is not None:
        headers = dict(properties.get("headers") or {})
        headers["x-stream-filter-value"] = (
            body.filter_value if isinstance(body.filter_value, str) else ",".join(body.filter_value)
        )
        properties["headers"] = headers
    routed = await f.publish(v, "", s, payload, properties)
    return PublishAnswer(routed=routed, stored=routed)


@router.get("/streams/{vhost}/{stream}/offsets", response_model=list[ConsumerOffsetView])
async def offsets(
    request: Request, f: Facade, vhost: str, stream: str, who: User
) -> list[ConsumerOffsetView] | Response:
    """Every named consumer's committed offset and its lag (messages stored after it)."""
    v, s = _stream(f, who, vhost, stream)
    return await _elsewhere(request, f, who, v, s) or f.consumer_offsets(v, s)


@router.get(
    "/streams/{vhost}/{stream}/consumers/{consumer}/offset", response_model=ConsumerOffsetView
)
async def get_offset(
    request: Request, f: Facade, vhost: str, stream: str, consumer: str, who: User
) -> ConsumerOffsetView | Response:
    v, s = _stream(f, who, vhost, stream)
    relayed = await _elsewhere(request, f, who, v, s)
    if relayed is not None:
        return relayed
    c = name(consumer)
    for view in f.consumer_offsets(v, s):
        if view.consumer == c:
            return view
    raise not_found()


@router.put("/streams/{vhost}/{stream}/consumers/{consumer}/offset", status_code=204)
async def put_offset(
    request: Request, f: Facade, vhost: str, stream: str, consumer: str, body: OffsetBody, who: User
) -> Response:
    """Store a committed offset: the named consumer resumes after it (stored by the
    stream's leader, which ships it to the replicas)."""
    v, s = _stream(f, who, vhost, stream)
    require(who, v, "read", "queue", s)
    relayed = await _elsewhere(request, f, who, v, s)
    if relayed is not None:
        return relayed
    f.set_consumer_offset(v, s, name(consumer), body.offset)
    return Response(status_code=204)


@router.delete("/streams/{vhost}/{stream}/consumers/{consumer}/offset", status_code=204)
async def delete_offset(
    request: Request, f: Facade, vhost: str, stream: str, consumer: str, who: User
) -> Response:
    v, s = _stream(f, who, vhost, stream)
    require(who, v, "read", "queue", s)
    relayed = await _elsewhere(request, f, who, v, s)
    if relayed is not None:
        return relayed
    f.delete_consumer_offset(v, s, name(consumer))
    return Response(status_code=204)


@router.get("/streams/{vhost}/{stream}/subscriptions", response_model=list[SubscriptionView])
async def subscriptions(
    request: Request, f: Facade, vhost: str, stream: str, who: User
) -> list[SubscriptionView] | Response:
    v, s = _stream(f, who, vhost, stream)
    return await _elsewhere(request, f, who, v, s) or f.list_subscriptions(v, s)


@router.get("/streams/{vhost}/{stream}/filter-advice", response_model=FilterAdviceView)
async def filter_advice(
    request: Request,
    f: Facade,
    vhost: str,
    stream: str,
    who: User,
    target_fpr: Annotated[float, Query(gt=0, lt=1)] = 0.01,
    chunks: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> FilterAdviceView | Response:
    """The ``x-stream-filter-size-bytes`` that keeps Bloom false positives at
    ``target_fpr``, from the distinct filter values seen per chunk in the newest chunks."""
    v, s = _stream(f, who, vhost, stream)
    return await _elsewhere(request, f, who, v, s) or f.filter_advice(v, s, target_fpr, chunks)


@router.post(
    "/queues/{vhost}/{queue}/stream",
    tags=["LavinMQ compatible"],
    response_model=list[dict[str, Any]],
)
async def lavinmq_browse(
    request: Request, f: Facade, vhost: str, queue: str, body: LavinBrowse, who: User
) -> list[dict[str, Any]] | Response:
    """LavinMQ's stream browse: ``{count, offset: first|last|next|<n>, encoding}`` (a
    stream another cluster node leads is read from this node's replica, else there)."""
    v, s = _stream(f, who, vhost, queue)
    require(who, v, "read", "queue", s)
    if not f.holds_stream(v, s):
        return await on_leader(request, f, who, v, s)
    published, messages = f.held_counts(v, s)
    offset: int | None
    newest = False
    if isinstance(body.offset, int) or str(body.offset).isdigit():
        offset = int(body.offset)
    elif body.offset == "first":
        offset = None
    elif body.offset in ("last", "next"):
        offset, newest = None, True
        if body.offset == "next":
            offset = published
    else:
        raise bad_request(f"offset must be first, last, next or a number, got '{body.offset}'")
    result = f.browse(
        v, s, offset=offset, limit=body.count, newest_first=newest, encoding=body.encoding
    )
    return [
        {
            "payload_bytes": m.payload_bytes,
            "redelivered": False,
            "exchange": m.exchange,
            "routing_key": m.routing_key,
            "message_count": messages,
            "properties": m.properties,
            "payload": m.payload,
            "payload_encoding": m.payload_encoding,
            "offset": m.offset,
            "timestamp": m.timestamp_ms,
        }
        for m in result.messages
    ]
