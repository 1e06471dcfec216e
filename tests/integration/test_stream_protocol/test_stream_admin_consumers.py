"""Stream-protocol consumers, publishers and single-active-consumer groups in the admin API
(/api/stream/consumers, /api/stream/publishers: the stream management plugin's; and
/api/stream/consumer-groups, a SieveMQ extension), over real HTTP with real rstream clients."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
)
from rstream.client import Client

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q
from sievemq.testing.stream_client import consumer, from_first, producer, sac
from sievemq.testing.wait import eventually


def _connection(http: httpx.Client, connection_name: str) -> str:
    """The server's name of the stream connection whose client called itself so."""
    for c in http.get("/api/stream/connections").json():
        if c["client_properties"].get("connection_name") == connection_name:
            return str(c["name"])
    raise AssertionError(f"no stream connection {connection_name!r}")


def _of(items: list[dict[str, Any]], stream: str) -> list[dict[str, Any]]:
    return [i for i in items if i["queue"] == {"name": stream, "vhost": "/"}]


async def test_stream_consumers_and_publishers_are_listed(
    server: ServerProcess, qname: str, http: httpx.Client
) -> None:
    confirmed: list[int] = []
    got: list[int] = []

    async def on_message(msg: Any, ctx: MessageContext) -> None:
        got.append(ctx.offset)

    async with producer(server, connection_name="admin-writer") as p:
        await p.create_stream(qname)
        await p.send_batch(
            qname,
            [AMQPMessage(body=f"m{i}".encode()) for i in range(10)],
            publisher_name="ref-1",
            on_publish_confirm=lambda status: confirmed.append(status.message_id),
        )
        await eventually(lambda: len(confirmed) == 10)
        async with consumer(server, connection_name="admin-reader") as c:
            await c.subscribe(
                qname,
                on_message,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
                properties={"identifier": "reader-1"},
            )
            await eventually(lambda: len(got) == 10)
            reader = _connection(http, "admin-reader")
            everywhere = _of(http.get("/api/stream/consumers").json(), qname)
            in_vhost = _of(http.get("/api/stream/consumers/%2F").json(), qname)
            missing_vhost = http.get("/api/stream/consumers/nope")

            publishers = http.get(f"/api/stream/publishers/%2F/{q(qname)}").json()
            all_publishers = _of(http.get("/api/stream/publishers").json(), qname)
            missing_stream = http.get("/api/stream/publishers/%2F/no-such-stream")
            writer = _connection(http, "admin-writer")

    assert everywhere == in_vhost and len(everywhere) == 1
    view = everywhere[0]
    assert view["connection_details"]["name"] == reader
    assert view["connection_details"]["user"] == "guest"
    assert isinstance(view["subscription_id"], int)
    assert view["consumed"] == 10 and view["offset"] == 10 and view["offset_lag"] == 0
    assert view["credits"] > 0
    assert view["properties"]["identifier"] == "reader-1"
    assert view["active"] is True and view["activity_status"] == "up"
    assert view["sievemq"]["single_active_consumer_group"] is None
    assert missing_vhost.status_code == 404

    assert publishers == all_publishers and len(publishers) == 1
    pub = publishers[0]
    assert pub["connection_details"]["name"] == writer
    assert pub["reference"] == "ref-1" and isinstance(pub["publisher_id"], int)
    assert (pub["published"], pub["confirmed"], pub["errored"]) == (10, 10, 0)
    assert missing_stream.status_code == 404


