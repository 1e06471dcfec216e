"""Where each queue lives: its leader node, recorded in etcd with an epoch.

A durable queue is led by the node that declared it (``client-local``, RabbitMQ's default).
When a node's definitions store records a new queue, this node writes
``sievemq/queues/<vhost>/<name>`` = ``{leader, epoch, type, arguments}`` with a
create-if-absent transaction, and the declare-ok waits for etcd's commit (the store's
``observer`` and ``DefinitionsSync.also_wait``). A queue deleted on its leader loses its
record (compare-and-swap on the record's revision). Every node watches the records: a node
that does not lead a queue answers a declare of it with declare-ok, accepts bindings to it
(they are cluster-wide: ``definitions_mirror``), forwards publishes routed to it over the
link (``remote_queue``, ``cluster/forwarding.py``), and opens link channels to its leader for
consumers, gets, acks, purges and deletes through this node (``open_link``,
``gateway/session/remote.py``).

A queue declared with the ``balanced`` leader locator goes to the live node leading the
fewest queues: the declaring node writes its record with that node as leader and
``state: creating`` (create-if-absent, epoch 1); that node's watch sees a record it leads
but does not hold, makes the queue and writes ``state: ready`` (or ``failed`` with the
reason), and the declaring node's declare-ok waits for that. A stream deleted through a
node that does not lead it is asked of its leader the same way: the record gets
``delete: true`` (compare-and-swap), the leader deletes the queue and its record, and the
deleting node answers once the record is gone: creating and deleting go through etcd, not
over the link.

A stream's record also names its ``replicas`` (``x-initial-cluster-size``, else a policy's
``initial-cluster-size``, default 3 or the number of nodes when fewer: the leader plus the
live nodes leading the fewest streams), chosen when it is placed and changed by
``cluster/replica_ops.py``; each follows the leader's log (``cluster.replication``).

The epoch is 1 when a queue is first placed; a move or a failover (not built yet) writes
epoch + 1 by compare-and-swap, and a message carrying an older epoch is to be refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, unquote

from sievemq.cluster.coordination import (
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    Event,
    delete_op,
    key_missing,
    mod_revision_is,
    put_op,
    range_op,
)
from sievemq.cluster.exclusive import ExclusiveQueues
from sievemq.cluster.forwarding import ForwardedQueue
from sievemq.cluster.link import Links
from sievemq.cluster.membership import ROOT
from sievemq.cluster.replies import ReplyForwarder
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.definitions import decode_value, encode_value
from sievemq.gateway.model.directory import (
    FeedChannelEnd,
    FeedPeer,
    LeaderUnavailable,
    LinkChannel,
    LinkReceiver,
)
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.runtime.definitions_sync import ReplicationFailed

log = logging.getLogger("sievemq.cluster")

QUEUES = ROOT + "queues/"
# how long a declare waits for the node it placed a queue on, and a delete for the leader
REMOTE_WAIT_S = 15.0
CREATING, READY, FAILED = "creating", "ready", "failed"
DEFAULT_CLUSTER_SIZE = 3  # a stream's or quorum queue's copies, leader included (RabbitMQ's)
REPLICATED = ("stream", "quorum")  # the queue types with replicas


class _NoAnswer(Exception):
    """etcd did not answer (or refused): the write may be retried."""


def queue_key(vhost: str, name: str) -> str:
    return QUEUES + quote(vhost, safe="") + "/" + quote(name, safe="")


def cluster_size(
    arguments: dict[str, Any], policy: dict[str, Any] | None = None, kind: str = "stream"
) -> int:
    """A stream's ``x-initial-cluster-size`` (checked by its declare), else its policy's
    ``initial-cluster-size`` (the argument wins, as in RabbitMQ), else the default; a
    quorum queue's ``x-quorum-initial-group-size`` (RabbitMQ's, no policy key)."""
    if kind == "quorum":
        policy = None
        value = arguments.get("x-quorum-initial-group-size")
    else:
        value = arguments.get("x-initial-cluster-size")
    if value is None and policy:
        value = policy.get("initial-cluster-size") or None  # (0: not a size; the default)
    try:
        return int(value) if value is not None else DEFAULT_CLUSTER_SIZE
    except (TypeError, ValueError):
        return DEFAULT_CLUSTER_SIZE


def queue_of(key: str) -> tuple[str, str] | None:
    vhost, _, name = key[len(QUEUES) :].partition("/")
    return (unquote(vhost), unquote(name)) if name else None


class Placement:
    """The queue records as this node sees them, and this node's writes of its own."""

    def __init__(
        self,
        client: EtcdClient,
        me: str,
        broker: Broker,
        also_wait: Callable[[asyncio.Future[None]], None],
        live: Callable[[], dict[str, dict[str, Any]]] = dict,
        remote_wait_s: float = REMOTE_WAIT_S,
    ) -> None:
        self.client = client
        self.me = me
        self.broker = broker
        self._also_wait = also_wait
        self._live = live  # the live nodes' published records, by name
        self._remote_wait_s = remote_wait_s
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        self._tasks: set[asyncio.Future[None]] = set()
        # publishes to queues other nodes lead go over the link (set at join)
        self.links: Links | None = None
        self._forwarded: dict[tuple[str, str], ForwardedQueue] = {}
        # declares and deletes waiting for another node: resolved by the watched records
        self._waiting: dict[tuple[str, str], list[asyncio.Future[dict[str, Any] | None]]] = {}
        self._working: set[tuple[str, str]] = set()  # records this node is acting on
        self.stopping: list[Callable[[], Awaitable[None]]] = []  # (replication's stop)
        # this node's replica of a stream, to read (set by replication)
        self.replica_of: Callable[[str, str], StreamQueue | None] = lambda vhost, name: None
        self.replica_copies: Callable[[], list[StreamQueue]] = list  # (and every one)
        # commit by majority (``cluster/commit.py``, set at join): told of each record of a
        # queue this node starts to lead, and of the replicas' acknowledgements
        self.led: Callable[[tuple[str, str], dict[str, Any]], None] = lambda queue, record: None
        # a stream this node is about to lead since an election: its committed floor
        self.promoted: Callable[[tuple[str, str], int], None] = lambda queue, floor: None
        self.holds: Callable[[str, str, str, int, int], None] = lambda *ack: None
        # the log feeds of the quorum queues this node leads (``cluster/quorum_replication``)
        self.open_feed: Callable[[str, str, FeedChannelEnd], FeedPeer] | None = None
        self.exclusive: ExclusiveQueues | None = None  # the cluster's (set at join)
        self.replies: ReplyForwarder | None = None  # direct replies to other nodes (join)

    # ---------------------------------------------------------------- the directory

    def leader_elsewhere(self, vhost: str, name: str) -> str | None:
        record = self.records.get((vhost, name))
        if record is None or record.get("leader") == self.me:
            return None
        return str(record.get("leader"))

    def exclusive_elsewhere(self, vhost: str, name: str) -> str | None:
        return None if self.exclusive is None else self.exclusive.elsewhere(vhost, name)

    def claim_exclusive(self, vhost: str, name: str) -> asyncio.Future[None] | None:
        return None if self.exclusive is None else self.exclusive.claim(vhost, name)

    def release_exclusive(self, vhost: str, name: str) -> None:
        if self.exclusive is not None:
            self.exclusive.release(vhost, name)

    def forward_reply(self, vhost: str, name: str, props: bytes, body: bytes) -> bool:
        return self.replies is not None and self.replies.forward(vhost, name, props, body)

    def open_link(
        self, vhost: str, name: str, receiver: LinkReceiver, number: int = 0, relay: bool = False
    ) -> LinkChannel:
        """A channel on the link to the queue's leader (consume, get, ack... through this
        node: ``gateway.session.remote``), numbered ``number`` when that one is free; with
        ``relay``, a relay channel whose deliveries are numbered ``number``."""
        assert self.links is not None, "the link is made when the node joins"
        leader = self.leader_elsewhere(vhost, name) or ""
        return self.links.open_channel(leader, vhost, receiver, number=number, relay=relay)

    def remote_queue(self, vhost: str, name: str) -> ForwardedQueue | None:
        """The queue as publishes through this node see it when another node leads it."""
        forwarded = self._forwarded.get((vhost, name))
        if forwarded is not None:
            return forwarded
        leader = self.leader_elsewhere(vhost, name)
        if leader is None or self.links is None:
            return None
        forwarded = self._forwarded[(vhost, name)] = ForwardedQueue(self.links, vhost, name, leader)
        return forwarded

    def _forget_forwarded(self, queue: tuple[str, str]) -> None:
        """The record changed or went: the next publish asks anew (the old forwarded queue
        closes its link channel once its publishes are answered)."""
        forwarded = self._forwarded.pop(queue, None)
        if forwarded is not None:
            forwarded.retire()

    # ---------------------------------------------------------------- watching

    def queue_type(self, vhost: str, name: str) -> str | None:
        if self.leader_elsewhere(vhost, name) is None:
            return None
        return str(self.records[(vhost, name)].get("type", "stream"))

    def stream_listener(self, node: str, tls: bool) -> tuple[str, int] | None:
        advertised = self._live().get(node, {}).get("advertised") or {}
        port = advertised.get("stream_tls" if tls else "stream")
        if not port or not advertised.get("host"):
            return None
        return str(advertised["host"]), int(port)

    def choose_leader(self) -> str | None:
        counts = dict.fromkeys(sorted({*self._live(), self.me}), 0)
        for record in self.records.values():
            if record.get("leader") in counts:
                counts[record["leader"]] += 1
        node = min(counts, key=lambda n: counts[n])  # the first name of the fewest
        return None if node == self.me else node

    def choose_replicas(
        self, leader: str, kind: str, arguments: dict[str, Any], vhost: str = "", name: str = ""
    ) -> list[str]:
        """A new stream's replicas: ``x-initial-cluster-size`` (else its policy's
        ``initial-cluster-size``) - 1 live nodes other than ``leader``, those leading and
        following the fewest streams and quorum queues first (ties: the first name); fewer
        when fewer nodes run. A quorum queue's: ``x-quorum-initial-group-size`` - 1 so.
        Classic queues have none (as in RabbitMQ 4)."""
        if kind not in REPLICATED:
            return []
        local = self.broker.vhosts.get(vhost) if vhost else None
        policy = local.policy_definition(kind, name) if local else None
        size = cluster_size(arguments, policy, kind)
        counts = dict.fromkeys(sorted({*self._live(), self.me} - {leader}), 0)
        for record in self.records.values():
            if record.get("type", "stream") not in REPLICATED:
                continue
            for node in (record.get("leader"), *record.get("replicas", ())):
                if node in counts:
                    counts[node] += 1
        return sorted(counts, key=lambda n: counts[n])[: max(size - 1, 0)]

    def replicas(self, vhost: str, name: str) -> list[str]:
        return [str(n) for n in self.records.get((vhost, name), {}).get("replicas", ())]

    def replica_queue(self, vhost: str, name: str) -> StreamQueue | None:
        return self.replica_of(vhost, name)

    def replica_queues(self) -> list[StreamQueue]:
        return self.replica_copies()

    def replica_holds(self, vhost: str, name: str, node: str, epoch: int, offset: int) -> None:
        self.holds(vhost, name, node, epoch, offset)

    def quorum_feed(self, vhost: str, node: str, end: FeedChannelEnd) -> FeedPeer:
        if self.open_feed is None:
            raise LeaderUnavailable("this node feeds no quorum queue replica yet")
        return self.open_feed(vhost, node, end)

    def epoch(self, vhost: str, name: str) -> int | None:
        record = self.records.get((vhost, name))
        return None if record is None else int(record.get("epoch", 1))

    def members(self, vhost: str, name: str) -> tuple[list[str], list[str]] | None:
        """A recorded queue's members (leader, then replicas) and those running now."""
        record = self.records.get((vhost, name))
        if record is None:
            return None
        members = [str(record.get("leader")), *map(str, record.get("replicas", ()))]
        live = self._live()
        return members, [m for m in members if m == self.me or m in live]

    # ---------------------------------------------------------------- watching

    def apply(self, events: list[Event], reset: bool) -> None:
        """Fold the watched ``sievemq/queues/`` events into the view; act on the records
        that ask this node to create or delete a queue, and wake who waits on a record."""
        if reset:
            gone = set(self.records)
            self.records.clear()
        else:
            gone = set()
        for event in events:
            queue = queue_of(event.kv.key)
            if queue is None:
                continue
            if event.kind == "delete":
                self.records.pop(queue, None)
                gone.add(queue)
                continue
            try:
                record = json.loads(event.kv.value)
            except ValueError:
                continue
            if isinstance(record, dict):
                self.records[queue] = {**record, "mod_revision": event.kv.mod_revision}
                forwarded = self._forwarded.get(queue)
                if forwarded is not None and forwarded.leader != record.get("leader"):
                    del self._forwarded[queue]  # (its old leader's answers may never come)
                    forwarded.leader_moved(str(record.get("leader")))
                gone.discard(queue)
                self._react(queue, self.records[queue])
        for queue in gone:
            self._wake(queue, None)
            self._forget_forwarded(queue)

    def _react(self, queue: tuple[str, str], record: dict[str, Any]) -> None:
        if record.get("state", READY) != CREATING:
            self._wake(queue, record)
        if record.get("leader") != self.me or queue in self._working:
            return
        if record.get("delete"):
            self._working.add(queue)
            self._track(self._delete_here(queue, record), wait=False)
        elif record.get("state") == CREATING:
            self._working.add(queue)
            self._track(self._create_here(queue, record), wait=False)

    def _current(self, queue: tuple[str, str], record: dict[str, Any]) -> bool:
        return self.records.get(queue, {}).get("mod_revision") == record.get("mod_revision")

    def _wake(self, queue: tuple[str, str], record: dict[str, Any] | None) -> None:
        for waiter in self._waiting.pop(queue, []):
            if not waiter.done():
                waiter.set_result(record)

    def _waiter(self, queue: tuple[str, str]) -> asyncio.Future[dict[str, Any] | None]:
        waiter: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(queue, []).append(waiter)
        return waiter

    def _forget_waiter(
        self, queue: tuple[str, str], waiter: asyncio.Future[dict[str, Any] | None]
    ) -> None:
        waiters = self._waiting.get(queue, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if not waiters:
            self._waiting.pop(queue, None)

    # ---------------------------------------------------------------- placed on another node

    def create_elsewhere(
        self, node: str, vhost: str, name: str, kind: str, arguments: dict[str, Any]
    ) -> asyncio.Future[None]:
        work = asyncio.ensure_future(self._create_on(node, vhost, name, kind, arguments))
        self._tasks.add(work)
        work.add_done_callback(self._tasks.discard)
        return work

    async def _create_on(
        self, node: str, vhost: str, name: str, kind: str, arguments: dict[str, Any]
    ) -> None:
        key = queue_key(vhost, name)
        record = {
            "vhost": vhost,
            "name": name,
            "leader": node,
            "replicas": self.choose_replicas(node, kind, arguments, vhost, name),
            "epoch": 1,
            "type": kind,
            "arguments": encode_value(arguments),
            "state": CREATING,
            "placed_by": self.me,
        }
        waiter = self._waiter((vhost, name))
        try:
            result = await self.client.txn(
                [key_missing(key)], [put_op(key, json.dumps(record))], [range_op(key)]
            )
        except (EtcdUnavailable, EtcdError) as error:
            raise ReplicationFailed(f"etcd did not record queue '{name}': {error}") from error
        if not result.succeeded:
            found = result.ranges()
            held = json.loads(found[0].value) if found else {}
            raise ReplicationFailed(
                f"queue '{name}' in vhost '{vhost}' was declared at the same time on "
                f"cluster node '{held.get('leader')}', which leads it"
            )
        revision = result.revision
        self.records.setdefault((vhost, name), {**record, "mod_revision": revision})
        try:
            done = await asyncio.wait_for(asyncio.shield(waiter), self._remote_wait_s)
        except TimeoutError:
            await self._withdraw(key, revision)
            raise ReplicationFailed(
                f"cluster node '{node}' did not create queue '{name}' in vhost '{vhost}' "
                f"within {self._remote_wait_s:.0f} s (balanced placement chose it; is it "
                "running?); the declare is withdrawn"
            ) from None
        if done is None:
            raise ReplicationFailed(f"queue '{name}' in vhost '{vhost}' was deleted meanwhile")
        if done.get("state") == FAILED:
            await self._withdraw(key, int(done.get("mod_revision", 0)))
            raise ReplicationFailed(
                f"cluster node '{node}' could not create queue '{name}' in vhost '{vhost}': "
                f"{done.get('error', '?')}"
            )

    async def _withdraw(self, key: str, revision: int) -> None:
        """Remove a placement record nobody acted on (or that failed), if unchanged."""
        try:
            await self.client.txn([mod_revision_is(key, revision)], [delete_op(key)])
        except (EtcdUnavailable, EtcdError) as error:
            log.warning("could not withdraw %s: %s", key, error)

    async def _create_here(self, queue: tuple[str, str], record: dict[str, Any]) -> None:
        """A queue another node placed on this one: make it, then mark its record."""
        vhost, name = queue
        key = queue_key(vhost, name)
        error = ""
        if not self._current(queue, record):  # withdrawn meanwhile (a batch of events)
            self._working.discard(queue)
            return
        try:
            local = self.broker.vhosts.get(vhost) if vhost else None
            if local is None:
                error = f"no vhost '{vhost}' on node '{self.me}'"
            else:
                arguments = decode_value(record.get("arguments") or {})
                # gated before the declaring node hears of it (``Commits.declared``)
                local.declare_queue(name, durable=True, arguments=dict(arguments))
        except Exception as failure:  # a 406's text or storage's: back to the declaring node
            error = str(getattr(failure, "explanation", failure))
            log.warning("cannot create queue '%s' placed on this node: %s", name, error)
        marked = {k: v for k, v in record.items() if k != "mod_revision"}
        marked.update({"state": FAILED, "error": error} if error else {"state": READY})
        try:
            await self.client.txn(
                [mod_revision_is(key, int(record["mod_revision"]))],
                [put_op(key, json.dumps(marked))],
            )
        except (EtcdUnavailable, EtcdError) as failure:
            log.warning("queue '%s' made here, its record not marked: %s", name, failure)
        finally:
            self._working.discard(queue)

    def delete_elsewhere(self, vhost: str, name: str) -> asyncio.Future[None]:
        work = asyncio.ensure_future(self._delete_on(vhost, name))
        self._tasks.add(work)
        work.add_done_callback(self._tasks.discard)
        return work

    async def _delete_on(self, vhost: str, name: str) -> None:
        record = self.records.get((vhost, name))
        if record is None:
            return
        leader = str(record.get("leader"))
        if leader not in self._live():
            raise LeaderUnavailable(
                f"queue '{name}' in vhost '{vhost}' is led by cluster node '{leader}', "
                "which is not running"
            )
        key = queue_key(vhost, name)
        asked = {k: v for k, v in record.items() if k != "mod_revision"}
        asked.update({"delete": True, "deleted_by": self.me})
        waiter = self._waiter((vhost, name))
        try:
            result = await self.client.txn(
                [mod_revision_is(key, int(record["mod_revision"]))],
                [put_op(key, json.dumps(asked))],
            )
        except (EtcdUnavailable, EtcdError) as error:
            raise ReplicationFailed(f"etcd did not take the delete of '{name}': {error}") from error
        if not result.succeeded and (vhost, name) not in self.records:
            return  # deleted meanwhile
        deadline = asyncio.get_running_loop().time() + self._remote_wait_s
        while (vhost, name) in self.records:  # (our own request seen wakes us too)
            left = deadline - asyncio.get_running_loop().time()
            try:
                await asyncio.wait_for(asyncio.shield(waiter), max(left, 0))
            except TimeoutError:
                raise ReplicationFailed(
                    f"cluster node '{leader}' did not delete queue '{name}' in vhost "
                    f"'{vhost}' within {self._remote_wait_s:.0f} s"
                ) from None
            waiter = self._waiter((vhost, name))
        self._forget_waiter((vhost, name), waiter)

    async def _delete_here(self, queue: tuple[str, str], record: dict[str, Any]) -> None:
        """Another node asked this one, the leader, to delete the queue."""
        vhost, name = queue
        try:
            if not self._current(queue, record):
                return
            local = self.broker.vhosts.get(vhost) if vhost else None
            if local is not None and self._holds(vhost, name):
                local.delete_queue(name)  # its record goes with it (``observe``)
            else:
                await self._withdraw(queue_key(vhost, name), int(record["mod_revision"]))
        except Exception as error:  # (a delete refused: the asker times out, says so)
            log.error("delete of '%s' asked by %s: %s", name, record.get("deleted_by"), error)
        finally:
            self._working.discard(queue)

    # ---------------------------------------------------------------- this node's queues

    def observe(self, op: str, section: str, key: str | None, item: Any) -> None:
        """The definitions store's observer: a queue stored or removed here."""
        if section != "queues" or key is None:
            return
        if op == "put" and isinstance(item, dict):
            vhost, name = str(item.get("vhost")), str(item.get("name"))
            if self.records.get((vhost, name), {}).get("leader") == self.me:
                return  # ours already (a change of its arguments)
            self._track(self._claim(vhost, name, item), wait=True)
        elif op == "del":
            try:
                vhost, name = json.loads(key)
            except (ValueError, TypeError):
                return
            if self.records.get((vhost, name), {}).get("leader") == self.me:
                self._track(self._release(vhost, name), wait=True)

    def _track(self, work: Any, wait: bool) -> None:
        task: asyncio.Future[None] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)
        if wait:
            self._also_wait(task)  # the change's reply waits for etcd's commit

    async def _claim(self, vhost: str, name: str, item: dict[str, Any]) -> None:
        """Record this node as the queue's leader, epoch 1, unless the queue has one; when
        etcd does not answer, keep trying in the background (the change fails meanwhile)."""
        try:
            await self._record_leader(vhost, name, item)
        except _NoAnswer as error:
            self._track(self._claim_later(vhost, name, item), wait=False)
            raise ReplicationFailed(f"etcd did not record queue '{name}': {error}") from error

    async def _record_leader(self, vhost: str, name: str, item: dict[str, Any]) -> None:
        key = queue_key(vhost, name)
        kind = str(item.get("type", "stream"))
        arguments = dict(item.get("arguments", {}))
        record = {
            "vhost": vhost,
            "name": name,
            "leader": self.me,
            "replicas": self.choose_replicas(self.me, kind, arguments, vhost, name),
            "epoch": 1,
            "type": kind,
            "arguments": encode_value(arguments),
        }
        try:
            result = await self.client.txn(
                [key_missing(key)], [put_op(key, json.dumps(record))], [range_op(key)]
            )
        except (EtcdUnavailable, EtcdError) as error:
            raise _NoAnswer(str(error)) from error
        if result.succeeded:
            self.records[(vhost, name)] = {**record, "mod_revision": result.revision}
            self.led((vhost, name), record)  # gated before its declare-ok
            return
        found = result.ranges()
        held = json.loads(found[0].value) if found else {}
        if held.get("leader") != self.me:
            raise ReplicationFailed(
                f"queue '{name}' in vhost '{vhost}' was declared at the same time on "
                f"cluster node '{held.get('leader')}', which leads it"
            )

    async def _claim_later(self, vhost: str, name: str, item: dict[str, Any]) -> None:
        """A queue made here while etcd did not answer: record it once etcd does (while
        this node still holds it)."""
        while self._holds(vhost, name) and (vhost, name) not in self.records:
            await asyncio.sleep(1.0)
            try:
                await self._record_leader(vhost, name, item)
                return
            except _NoAnswer as error:
                log.debug("queue '%s' not recorded yet: %s", name, error)
            except ReplicationFailed as error:  # another node recorded it meanwhile
                log.error("%s", error)
                return

    def _holds(self, vhost: str, name: str) -> bool:
        local = self.broker.vhosts.get(vhost) if vhost else None
        return local is not None and (name in local.queues or name in local.classic.queues)

    async def _release(self, vhost: str, name: str) -> None:
        """Remove the record of a queue this node led and deleted (once etcd answers, when
        it does not now: the queue is gone here, its record must not outlive it)."""
        try:
            await self._remove_record(vhost, name)
        except _NoAnswer as error:
            self._track(self._release_later(vhost, name), wait=False)
            raise ReplicationFailed(f"etcd did not remove queue '{name}': {error}") from error

    async def _remove_record(self, vhost: str, name: str) -> None:
        key = queue_key(vhost, name)
        try:
            found = await self.client.get(key)
            if found is None or json.loads(found.value).get("leader") != self.me:
                return
            await self.client.txn([mod_revision_is(key, found.mod_revision)], [delete_op(key)])
        except (EtcdUnavailable, EtcdError) as error:
            raise _NoAnswer(str(error)) from error
        self.records.pop((vhost, name), None)

    async def _release_later(self, vhost: str, name: str) -> None:
        """A queue deleted here while etcd did not answer: remove its record once etcd
        does (unless the queue was made here again meanwhile)."""
        while not self._holds(vhost, name):
            await asyncio.sleep(1.0)
            try:
                await self._remove_record(vhost, name)
                return
            except _NoAnswer as error:
                log.debug("record of deleted queue '%s' not removed yet: %s", name, error)

    async def place_local_queues(self) -> None:
        """At join: record the durable queues this node already holds (a node that joins
        with data, or was cut off from etcd while they were declared)."""
        for vhost in list(self.broker.vhosts.values()):
            local = [
                (name, {"type": "stream", "arguments": q.arguments.table})
                for name, q in vhost.queues.items()
            ]
            local += [
                (name, {"type": c.kind, "arguments": c.arguments.table})
                for name, c in vhost.classic.queues.items()
                if c.durable and not c.exclusive
            ]
            for name, item in local:
                if (vhost.name, name) not in self.records:
                    try:
                        await self._claim(vhost.name, name, item)
                    except ReplicationFailed as error:
                        log.error("%s", error)

    def place_again(self) -> None:
        """After this node registered again (etcd may have lost the records meanwhile)."""
        self._track(self.place_local_queues(), wait=False)

    async def stop(self) -> None:
        for stop in self.stopping:
            await stop()
        for task in list(self._tasks):
            task.cancel()
        for forwarded in self._forwarded.values():
            forwarded.close()
        self._forwarded.clear()
        if self.links is not None:
            await self.links.close()


def _log_failure(task: asyncio.Future[None]) -> None:
    """A claim or release that failed is logged here: a change made while applying what
    other nodes did (a definitions sync) has nobody waiting for its reply, and asyncio would
    otherwise report "Task exception was never retrieved"."""
    if task.cancelled():
        return
    error = task.exception()
    if isinstance(error, ReplicationFailed):
        log.warning("%s", error)
    elif error is not None:
        log.error("queue placement failed", exc_info=error)
