"""A virtual host: its exchanges, stream queues and bindings, with RabbitMQ's rules and texts.

Plain synchronous methods, called by the connection handler on the event loop; each raises
an ``amqp.errors`` class on refusal. ``route`` is on the publish hot path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sievemq.amqp.errors import AccessRefused, NotFound, PreconditionFailed
from sievemq.gateway.model import policies
from sievemq.gateway.model.classic.arguments import validate_declare
from sievemq.gateway.model.classic.queue import ClassicQueue
from sievemq.gateway.model.classic.vhost import ClassicQueues, locked
from sievemq.gateway.model.exchanges import (
    DEFAULT_EXCHANGE,
    STANDARD_EXCHANGES,
    Exchange,
    check_deletion,
    check_name,
    check_not_default,
    check_type,
)
from sievemq.gateway.model.remote import RemoteQueue
from sievemq.gateway.model.replies import rs
from sievemq.gateway.model.routing import Binding, DestKind, HeadersFn, validate_headers_binding
from sievemq.gateway.model.stream.arguments import (
    StreamArguments,
    assert_equivalence,
    assert_exclusive_access,
    assert_field_equivalence,
    validate_stream_declare,
)
from sievemq.gateway.model.stream.queue import StreamQueue

if TYPE_CHECKING:
    from sievemq.storage import Stream, StreamSurvey

StreamOpener = Callable[[str, str, StreamArguments], "Stream"]
StreamRemover = Callable[[StreamQueue], None]
StreamSurveyor = Callable[[str, str], "StreamSurvey | None"]
# a declared stream: the storage stream, or a call that opens it once its files exist
StreamCreator = Callable[[str, str, StreamArguments], "Stream | Callable[[], Stream]"]
AnyQueue = StreamQueue | ClassicQueue
# a cluster's queues led elsewhere, by name in this vhost (``QueueDirectory.remote_queue``)
RemoteLookup = Callable[[str], RemoteQueue | None]


def check_queue_name(name: str) -> None:
    """403 for a queue name in the reserved ``amq.`` namespace (non-passive declare)."""
    if name.startswith("amq."):
        raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")


class VirtualHost:
    """Exchanges, queues and bindings of one vhost.

    ``open_stream``/``remove_stream`` create and delete the storage behind a queue;
    ``survey_stream`` reads the statistics of a stream restored at start without opening it;
    ``new_stream`` (default ``open_stream``) makes the storage of a stream declared now: the
    broker gives an opener whose files a worker thread creates, so the loop never fsyncs;
    ``on_change`` is called after every change to durable definitions (the broker persists);
    ``touched`` lists what the change touched, ``("queue" | "exchange", name)`` or
    ``("binding", Binding)``, so that the broker persists those objects only (it empties it).
    """

    def metadata(self) -> dict[str, Any]:
        """Description, tags and default queue type as the definitions record them."""
        return {
            "description": self.description,
            "tags": list(self.tags),
            "default_queue_type": self.classic.default_type,
        }

    def __init__(
        self,
        name: str,
        open_stream: StreamOpener,
        remove_stream: StreamRemover,
        on_change: Callable[[], None] = lambda: None,
        classic: ClassicQueues | None = None,
        survey_stream: StreamSurveyor | None = None,
        new_stream: StreamCreator | None = None,
    ) -> None:
        self.name = name
        self._open_stream = open_stream
        self._new_stream: StreamCreator = new_stream or open_stream
        self._survey_stream = survey_stream
        self._remove_stream = remove_stream
        self._on_change = on_change
        # called with a stream about to be deleted (the broker keeps its counts)
        self.on_deleted: Callable[[Any], None] = lambda q: None
        # called with the name of a stream a declare just created (the broker's hook)
        self.on_declared: Callable[[str], None] = lambda name: None
        # whether another cluster node leads a queue of this name (the broker sets it from
        # its directory): a binding to such a queue is accepted and routes through it
        self.elsewhere: Callable[[str], bool] = lambda name: False
        # whether another cluster node's client connection owns an exclusive queue of this
        # name (the broker sets it): a binding to it is 405, as to any connection's but
        # its owner's
        self.locked_elsewhere: Callable[[str], bool] = lambda name: False
        self.touched: list[tuple[str, Any]] = []
        # RabbitMQ's vhost limits: max-connections, max-queues (absent or < 0: none)
        self.limits: dict[str, int] = {}
        # RabbitMQ's vhost metadata (the default queue type is ``classic.default_type``)
        self.description = ""
        self.tags: list[str] = []
        # RabbitMQ's policies and operator policies, by name (``apply_policy`` puts them to work)
        self.policies: dict[str, policies.Policy] = {}
        self.operator_policies: dict[str, policies.Policy] = {}
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, StreamQueue] = {}  # stream queues
        # classic and quorum queues (their own module: declare, delete, dead-lettering)
        self.classic = classic or ClassicQueues(name, "classic")
        self.classic.attach(self)
        self.classic.apply_policy = self.apply_policy
        # bindings whose destination is an exchange/queue, for cleanup on delete
        self._inbound: dict[tuple[DestKind, str], set[Binding]] = {}
        self.exchanges[DEFAULT_EXCHANGE] = Exchange(DEFAULT_EXCHANGE, "direct", vhost=name)
        for xname, xtype in STANDARD_EXCHANGES.items():
            self.exchanges[xname] = Exchange(xname, xtype, vhost=name)

    # ------------------------------------------------------------------ exchanges

    def declare_exchange(
        self,
        name: str,
        type: str,
        passive: bool = False,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> Exchange:
        """exchange.declare: order and texts as rabbit_channel."""
        if passive:
            check_not_default(name, self.name)
            return self.get_exchange(name)
        check_type(type)
        check_not_default(name, self.name)
        existing = self.exchanges.get(name)
        if existing is not None:
            existing.assert_equivalent(type, durable, auto_delete, internal, arguments)
            return existing
        check_name(name)
        exchange = Exchange(
            name, type, durable, auto_delete, internal, dict(arguments or {}), vhost=self.name
        )
        self.apply_exchange_policy(exchange)
        self.exchanges[name] = exchange
        if durable:
            self.touched.append(("exchange", name))
            self._on_change()
        return exchange

    def get_exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise NotFound(f"no {rs('exchange', name, self.name)}")
        return exchange

    def delete_exchange(self, name: str, if_unused: bool = False) -> None:
        """exchange.delete: idempotent for a missing exchange; 406 when in use."""
        check_not_default(name, self.name)
        check_deletion(name, self.name)
        exchange = self.exchanges.get(name)
        if exchange is None:
            return
        if if_unused and exchange.bindings:
            raise PreconditionFailed(f"{rs('exchange', name, self.name)} in use")
        self._remove_exchange(exchange)
        self._on_change()

    def _remove_exchange(self, exchange: Exchange) -> None:
        del self.exchanges[exchange.name]
        self.touched.append(("exchange", exchange.name))
        for binding in list(exchange.bindings):
            self._drop_binding(binding, cascade=False)
        for binding in list(self._inbound.get(("exchange", exchange.name), ())):
            self._drop_binding(binding, cascade=True)
        self._inbound.pop(("exchange", exchange.name), None)

    # ------------------------------------------------------------------ queues

    def declare_queue(
        self,
        name: str,
        passive: bool = False,
        durable: bool = True,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        owner: object | None = None,
    ) -> tuple[AnyQueue, int, int]:
        """queue.declare: (queue, message_count, consumer_count). Classic and quorum
        queues (the default type unless ``x-queue-type`` says stream) are declared by
        ``self.classic`` (``model/classic/vhost.py``); streams here."""
        if passive:
            queue = self.find_queue(name)
            if isinstance(queue, ClassicQueue):
                self.classic.check_owner(queue, owner)
            return queue, queue.message_count, queue.consumer_count
        if name:
            check_queue_name(name)
        if not name or (name not in self.queues and name not in self.classic.queues):
            self.check_queue_limit(name)
        if (name and name in self.classic.queues) or (
            name not in self.queues and self.classic.wants(arguments)
        ):
            return self.classic.declare(name, durable, exclusive, auto_delete, arguments, owner)
        existing = self.queues.get(name) if name else None
        if existing is not None:
            assert_exclusive_access(False, exclusive, name, self.name)
            durable = durable and not exclusive
            assert_field_equivalence("durable", True, durable, name, self.name)
            assert_field_equivalence("auto_delete", False, auto_delete, name, self.name)
            assert_equivalence(existing.arguments.table, arguments, name, self.name)
            return existing, existing.message_count, existing.consumer_count
        stream_args = validate_stream_declare(
            name, self.name, durable, exclusive, auto_delete, arguments
        )
        queue = self._create_queue(name, stream_args)
        self._on_change()
        self.on_declared(name)
        return queue, queue.message_count, queue.consumer_count

    def validate_new_queue(
        self, name: str, kind: str, durable: bool, exclusive: bool, arguments: dict[str, Any]
    ) -> None:
        """The checks a declare of a new queue of ``kind`` makes (406 with their texts),
        making nothing: a cluster checks a queue it places on another node first."""
        if kind in ("classic", "quorum"):
            validate_declare(
                "quorum" if kind == "quorum" else "classic",
                name,
                self.name,
                durable,
                exclusive,
                False,
                arguments,
            )
        else:
            validate_stream_declare(name, self.name, durable, exclusive, False, arguments)

    def check_queue_limit(self, name: str) -> None:
        """A new queue past the vhost's max-queues: 406 with RabbitMQ's text."""
        limit = self.limits.get("max-queues", -1)
        if 0 <= limit <= len(self.queues) + len(self.classic.queues):
            raise PreconditionFailed(
                f"cannot declare queue '{name}': queue limit in vhost '{self.name}' "
                f"({limit}) is reached"
            )

    def _create_queue(
        self, name: str, stream_args: StreamArguments, lazy: bool = False
    ) -> StreamQueue:
        vhost = self.name
        survey = self._survey_stream
        # a new stream not opened yet (its files being created) is surveyed like a restored
        # one: a missing directory reads as the empty stream opening will make
        queue = StreamQueue(
            name,
            vhost,
            stream_args,
            (
                (lambda: self._open_stream(vhost, name, stream_args))
                if lazy
                else self._new_stream(vhost, name, stream_args)
            ),
            None if survey is None else lambda: survey(vhost, name),
            restored=lazy,
        )
        if not lazy or self.policies or self.operator_policies:
            self.apply_policy(queue)  # (with no policy at all it would change nothing)
        self.queues[name] = queue
        self.touched.append(("queue", name))
        return queue

    def get_queue(self, name: str) -> StreamQueue:
        queue = self.queues.get(name)
        if queue is None:
            raise NotFound(f"no {rs('queue', name, self.name)}")
        return queue

    def find_queue(self, name: str) -> AnyQueue:
        """A stream, classic or quorum queue; 404 NOT_FOUND when there is none."""
        queue: AnyQueue | None = self.queues.get(name) or self.classic.queues.get(name)
        if queue is None:
            raise NotFound(f"no {rs('queue', name, self.name)}")
        return queue

    def delete_queue(self, name: str, if_unused: bool = False, if_empty: bool = False) -> int:
        """queue.delete: cancel consumers (delete listeners), drop bindings, remove files.

        Returns the number of messages the stream held; a missing queue returns 0 (the
        delete is idempotent, as in RabbitMQ). if-unused and if-empty are ignored for
        streams, as RabbitMQ does.
        """
        if name in self.classic.queues:
            return self.classic.delete(name, if_unused, if_empty)
        queue = self.queues.get(name)
        if queue is None:
            return 0
        count = queue.message_count
        self.on_deleted(queue)
        del self.queues[name]
        self.touched.append(("queue", name))
        self.drop_queue_bindings(name)
        queue.notify_deleted()
        self._on_change()  # forgotten first (committed): then its files go
        self._remove_stream(queue)
        return count

    def detach_queue(self, name: str) -> StreamQueue | None:
        """Another cluster node leads the stream now (a failover): forget it here as a
        delete does (its consumers and publishers are told it is gone) but keep its
        bindings (cluster-wide: they route to the new leader) and its files, closed,
        for the caller (they become this node's replica of it)."""
        queue = self.queues.pop(name, None)
        if queue is None:
            return None
        self.on_deleted(queue)
        self.touched.append(("queue", name))
        queue.notify_deleted()
        self._on_change()
        stream = queue.opened_stream
        if stream is not None:
            stream.close()
        return queue

    def drop_queue_bindings(self, name: str) -> None:
        """Every binding to the queue goes (it is being deleted)."""
        for binding in list(self._inbound.get(("queue", name), ())):
            self._drop_binding(binding, cascade=True)
        self._inbound.pop(("queue", name), None)

    # ------------------------------------------------------------------ bindings

    def _resolve(self, kind: DestKind, destination: str, source: str) -> Exchange:
        """Checks shared by bind and unbind, in rabbit_channel:binding_action's order."""
        if kind == "exchange":
            check_not_default(destination, self.name)
        check_not_default(source, self.name)
        exchange = self.exchanges.get(source)
        if exchange is None:
            raise NotFound(f"no {rs('exchange', source, self.name)}")
        known: Any = self.queues if kind == "queue" else self.exchanges
        if kind == "queue" and destination in self.classic.queues:
            known = self.classic.queues
        if destination not in known and not (kind == "queue" and self.elsewhere(destination)):
            if kind == "queue" and self.locked_elsewhere(destination):
                raise locked(destination, self.name)
            raise NotFound(f"no {rs(kind, destination, self.name)}")
        return exchange

    def bind(
        self,
        kind: DestKind,
        destination: str,
        source: str,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> None:
        """queue.bind (``kind`` "queue") or exchange.bind (``kind`` "exchange")."""
        exchange = self._resolve(kind, destination, source)
        binding = Binding.make(source, kind, destination, routing_key, arguments)
        if exchange.type == "headers":
            validate_headers_binding(binding.arguments)
        if exchange.add_binding(binding):
            self._inbound.setdefault(binding.dest, set()).add(binding)
            if self.is_durable(binding):
                self.touched.append(("binding", binding))
                self._on_change()

    def unbind(
        self,
        kind: DestKind,
        destination: str,
        source: str,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> None:
        """queue.unbind or exchange.unbind; an unknown binding is no error (as in RabbitMQ)."""
        binding = Binding.make(source, kind, destination, routing_key, arguments)
        try:
            self._resolve(kind, destination, source)
        except NotFound:
            # no such exchange or queue: no such binding either, and removing a binding
            # that does not exist is unbind-ok in RabbitMQ (checked on 3.10.8); but a
            # cluster's binding to a queue its leader just deleted is still here: it goes
            held = self.exchanges.get(source)
            if held is None or binding not in held.bindings:
                return
        durable = self.is_durable(binding)
        if self._drop_binding(binding, cascade=True) and durable:
            self._on_change()

    def _drop_binding(self, binding: Binding, cascade: bool) -> bool:
        """Remove a binding; with ``cascade`` an auto-delete source left without bindings
        goes too (RabbitMQ's auto-delete semantics)."""
        source = self.exchanges.get(binding.source)
        removed = source is not None and source.remove_binding(binding)
        if removed:
            self.touched.append(("binding", binding))
        inbound = self._inbound.get(binding.dest)
        if inbound is not None:
            inbound.discard(binding)
            if not inbound:
                del self._inbound[binding.dest]
        if (
            cascade
            and removed
            and source is not None
            and source.auto_delete
            and not source.bindings
            and not source.builtin
        ):
            self._remove_exchange(source)
        return removed

    def is_durable(self, binding: Binding) -> bool:
        """A binding survives restarts when its source and destination both do."""
        source = self.exchanges.get(binding.source)
        if source is None or not source.durable:
            return False
        if binding.destination_kind == "queue":
            classic = self.classic.queues.get(binding.destination)
            return classic is None or classic.durable
        dest = self.exchanges.get(binding.destination)
        return dest is not None and dest.durable

    def bindings(self) -> Iterator[Binding]:
        """Every binding of the vhost (not the default exchange's implicit ones)."""
        for exchange in self.exchanges.values():
            yield from exchange.bindings

    # ------------------------------------------------------------------ publish

    def route(
        self,
        exchange_name: str,
        routing_key: str,
        headers_fn: HeadersFn,
        remote: RemoteLookup | None = None,
    ) -> list[Any]:
        """The queues a message published to ``exchange_name`` goes to (no duplicates):
        ``AnyQueue``, and with ``remote`` (a cluster's publishes) the ``RemoteQueue`` it
        gives for a queue name this node does not hold but another node leads.

        Follows exchange-to-exchange bindings (cycle-safe) and ``alternate-exchange``.
        ``headers_fn`` is called at most once, and only when a headers exchange needs it.
        Hot path.
        """
        if exchange_name == DEFAULT_EXCHANGE:  # a stream first: classic queues only on a miss
            queue: Any = self.queues.get(routing_key) or self.classic.queues.get(routing_key)
            if queue is not None:
                return [queue]
            if remote is not None:  # a miss here: is it another node's queue?
                queue = remote(routing_key)
                if queue is not None:
                    return [queue]
            return []
        classic = self.classic.queues
        exchange = self.exchanges.get(exchange_name)
        if exchange is None:
            raise NotFound(f"no {rs('exchange', exchange_name, self.name)}")
        if exchange.internal:
            raise AccessRefused(
                f"cannot publish to internal {rs('exchange', exchange_name, self.name)}"
            )
        cached: dict[str, Any] | None = None
        fetched = False

        def headers_once() -> dict[str, Any] | None:
            nonlocal cached, fetched
            if not fetched:
                cached, fetched = headers_fn(), True
            return cached

        queues: dict[str, Any] = {}
        seen = {exchange_name}
        pending = [exchange]
        while pending:
            current = pending.pop()
            routed = False
            for kind, name in current.match(routing_key, headers_once):
                if kind == "queue":
                    queue = self.queues.get(name) or classic.get(name)
                    if queue is None and remote is not None:
                        queue = remote(name)
                    if queue is not None:
                        queues[name] = queue
                        routed = True
                elif name not in seen:
                    seen.add(name)
                    nxt = self.exchanges.get(name)
                    if nxt is not None:
                        pending.append(nxt)
                        routed = True
            if not routed:
                alternate = current.arguments.get("alternate-exchange", current.policy_alternate)
                if isinstance(alternate, str) and alternate not in seen:
                    seen.add(alternate)
                    nxt = self.exchanges.get(alternate)
                    if nxt is not None:
                        pending.append(nxt)
        return list(queues.values())

    def reachable_queues(self, exchange_name: str) -> set[str]:
        """Every queue name a publish to ``exchange_name`` may reach, whatever its routing
        key and headers: its bindings', its exchange-to-exchange bindings' and alternate
        exchanges' (a cluster forwards a headers exchange's publishes raw to the one node
        that leads all of them: ``session.raw_publish``)."""
        names: set[str] = set()
        seen = {exchange_name}
        pending = [exchange_name]
        while pending:
            exchange = self.exchanges.get(pending.pop())
            if exchange is None:
                continue
            for binding in exchange.bindings:
                if binding.destination_kind == "queue":
                    names.add(binding.destination)
                elif binding.destination not in seen:
                    seen.add(binding.destination)
                    pending.append(binding.destination)
            alternate = exchange.arguments.get("alternate-exchange", exchange.policy_alternate)
            if isinstance(alternate, str) and alternate not in seen:
                seen.add(alternate)
                pending.append(alternate)
        return names

    # ------------------------------------------------------------------ policies

    def apply_policy(
        self,
        queue: AnyQueue,
        ranked: tuple[list[policies.Policy], list[policies.Policy]] | None = None,
    ) -> None:
        """Work out which policy and operator policy apply to ``queue`` and put their
        effective definition to work (on declare, and whenever a policy changes).
        ``ranked``: the policies and operator policies already ``policies.ranked``."""
        mine, operators = ranked or self._ranked()
        kind = "stream" if isinstance(queue, StreamQueue) else queue.kind
        policy = policies.match(mine, kind, queue.name)
        operator = policies.match(operators, kind, queue.name)
        effective = policies.effective_definition(policy, operator)
        names = (
            None if policy is None else policy.name,
            None if operator is None else operator.name,
        )
        if (queue.policy, queue.operator_policy) == names and queue.effective_policy == effective:
            return  # nothing changed for this one (the common case when a policy is set)
        queue.policy, queue.operator_policy = names
        queue.effective_policy = effective
        if isinstance(queue, ClassicQueue):
            queue.apply_arguments(policies.queue_arguments(queue.declared, effective))
            return
        limits = policies.stream_limits(queue.arguments, effective)

        def put_limits(stream: Stream) -> None:
            config = stream.config
            wanted = dataclasses.replace(
                config,
                max_bytes=limits.max_bytes,
                max_age_ms=limits.max_age_ms,
                max_segment_bytes=limits.max_segment_bytes,
                filter_size_bytes=limits.filter_size_bytes,
            )
            if wanted != config:
                # read at the next chunk and segment roll (retention runs at each roll)
                stream.config = wanted

        # an idle stream restored at start stays closed
        queue.when_open(put_limits, limits.filter_size_bytes)

    def policy_definition(self, kind: str, name: str) -> dict[str, Any]:
        """The effective policy definition a queue of ``kind`` named ``name`` gets (or
        would get, declared now)."""
        mine, operators = self._ranked()
        return policies.effective_definition(
            policies.match(mine, kind, name), policies.match(operators, kind, name)
        )

    def _ranked(self) -> tuple[list[policies.Policy], list[policies.Policy]]:
        return (
            policies.ranked(self.policies.values()),
            policies.ranked(self.operator_policies.values()),
        )

    def apply_exchange_policy(
        self, exchange: Exchange, ranked: list[policies.Policy] | None = None
    ) -> None:
        """An exchange's policy: of its keys only ``alternate-exchange`` does something."""
        if exchange.builtin:
            return
        policy = policies.match(
            ranked if ranked is not None else self._ranked()[0], "exchange", exchange.name
        )
        exchange.policy = None if policy is None else policy.name
        alternate = None if policy is None else policy.definition.get("alternate-exchange")
        exchange.policy_alternate = alternate if isinstance(alternate, str) else None

    def apply_policies(self) -> None:
        """A policy of this vhost was set or removed: re-apply to every queue and exchange."""
        for _ in self.policy_steps():
            pass

    def policy_steps(self) -> Iterator[None]:
        """``apply_policies`` one object at a time (a yield after each), so that the admin
        plane can hand the event loop back in between. Objects declared meanwhile got the
        policies at their declare; deleted ones are skipped."""
        ranked = self._ranked()
        for exchange in list(self.exchanges.values()):
            if self.exchanges.get(exchange.name) is exchange:
                self.apply_exchange_policy(exchange, ranked[0])
            yield
        queues: list[AnyQueue] = [*self.queues.values(), *self.classic.queues.values()]
        for queue in queues:
            if not queue.deleted:
                self.apply_policy(queue, ranked)
            yield

    def set_policy(
        self, policy: policies.Policy, operator: bool = False, apply: bool = True
    ) -> bool:
        """Add or replace a policy (True when it is new) and apply it (``apply=False``:
        the caller runs ``policy_steps``)."""
        table = self.operator_policies if operator else self.policies
        created = policy.name not in table
        table[policy.name] = policy
        if apply:
            self.apply_policies()
        return created

    def clear_policy(self, name: str, operator: bool = False, apply: bool = True) -> bool:
        """Remove a policy (False when there was none) and re-apply what is left."""
        table = self.operator_policies if operator else self.policies
        if table.pop(name, None) is None:
            return False
        if apply:
            self.apply_policies()
        return True

    # ------------------------------------------------------------------ lifecycle

    def restore_queue(self, name: str, stream_args: StreamArguments) -> StreamQueue:
        """Re-create a queue from persisted definitions (no checks, no on_change); its
        stream's files are recovered and opened on first use, not now."""
        return self._create_queue(name, stream_args, lazy=True)

    def close(self) -> None:
        """Close (sync) every stream of the vhost that was opened (the others were not
        touched since the start: nothing to sync)."""
        for queue in self.queues.values():
            stream = queue.opened_stream
            if stream is not None:
                stream.close()
        self.classic.close()
