"""Every definition through etcd: vhosts, users and permissions, exchanges, bindings,
policies, operator policies and global parameters, one key each under ``sievemq/defs/``.

Local to etcd: the definitions store's ``observer`` sees every durable change a node makes
(AMQP, HTTP, a definitions import); the change is written to etcd by one writer task, in
order, a turn's changes in one transaction, and the change's reply waits for the commit
(``DefinitionsSync.also_wait``). A new object is written create-if-absent, a delete is a
compare-and-swap on the revision this node last saw: two nodes racing on one object, the
second is told (541 naming the other) and takes the cluster's version. When etcd does not
answer, the change fails (541 naming etcd) and is written once etcd answers.

etcd to local: every node watches ``sievemq/defs/`` and applies what the others wrote through
the same model code a local change uses, its own mirror muted so nothing is written back.
An event for a key this node is writing waits for that write (the newer one wins).

Joining (and whenever the watch reads everything anew: etcd compacted, or lost its data) a
node reconciles. ``sievemq/defs_id`` names the definitions etcd holds; a node keeps the id
it last reconciled with (``DATA_DIR/cluster-defs-id``). Same id: etcd is the truth, and a
local object etcd lacks was deleted while the node was away. Another id or none (a node's
first join, or etcd restarted empty): the node offers its definitions create-if-absent, a
conflict is logged and the cluster's version kept. Queues are ``placement``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
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
from sievemq.cluster.membership import ROOT
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import AMQPError
from sievemq.gateway.model import policies
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.definitions import canonical, decode_value, encode_value, item_key
from sievemq.gateway.model.routing import dest_kind
from sievemq.gateway.model.users import User
from sievemq.gateway.runtime.definitions_sync import ReplicationFailed, settle

log = logging.getLogger("sievemq.cluster")

DEFS = ROOT + "defs/"
DEFS_ID = ROOT + "defs_id"
DEFS_ID_FILE = "cluster-defs-id"
# the order a reconcile applies puts in (what an object needs comes first); deletes reverse it
SECTIONS = (
    "vhosts",
    "users",
    "global_parameters",
    "policies",
    "parameters",
    "exchanges",
    "bindings",
)
BATCH = 64  # changes per etcd transaction (etcd allows 128 operations)
RETRY_S = 1.0

Observer = Callable[[str, str, str | None, Any], None]


def defs_key(section: str, store_key: str) -> str:
    """``sievemq/defs/SECTION/F1/F2...``: the object's key fields, each URL-quoted (a
    value that is not a string, such as a binding's arguments, as ``=`` + quoted JSON)."""
    try:
        fields = json.loads(store_key)
    except ValueError:
        fields = [store_key]
    if not isinstance(fields, list):
        fields = [fields]
    parts = [
        quote(f, safe="")
        if isinstance(f, str)
        else "=" + quote(json.dumps(f, sort_keys=True, separators=(",", ":")), safe="")
        for f in fields
    ]
    return DEFS + section + "/" + "/".join(parts)


def store_key_of(key: str) -> tuple[str, str] | None:
    """(section, the definitions store's key) of a ``defs_key``; None for another key."""
    section, _, rest = key[len(DEFS) :].partition("/")
    if not key.startswith(DEFS) or section not in SECTIONS or not rest:
        return None
    try:
        fields = [
            json.loads(unquote(p[1:])) if p.startswith("=") else unquote(p) for p in rest.split("/")
        ]
    except ValueError:
        return None  # not one of ours (written by hand?)
    return section, json.dumps(fields, sort_keys=True, separators=(",", ":"))


_NAMED_BY = {
    "exchanges": ("vhost", "name"),
    "policies": ("vhost", "name"),
    "parameters": ("component", "vhost", "name"),
    "bindings": ("vhost", "source", "destination_type", "destination", "routing_key"),
}


def describe_key(key: str) -> str:
    """The object a ``defs_key`` names, as ``describe`` says it (a delete has no item)."""
    section, _, rest = key[len(DEFS) :].partition("/")
    parts = [unquote(p) for p in rest.split("/")]
    return describe(section, dict(zip(_NAMED_BY.get(section, ("name",)), parts, strict=False)))