async def test_single_active_consumer_groups_show_who_is_active(
    server: ServerProcess, qname: str, http: httpx.Client
) -> None:
    first: list[int] = []
    second: list[int] = []
    props = sac("grp")
    async with producer(server) as p:
        await p.create_stream(qname)
        confirmed: list[int] = []
        await p.send_batch(
            qname,
            [AMQPMessage(body=b"x") for _ in range(5)],
            on_publish_confirm=lambda status: confirmed.append(status.message_id),
        )
        await eventually(lambda: len(confirmed) == 5)

    async def on_first(msg: Any, ctx: MessageContext) -> None:
        first.append(ctx.offset)

    async def on_second(msg: Any, ctx: MessageContext) -> None:
        second.append(ctx.offset)

    c1 = consumer(server, connection_name="sac-one")
    await c1.start()
    async with consumer(server, connection_name="sac-two") as c2:
        for c, handler in ((c1, on_first), (c2, on_second)):
            await c.subscribe(
                qname,
                handler,
                properties=props,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
                consumer_update_listener=from_first,
            )
        await eventually(lambda: len(first) == 5)
        one, two = _connection(http, "sac-one"), _connection(http, "sac-two")
        consumers = _of(http.get("/api/stream/consumers/%2F").json(), qname)
        groups = [g for g in http.get("/api/stream/consumer-groups").json() if g["stream"] == qname]
        in_vhost = http.get("/api/stream/consumer-groups/%2F").json()

        await c1.close()  # the waiting one takes over
        await eventually(lambda: len(second) == 5)
        after = [g for g in http.get("/api/stream/consumer-groups").json() if g["stream"] == qname]
        consumers_after = _of(http.get("/api/stream/consumers/%2F").json(), qname)

    by_connection = {c["connection_details"]["name"]: c for c in consumers}
    assert by_connection[one]["active"] is True
    assert by_connection[one]["activity_status"] == "single_active"
    assert by_connection[two]["active"] is False
    assert by_connection[two]["activity_status"] == "waiting"
    assert {c["sievemq"]["single_active_consumer_group"] for c in consumers} == {"grp"}
    assert {c["consumed"] for c in consumers} == {5, 0}

    assert len(groups) == 1 and groups[0] in in_vhost
    group = groups[0]
    assert (group["vhost"], group["reference"], group["partition_index"]) == ("/", "grp", -1)
    assert [(m["connection_name"], m["state"], m["active"]) for m in group["consumers"]] == [
        (one, "active", True),
        (two, "waiting", False),
    ]
    assert [(m["connection_name"], m["state"]) for m in after[0]["consumers"]] == [(two, "active")]
    assert [(c["connection_details"]["name"], c["activity_status"]) for c in consumers_after] == [
        (two, "single_active")
    ]


async def test_users_without_monitoring_see_only_their_own_stream_clients(
    server: ServerProcess, qname: str, http: httpx.Client
) -> None:
    """A ``management`` user (no ``monitoring`` tag) sees its own subscriptions and, of a
    group, only its own members; the administrator sees everyone's."""
    user = f"plain-{qname[-8:]}"
    created = http.put(f"/api/users/{user}", json={"password": "pw", "tags": "management"})
    assert created.status_code in (201, 204)
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    assert http.put(f"/api/permissions/%2F/{user}", json=perms).status_code in (201, 204)
    props = sac("mine")
    theirs = Consumer(
        server.host, server.stream_port, username=user, password="pw", connection_name="plain-sac"
    )
    await theirs.start()
    try:
        async with consumer(server, connection_name="guest-sac") as c:
            await c.create_stream(qname)
            await c.subscribe(qname, lambda m, ctx: None, properties=props)
            await theirs.subscribe(qname, lambda m, ctx: None, properties=props)
            own = _connection(http, "plain-sac")
            with client(server, user, "pw") as plain:
                consumers = _of(plain.get("/api/stream/consumers").json(), qname)
                groups = plain.get("/api/stream/consumer-groups").json()
                publishers = plain.get("/api/stream/publishers").json()
            as_admin = [
                g for g in http.get("/api/stream/consumer-groups").json() if g["stream"] == qname
            ]
    finally:
        await theirs.close()
        http.delete(f"/api/users/{user}")
    assert [c["connection_details"]["name"] for c in consumers] == [own]
    assert [(g["stream"], [m["connection_name"] for m in g["consumers"]]) for g in groups] == [
        (qname, [own])
    ]
    assert publishers == []
    assert len(as_admin) == 1 and len(as_admin[0]["consumers"]) == 2


def _consumer_total(http: httpx.Client) -> int:
    return int(http.get("/api/overview").json()["object_totals"]["consumers"])


def _queue_consumers_metric(http: httpx.Client, stream: str) -> float | None:
    wanted = f'rabbitmq_queue_consumers{{vhost="/",queue="{stream}"}} '
    for line in http.get("/metrics/per-object").text.splitlines():
        if line.startswith(wanted):
            return float(line[len(wanted) :])
    return None


