"""Routing into streams through every exchange type: what lands in each stream."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect, consume_expected

pytestmark = pytest.mark.timeout(120)  # a hang guard: a starved machine took > 30 s

STREAM = {"x-queue-type": "stream"}


def bodies_in(ch: Any, queue: str, want: int) -> list[bytes]:
    """The stream's bodies from the first: ``want`` of them are waited for, then 0.3 s more."""
    ch.basic_qos(prefetch_count=100)
    got = consume_expected(ch, queue, want, {"x-stream-offset": "first"})
    return [body for _m, _p, body in got]


def test_topic_fanout_headers_and_exchange_bindings(server: ServerProcess, qname: str) -> None:
    conn = connect(server)
    ch = conn.channel()
    ch.confirm_delivery()
    q = {name: f"{qname}-{name}" for name in ("topic", "fanout", "all", "any", "e2e")}
    for name in q.values():
        ch.queue_declare(name, durable=True, arguments=STREAM)
    ch.exchange_declare(f"{qname}.t", "topic", durable=True)
    ch.exchange_declare(f"{qname}.f", "fanout", durable=True)
    ch.exchange_declare(f"{qname}.h", "headers", durable=True)
    ch.exchange_declare(f"{qname}.src", "direct", durable=True)
    ch.queue_bind(q["topic"], f"{qname}.t", "a.*.c")
    ch.queue_bind(q["topic"], f"{qname}.t", "#.z")
    ch.queue_bind(q["fanout"], f"{qname}.f", "ignored")
    ch.queue_bind(q["all"], f"{qname}.h", "", arguments={"x-match": "all", "k": "v", "n": 1})
    ch.queue_bind(q["any"], f"{qname}.h", "", arguments={"x-match": "any", "k": "v", "n": 1})
    ch.exchange_bind(destination=f"{qname}.f", source=f"{qname}.src", routing_key="go")
    ch.queue_bind(q["e2e"], f"{qname}.src", "go")

    unroutable: list[str] = []

    def pub(exchange: str, rk: str, body: str, headers: dict[str, Any] | None = None) -> None:
        props = pika.BasicProperties(headers=headers)
        try:
            ch.basic_publish(exchange, rk, body.encode(), props, mandatory=True)
        except pika.exceptions.UnroutableError:
            unroutable.append(body)

    for rk in ["a.b.c", "a.b.b.c", "a.c", "x.y.z", "z", "a.b.c.z"]:
        pub(f"{qname}.t", rk, f"t:{rk}")
    pub(f"{qname}.f", "whatever", "f:1")
    pub(f"{qname}.h", "", "h:both", {"k": "v", "n": 1})
    pub(f"{qname}.h", "", "h:k", {"k": "v"})
    pub(f"{qname}.h", "", "h:none", {"k": "w"})
    pub(f"{qname}.src", "go", "src:go")
    pub(f"{qname}.src", "stop", "src:stop")

    assert unroutable == ["t:a.b.b.c", "t:a.c", "h:none", "src:stop"]
    assert bodies_in(conn.channel(), q["topic"], 4) == [
        b"t:a.b.c",
        b"t:x.y.z",
        b"t:z",
        b"t:a.b.c.z",
    ]
    assert bodies_in(conn.channel(), q["fanout"], 2) == [b"f:1", b"src:go"]
    assert bodies_in(conn.channel(), q["all"], 1) == [b"h:both"]
    assert bodies_in(conn.channel(), q["any"], 2) == [b"h:both", b"h:k"]
    assert bodies_in(conn.channel(), q["e2e"], 1) == [b"src:go"]
    conn.close()