def describe(section: str, item: Any) -> str:
    """An object as a log line or a reply names it."""
    if not isinstance(item, dict):
        return f"{section} {item!r}"
    vhost = f" in vhost '{item.get('vhost')}'" if "vhost" in item else ""
    if section == "bindings":
        return (
            f"binding of {item.get('destination_type')} '{item.get('destination')}' to "
            f"exchange '{item.get('source')}' (routing key '{item.get('routing_key')}'){vhost}"
        )
    kind = {"parameters": "operator policy", "global_parameters": "global parameter"}.get(
        section, section.rstrip("s")
    )
    return f"{kind} '{item.get('name')}'{vhost}"


@dataclass
class _Change:
    """One local change on its way to etcd."""

    key: str
    section: str
    item: Any  # None: deleted
    future: asyncio.Future[None]
    revision: int = 0  # the revision the node last saw of the key (0: believed absent)
    compare: list[dict[str, Any]] = field(default_factory=list)

    def ops(self) -> list[dict[str, Any]]:
        if self.item is None:
            return [delete_op(self.key)]
        return [put_op(self.key, _value(self.item))]


def _value(item: Any) -> str:
    return json.dumps(encode_value(item), sort_keys=True, separators=(",", ":"))


def _item(raw: bytes) -> Any:
    return decode_value(json.loads(raw))


