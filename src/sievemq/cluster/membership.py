"""Nodes joining, leaving and dying: the cluster's member list as every node sees it.

A node registers ``sievemq/nodes/<name>`` under a lease it keeps alive (TTL/3), with a
record of what it serves (addresses, fd and memory use, uptime) rewritten every few seconds.
Figures that may be long and change only with traffic (the queues it leads, its replicas'
read counts) go beside it, one key each under ``sievemq/figures/<name>/``, written with the
record only when they changed: the record stays small, and an idle node's rewrites carry
none of them (their values show in its record's ``totals``, as of its ``published``).
It also writes ``sievemq/members/<name>`` without a lease: the members ever joined, so a
stopped node is still listed, ``running: false``, as RabbitMQ lists a stopped cluster node.
Every node watches ``sievemq/`` and keeps the records in memory for ``/api/nodes``.

A name is one node: registering is a create-if-absent transaction, and a second process
started with a name that is live refuses to start (``NameTaken``). The same node restarted
on its data directory (its node id, kept there, matches) takes its record over at once
instead of waiting for its old lease to expire. A lost lease (etcd unreachable for a whole
TTL, or etcd restarted without its data) is logged and the node registers again as soon as
etcd answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sievemq.cluster.coordination import (
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    Event,
    KeyValue,
    Lease,
    WatchBatch,
    key_missing,
    lease_is,
    mod_revision_is,
    put_op,
    range_op,
)
from sievemq.gateway.admin.views import ClusterNodeView, QuorumCopyView, RemoteQueueView

log = logging.getLogger("sievemq.cluster")

ROOT = "sievemq/"
NODES = ROOT + "nodes/"
MEMBERS = ROOT + "members/"
CLUSTER_NAME = ROOT + "cluster_name"
FIGURES = ROOT + "figures/"  # <node>/<part>: a record's part written when it changed
NODE_ID_FILE = "cluster-node-id"
# how often a node rewrites its record's figures: every write is an etcd revision kept until
# etcd compacts its history (docs/cluster.md), so not on every keep-alive
PUBLISH_INTERVAL_S = 10.0


class NameTaken(Exception):
    """Another live node (another data directory) is registered under this name."""


def node_id_for(data_dir: Path) -> str:
    """This data directory's node id, made once: a restart on the same data is the same node."""
    path = Path(data_dir) / NODE_ID_FILE
    try:
        return path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        node_id = uuid.uuid4().hex
        path.write_text(node_id + "\n", encoding="ascii")
        return node_id


@dataclass(frozen=True)
class Identity:
    """Who this node is to the others."""

    name: str
    node_id: str
    cluster_address: str  # HOST:PORT of the inter-node listener
    # the client listeners as clients reach them (``--advertise-host``): ``host``,
    # ``stream`` and ``stream_tls`` (ports; Metadata names the leader's)
    advertised: dict[str, Any] = field(default_factory=dict)


