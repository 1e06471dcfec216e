"""Direct reply-to across nodes: three real nodes, a real etcd, pika.

An RPC client on `a` consumes ``amq.rabbitmq.reply-to`` and sends requests to a queue `b`
leads; a server reads them through `b` or through `c` and publishes each reply to the
request's reply-to name on its own node. The name encodes the requester's node: the reply
is forwarded over the link and reaches the client on `a`.
"""

from __future__ import annotations

from typing import Any

import pika

from sievemq.testing import ServerProcess

from .cluster_helpers import channel, queues, until

NAMES = ("a", "b", "c")  # the nodes of this module (conftest.nodes)


def test_replies_reach_the_requester_on_another_node(nodes: dict[str, ServerProcess]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    channel(b).queue_declare("rpc", durable=True)
    until(lambda: "rpc" in queues(a) and "rpc" in queues(c), "every node knows rpc")

    client_conn = pika.BlockingConnection(pika.URLParameters(a.url))
    client = client_conn.channel()
    replies: list[tuple[Any, bytes]] = []
    client.basic_consume(
        "amq.rabbitmq.reply-to", lambda _c, _m, p, body: replies.append((p, body)), auto_ack=True
    )
    client.confirm_delivery()

    for label, server_node, request in (("b", b, b"ping via b"), ("c", c, b"ping via c")):
        props = pika.BasicProperties(
            reply_to="amq.rabbitmq.reply-to", correlation_id=request.decode()
        )
        client.basic_publish("", "rpc", request, props)
        server = channel(server_node)
        server.confirm_delivery()
        got: list[Any] = []

        def take(ch: Any = server, into: list[Any] = got) -> bool:
            method, p, body = ch.basic_get("rpc", auto_ack=True)
            if method is not None:
                into.append((p, body))
            return bool(into)

        until(take, f"the request through {label}")
        asked, body = got[0]
        assert body == request
        assert asked.reply_to.startswith("amq.rabbitmq.reply-to.")
        server.basic_publish(
            "",
            asked.reply_to,
            b"pong: " + body,
            pika.BasicProperties(correlation_id=asked.correlation_id),
            mandatory=True,  # routed (forwarded), so not returned
        )

        def replied(before: int = len(replies)) -> bool:
            client_conn.process_data_events(0.1)
            return len(replies) > before

        until(replied, "the reply on a")
        reply_props, reply = replies[-1]
        assert reply == b"pong: " + request
        assert reply_props.correlation_id == request.decode()
    client_conn.close()