class DefinitionsMirror:
    """This node's definitions and etcd's, kept the same (see the module docstring)."""

    def __init__(
        self,
        client: EtcdClient,
        me: str,
        broker: Broker,
        admin: BrokerFacade,
        also_wait: Callable[[asyncio.Future[None]], None],
        data_dir: Path,
        queues: Observer,
        flush: Callable[[], asyncio.Future[None] | None] | None = None,
    ) -> None:
        self.client = client
        self.me = me
        self.broker = broker
        self.admin = admin
        self._also_wait = also_wait
        self._id_path = Path(data_dir) / DEFS_ID_FILE
        self._queues = queues  # the placement's observer: queues are its business
        # the node's group-committed fdatasync (None: each applied change syncs at once)
        self._flush = flush
        self._unflushed = False
        self._muted = False
        self._started = False
        # of each key: the newest revision seen (a put or a delete), and the revision it
        # was last written at while it exists (a delete compares it; absent: create)
        self._seen: dict[str, int] = {}
        self._present: dict[str, int] = {}
        self._outbox: list[_Change] = []
        self._wake = asyncio.Event()
        self._writing: dict[str, int] = {}  # key -> changes queued or in flight
        self._held: dict[str, Event] = {}  # the newest event of a key being written
        self._unsent: set[str] = set()  # keys etcd did not take: rewritten when it answers
        self._waiting: dict[str, Any] = {}  # remote puts not applicable yet (a binding first)
        self._buffer: list[Event] = []  # events that came during a reconcile
        self._reconcile_again = False
        self._tasks: set[asyncio.Future[None]] = set()
        self._writer: asyncio.Task[None] | None = None
        self._reconciling: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- starting

    async def start(self) -> None:
        """At join: reconcile, then mirror every change from now on."""
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write_loop())
        revision = await self.reconcile()
        self._started = True
        self._drain_buffer(revision)

    async def stop(self) -> None:
        self._started = False  # leaving: what the shutdown changes stays here
        tasks = [*self._tasks, *([self._writer] if self._writer else [])]
        if self._reconciling is not None:
            tasks.append(self._reconciling)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # ---------------------------------------------------------------- local -> etcd

    def observe(self, op: str, section: str, key: str | None, item: Any) -> None:
        """The definitions store's observer (the placement's for queues)."""
        if section == "queues":
            self._queues(op, section, key, item)
            return
        if section not in SECTIONS or key is None or self._muted or not self._started:
            return
        if op == "put" and self._stays_local(section, item):
            return
        ekey = defs_key(section, key)
        if op == "del" and not (
            ekey in self._present or ekey in self._writing or ekey in self._unsent
        ):
            return  # never in etcd (a binding to an exclusive queue): nothing to remove
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._outbox.append(_Change(ekey, section, item if op == "put" else None, future))
        self._writing[ekey] = self._writing.get(ekey, 0) + 1
        self._wake.set()
        self._also_wait(future)  # the change's reply waits for etcd's commit

    def _stays_local(self, section: str, item: Any) -> bool:
        """A binding to an exclusive queue lives and dies with it, on this node."""
        if section != "bindings" or item.get("destination_type") != "queue":
            return False
        vhost = self.broker.vhosts.get(str(item.get("vhost")))
        queue = None if vhost is None else vhost.classic.queues.get(str(item.get("destination")))
        return queue is not None and queue.exclusive

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                batch = self._take_batch()
                await self._write(batch)
                for change in batch:
                    self._written(change.key)

    def _take_batch(self) -> list[_Change]:
        """The oldest changes, at most BATCH, one per key (etcd refuses a key twice in a
        transaction), each with its compare."""
        batch: list[_Change] = []
        keys: set[str] = set()
        for change in self._outbox:
            if len(batch) == BATCH or change.key in keys:
                break
            keys.add(change.key)
            batch.append(change)
        del self._outbox[: len(batch)]
        for change in batch:
            change.revision = self._present.get(change.key, 0)
            if change.item is not None and change.revision == 0:
                change.compare = [key_missing(change.key)]  # new: create-if-absent
            elif change.item is None and change.revision:
                change.compare = [mod_revision_is(change.key, change.revision)]
        return batch

    async def _write(self, batch: list[_Change]) -> None:
        compare = [c for change in batch for c in change.compare]
        ops = [op for change in batch for op in change.ops()]
        try:
            result = await self.client.txn(compare, ops)
        except Exception as error:  # (not only etcd's: the writer must go on)
            for change in batch:
                self._failed(change, error)
            return
        if result.succeeded:
            for change in batch:
                self._done(change, result.revision)
            return
        for change in batch:  # some compare failed: each on its own, to tell which
            await self._write_one(change)

    async def _write_one(self, change: _Change) -> None:
        try:
            result = await self.client.txn(change.compare, change.ops(), [range_op(change.key)])
            found = result.ranges()
            theirs = _item(found[0].value) if found else None
        except Exception as error:
            self._failed(change, error)
            return
        if result.succeeded:
            self._done(change, result.revision)
            return
        if change.item is not None and theirs is not None and _same(theirs, change.item):
            self._saw(change.key, found[0].mod_revision, present=True)
            settle(change.future, None)  # the same object, declared elsewhere too
            return
        what = describe_key(change.key)
        settle(
            change.future,
            ReplicationFailed(
                f"{what} was changed at the same time through another cluster node; "
                "the cluster keeps that change"
            ),
        )

    def _done(self, change: _Change, revision: int) -> None:
        self._saw(change.key, revision, present=change.item is not None)
        self._unsent.discard(change.key)
        settle(change.future, None)

    def _failed(self, change: _Change, error: Exception) -> None:
        verb = "remove" if change.item is None else "record"
        what = describe_key(change.key)
        settle(change.future, ReplicationFailed(f"etcd did not {verb} {what}: {error}"))
        if not self._unsent:
            self._track(self._send_later())
        self._unsent.add(change.key)

    def _written(self, key: str) -> None:
        """A write of ``key`` ended: an event that came meanwhile and is newer applies."""
        left = self._writing.get(key, 1) - 1
        if left > 0:
            self._writing[key] = left
            return
        self._writing.pop(key, None)
        held = self._held.pop(key, None)
        if held is not None:
            self._apply_event(held)
            self._synced()

    async def _send_later(self) -> None:
        """Changes etcd did not take: write each key's current local state once it answers."""
        while self._unsent:
            await asyncio.sleep(RETRY_S)
            for key in sorted(self._unsent):
                if key in self._writing:
                    continue
                item = self._local_item(key)
                try:
                    if item is None:
                        await self.client.delete(key)
                        revision = 0
                    else:
                        revision = await self.client.put(key, _value(item))
                except (EtcdUnavailable, EtcdError) as error:
                    log.debug("definitions not in etcd yet: %s", error)
                    break
                self._saw(key, revision, present=item is not None)
                self._unsent.discard(key)
                self._held.pop(key, None)  # older than this node's write

    def _saw(self, key: str, revision: int, present: bool) -> None:
        if revision:
            self._seen[key] = max(self._seen.get(key, 0), revision)
        if present:
            self._present[key] = revision
        else:
            self._present.pop(key, None)

    def _local_item(self, key: str) -> Any:
        found = store_key_of(key)
        return None if found is None else self.broker.store.get(*found)

    # ---------------------------------------------------------------- etcd -> local

    def apply(self, events: list[Event], reset: bool) -> None:
        """The watched ``sievemq/defs/`` events (reset: etcd read anew)."""
        if reset:
            if self._started:
                self._request_reconcile()
            return
        if not self._started or self._reconciling is not None:
            self._buffer.extend(events)
            return
        try:
            for event in events:
                self._apply_event(event)
            self._retry_waiting()
        except Exception:  # the membership's watch feeds us: it must go on
            log.exception("cannot apply definitions from etcd")
        self._synced()

    def _apply_event(self, event: Event) -> None:
        key = event.kv.key
        found = store_key_of(key)
        if found is None:
            return
        if event.kv.mod_revision <= self._seen.get(key, 0):
            return  # seen already (our own write, or older than it)
        if key in self._writing or key in self._unsent:
            self._held[key] = event  # ours is being written: the newer of the two wins
            return
        section, store_key = found
        self._waiting.pop(key, None)
        if event.kind == "delete":
            self._saw(key, event.kv.mod_revision, present=False)
            local = self.broker.store.get(section, store_key)
            if local is not None:
                self._muted_apply(section, local, deleted=True)
            return
        self._saw(key, event.kv.mod_revision, present=True)
        try:
            item = _item(event.kv.value)
        except ValueError:
            log.error("ignoring %s in etcd: not JSON", key)
            return
        self._put(key, section, item)

    def _put(self, key: str, section: str, item: Any) -> None:
        local = self.broker.store.get(section, item_key(section, item))
        if local is not None and _same(local, item):
            return
        if not self._muted_apply(section, item, deleted=False):
            self._waiting[key] = item

    def _retry_waiting(self) -> None:
        for key, item in list(self._waiting.items()):
            found = store_key_of(key)
            if found is not None and self._muted_apply(found[0], item, deleted=False):
                self._waiting.pop(key, None)

    def _muted_apply(self, section: str, item: Any, deleted: bool) -> bool:
        """Apply a change made elsewhere (mirror muted); False when it cannot be yet (a
        binding whose queue or exchange this node does not know yet)."""
        self._muted = True
        store = self.broker.store
        deferred = store.defer_sync
        if self._flush is not None:  # written now, synced off the loop by _synced()
            store.defer_sync = self._unflushed = True
        try:
            apply_change(self.broker, self.admin, section, item, deleted)
            return True
        except AMQPError as error:
            log.debug("not applied yet: %s: %s", describe(section, item), error.explanation)
            return False
        except Exception:
            log.exception("cannot apply %s from the cluster", describe(section, item))
            return True
        finally:
            self._muted = False
            store.defer_sync = deferred

    def _synced(self) -> None:
        """Start the fdatasync of the changes applied from elsewhere (in a worker thread,
        with the node's other definitions changes)."""
        if not self._unflushed or self._flush is None:
            return
        self._unflushed = False
        pending = self._flush()
        if pending is not None:
            pending.add_done_callback(_log_failure)

    def _drain_buffer(self, revision: int) -> None:
        events, self._buffer = self._buffer, []
        for event in events:
            if event.kv.mod_revision > revision:
                self._apply_event(event)
        self._retry_waiting()
        self._synced()

    # ---------------------------------------------------------------- reconciling

    def _request_reconcile(self) -> None:
        if self._reconciling is not None:
            self._reconcile_again = True
            return
        self._reconciling = asyncio.ensure_future(self._reconcile_until_done())

    async def _reconcile_until_done(self) -> None:
        try:
            while True:
                self._reconcile_again = False
                try:
                    revision = await self.reconcile()
                except (EtcdUnavailable, EtcdError) as error:
                    log.warning("definitions not reconciled with etcd yet: %s", error)
                    await asyncio.sleep(RETRY_S)
                    self._reconcile_again = True
                    continue
                if not self._reconcile_again:
                    break
        finally:
            self._reconciling = None
        self._drain_buffer(revision)

    async def reconcile(self) -> int:
        """Make this node's definitions and etcd's the same (the module docstring says
        which wins); returns the revision etcd's were read at."""
        fresh = uuid.uuid4().hex
        existing = await self.client.create(DEFS_ID, fresh)
        cluster_id = fresh if existing is None else existing.value.decode()
        offer = cluster_id != self._local_id()
        kvs, revision = await self.client.get_prefix(DEFS)
        if offer:
            await self._offer({kv.key: kv for kv in kvs})
            kvs, revision = await self.client.get_prefix(DEFS)
        remote = {kv.key: kv for kv in kvs}
        busy = set(self._writing) | self._unsent
        self._waiting.clear()
        # what was seen before may be of an etcd that lost its data (its revisions start
        # again from 1): only this read counts
        self._seen = {key: revision for key in self._seen}
        self._present = {}
        for kv in sorted(remote.values(), key=lambda kv: _order(kv.key)):
            self._present[kv.key] = kv.mod_revision
            if kv.key in busy:
                continue
            try:
                item = _item(kv.value)
            except ValueError:
                continue
            found = store_key_of(kv.key)
            if found is not None:
                self._put(kv.key, found[0], item)
        self._retry_waiting()
        if not offer:
            for section, key, item in reversed(self._local_objects()):
                if key not in remote and key not in busy:
                    log.info("%s was deleted in the cluster meanwhile", describe(section, item))
                    self._muted_apply(section, item, deleted=True)
        self._synced()
        self._id_path.write_text(cluster_id + "\n", encoding="ascii")
        log.info(
            "definitions reconciled with etcd (%s): %d objects",
            "offered this node's" if offer else "etcd's kept",
            len(remote),
        )
        return revision

    def _local_id(self) -> str | None:
        try:
            return self._id_path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None

    async def _offer(self, remote: dict[str, Any]) -> None:
        """This node's objects etcd lacks, create-if-absent; a different one is logged."""
        for section, key, item in self._local_objects():
            if key in remote:
                self._conflict(section, item, _item(remote[key].value))
                continue
            theirs = await self.client.create(key, _value(item))
            if theirs is not None:  # another node offered it first
                self._conflict(section, item, _item(theirs.value))

    def _local_objects(self) -> list[tuple[str, str, Any]]:
        """(section, etcd key, item) of this node's cluster-wide objects, in SECTIONS order."""
        return [
            (section, defs_key(section, store_key), item)
            for section in SECTIONS
            for store_key, item in self.broker.store.items(section)
            if store_key is not None and not self._stays_local(section, item)
        ]

    def _conflict(self, section: str, mine: Any, theirs: Any) -> None:
        if _same(mine, theirs) or _default_user(self.broker, section, mine, theirs):
            return
        log.warning(
            "definitions conflict: %s differs on node %s from the cluster's; the cluster's "
            "is kept (ours: %s; the cluster's: %s)",
            describe(section, mine),
            self.me,
            canonical(mine),
            canonical(theirs),
        )

    def _track(self, work: Any) -> None:
        task: asyncio.Future[None] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


