"""The classic and quorum queues of one vhost: declare, owner checks, delete, dead-lettering.

``model.vhost.VirtualHost`` holds the exchanges, bindings, routing, policies and the stream
queues, and hands classic and quorum queues to this (``VirtualHost.classic``): exclusive owners,
auto-delete, server-named queues and dead-lettering have no stream counterpart. Texts are
RabbitMQ 3.10's (checked against the peer).
"""

from __future__ import annotations

import base64
import datetime
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sievemq.amqp import properties as amqp_properties
from sievemq.amqp.errors import AccessRefused, AMQPError, PreconditionFailed, ResourceLocked
from sievemq.gateway.model.classic.arguments import (
    CLASSIC_TYPE_NAME,
    EQUIVALENCE_KEYS,
    QUORUM_TYPE_NAME,
    QueueArguments,
    QueueKind,
    validate_declare,
)
from sievemq.gateway.model.classic.message import (
    DEFAULT_WINDOW,
    MemoryBudget,
    MemoryWindow,
    QueueMessage,
)
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.replies import amqp_type, display_value, rs
from sievemq.gateway.model.stream.arguments import parse_filter_values
from sievemq.storage import Message, layout

if TYPE_CHECKING:
    from sievemq.storage.queue_log import QueueLog


class Host(Protocol):
    """What dead-lettering and delete need of the vhost (``model.vhost.VirtualHost``)."""

    exchanges: dict[str, Any]

    def route(
        self, exchange_name: str, routing_key: str, headers_fn: Callable[[], dict[str, Any]]
    ) -> list[Any]: ...
    def drop_queue_bindings(self, name: str) -> None: ...


LogOpener = Callable[[str, str], "QueueLog"]
# writes one dead-lettered message into a stream (the node's stream appender); the first
# argument is the ``StreamQueue`` a dead-letter exchange routed it to
StreamWriter = Callable[[Any, Message], None]
CLASSIC_ALIASES = ("classic", CLASSIC_TYPE_NAME)
QUORUM_ALIASES = ("quorum", QUORUM_TYPE_NAME)


def server_name() -> str:
    """``amq.gen-`` and 22 url-safe base64 characters, as RabbitMQ names queues."""
    return "amq.gen-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def locked(queue: str, vhost: str) -> ResourceLocked:
    return ResourceLocked(
        f"cannot obtain exclusive access to locked {rs('queue', queue, vhost)}. It could be "
        "originally declared on another connection or the exclusive property value does not "
        "match that of the original declaration."
    )


