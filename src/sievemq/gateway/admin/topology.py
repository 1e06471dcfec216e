"""Exchanges and bindings, and publishing through an exchange."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from functools import partial
from typing import Any

from sievemq.amqp.errors import NotFound, PreconditionFailed
from sievemq.gateway.admin.base import AdminBase
from sievemq.gateway.admin.codec import encode_properties, jsonable
from sievemq.gateway.admin.views import BindingView, ExchangeView
from sievemq.gateway.model.exchanges import Exchange
from sievemq.gateway.model.routing import Binding, dest_kind
from sievemq.gateway.model.stream.arguments import parse_filter_values
from sievemq.storage import Message


class TopologyAdmin(AdminBase):
    """Exchanges, bindings and publishing."""

    def list_exchanges(self, vhost: str | None = None) -> list[ExchangeView]:
        return [_exchange_view(x) for v in self._vhosts(vhost) for x in v.exchanges.values()]

    def get_exchange(self, vhost: str, name: str) -> ExchangeView:
        return _exchange_view(self.broker.vhost(vhost).get_exchange(name))

    def declare_exchange(
        self,
        vhost: str,
        name: str,
        type: str,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> bool:
        """exchange.declare's rules and texts; True when it was created."""
        v = self.broker.vhost(vhost)
        existed = name in v.exchanges
        v.declare_exchange(
            name,
            type,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=dict(arguments or {}),
        )
        return not existed

    def delete_exchange(self, vhost: str, name: str, if_unused: bool = False) -> None:
        v = self.broker.vhost(vhost)
        v.get_exchange(name)
        v.delete_exchange(name, if_unused)

    def list_bindings(
        self,
        vhost: str | None = None,
        source: str | None = None,
        destination: str | None = None,
        destination_type: str | None = None,
    ) -> list[BindingView]:
        """Bindings as RabbitMQ lists them: each queue's implicit default-exchange binding
        first, then the declared ones."""
        out: list[BindingView] = []
        for v in self._vhosts(vhost):
            implicit = [
                BindingView(v.name, "", q, "queue", q, {}, _properties_key(q, {}))
                for q in sorted([*v.queues, *v.classic.queues])
            ]
            declared = sorted(
                (_binding_view(v.name, b) for b in v.bindings()),
                key=lambda b: (b.source, b.destination_type, b.destination, b.routing_key),
            )
            out.extend(implicit + declared)
        return [
            b
            for b in out
            if (source is None or b.source == source)
            and (destination is None or b.destination == destination)
            and (destination_type is None or b.destination_type == destination_type)
        ]

    def bind(
        self,
        vhost: str,
        source: str,
        destination_type: str,
        destination: str,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> str:
        """queue.bind / exchange.bind; returns the binding's properties key."""
        v = self.broker.vhost(vhost)
        args = dict(arguments or {})
        if destination_type not in ("queue", "exchange"):
            raise PreconditionFailed(f"unknown destination type '{destination_type}'")
        v.bind(dest_kind(destination_type), destination, source, routing_key, args)
        return _properties_key(routing_key, args)

    def unbind(
        self, vhost: str, source: str, destination_type: str, destination: str, props: str
    ) -> None:
        """Remove the binding with this properties key; 404 when there is none."""
        for b in self.list_bindings(vhost, source, destination, destination_type):
            if b.properties_key == props and b.source != "":
                v = self.broker.vhost(vhost)
                v.unbind(
                    dest_kind(destination_type), destination, source, b.routing_key, b.arguments
                )
                return
        raise NotFound(f"no binding '{props}'")

    async def publish(
        self,
        vhost: str,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: dict[str, Any] | None = None,
    ) -> bool:
        """Route and store one message; returns once every routed queue, here or on
        another cluster node, confirmed it stored (False when nothing routed).
        ``x-stream-filter-value`` in the headers is the message's filter value, as on
        AMQP. 406 for bad properties."""
        if self.node is None:
            raise PreconditionFailed("publishing needs a running node")
        v = self.broker.vhost(vhost)
        props = encode_properties(properties or {})
        headers = dict((properties or {}).get("headers") or {})
        values = parse_filter_values(headers.get("x-stream-filter-value"))
        # a queue another cluster node leads takes the message over the link, as an AMQP
        # publish routed to it does: stored (and confirmed) by its leader
        directory = self.broker.directory
        remote = None if directory is None else partial(directory.remote_queue, vhost)
        queues = v.route(exchange, routing_key, lambda: headers, remote)
        counters = self.broker.counters
        counters.received += 1
        if not queues:
            counters.dropped_unroutable += 1
            return False
        message = Message(values, exchange, routing_key, props, body)
        sink = _OneShotSink(len(queues))
        for queue in queues:
            self.node.appender(queue).submit(message, sink, 1)
        if not await sink.wait():
            raise PreconditionFailed("the message could not be stored")
        return True


def _properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """RabbitMQ's binding key: the routing key (``~`` when empty), plus a hash of the
    arguments when there are any."""
    key = routing_key.replace("%", "%25").replace("/", "%2F") if routing_key else "~"
    if not arguments:
        return key
    digest = hashlib.sha256(
        json.dumps(jsonable(arguments), sort_keys=True).encode("utf-8")
    ).digest()
    return key + "~" + base64.urlsafe_b64encode(digest[:16]).decode("ascii").rstrip("=")


def _binding_view(vhost: str, b: Binding) -> BindingView:
    args = jsonable(dict(b.arguments))
    return BindingView(
        vhost,
        b.source,
        b.destination,
        b.destination_kind,
        b.routing_key,
        args,
        _properties_key(b.routing_key, dict(b.arguments)),
    )


def _exchange_view(x: Exchange) -> ExchangeView:
    return ExchangeView(
        x.vhost,
        x.name,
        x.type,
        x.durable,
        x.auto_delete,
        x.internal,
        jsonable(x.arguments),
        x.policy,
    )


class _OneShotSink:
    """A ConfirmSink for one HTTP publish routed to ``n`` streams."""

    def __init__(self, n: int) -> None:
        self._left = n
        self._ok = True
        self._future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def settle_confirms(self, seqs: list[int], ok: bool) -> None:
        self._left -= len(seqs)
        self._ok = self._ok and ok
        if self._left <= 0 and not self._future.done():
            self._future.set_result(self._ok)

    async def wait(self) -> bool:
        return await self._future
