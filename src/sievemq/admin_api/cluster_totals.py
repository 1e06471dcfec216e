"""The cluster's totals: what a node publishes of itself into etcd, and the overview summed.

Every cluster node rewrites its etcd record every few seconds (``cluster/membership.py``); with
it goes ``published_totals``: the summable part of its ``/api/overview`` (message counters and
their rates, queue lengths, object counts); ``published_parts`` beside it, each in a key of its
own written only when it changed: the figures of the durable queues it leads (up to 2,000:
the record stays small) and its replicas' read counts. Any
node's ``/api/overview`` then adds every other live node's last publication to its own, as
RabbitMQ's overview totals the cluster, and says how old each part is (``sievemq.totals_from``);
``/api/queues`` shows a queue led elsewhere with its leader's published figures. A stream's
figures add what every node's consumers of its replica of it did (``replica_reads``: this
node's now, the others' as they last published it: a part, changed only while its copies are
read), as RabbitMQ's queue figures count the deliveries of every node's channels.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sievemq.admin_api import shapes
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import ClusterNodeView, QueueView, StreamView

# the parts of the overview that add up over nodes; exchanges are definitions (the same on
# every node once definitions go through etcd), so the overview keeps its own node's count
SUMMED = ("message_stats", "queue_totals", "object_totals")
NOT_SUMMED = {"exchanges"}
# a queue's figures as /api/queues shows them, published by its leader
QUEUE_FIGURES = (
    "consumers",
    "messages",
    "messages_details",
    "messages_ready",
    "messages_ready_details",
    "messages_unacknowledged",
    "messages_unacknowledged_details",
    "message_bytes",
    "message_stats",
    "segments",
    "committed_offset",
)
# etcd takes 1.5 MiB per request: a node leading more queues publishes the figures of the
# first ones by name only (docs/cluster.md)
MAX_PUBLISHED_QUEUES = 2000


def published_totals(f: BrokerFacade) -> dict[str, Any]:
    """This node's summable overview, for its etcd record."""
    shown = shapes.overview(f.overview(list(f.iter_streams())), [])
    return {
        "overview": {
            **{k: shown[k] for k in SUMMED},
            "bytes": shown["sievemq"]["bytes"],
        },
    }


def published_parts(f: BrokerFacade) -> dict[str, Callable[[], Any]]:
    """The parts of this node's totals that may be long and change only with traffic: each
    written to etcd only when it changed (``Membership``), and seen in the node's ``totals``
    as if published with them."""
    return {"queues": lambda: _led_queues(f), "replica_reads": lambda: _read_copies(f)}


def _led_queues(f: BrokerFacade) -> list[list[Any]]:
    """The figures of the queues etcd records (durable, not exclusive) that this node leads,
    the first by name: ``[vhost, name, figures]``."""
    views: list[StreamView | QueueView] = [*f.iter_streams(), *f.iter_queues()]
    views = sorted((v for v in views if v.durable and not v.exclusive), key=_by_name)
    kept = [
        shapes.queue(v, [], f.node_name, False)
        if isinstance(v, StreamView)
        else shapes.classic_queue(v, f.node_name)
        for v in views[:MAX_PUBLISHED_QUEUES]
    ]
    return [[q["vhost"], q["name"], {k: q[k] for k in QUEUE_FIGURES if k in q}] for q in kept]


def _read_copies(f: BrokerFacade) -> list[list[Any]]:
    """The copies this node's consumers read or have read (most have none), the first by
    name."""
    read = sorted((key, reads) for key, reads in f.replica_reads().items() if any(reads.values()))
    return [[v, n, reads] for (v, n), reads in read[:MAX_PUBLISHED_QUEUES]]


def with_replica_reads(f: BrokerFacade, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each stream's ``message_stats`` and ``consumers`` (its leader's) plus the deliveries
    and acks of every node's consumers of its replicas, and those consumers."""
    if f.cluster is None or not any(row.get("type") == "stream" for row in rows):
        return rows
    reads: dict[tuple[str, str], dict[str, Any]] = {}
    for key, mine in f.replica_reads().items():
        _add(reads.setdefault(key, {}), mine, set())
    for node in f.cluster.node_views():
        published = node.totals.get("replica_reads")
        if node.local or not node.running or not isinstance(published, list):
            continue
        for item in published:
            if isinstance(item, list) and len(item) == 3 and isinstance(item[2], dict):
                _add(reads.setdefault((str(item[0]), str(item[1])), {}), item[2], set())
    for row in rows:
        found = reads.get((row["vhost"], row["name"]))
        if found and row.get("type") == "stream":
            _add(row.setdefault("message_stats", {}), found, {"consumers"})
            _add(row, {"consumers": found.get("consumers", 0)}, set())
    return rows


def _by_name(v: StreamView | QueueView) -> tuple[str, str]:
    return (v.vhost, v.name)


def cluster_overview(shown: dict[str, Any], nodes: list[ClusterNodeView]) -> dict[str, Any]:
    """``shown`` (this node's overview) with every other live node's last published totals
    added, and ``sievemq.totals_from``: each node summed and how old its part is."""
    now = time.time()
    sources = [{"node": shown["node"], "age_ms": 0}]
    for node in nodes:
        overview = node.totals.get("overview")
        if node.local or not node.running or not isinstance(overview, dict):
            continue
        for part in SUMMED:
            _add(shown[part], overview.get(part), NOT_SUMMED if part == "object_totals" else set())
        _add(shown["sievemq"], {"bytes": overview.get("bytes", 0)}, set())
        age = 0 if node.published is None else max(int((now - node.published) * 1000), 0)
        sources.append({"node": node.name, "age_ms": age})
    shown["sievemq"]["totals_from"] = sources
    return shown


def _add(into: dict[str, Any], more: Any, skip: set[str]) -> None:
    """Add the numbers of ``more`` into ``into``, nested dicts (``*_details``) included."""
    if not isinstance(more, dict):
        return
    for key, value in more.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            _add(into.setdefault(key, {}), value, set())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            total = into.get(key, 0) + value
            into[key] = round(total, 1) if isinstance(total, float) else total