class ClassicQueues:
    """Classic and quorum queues of a vhost (``VirtualHost.classic``)."""

    def __init__(
        self,
        vhost: str,
        default_type: str,
        open_log: LogOpener | None = None,
        on_change: Callable[[str], None] = lambda name: None,
        window: MemoryWindow = DEFAULT_WINDOW,
    ) -> None:
        self.vhost_name = vhost
        self.window = window
        self.default_type = default_type
        self.queues: dict[str, ClassicQueue] = {}
        self._open_log = open_log
        self._on_change = on_change
        self._vhost: Host | None = None
        self.on_created: Callable[[ClassicQueue], None] = lambda q: None
        # set by the broker: called with a queue about to be deleted (it keeps its counts)
        self.on_deleted: Callable[[ClassicQueue], None] = lambda q: None
        # set by the vhost: puts its policies to work on a new queue (before its recovery)
        self.apply_policy: Callable[[ClassicQueue], None] = lambda q: None
        # set by the broker: dead-letters routed to a stream go through its appender
        self.write_stream: StreamWriter | None = None
        # set by the broker: what becomes of a deleted queue's tombstone (removed once the
        # delete is durable); by default a background thread removes it at once
        self.release_files: Callable[[Path], None] = layout.remove_later
        # set by the broker: the node's memory for queue bodies, shared by its durable
        # queues (None: each queue has ``window.bytes`` of its own)
        self.budget: MemoryBudget | None = None

    def attach(self, vhost: Host) -> None:
        self._vhost = vhost

    def kind_of(self, arguments: dict[str, Any] | None) -> str:
        """The type a declare asks for: its x-queue-type, else the vhost default."""
        raw = (arguments or {}).get("x-queue-type")
        if raw is None:
            return self.default_type
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if text in CLASSIC_ALIASES:
            return "classic"
        if text in QUORUM_ALIASES:
            return "quorum"
        return str(text)

    def wants(self, arguments: dict[str, Any] | None) -> bool:
        return self.kind_of(arguments) in ("classic", "quorum")

    # ------------------------------------------------------------------ declare

    def declare(
        self,
        name: str,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: dict[str, Any] | None,
        owner: object | None,
    ) -> tuple[ClassicQueue, int, int]:
        v = self.vhost_name
        existing = self.queues.get(name) if name else None
        kind = self.kind_of(arguments)
        if existing is not None:
            if existing.owner is not None and existing.owner is not owner:
                raise locked(name, v)
            if exclusive != existing.exclusive:
                raise locked(name, v)
            self._equivalent(existing, durable, auto_delete, arguments)
            existing.last_used_ms = _now()
            return existing, existing.message_count, existing.consumer_count
        queue_arguments = validate_declare(
            "quorum" if kind == "quorum" else "classic",
            name,
            v,
            durable,
            exclusive,
            auto_delete,
            arguments,
        )
        if not name:
            name = server_name()
        queue = self._create(
            name, queue_arguments, durable, auto_delete, owner if exclusive else None, fresh=True
        )
        if queue.durable and not queue.exclusive:
            self._on_change(queue.name)
        return queue, 0, 0

    def _equivalent(
        self,
        queue: ClassicQueue,
        durable: bool,
        auto_delete: bool,
        arguments: dict[str, Any] | None,
    ) -> None:
        v = self.vhost_name
        for field, current, received in (
            ("durable", queue.durable, durable),
            ("auto_delete", queue.auto_delete, auto_delete),
        ):
            if current != received:
                raise PreconditionFailed(
                    f"inequivalent arg '{field}' for {rs('queue', queue.name, v)}: received "
                    f"'{display_value(received)}' but current is '{display_value(current)}'"
                )
        new = dict(arguments or {})
        old = dict(queue.arguments.table)
        if queue.kind == "classic":  # classic given or left to the default: the same
            for table in (new, old):
                if self.kind_of(table) == "classic":
                    table.pop("x-queue-type", None)
        for key in EQUIVALENCE_KEYS:
            a, b = old.get(key), new.get(key)
            if isinstance(b, bytes):
                b = b.decode("utf-8", "replace")
            if (a == b and type(a) is type(b)) or (_is_num(a) and _is_num(b) and a == b):
                continue
            raise PreconditionFailed(
                f"inequivalent arg '{key}' for {rs('queue', queue.name, v)}: "
                f"received {_val(b)} but current is {_val(a)}"
            )

    def _create(
        self,
        name: str,
        queue_arguments: QueueArguments,
        durable: bool,
        auto_delete: bool,
        owner: object | None,
        fresh: bool = False,
    ) -> ClassicQueue:
        """``fresh``: a new declare, so files a deleted queue of that name left behind (a
        crash between forgetting it and deleting them) are removed, never recovered."""
        log_store = None
        if durable and owner is None and self._open_log is not None:
            log_store = self._open_log(self.vhost_name, name)
            if fresh:
                log_store.delete()
                log_store = self._open_log(self.vhost_name, name)
        queue = ClassicQueue(
            name,
            self.vhost_name,
            queue_arguments,
            durable=durable,
            auto_delete=auto_delete,
            owner=owner,
            log_store=log_store,
            window=self.window,
            budget=self.budget,
        )
        self.apply_policy(queue)
        if log_store is not None:
            queue.restore(log_store.scan(), log_store.delivered)
        queue.on_unused = self._auto_delete
        queue.dead_letter = self._dead_letter
        self.queues[name] = queue
        self.on_created(queue)
        return queue

    def restore(
        self, name: str, kind: str, table: dict[str, Any], auto_delete: bool
    ) -> ClassicQueue:
        """Re-create a durable queue from definitions and recover its log."""
        qkind: QueueKind = "quorum" if kind == "quorum" else "classic"
        queue_arguments = validate_declare(
            qkind, name, self.vhost_name, True, False, auto_delete, table
        )
        return self._create(name, queue_arguments, True, auto_delete, None)

    def open_copy(self, name: str, table: dict[str, Any]) -> ClassicQueue:
        """A replica's copy of a durable quorum queue's log, kept where this node's own
        queue of that name keeps its log, opened as the live queue (a failover made this
        node its leader): recovery rebuilds its state as after a restart. Every message not
        settled is ready; what the old leader had handed out (at or below the copy's
        delivered mark) comes back redelivered, counted as returned once more (its consumers
        went with that leader), with the counts the copy holds. The queue is stored in this
        node's definitions, as a declare stores it."""
        if name in self.queues:
            raise PreconditionFailed(
                f"{rs('queue', name, self.vhost_name)} is already open on this node"
            )
        queue = self.restore(name, "quorum", table, False)
        self._on_change(name)
        return queue

    def detach(self, name: str) -> ClassicQueue | None:
        """Another node leads the queue now (a failover): forget it here as a delete does
        (its consumers are cancelled, the definitions forget it) but keep its bindings
        (cluster-wide) and leave its files, closed, to the caller."""
        queue = self.queues.pop(name, None)
        if queue is None:
            return None
        self.on_deleted(queue)
        queue.notify_deleted()
        self._on_change(name)
        queue.release_memory()
        queue.close()
        return queue

    # ------------------------------------------------------------------ access

    def check_owner(self, queue: ClassicQueue, owner: object | None) -> None:
        """405 RESOURCE_LOCKED for a connection other than an exclusive queue's owner."""
        if queue.owner is not None and queue.owner is not owner:
            raise locked(queue.name, self.vhost_name)

    def check_exclusive_consumer(self, queue: ClassicQueue, exclusive: bool) -> None:
        """403 when an exclusive consumer holds the queue, or one is asked of a used one."""
        held = any(getattr(c, "exclusive", False) for c in queue.consumers)
        if held or (exclusive and queue.consumers):
            raise AccessRefused(f"{rs('queue', queue.name, self.vhost_name)} in exclusive use")

    # ------------------------------------------------------------------ delete

    def delete(self, name: str, if_unused: bool = False, if_empty: bool = False) -> int:
        queue = self.queues.get(name)
        if queue is None:
            return 0
        v = self.vhost_name
        if if_unused and queue.consumers:
            raise PreconditionFailed(f"{rs('queue', name, v)} in use")
        if if_empty and queue.message_count:
            raise PreconditionFailed(f"{rs('queue', name, v)} not empty")
        count = queue.message_count
        self.remove(queue)
        return count

    def remove(self, queue: ClassicQueue) -> None:
        if self.queues.get(queue.name) is not queue:
            return
        self.on_deleted(queue)
        del self.queues[queue.name]
        if self._vhost is not None:
            self._vhost.drop_queue_bindings(queue.name)
        queue.notify_deleted()
        if queue.durable and not queue.exclusive:
            self._on_change(queue.name)  # forgotten first (committed): then its files go
        queue.release_memory()
        queue.destroy(self.release_files)

    def _auto_delete(self, queue: ClassicQueue) -> None:
        self.remove(queue)

    def owner_gone(self, owner: object) -> None:
        """The owning connection closed: its exclusive queues go."""
        for queue in [q for q in self.queues.values() if q.owner is owner]:
            self.remove(queue)

    def close(self) -> None:
        for queue in self.queues.values():
            queue.sync()
            queue.close()

    # ------------------------------------------------------------------ dead letters

    def _dead_letter(self, queue: ClassicQueue, messages: list[QueueMessage], reason: str) -> None:
        dlx = queue.arguments.dead_letter_exchange
        vhost = self._vhost
        if dlx is None or vhost is None or dlx not in vhost.exchanges:
            return
        dlrk = queue.arguments.dead_letter_routing_key
        for msg in messages:
            props, deaths = dead_letter_properties(msg, queue.name, reason, self.vhost_name)
            routing_key = dlrk if dlrk is not None else msg.routing_key
            try:
                targets = vhost.route(dlx, routing_key, _headers_of(props))
            except Exception:  # the exchange went away meanwhile: the message is dropped
                continue
            for target in targets:
                if reason != "rejected" and _cycle(deaths, target.name):
                    continue
                if isinstance(target, ClassicQueue):
                    target.enqueue([(dlx, routing_key, props, msg.body)])
                elif self.write_stream is not None:
                    # a stream: the record a publish of these properties would make (its
                    # x-stream-filter-value header indexed), through the stream's one writer
                    values = _filter_values(props)
                    self.write_stream(target, Message(values, dlx, routing_key, props, msg.body))


