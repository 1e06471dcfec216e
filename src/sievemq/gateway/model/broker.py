"""The broker model: vhosts, users and the durable definitions behind them.

No sockets and no asyncio: the connection handler calls these methods synchronously. On
start the broker loads ``definitions.log`` and reopens every stream from
``<data_dir>/streams/<safe vhost>/<safe name>`` with its declared arguments.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sievemq.amqp.errors import NotAllowed, NotFound, PreconditionFailed
from sievemq.gateway.model import definitions, policies
from sievemq.gateway.model.classic.message import DEFAULT_WINDOW, MemoryBudget, MemoryWindow
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.classic.queue import message_stats as classic_message_stats
from sievemq.gateway.model.classic.vhost import ClassicQueues
from sievemq.gateway.model.directory import QueueDirectory
from sievemq.gateway.model.exchanges import Exchange
from sievemq.gateway.model.routing import Binding, dest_kind
from sievemq.gateway.model.stream.arguments import StreamArguments, stream_arguments_from_table
from sievemq.gateway.model.stream.queue import StreamQueue
from sievemq.gateway.model.users import User, Users
from sievemq.gateway.model.vhost import VirtualHost
from sievemq.storage import (
    Durability,
    Message,
    PendingStream,
    Stream,
    StreamConfig,
    StreamSurvey,
    layout,
    survey,
)
from sievemq.storage.layout import QUEUES_DIR, STREAMS_DIR, safe_name
from sievemq.storage.queue_log import QueueLog

log = logging.getLogger(__name__)
DEFAULT_VHOST_DESCRIPTION = "Default virtual host"  # what RabbitMQ calls its "/"


@dataclass(frozen=True)
class BrokerSettings:
    """What the broker needs from the server settings (built at the edge, passed down)."""

    durability: Durability = Durability.BATCH
    sync_interval_ms: int = 200
    default_vhost: str = "/"
    default_user: str = "guest"
    default_password: str = "guest"
    default_user_loopback_only: bool = True
    default_queue_type: str = "classic"  # what queue.declare without x-queue-type makes
    # ready messages (and body bytes) a classic/quorum queue holds in memory; past them a
    # durable queue's persistent messages are read back from its log
    queue_window: MemoryWindow = DEFAULT_WINDOW
    # a cluster node (--cluster-etcd): a stored binding to a queue another node leads is
    # dropped at the restore and comes back from etcd once the node joined
    cluster: bool = False


@dataclass
class MessageCounters:
    """Node-wide message counters the queues cannot hold (RabbitMQ's overview shows them).

    Messages are counted once each, however many queues they are routed to (a queue's own
    ``published`` counts its copy). AMQP 0-9-1 (and HTTP) publishes are counted per read
    batch of frames; those routed are the received minus the unroutable ones."""

    received: int = 0  # AMQP 0-9-1 and HTTP publishes accepted (routed or not)
    stream_received: int = 0  # stream-protocol entries of existing, permitted publishers
    stream_routed: int = 0  # of them written (not errors, not duplicates)
    stream_confirmed: int = 0  # stream-protocol publishing ids confirmed stored

    confirmed: int = 0  # publisher confirms (basic.ack/nack) sent, all channels ever
    returned_unroutable: int = 0  # mandatory publishes returned as unroutable
    dropped_unroutable: int = 0  # publishes routed nowhere and dropped
    # message_stats of the queues deleted since the start, per queue type (classic, quorum,
    # stream): the node's totals never go back when a queue goes, as RabbitMQ's
    retired: dict[str, dict[str, int]] = field(default_factory=dict)
    # deliveries and acks of consumers on this node reading its replicas of streams other
    # nodes lead, per (vhost, stream) held now (a cluster's replication sets it): the node
    # counts them, as RabbitMQ counts a delivery at the channel's node; the copies it no
    # longer holds are in ``retired``
    replica_reads: Callable[[], dict[tuple[str, str], dict[str, int]]] = field(default=dict)

    def retire(self, kind: str, counts: dict[str, int]) -> None:
        sums = self.retired.setdefault(kind, {})
        for name, count in counts.items():
            sums[name] = sums.get(name, 0) + count


class Broker:
    """Vhosts and users of one SieveMQ server, persisted under ``data_dir``."""

    def __init__(self, data_dir: Path, settings: BrokerSettings | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.settings = settings or BrokerSettings()
        self.users = Users()
        self.vhosts: dict[str, VirtualHost] = {}
        self.global_parameters: dict[str, Any] = {}  # RabbitMQ's global runtime parameters
        self.counters = MessageCounters()
        # the body bytes all durable classic/quorum queues hold in memory together
        self.queue_memory = MemoryBudget(self.settings.queue_window.bytes)
        # the runtime's writer of one message into a stream (``Node`` sets it: its appender);
        # dead-letters routed to a stream go through it, and are dropped while it is None
        self.stream_writer: Callable[[StreamQueue, Message], None] | None = None
        # where a queue this node does not hold lives (a cluster sets it; None: single node)
        self.directory: QueueDirectory | None = None
        # told of each stream a declare creates here, (vhost, name), in the declare's own
        # turn (a cluster sets it: commit by majority gates a stream this node leads)
        self.stream_declared: Callable[[str, str], None] = lambda vhost, name: None
        self._loading = True
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # the replay and the restore make no cyclic garbage, only live objects (hundreds of
        # thousands with 50,000 streams): the collector's passes over them are pure cost
        collecting = gc.isenabled()
        gc.disable()
        try:
            self.store = definitions.DefinitionStore(self.data_dir)
            stored = self.store.load()
            self._settle_tombstones(stored)  # before any queue's files are opened
            # the definitions to write back after the start: the defaults of a new node,
            # or what the restore dropped (a dangling binding); an exact restore writes nothing
            self._restore_dropped = False
            if stored is None:
                self._create_defaults()
            else:
                self._restore(stored)
        finally:
            if collecting:
                gc.enable()
        for vhost in self.vhosts.values():
            vhost.touched.clear()
        if stored is not None and layout.remove_deleted_vhost_dirs(self.data_dir, set(self.vhosts)):
            log.info("removed the files of a vhost deleted just before a crash")
        layout.remove_empty_vhost_dirs(self.data_dir, set(self.vhosts))
        self._loading = False
        if stored is None or self._restore_dropped:
            self.save_definitions(everything=True)

    def _settle_tombstones(self, stored: dict[str, Any] | None) -> None:
        """The deleted queues' directories a crash left: a delete the definitions do not
        hold yet (never durable, never answered) is undone, with its data; the others go."""
        live: set[tuple[str, str, str]] = set()
        vhosts = {item["name"] for item in (stored or {}).get("vhosts", [])}
        for item in (stored or {}).get("queues", []):
            if item["vhost"] in vhosts:
                kind = QUEUES_DIR if item.get("type") in ("classic", "quorum") else STREAMS_DIR
                live.add((kind, safe_name(item["vhost"]), safe_name(item["name"])))
        restored, removed = layout.settle_tombstones(self.data_dir, live)
        if removed:
            log.info("removed %d deleted queue(s) a crash left behind", removed)
        if restored:
            log.warning("%d queue(s) deleted just before a crash are back", restored)

    def _release_files(self, tombstone: Path) -> None:
        """A deleted queue's tombstone goes once the delete is durable (``after_synced``;
        the delete was committed just before: a crash until then puts it back)."""
        self.store.after_synced(lambda: layout.remove_later(tombstone))

    # ------------------------------------------------------------------ setup

    def _create_defaults(self) -> None:
        s = self.settings
        self.add_vhost(s.default_vhost)
        self.users.add(
            s.default_user,
            s.default_password,
            tags=("administrator",),
            vhosts={s.default_vhost},
            loopback_only=s.default_user_loopback_only,
        )

    def _restore(self, data: dict[str, Any]) -> None:
        for item in data.get("vhosts", []):
            host = self.add_vhost(item["name"])
            host.limits = {str(k): int(v) for k, v in dict(item.get("limits") or {}).items()}
            if "description" in item:  # stores written before vhost metadata have none
                host.description = str(item["description"])
            host.tags = [str(t) for t in item.get("tags") or []]
            host.classic.default_type = str(
                item.get("default_queue_type") or self.settings.default_queue_type
            )
        for item in data.get("users", []):
            self.users.put(User.from_json(item))
        # a vhost's delete writes its own line first: a crash before the users' line
        # leaves permissions in a vhost that is gone, forgotten here (and written back)
        for stale in {v for u in self.users for v in u.permissions} - set(self.vhosts):
            self.users.forget_vhost(stale)
            self._restore_dropped = True
        for item in data.get("global_parameters", []):
            self.global_parameters[str(item["name"])] = item["value"]
        for item in data.get("policies", []):  # before the queues they apply to
            vhost = self.vhosts.get(item["vhost"])
            if vhost is not None:
                policy = policies.parse(vhost.name, str(item["name"]), item)
                vhost.policies[policy.name] = policy
        for item in data.get("parameters", []):
            vhost = self.vhosts.get(item["vhost"])
            if vhost is not None and item.get("component") == policies.OPERATOR_COMPONENT:
                policy = policies.parse(vhost.name, str(item["name"]), item["value"], True)
                vhost.operator_policies[policy.name] = policy
        for item in data.get("exchanges", []):
            vhost = self.vhosts.get(item["vhost"])
            if vhost is None:  # its vhost's delete was cut short by a crash
                self._restore_dropped = True
                continue
            if item["name"] in vhost.exchanges:
                continue
            vhost.declare_exchange(
                item["name"],
                item["type"],
                durable=True,
                auto_delete=bool(item.get("auto_delete", False)),
                internal=bool(item.get("internal", False)),
                arguments=item.get("arguments") or {},
            )
        # streams declared alike share one validated StreamArguments (50,000 streams with
        # the same arguments are validated once)
        parsed: dict[tuple[str, tuple[tuple[str, str, Any], ...]], StreamArguments] = {}
        for item in data.get("queues", []):
            vhost = self.vhosts.get(item["vhost"])
            if vhost is None:
                self._restore_dropped = True
                continue
            if item.get("type") in ("classic", "quorum"):
                vhost.classic.restore(
                    item["name"],
                    item["type"],
                    item.get("arguments") or {},
                    bool(item.get("auto_delete")),
                )
                continue
            stream_args = _stream_arguments(parsed, item.get("arguments") or {}, item, vhost.name)
            vhost.restore_queue(item["name"], stream_args)
        for item in data.get("bindings", []):
            vhost = self.vhosts.get(item["vhost"])
            if vhost is None:
                self._restore_dropped = True
                continue
            try:
                vhost.bind(
                    dest_kind(item["destination_type"]),
                    item["destination"],
                    item["source"],
                    item["routing_key"],
                    item.get("arguments") or {},
                )
            except (NotFound, PreconditionFailed) as exc:  # a dangling binding is dropped
                self._restore_dropped = True
                if self.settings.cluster and isinstance(exc, NotFound):
                    log.info("stored binding %r is the cluster's to restore", item)
                else:
                    log.warning("dropping stored binding %r: %s", item, exc.reply_text)

    # ------------------------------------------------------------------ streams

    def stream_config(self, arguments: StreamArguments) -> StreamConfig:
        """The storage configuration of a stream with these arguments."""
        return StreamConfig(
            max_segment_bytes=arguments.max_segment_size_bytes,
            filter_size_bytes=arguments.filter_size_bytes,
            compression=arguments.compression,
            max_bytes=arguments.max_length_bytes,
            max_age_ms=arguments.max_age_ms,
            durability=self.settings.durability,
            sync_interval_ms=self.settings.sync_interval_ms,
        )

    def _open_stream(self, vhost: str, name: str, arguments: StreamArguments) -> Stream:
        directory = definitions.stream_directory(self.data_dir, vhost, name)
        directory.mkdir(parents=True, exist_ok=True)
        return Stream.open(directory, self.stream_config(arguments))

    def _new_stream(
        self, vhost: str, name: str, arguments: StreamArguments
    ) -> Stream | Callable[[], Stream]:
        """The storage of a stream declared now. Inside a change whose definitions sync
        runs in a worker thread (``store.defer_sync``), its files are created and fsynced
        by that thread too, before the sync: the declare is answered once both are durable
        and the loop never waits for them. Otherwise (start, tests) it is opened at once."""
        if not self.store.defer_sync:
            return self._open_stream(vhost, name, arguments)
        directory = definitions.stream_directory(self.data_dir, vhost, name)
        pending = PendingStream(directory, self.stream_config(arguments))
        self.store.defer_job(pending.create)
        return pending.open

    def _survey_stream(self, vhost: str, name: str) -> StreamSurvey | None:
        return survey(definitions.stream_directory(self.data_dir, vhost, name))

    def _write_stream(self, queue: Any, message: Message) -> None:
        if self.stream_writer is not None and isinstance(queue, StreamQueue):
            self.stream_writer(queue, message)

    def _remove_stream(self, queue: StreamQueue) -> None:
        """A deleted stream's files go (its delete committed just before): renamed to a
        tombstone now, removed in the background once the delete is durable
        (``Stream.delete``, ``after_synced``). One not opened since the start is not
        opened for it (its recovery reads the files, on the event loop)."""
        ticket = self.store.writes  # (the release may run in the thread of an append)

        def release(tombstone: Path) -> None:
            self.store.after_synced(lambda: layout.remove_later(tombstone), ticket)

        if queue.discard_unopened():
            directory = definitions.stream_directory(self.data_dir, queue.vhost, queue.name)
            tombstone = layout.bury(directory)
            if tombstone is not None:
                release(tombstone)
            return
        queue.stream.delete(release)

    def _open_queue_log(self, vhost: str, name: str) -> QueueLog:
        """The message log of a durable classic/quorum queue (recovered by the queue)."""
        return QueueLog(definitions.queue_directory(self.data_dir, vhost, name))

    def queues(self) -> Iterator[StreamQueue]:
        for vhost in self.vhosts.values():
            yield from vhost.queues.values()

    def close(self) -> None:
        """Sync and close every stream, then the definitions log."""
        for vhost in self.vhosts.values():
            vhost.close()
        self.store.close()

    # ------------------------------------------------------------------ vhosts

    def add_vhost(self, name: str) -> VirtualHost:
        """Create a vhost (idempotent)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            # queues, exchanges and bindings persist through _vhost_changed, which writes
            # only what a change touched (a classic queue's change names the queue)
            classic = ClassicQueues(
                name,
                self.settings.default_queue_type,
                self._open_queue_log,
                lambda queue: self._classic_changed(name, queue),
                self.settings.queue_window,
            )
            classic.write_stream = self._write_stream
            classic.budget = self.queue_memory
            classic.on_deleted = self._retire
            classic.release_files = self._release_files
            vhost = VirtualHost(
                name,
                self._open_stream,
                self._remove_stream,
                lambda: self._vhost_changed(name),
                classic,
                self._survey_stream,
                self._new_stream,
            )
            vhost.on_deleted = self._retire
            vhost.on_declared = lambda queue: self.stream_declared(name, queue)
            vhost.elsewhere = lambda queue: self._led_elsewhere(name, queue)
            vhost.locked_elsewhere = lambda queue: self._owned_elsewhere(name, queue)
            if name == self.settings.default_vhost:
                vhost.description = DEFAULT_VHOST_DESCRIPTION
            self.vhosts[name] = vhost
            self.save_definitions()
        return vhost

    def _led_elsewhere(self, vhost: str, queue: str) -> bool:
        directory = self.directory
        return directory is not None and directory.leader_elsewhere(vhost, queue) is not None

    def _owned_elsewhere(self, vhost: str, queue: str) -> bool:
        directory = self.directory
        return directory is not None and directory.exclusive_elsewhere(vhost, queue) is not None

    def _retire(self, queue: StreamQueue | ClassicQueue) -> None:
        """A queue is being deleted: its counts stay in the node's totals (a stream whose
        files cannot be read is deleted all the same, its counts lost)."""
        if isinstance(queue, StreamQueue):
            try:
                counts = queue.message_stats()
            except Exception:
                log.exception("cannot read the counts of %r before its delete", queue)
                return
            self.counters.retire("stream", counts)
        else:
            kind = "quorum" if queue.kind == "quorum" else "classic"
            self.counters.retire(kind, classic_message_stats(queue))
            if queue.exclusive and self.directory is not None:
                self.directory.release_exclusive(queue.vhost, queue.name)  # cluster-wide

    def set_vhost_metadata(
        self,
        name: str,
        description: str | None = None,
        tags: list[str] | None = None,
        default_queue_type: str | None = None,
    ) -> None:
        """Change what is given of a vhost's description, tags and default queue type (the
        type a queue.declare without x-queue-type makes there) and persist it."""
        vhost = self.vhost(name)
        if description is not None:
            vhost.description = description
        if tags is not None:
            vhost.tags = list(tags)
        if default_queue_type is not None:
            vhost.classic.default_type = default_queue_type
        self.save_definitions()

    def delete_vhost(self, name: str) -> None:
        """Delete a vhost with all its queues: their directories are renamed to tombstones
        and removed by a background thread (``Stream.delete``, ``layout.discard``); the vhost's
        own (then empty) directories go at the next start (``remove_empty_vhost_dirs``).

        The vhost's own definitions line is written first, in a commit of its own, before any
        queue's line or file moves: a crash before it leaves the vhost whole with its data; a
        crash after it leaves it gone whole (the start drops its queues' and exchanges' records
        and permissions, and removes its directories: ``remove_deleted_vhost_dirs``)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            raise NotFound(f"no vhost '{name}'")
        self.store.delete("vhosts", {"name": name})
        self.store.commit()
        for queue_name in list(vhost.queues) + list(vhost.classic.queues):
            vhost.delete_queue(queue_name)
        for b in vhost.bindings():
            self.store.delete("bindings", self._binding_record(vhost, b))
        for x in vhost.exchanges.values():
            self.store.delete("exchanges", {"vhost": name, "name": x.name})
        del self.vhosts[name]
        self.users.forget_vhost(name)
        self.save_definitions()

    def vhost(self, name: str) -> VirtualHost:
        """The vhost; 404 NOT_FOUND when it does not exist."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            raise NotFound(f"no vhost '{name}'")
        return vhost

    def open_vhost(self, user: User, name: str) -> VirtualHost:
        """connection.open: 530 NOT_ALLOWED texts as RabbitMQ's."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            raise NotAllowed(f"vhost {name} not found")
        if not user.may_use(name):
            raise NotAllowed(f"access to vhost '{name}' refused for user '{user.name}'")
        return vhost

    def authenticate(self, username: str, password: str) -> User | None:
        return self.users.authenticate(username, password)

    # ------------------------------------------------------------------ persistence

    @staticmethod
    def _exchange_record(vhost: VirtualHost, x: Exchange) -> dict[str, Any] | None:
        """An exchange's definitions record; None when it is not stored (transient or built in)."""
        if not x.durable or x.builtin:
            return None
        return {
            "vhost": vhost.name,
            "name": x.name,
            "type": x.type,
            "durable": True,
            "auto_delete": x.auto_delete,
            "internal": x.internal,
            "arguments": x.arguments,
        }

    @staticmethod
    def _queue_record(vhost: VirtualHost, q: StreamQueue) -> dict[str, Any]:
        return {"vhost": vhost.name, "name": q.name, "arguments": q.arguments.table}

    @staticmethod
    def _classic_record(vhost: VirtualHost, c: ClassicQueue) -> dict[str, Any] | None:
        """A classic or quorum queue's definitions record; None when it is not stored
        (transient or exclusive)."""
        if not c.durable or c.exclusive:
            return None
        return {
            "vhost": vhost.name,
            "name": c.name,
            "type": c.kind,
            "durable": True,
            "auto_delete": c.auto_delete,
            "arguments": c.arguments.table,
        }

    @staticmethod
    def _binding_record(vhost: VirtualHost, b: Binding) -> dict[str, Any]:
        return {
            "vhost": vhost.name,
            "source": b.source,
            "destination_type": b.destination_kind,
            "destination": b.destination,
            "routing_key": b.routing_key,
            "arguments": b.arguments,
        }

    def definitions(self) -> dict[str, Any]:
        """Everything durable, shaped like RabbitMQ's definitions export."""
        exchanges: list[dict[str, Any]] = []
        queues: list[dict[str, Any]] = []
        bindings: list[dict[str, Any]] = []
        for vhost in self.vhosts.values():
            for x in vhost.exchanges.values():
                if (record := self._exchange_record(vhost, x)) is not None:
                    exchanges.append(record)
            for q in vhost.queues.values():
                queues.append(self._queue_record(vhost, q))
            for c in vhost.classic.queues.values():
                if (record := self._classic_record(vhost, c)) is not None:
                    queues.append(record)
            for b in vhost.bindings():
                if vhost.is_durable(b):
                    bindings.append(self._binding_record(vhost, b))
        bindings.sort(key=lambda d: (d["vhost"], d["source"], d["destination"], d["routing_key"]))
        settings = self._settings_definitions()
        return {
            "vhosts": settings.pop("vhosts"),
            "users": settings.pop("users"),
            "exchanges": exchanges,
            "queues": queues,
            "bindings": bindings,
        } | settings

    def _settings_definitions(self) -> dict[str, Any]:
        """The sections whose size does not grow with the queues: vhosts, users, policies,
        parameters, global parameters."""
        return {
            "vhosts": [
                {"name": n}
                | v.metadata()
                | ({"limits": dict(sorted(v.limits.items()))} if v.limits else {})
                for n, v in self.vhosts.items()
            ],
            "users": [u.to_json() for u in self.users],
            "policies": [
                p.to_json() for v in self.vhosts.values() for _, p in sorted(v.policies.items())
            ],
            "parameters": [
                policies.operator_parameter(p)
                for v in self.vhosts.values()
                for _, p in sorted(v.operator_policies.items())
            ],
            "global_parameters": [
                {"name": n, "value": value} for n, value in sorted(self.global_parameters.items())
            ],
        }

    def save_definitions(self, everything: bool = False) -> None:
        """Persist vhosts, users, policies and parameters now (after changing users or
        vhosts directly): only what differs from the stored ones is written, and queues,
        exchanges and bindings (persisted by ``_vhost_changed`` as they change) are not
        compared, so the cost does not grow with the number of queues. ``everything``
        compares those too (after a restore that dropped something)."""
        if self._loading:
            return
        if everything:
            self.store.save(self.definitions())
        else:
            self.store.save(self._settings_definitions(), only_given=True)

    def _classic_changed(self, vhost: str, queue: str) -> None:
        """A durable classic or quorum queue was declared or deleted: persist it alone."""
        v = self.vhosts.get(vhost)
        if v is not None:
            v.touched.append(("queue", queue))
            self._vhost_changed(vhost)

    def save_policy(self, vhost: str, name: str, operator: bool = False) -> None:
        """Persist one policy (or operator policy) as it now is, or its removal: one line
        and one sync, however many queues and streams there are."""
        v = self.vhosts.get(vhost)
        policy = None
        if v is not None:
            policy = (v.operator_policies if operator else v.policies).get(name)
        if operator:
            key = {"component": policies.OPERATOR_COMPONENT, "vhost": vhost, "name": name}
            item = None if policy is None else policies.operator_parameter(policy)
            section = "parameters"
        else:
            key = {"vhost": vhost, "name": name}
            item = None if policy is None else policy.to_json()
            section = "policies"
        if item is None:
            self.store.delete(section, key)
        else:
            self.store.put(section, item)
        self.store.commit()

    def save_global_parameter(self, name: str) -> None:
        """Persist one global parameter as it now is, or its removal."""
        if name in self.global_parameters:
            self.store.put(
                "global_parameters", {"name": name, "value": self.global_parameters[name]}
            )
        else:
            self.store.delete("global_parameters", {"name": name})
        self.store.commit()

    def _vhost_changed(self, name: str) -> None:
        """A vhost changed durable definitions: persist the objects it touched, nothing
        else (one append and one fdatasync, whatever the number of streams)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            return
        touched, vhost.touched = vhost.touched, []
        if self._loading:
            return
        store = self.store
        for kind, key in touched:
            if kind in ("queue", "exchange"):
                record: dict[str, Any] | None = None
                if kind == "exchange":
                    section = "exchanges"
                    if (x := vhost.exchanges.get(key)) is not None:
                        record = self._exchange_record(vhost, x)
                else:
                    section = "queues"
                    if (queue := vhost.queues.get(key)) is not None:
                        record = self._queue_record(vhost, queue)
                    elif (classic := vhost.classic.queues.get(key)) is not None:
                        record = self._classic_record(vhost, classic)
                if record is None:  # deleted, or not stored
                    store.delete(section, {"vhost": name, "name": key})
                else:
                    store.put(section, record)
            else:
                record = self._binding_record(vhost, key)
                source = vhost.exchanges.get(key.source)
                if source is not None and key in source.bindings and vhost.is_durable(key):
                    store.put("bindings", record)
                else:
                    store.delete("bindings", record)
        store.commit()


def _stream_arguments(
    parsed: dict[tuple[str, tuple[tuple[str, str, Any], ...]], StreamArguments],
    table: dict[str, Any],
    item: dict[str, Any],
    vhost: str,
) -> StreamArguments:
    """The stream arguments of a restored queue, validated once per distinct table."""
    try:
        key = (vhost, tuple(sorted((k, type(v).__name__, v) for k, v in table.items())))
        hash(key)
    except TypeError:  # an unhashable value (a nested table): not shared
        return stream_arguments_from_table(table, item["name"], vhost)
    arguments = parsed.get(key)
    if arguments is None:
        arguments = parsed[key] = stream_arguments_from_table(table, item["name"], vhost)
    return arguments
