"""The definitions mirror's pieces that need no etcd: the key layout under sievemq/defs/,
applying a change made elsewhere through the model, and a binding to a queue another node
leads."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.amqp.errors import NotFound
from sievemq.cluster.definitions_mirror import (
    apply_change,
    defs_key,
    describe_key,
    store_key_of,
)
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.model.broker import Broker
from sievemq.gateway.model.definitions import item_key


@pytest.mark.parametrize(
    ("section", "item", "key"),
    [
        ("vhosts", {"name": "/"}, "sievemq/defs/vhosts/%2F"),
        ("users", {"name": "alice"}, "sievemq/defs/users/alice"),
        ("exchanges", {"vhost": "/", "name": "a/b"}, "sievemq/defs/exchanges/%2F/a%2Fb"),
        (
            "parameters",
            {"component": "operator_policy", "vhost": "v", "name": "p"},
            "sievemq/defs/parameters/operator_policy/v/p",
        ),
        (
            "bindings",
            {
                "vhost": "/",
                "source": "x",
                "destination_type": "queue",
                "destination": "q",
                "routing_key": "eu.#",
                "arguments": {"x-match": "all", "raw": b"\xff"},
            },
            None,  # the arguments as quoted JSON: checked by the round trip
        ),
    ],
)
def test_a_key_names_the_object_and_leads_back_to_it(
    section: str, item: dict[str, object], key: str | None
) -> None:
    store_key = item_key(section, item)
    etcd_key = defs_key(section, store_key)
    if key is not None:
        assert etcd_key == key
    assert store_key_of(etcd_key) == (section, store_key)


def test_other_keys_are_not_definitions() -> None:
    assert store_key_of("sievemq/defs/queues/%2F/q") is None  # the placement's
    assert store_key_of("sievemq/defs/users/") is None
    assert store_key_of("sievemq/defs/bindings/%2F/x/=not-json") is None


def test_a_key_says_which_object_it_is() -> None:
    assert describe_key("sievemq/defs/exchanges/%2F/a%2Fb") == "exchange 'a/b' in vhost '/'"
    assert describe_key("sievemq/defs/users/alice") == "user 'alice'"
    assert describe_key("sievemq/defs/parameters/operator_policy/v/p") == (
        "operator policy 'p' in vhost 'v'"
    )


def test_a_change_made_elsewhere_goes_through_the_model(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    admin = BrokerFacade(broker)
    try:
        apply_change(broker, admin, "vhosts", {"name": "shop", "limits": {"max-queues": 5}}, False)
        assert broker.vhost("shop").limits == {"max-queues": 5}
        exchange = {"vhost": "shop", "name": "orders", "type": "topic", "arguments": {}}
        apply_change(broker, admin, "exchanges", exchange, False)
        # the cluster's version of an exchange replaces a different local one
        apply_change(broker, admin, "exchanges", {**exchange, "type": "fanout"}, False)
        assert broker.vhost("shop").exchanges["orders"].type == "fanout"
        policy = {
            "vhost": "shop",
            "name": "cap",
            "pattern": ".*",
            "apply-to": "queues",
            "definition": {"max-length": 3},
            "priority": 0,
        }
        apply_change(broker, admin, "policies", policy, False)
        assert "cap" in broker.vhost("shop").policies
        with pytest.raises(NotFound):  # its queue is not known yet: applied later
            apply_change(
                broker,
                admin,
                "bindings",
                {
                    "vhost": "shop",
                    "source": "orders",
                    "destination_type": "queue",
                    "destination": "nowhere",
                    "routing_key": "",
                    "arguments": {},
                },
                False,
            )
        stored = broker.store.load()
        assert stored is not None
        assert {x["name"] for x in stored["exchanges"]} == {"orders"}
        apply_change(broker, admin, "vhosts", {"name": "shop"}, True)
        assert "shop" not in broker.vhosts
    finally:
        broker.close()


class _Elsewhere:
    """A directory where node 'b' leads queue 'remote'."""

    def leader_elsewhere(self, vhost: str, name: str) -> str | None:
        return "b" if name == "remote" else None


def test_a_binding_to_a_queue_another_node_leads_is_kept(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    try:
        vhost = broker.vhost("/")
        vhost.declare_exchange("orders", "direct")
        with pytest.raises(NotFound):
            vhost.bind("queue", "remote", "orders", "k")  # a single node: no such queue
        broker.directory = _Elsewhere()
        vhost.bind("queue", "remote", "orders", "k")
        stored = broker.store.load()
        assert stored is not None
        assert [b["destination"] for b in stored["bindings"]] == ["remote"]
        assert vhost.route("orders", "k", lambda: None) == []  # routed by the leader
        broker.directory = None  # its leader deleted it: its binding's delete still works
        vhost.unbind("queue", "remote", "orders", "k")
        assert not vhost.exchanges["orders"].bindings
        assert not (broker.store.load() or {}).get("bindings")
    finally:
        broker.close()