def _now() -> int:
    return int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)


def _is_num(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _val(value: Any) -> str:
    if value is None:
        return "none"
    return f"the value '{display_value(value)}' of type '{amqp_type(value)}'"


def _headers_of(props: bytes) -> Callable[[], dict[str, Any]]:
    def headers() -> dict[str, Any]:
        got = amqp_properties.decode_properties(props).headers
        return dict(got) if got else {}

    return headers


def _filter_values(props: bytes) -> tuple[str, ...]:
    """A dead-letter's filter values, as a publish of its properties would have; a value a
    publish would have refused (406) leaves it unfiltered rather than losing the message."""
    try:
        return parse_filter_values(amqp_properties.read_header(props, "x-stream-filter-value"))
    except AMQPError:
        return ()


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _cycle(deaths: list[dict[str, Any]], target: str) -> bool:
    """Back into a queue already on the message's path with no rejection on it: RabbitMQ
    drops the message instead of looping."""
    return any(_text(d.get("queue")) == target for d in deaths) and all(
        _text(d.get("reason")) != "rejected" for d in deaths
    )


def dead_letter_properties(
    msg: QueueMessage, queue: str, reason: str, vhost: str
) -> tuple[bytes, list[dict[str, Any]]]:
    """The message's properties with RabbitMQ's ``x-death`` entry added (or counted up),
    ``x-first-death-*`` set once, and ``expiration`` moved into the entry."""
    props = amqp_properties.decode_properties(msg.properties)
    headers = dict(props.headers or {})
    old: Any = headers.get("x-death") or []
    deaths: list[dict[str, Any]] = [dict(d) for d in old if isinstance(d, dict)]
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0, tzinfo=None)
    found = None
    for entry in deaths:
        if _text(entry.get("queue")) == queue and _text(entry.get("reason")) == reason:
            found = entry
            break
    if found is not None:
        deaths.remove(found)
        found["count"] = int(found.get("count", 1)) + 1
        found["time"] = now
        deaths.insert(0, found)
    else:
        entry = {
            "count": 1,
            "reason": reason,
            "queue": queue,
            "time": now,
            "exchange": msg.exchange,
            "routing-keys": [msg.routing_key],
        }
        if props.expiration is not None:
            entry["original-expiration"] = props.expiration
        deaths.insert(0, entry)
    headers["x-death"] = deaths  # type: ignore[assignment]
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue)
    headers.setdefault("x-first-death-exchange", msg.exchange)
    props.headers = headers
    props.expiration = None
    return props.marshal(), deaths