# ---------------------------------------------------------------- applying one change


def apply_change(
    broker: Broker, admin: BrokerFacade, section: str, item: dict[str, Any], deleted: bool
) -> None:
    """Make one object as ``item`` says (or delete it) through the model code the same
    change made on this node goes through; raises AMQPError when it cannot be yet."""
    if section == "vhosts":
        _apply_vhost(broker, admin, item, deleted)
    elif section == "users":
        if deleted:
            broker.users.delete(str(item["name"]))
        else:
            broker.users.put(User.from_json(item))
        broker.save_definitions()
    elif section == "global_parameters":
        name = str(item["name"])
        if deleted:
            broker.global_parameters.pop(name, None)
            broker.save_global_parameter(name)
        else:
            admin.put_global_parameter(name, item["value"])
    elif section in ("policies", "parameters"):
        _apply_policy(broker, admin, section, item, deleted)
    elif section == "exchanges":
        _apply_exchange(broker, admin, item, deleted)
    elif section == "bindings":
        vhost = broker.vhost(str(item["vhost"]))
        args = (
            dest_kind(str(item["destination_type"])),
            str(item["destination"]),
            str(item["source"]),
            str(item.get("routing_key", "")),
            dict(item.get("arguments") or {}),
        )
        if deleted:
            vhost.unbind(*args)
        else:
            vhost.bind(*args)