class Membership:
    """This node's registration and its view of every node's record."""

    def __init__(
        self,
        client: EtcdClient,
        me: Identity,
        ttl_s: int,
        stats: Callable[[], dict[str, Any]],
        publish_interval_s: float | None = None,
        totals: Callable[[], dict[str, Any]] = dict,
        parts: dict[str, Callable[[], Any]] | None = None,
    ) -> None:
        self.client = client
        self.me = me
        self.ttl_s = ttl_s
        self._stats = stats
        self._totals = totals  # summed by every node's /api/overview (docs/cluster.md)
        # parts of ``totals`` kept in keys of their own, written when they changed (an
        # empty value: no key); what each holds now, as (lease id, JSON) last written
        self._parts = dict(parts or {})
        self._written: dict[str, tuple[int, str]] = {}
        self._publish_interval = publish_interval_s or PUBLISH_INTERVAL_S
        self.started = time.time()
        self.cluster_name = me.name
        self.lease: Lease | None = None
        self.records: dict[str, dict[str, Any]] = {}  # live nodes, by name
        self.members: dict[str, dict[str, Any]] = {}  # every node ever joined
        self.figures: dict[str, dict[str, Any]] = {}  # live nodes' parts, by name and part
        self._tasks: list[asyncio.Task[None]] = []
        self._rejoining: asyncio.Task[None] | None = None
        self._stopping = False
        self.registered = asyncio.Event()
        # others fed the watched events under their prefix (placement: sievemq/queues/)
        self._listeners: list[tuple[str, Callable[[list[Event], bool], None]]] = []
        # the queues other nodes lead (the placement sets it) and what runs once this node
        # registered again after losing its lease (the placement records its queues anew)
        self.queue_records: Callable[[], list[dict[str, Any]]] = list
        # a queue's members and those running (``Placement.members``, set at the join)
        self.queue_members: Callable[[str, str], tuple[list[str], list[str]] | None] = (
            lambda vhost, name: None
        )
        # a recorded queue's epoch (``Placement.epoch``) and the changes of a stream's
        # replicas (``ReplicaOps``), set at the join
        self.queue_epoch: Callable[[str, str], int | None] = lambda vhost, name: None
        # whether this node holds a queue it leads (a failover's winner leads the stream
        # in etcd a moment before its copy is opened as the stream: listed meanwhile)
        self.holds_queue: Callable[[str, str], bool] = lambda vhost, name: True
        # this node's inter-node links (``Links.describe``, set at the join)
        self.link_views: Callable[[], list[dict[str, Any]]] = list
        self.add_replica: Callable[[str, str, str], Awaitable[bool]] = _not_joined
        self.delete_replica: Callable[[str, str, str], Awaitable[None]] = _not_joined
        # a quorum queue's members (``ReplicaOps`` with ``QUORUM``) and this node's copy of
        # one (``QuorumReplication.copy_view``), set at the join
        self.add_member: Callable[[str, str, str], Awaitable[bool]] = _not_joined
        self.delete_member: Callable[[str, str, str], Awaitable[None]] = _not_joined
        self.quorum_copy: Callable[[str, str], QuorumCopyView | None] = lambda vhost, name: None
        self.on_registered_again: list[Callable[[], None]] = []
        # what stops before this node leaves (the definitions mirror's writer and retries)
        self.on_leave: list[Callable[[], Awaitable[None]]] = []

    def subscribe(self, prefix: str, listener: Callable[[list[Event], bool], None]) -> None:
        """Feed ``listener`` the events under ``prefix`` (reset: the whole prefix anew);
        before ``join``, so it sees the state read at the join too."""
        self._listeners.append((prefix, listener))

    # ---------------------------------------------------------------- the record

    def record(self) -> dict[str, Any]:
        return {
            "stats": self._stats(),
            "totals": self._totals(),
            "name": self.me.name,
            "node_id": self.me.node_id,
            "cluster": self.me.cluster_address,
            "advertised": self.me.advertised,
            "started": self.started,
            "published": time.time(),
        }

    def _member(self) -> str:
        return json.dumps({"name": self.me.name, "cluster": self.me.cluster_address})

    # ---------------------------------------------------------------- joining

    async def join(self) -> None:
        """Register, learn the cluster, start the keep-alive, the watch and the publisher.
        Raises ``NameTaken`` or ``EtcdUnavailable``."""
        await self._register()
        existing = await self.client.create(CLUSTER_NAME, self.me.name)
        self.cluster_name = self.me.name if existing is None else existing.value.decode()
        kvs, revision = await self.client.get_prefix(ROOT)
        self.apply(WatchBatch([Event("put", kv) for kv in kvs], revision, reset=True))
        self._tasks = [
            asyncio.ensure_future(self._watch(revision + 1)),
            asyncio.ensure_future(self._publish()),
        ]

    async def _register(self) -> None:
        old = self.lease
        if old is not None:  # a join retried, or the lease lost: never two keepers
            self.lease = None
            await old.stop(revoke=not old.lost)
        lease_id = await self.client.grant(self.ttl_s)
        try:
            await self._claim(lease_id)
        except BaseException:
            with contextlib.suppress(EtcdUnavailable):
                await self.client.revoke(lease_id)
            raise
        self.lease = Lease(self.client, lease_id, self.ttl_s, self._on_lease_lost)
        self.lease.start()
        self.registered.set()

    async def _claim(self, lease_id: int) -> None:
        """Create our key under ``lease_id``, or take it over from our own previous run."""
        key = NODES + self.me.name
        record = json.dumps(self.record())
        changed = self._changed_parts(lease_id)  # its parts too: shown from the start
        writes = [put_op(key, record, lease_id), put_op(MEMBERS + self.me.name, self._member())]
        writes += [put_op(k, text, lease_id) for k, text in changed.values()]
        result = await self.client.txn([key_missing(key)], writes, [range_op(key)])
        if result.succeeded:
            self._wrote(lease_id, changed)
            return
        found = result.ranges()
        if not found:
            raise EtcdError(f"{key}: neither created nor found")
        theirs = found[0]
        holder = _json(theirs)
        if holder.get("node_id") != self.me.node_id:
            raise NameTaken(
                f"node name {self.me.name!r} is taken by a running node "
                f"(cluster address {holder.get('cluster', '?')}, another data directory); "
                "choose another --node-name, or stop that node (once killed, its name is "
                "free when its lease expires)"
            )
        # our own previous process (killed, restarted on its data): take the record over
        taken = await self.client.txn([mod_revision_is(key, theirs.mod_revision)], writes)
        if not taken.succeeded:
            raise EtcdError(f"{key} changed while taking it over; try again")
        self._wrote(lease_id, changed)
        if theirs.lease and theirs.lease != lease_id:
            await self.client.revoke(theirs.lease)

    def _on_lease_lost(self, why: str) -> None:
        self.registered.clear()
        if self._stopping:
            return
        log.warning(
            "node %s lost its etcd lease: %s; the other nodes no longer see it; "
            "registering again when etcd answers",
            self.me.name,
            why,
        )
        self._rejoining = asyncio.ensure_future(self._rejoin())

    async def _rejoin(self) -> None:
        while not self._stopping:
            try:
                await self._register()
            except (EtcdUnavailable, EtcdError) as error:
                log.debug("re-registering %s: %s", self.me.name, error)
                await asyncio.sleep(min(1.0, self.ttl_s / 3))
                continue
            except NameTaken as error:
                log.error("cannot register again: %s", error)
                await asyncio.sleep(self.ttl_s)
                continue
            except Exception:  # a bug must not leave this node out of the cluster for good
                log.exception("registering %s again failed; trying again", self.me.name)
                await asyncio.sleep(min(1.0, self.ttl_s / 3))
                continue
            with contextlib.suppress(EtcdUnavailable, EtcdError):
                await self.client.create(CLUSTER_NAME, self.cluster_name)
            log.warning("node %s registered again in the cluster", self.me.name)
            for callback in self.on_registered_again:
                callback()
            return

    # ---------------------------------------------------------------- keeping the record fresh

    async def _publish(self) -> None:
        """Rewrite our record's figures while our lease holds it (a keep-alive writes
        nothing: it renews the lease, not the key), and the parts that changed with it."""
        key = NODES + self.me.name
        while True:
            await asyncio.sleep(self._publish_interval)
            lease = self.lease
            if lease is None or lease.lost:
                continue
            try:
                changed = self._changed_parts(lease.id)
                writes = [put_op(key, json.dumps(self.record()), lease.id)]
                writes += [put_op(k, text, lease.id) for k, text in changed.values()]
                result = await self.client.txn([lease_is(key, lease.id)], writes)
                if result.succeeded:
                    self._wrote(lease.id, changed)
            except (EtcdUnavailable, EtcdError):
                pass
            except Exception:  # the figures go stale, the loop must not end
                log.exception("publishing %s's record failed", self.me.name)

    def _changed_parts(self, lease_id: int) -> dict[str, tuple[str, str]]:
        """The parts whose value differs from what their key holds, with their key and
        JSON; a key written under an older lease went with it (as an empty value)."""
        changed = {}
        for part, source in self._parts.items():
            value = source()
            text = json.dumps(value, sort_keys=True)
            held = self._written.get(part)
            if held is None or held[0] != lease_id:
                if not value:
                    continue  # no key, nothing to say
            elif held[1] == text:
                continue
            changed[part] = (f"{FIGURES}{self.me.name}/{part}", text)
        return changed

    def _wrote(self, lease_id: int, changed: dict[str, tuple[str, str]]) -> None:
        """Remember what the parts' keys hold now (``changed`` committed under ``lease_id``)."""
        self._written.update((part, (lease_id, text)) for part, (_, text) in changed.items())

    # ---------------------------------------------------------------- watching the others

    async def _watch(self, start_revision: int) -> None:
        async for batch in self.client.watch(ROOT, start_revision):
            self.apply(batch)

    def apply(self, batch: WatchBatch) -> None:
        """Fold a watch batch into the view (a reset replaces it)."""
        if batch.reset:
            self.records.clear()
            self.members.clear()
            self.figures.clear()
        for prefix, listener in self._listeners:
            mine = [e for e in batch.events if e.kv.key.startswith(prefix)]
            if mine or batch.reset:
                try:
                    listener(mine, batch.reset)
                except Exception:  # one listener's bug must not end this node's watch
                    log.exception("applying the etcd events under %s failed", prefix)
        for event in batch.events:
            if event.kind == "put":
                self._apply_put(event.kv)
            elif event.kv.key.startswith(NODES):
                self.records.pop(event.kv.key[len(NODES) :], None)
            elif event.kv.key.startswith(MEMBERS):
                self.members.pop(event.kv.key[len(MEMBERS) :], None)
            elif event.kv.key.startswith(FIGURES):
                node, _, part = event.kv.key[len(FIGURES) :].partition("/")
                self.figures.get(node, {}).pop(part, None)

    def _apply_put(self, kv: KeyValue) -> None:
        if kv.key.startswith(NODES):
            self.records[kv.key[len(NODES) :]] = _json(kv)
        elif kv.key.startswith(MEMBERS):
            self.members[kv.key[len(MEMBERS) :]] = _json(kv)
        elif kv.key == CLUSTER_NAME:
            self.cluster_name = kv.value.decode()
        elif kv.key.startswith(FIGURES):
            node, _, part = kv.key[len(FIGURES) :].partition("/")
            with contextlib.suppress(ValueError):
                self.figures.setdefault(node, {})[part] = json.loads(kv.value)

    def cluster_address(self, name: str) -> str | None:
        """A live node's inter-node listener (HOST:PORT) as it registered it, or None."""
        address = self.records.get(name, {}).get("cluster")
        return str(address) if address else None

    def node_views(self) -> list[ClusterNodeView]:
        """Every member, the live ones with their last published record, sorted by name;
        this node is always listed as running."""
        names = set(self.members) | set(self.records) | {self.me.name}
        out = []
        for name in sorted(names):
            record = self.records.get(name, {})
            published = record.get("published")
            out.append(
                ClusterNodeView(
                    name=name,
                    running=name in self.records or name == self.me.name,
                    local=name == self.me.name,
                    record=_figures(record),
                    totals={**_dict(record.get("totals")), **self.figures.get(name, {})},
                    published=float(published) if isinstance(published, (int, float)) else None,
                )
            )
        return out

    def _published_queues(self) -> dict[tuple[str, str], tuple[dict[str, Any], float | None]]:
        """Every live node's queues' figures as it last published them, by (vhost, name):
        its ``queues`` part (still so when its record was last rewritten: a part that
        changed is written with it), or its record's ``totals.queues`` (a node of a version
        before the part)."""
        out: dict[tuple[str, str], tuple[dict[str, Any], float | None]] = {}
        for name, record in self.records.items():
            published = record.get("published")
            when = float(published) if isinstance(published, (int, float)) else None
            part = self.figures.get(name, {}).get("queues")
            entries = part if part is not None else _dict(record.get("totals")).get("queues")
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], dict):
                    out[(str(entry[0]), str(entry[1]))] = (entry[2], when)
        return out

    def quorum_queues(self) -> list[tuple[str, str, list[str]]]:
        """Every recorded quorum queue not being deleted, with its members (leader first):
        what ``rabbitmq-queues grow / shrink`` go through."""
        out = [
            (
                str(r.get("vhost")),
                str(r.get("name")),
                [str(r.get("leader")), *map(str, r.get("replicas", ()))],
            )
            for r in self.queue_records()
            if r.get("type") == "quorum" and not r.get("delete")
        ]
        return sorted(out)

    def remote_queues(self, vhost: str | None) -> list[RemoteQueueView]:
        """The queues other nodes lead, as their records say, with the figures their
        leaders last published, sorted."""
        published = self._published_queues()
        out = []
        for r in self.queue_records():
            if (vhost is not None and r.get("vhost") != vhost) or self._listed_here(r):
                continue
            leader = str(r.get("leader"))
            key = (str(r.get("vhost")), str(r.get("name")))
            figures, when = published.get(key, ({}, None)) if leader in self.records else ({}, None)
            out.append(
                RemoteQueueView(
                    vhost=key[0],
                    name=key[1],
                    type=str(r.get("type", "stream")),
                    leader=leader,
                    epoch=int(r.get("epoch", 0)),
                    arguments=dict(r.get("arguments") or {}),
                    leader_running=leader in self.records,
                    figures=copy.deepcopy(figures),  # the caller's: views add to them
                    figures_published=when,
                )
            )
        return sorted(out, key=lambda q: (q.vhost, q.name))

    def _listed_here(self, record: dict[str, Any]) -> bool:
        """A queue this node leads is listed as its own, unless it is not open here yet
        (promoted by a failover); one being created or deleted here is left out."""
        if record.get("leader") != self.me.name:
            return False
        if record.get("state", "ready") == "creating" or record.get("delete"):
            return True
        return self.holds_queue(str(record.get("vhost")), str(record.get("name")))

    # ---------------------------------------------------------------- leaving

    async def leave(self) -> None:
        """Stop watching and publishing; revoke the lease so the others see us go at once."""
        self._stopping = True
        for stop in self.on_leave:
            await stop()
        tasks = [*self._tasks, *([self._rejoining] if self._rejoining else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.lease is not None:
            with contextlib.suppress(EtcdError):
                await self.lease.stop(revoke=True)
        await self.client.close()


async def _not_joined(vhost: str, name: str, node: str) -> Any:
    raise RuntimeError("replica changes are wired at the join")


def _figures(record: dict[str, Any]) -> dict[str, Any]:
    """A record's figures, its uptime brought up to now (published every few seconds)."""
    figures = dict(record.get("stats", {}))
    started = record.get("started")
    if isinstance(started, (int, float)) and "uptime" in figures:
        figures["uptime"] = max(int((time.time() - started) * 1000), 0)
    return figures


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _json(kv: KeyValue) -> dict[str, Any]:
    try:
        value = json.loads(kv.value)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