async def test_stream_subscriptions_count_as_the_queues_consumers(
    server: ServerProcess, qname: str, http: httpx.Client
) -> None:
    """As RabbitMQ's stream plugin registers its consumers with the queue: a Subscribe
    counts in the stream's ``consumers`` (queues, streams, overview, Prometheus) and is
    listed in /api/consumers as ``stream.subid-N`` without acks or prefetch."""
    before = _consumer_total(http)
    props = {"identifier": "counted", "filter.0": "red", "match-unfiltered": "true"}
    async with consumer(server, connection_name="counted-reader") as c:
        await c.create_stream(qname)
        sid = await c.subscribe(qname, lambda m, ctx: None, properties=props)
        reader = _connection(http, "counted-reader")
        queue = http.get(f"/api/queues/%2F/{q(qname)}").json()
        stream = http.get(f"/api/streams/%2F/{q(qname)}").json()
        listed = [c for c in http.get("/api/queues/%2F").json() if c["name"] == qname]
        total = _consumer_total(http)
        metric = _queue_consumers_metric(http, qname)
        everywhere = _of(http.get("/api/consumers").json(), qname)
        in_vhost = _of(http.get("/api/consumers/%2F").json(), qname)
        assert http.delete(f"/api/queues/%2F/{q(qname)}").status_code == 204
        await eventually(lambda: not _of(http.get("/api/consumers").json(), qname))
        after_delete = _consumer_total(http)

    assert queue["consumers"] == 1 and listed[0]["consumers"] == 1
    assert stream["consumers"] == 1
    assert total == before + 1 and after_delete == before
    assert metric == 1.0
    assert everywhere == in_vhost and len(everywhere) == 1
    entry = everywhere[0]
    assert entry["consumer_tag"] == f"stream.subid-{sid}"
    assert (entry["ack_required"], entry["exclusive"], entry["prefetch_count"]) == (False, False, 0)
    assert (entry["active"], entry["activity_status"]) == (True, "up")
    assert entry["arguments"] == props
    assert entry["channel_details"]["connection_name"] == reader
    assert entry["channel_details"]["user"] == "guest"
    assert entry["sievemq"]["filter"] == {
        "values": ["red"],
        "match_unfiltered": True,
        "match_type": "any",
    }
    assert [c["consumer_tag"] for c in queue["consumer_details"]] == [f"stream.subid-{sid}"]


async def test_a_stream_connections_own_pages(
    server: ServerProcess, qname: str, http: httpx.Client
) -> None:
    """The stream plugin's /api/stream/connections/{vhost}/{name}, …/consumers and
    …/publishers: one connection, and only that connection's subscriptions and publishers."""
    confirmed: list[int] = []
    async with producer(server, connection_name="own-writer") as p:
        await p.create_stream(qname)
        await p.send_batch(
            qname,
            [AMQPMessage(body=b"x") for _ in range(3)],
            publisher_name="own-ref",
            on_publish_confirm=lambda status: confirmed.append(status.message_id),
        )
        await eventually(lambda: len(confirmed) == 3)
        async with consumer(server, connection_name="own-reader") as c:
            await c.subscribe(qname, lambda m, ctx: None, properties={"identifier": "own"})
            writer, reader = _connection(http, "own-writer"), _connection(http, "own-reader")
            base = "/api/stream/connections/%2F"
            one = http.get(f"{base}/{q(reader)}").json()
            in_vhost = http.get(base).json()
            reader_consumers = http.get(f"{base}/{q(reader)}/consumers").json()
            reader_publishers = http.get(f"{base}/{q(reader)}/publishers").json()
            writer_consumers = http.get(f"{base}/{q(writer)}/consumers").json()
            writer_publishers = http.get(f"{base}/{q(writer)}/publishers").json()
            missing = http.get(f"{base}/{q('no such connection')}")
            wrong_vhost = http.get(f"/api/stream/connections/nope/{q(reader)}")

    # DELETE drops the connection (a plain client: rstream's Consumer cannot close after it)
    lone = Client(
        server.host, server.stream_port, frame_max=1 << 20, heartbeat=60, connection_name="lone"
    )
    await lone.start()
    await lone.authenticate(vhost="/", username="guest", password="guest")
    try:
        target = _connection(http, "lone")
        closed = http.delete(f"{base}/{q(target)}")
        await eventually(lambda: http.get(f"{base}/{q(target)}").status_code == 404)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(lone.close(), 2)

    assert one["name"] == reader and one["protocol"] == "stream"
    assert one["client_properties"]["connection_name"] == "own-reader"
    assert {reader, writer} <= {x["name"] for x in in_vhost}
    assert [x["properties"]["identifier"] for x in reader_consumers] == ["own"]
    assert reader_consumers[0]["connection_details"]["name"] == reader
    assert reader_publishers == [] and writer_consumers == []
    assert [(x["reference"], x["published"], x["confirmed"]) for x in writer_publishers] == [
        ("own-ref", 3, 3)
    ]
    assert missing.status_code == 404 and wrong_vhost.status_code == 404
    assert closed.status_code == 204