def _apply_vhost(broker: Broker, admin: BrokerFacade, item: dict[str, Any], deleted: bool) -> None:
    name = str(item["name"])
    if deleted:
        if name in broker.vhosts:
            admin.delete_vhost(name)  # its connections are closed, as a local delete does
        return
    admin.add_vhost(name, item.get("description"), item.get("tags"), item.get("default_queue_type"))
    broker.vhost(name).limits = {str(k): int(v) for k, v in dict(item.get("limits") or {}).items()}
    broker.save_definitions()


def _apply_policy(
    broker: Broker, admin: BrokerFacade, section: str, item: dict[str, Any], deleted: bool
) -> None:
    operator = section == "parameters"
    if operator and item.get("component") != policies.OPERATOR_COMPONENT:
        return
    vhost, name = str(item["vhost"]), str(item["name"])
    if deleted:
        if broker.vhost(vhost).clear_policy(name, operator):
            broker.save_policy(vhost, name, operator)
        return
    admin.put_policy(vhost, name, item["value"] if operator else item, operator)


def _apply_exchange(
    broker: Broker, admin: BrokerFacade, item: dict[str, Any], deleted: bool
) -> None:
    vhost = broker.vhost(str(item["vhost"]))
    name = str(item["name"])
    if deleted:
        vhost.delete_exchange(name)
        return
    kind = str(item["type"])
    auto_delete, internal = bool(item.get("auto_delete")), bool(item.get("internal"))
    arguments = dict(item.get("arguments") or {})
    local = vhost.exchanges.get(name)
    if local is not None and (local.type, local.auto_delete, local.internal, local.arguments) != (
        kind,
        auto_delete,
        internal,
        arguments,
    ):
        vhost.delete_exchange(name)  # the cluster's version replaces this node's
    admin.declare_exchange(
        vhost.name,
        name,
        kind,
        durable=True,
        auto_delete=auto_delete,
        internal=internal,
        arguments=arguments,
    )


# ---------------------------------------------------------------- helpers


def _same(a: Any, b: Any) -> bool:
    return bool(canonical(a) == canonical(b))


def _default_user(broker: Broker, section: str, mine: Any, theirs: Any) -> bool:
    """Every fresh node makes the default user with its own salt: not a conflict."""
    if section != "users" or not isinstance(mine, dict) or not isinstance(theirs, dict):
        return False
    if mine.get("name") != broker.settings.default_user:
        return False
    strip = ("password_hash",)
    return _same(
        {k: v for k, v in mine.items() if k not in strip},
        {k: v for k, v in theirs.items() if k not in strip},
    )


def _order(key: str) -> tuple[int, str]:
    section = key[len(DEFS) :].partition("/")[0]
    return (SECTIONS.index(section) if section in SECTIONS else len(SECTIONS), key)


def _log_failure(future: asyncio.Future[None]) -> None:
    error = None if future.cancelled() else future.exception()
    if error is not None:
        log.error("definitions applied from the cluster not synced to disk: %s", error)
