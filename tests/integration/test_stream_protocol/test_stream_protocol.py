"""The RabbitMQ Stream protocol listener, driven by the real rstream client (and a raw
socket for frames rstream cannot produce) against a real server process."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest
from rstream import (
    AMQPMessage,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    MessageContext,
    OffsetType,
    RawMessage,
    amqp_decoder,
)
from rstream.exceptions import OffsetNotFound, PreconditionFailed, StreamDoesNotExist

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect
from sievemq.testing.stream_client import (
    RawStreamClient,
    consumer,
    open_client,
    producer,
    send_confirmed,
    string,
)
from sievemq.testing.wait import eventually


async def _consume_all(
    server: ServerProcess,
    stream: str,
    expected: int,
    spec: ConsumerOffsetSpecification | None = None,
    decoder: object = None,
    **kwargs: object,
) -> list[tuple[int, object]]:
    got: list[tuple[int, object]] = []

    async def on_message(msg: object, ctx: MessageContext) -> None:
        got.append((ctx.offset, msg))

    async with consumer(server) as c:
        await c.subscribe(
            stream,
            on_message,
            decoder=decoder,  # type: ignore[arg-type]
            offset_specification=spec or ConsumerOffsetSpecification(OffsetType.FIRST, None),
            **kwargs,  # type: ignore[arg-type]
        )
        await eventually(lambda: len(got) >= expected)
        await asyncio.sleep(0.2)  # nothing beyond what is expected may arrive
    return got


# --------------------------------------------------------------------------- handshake


async def test_peer_properties_look_like_rabbitmq(server: ServerProcess) -> None:
    client = await open_client(server)
    try:
        props = await client.peer_properties()
    finally:
        await client.close()
    assert props["product"] == "RabbitMQ"
    major, minor = (int(x) for x in props["version"].split(".")[:2])
    assert (major, minor) >= (3, 13)


def test_wrong_password_and_unknown_vhost_are_refused(server: ServerProcess) -> None:
    raw = RawStreamClient(server)
    try:
        assert raw.open(password="wrong") == 8  # authentication failure
    finally:
        raw.close()
    raw = RawStreamClient(server)
    try:
        assert raw.open(vhost="no-such-vhost") == 12  # virtual host access failure
    finally:
        raw.close()


def test_garbage_frame_gets_close_13_and_the_server_survives(server: ServerProcess) -> None:
    raw = RawStreamClient(server)
    try:
        assert raw.open() == 1
        raw.send(999, b"\x01\x02")  # an unknown command key
        key, _, body = raw.read_frame()
        assert key == 22  # Close
        assert struct.unpack_from(">H", body, 4)[0] == 13
    finally:
        raw.close()
    raw = RawStreamClient(server)
    try:
        assert raw.open() == 1
        raw.sock.sendall(struct.pack(">I", 64 * 1024 * 1024))  # larger than frame_max
        key, _, body = raw.read_frame()
        assert key == 22
        assert struct.unpack_from(">H", body, 4)[0] == 14
    finally:
        raw.close()


def test_stream_stats_and_exchange_command_versions(server: ServerProcess, qname: str) -> None:
    raw = RawStreamClient(server)
    try:
        assert raw.open() == 1
        raw.request(28, string(qname))
        _, _, body = raw.read_frame()
        assert struct.unpack_from(">H", body, 4)[0] == 2  # no such stream
        raw.request(13, string(qname) + struct.pack(">i", 0))
        raw.read_frame()
        raw.request(28, string(qname))
        _, _, body = raw.read_frame()
        assert struct.unpack_from(">H", body, 4)[0] == 1
        (count,) = struct.unpack_from(">i", body, 6)
        stats = {}
        pos = 10
        for _ in range(count):
            (n,) = struct.unpack_from(">H", body, pos)
            name = body[pos + 2 : pos + 2 + n].decode()
            (stats[name],) = struct.unpack_from(">q", body, pos + 2 + n)
            pos += 2 + n + 8
        assert stats["first_chunk_id"] == -1 and stats["committed_chunk_id"] == -1
        raw.request(27, struct.pack(">i", 1) + struct.pack(">HHH", 2, 1, 2))
        _, _, body = raw.read_frame()
        (count,) = struct.unpack_from(">i", body, 6)
        versions = [struct.unpack_from(">HHH", body, 10 + 6 * i) for i in range(count)]
        assert versions[0] == (1, 1, 1)  # RabbitMQ's order: DeclarePublisher first ...
        assert versions[1] == (2, 1, 2)  # ... then Publish, up to v2 (filtering)
    finally:
        raw.close()


# --------------------------------------------------------------------------- streams


async def test_create_exists_delete_and_metadata(server: ServerProcess, qname: str) -> None:
    async with producer(server) as p:
        assert not await p.stream_exists(qname)
        await p.create_stream(qname, arguments={"max-length-bytes": 10_000_000})
        assert await p.stream_exists(qname)
        await p.create_stream(qname, arguments={"max-length-bytes": 10_000_000}, exists_ok=True)
        with pytest.raises(PreconditionFailed):  # exists with other arguments
            await p.create_stream(qname, arguments={"max-length-bytes": 5}, exists_ok=True)
        client = await open_client(server)
        try:
            leader, replicas = await client.query_leader_and_replicas(qname)
        finally:
            await client.close()
        assert (leader.host, leader.port) == (server.host, server.stream_port)
        assert replicas == []
        await p.delete_stream(qname)
        assert not await p.stream_exists(qname)
        with pytest.raises(StreamDoesNotExist):
            await p.delete_stream(qname)


async def test_stream_created_over_stream_protocol_is_an_amqp_stream_queue(
    server: ServerProcess, qname: str
) -> None:
    async with producer(server) as p:
        await p.create_stream(qname)
    conn = connect(server)
    try:
        ch = conn.channel()
        ok = ch.queue_declare(qname, passive=True)
        assert ok.method.message_count == 0
    finally:
        conn.close()


# --------------------------------------------------------------------------- publish/consume


async def test_publish_confirm_and_consume_in_order(server: ServerProcess, qname: str) -> None:
    confirmed: list[int] = []
    async with producer(server) as p:
        await p.create_stream(qname)
        await p.send_batch(qname, [AMQPMessage(body=f"m{i}".encode()) for i in range(300)])
        for i in range(5):
            await p.send_wait(qname, AMQPMessage(body=f"w{i}".encode()))
        await p.send_batch(
            qname,
            [b"raw-%d" % i for i in range(10)],
            on_publish_confirm=lambda c: confirmed.append(c.message_id),  # type: ignore[arg-type,return-value]
        )
        await eventually(lambda: len(confirmed) == 10)
    got = await _consume_all(server, qname, 315)
    assert [o for o, _ in got] == list(range(315))
    assert [bytes(m) for _, m in got[:2]] == [  # type: ignore[call-overload]
        bytes(AMQPMessage(body=b"m0")),
        bytes(AMQPMessage(body=b"m1")),
    ]
    # stream payloads are kept byte for byte, AMQP 1.0 or not
    assert [m for _, m in got[305:]] == [b"raw-%d" % i for i in range(10)]


async def test_every_offset_specification(server: ServerProcess, qname: str) -> None:
    async with producer(server) as p:
        await p.create_stream(qname)
        await send_confirmed(p, qname, [b"a%d" % i for i in range(10)])  # chunk at 0
        await asyncio.sleep(0.05)
        middle = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        await send_confirmed(p, qname, [b"b%d" % i for i in range(10)])  # chunk at 10
    first = await _consume_all(server, qname, 20)
    assert len(first) == 20
    offset = await _consume_all(
        server, qname, 13, ConsumerOffsetSpecification(OffsetType.OFFSET, 7)
    )
    assert offset[0][0] == 7 and len(offset) == 13
    last = await _consume_all(server, qname, 10, ConsumerOffsetSpecification(OffsetType.LAST))
    assert [o for o, _ in last] == list(range(10, 20))  # the last chunk, whole
    ts = await _consume_all(
        server, qname, 10, ConsumerOffsetSpecification(OffsetType.TIMESTAMP, middle)
    )
    assert [m for _, m in ts] == [b"b%d" % i for i in range(10)]

    got: list[bytes] = []
    async with consumer(server) as c:
        await c.subscribe(
            qname,
            lambda m, ctx: got.append(m),  # type: ignore[arg-type,return-value]
            offset_specification=ConsumerOffsetSpecification(OffsetType.NEXT),
        )
        await asyncio.sleep(0.3)
        assert got == []  # next: only what is published after subscribing
        async with producer(server) as p:
            await p.send_wait(qname, b"after")
        await eventually(lambda: got == [b"after"])


async def test_filtered_subscribe_gets_only_matching_values(
    server: ServerProcess, qname: str
) -> None:
    async def extract(msg: AMQPMessage) -> str:
        return str(msg.application_properties["region"])  # type: ignore[index]

    async with producer(server, filter_value_extractor=extract) as p:
        await p.create_stream(qname)
        for batch in range(5):
            await p.send_batch(
                qname,
                [
                    AMQPMessage(
                        body=b"%d-%d" % (batch, i), application_properties={"region": f"r{i % 50}"}
                    )
                    for i in range(100)
                ],
            )
    got = await _consume_all(
        server,
        qname,
        10,
        decoder=amqp_decoder,
        filter_input=FilterConfiguration(
            values_to_filter=["r7"],
            predicate=lambda m: m.application_properties[b"region"] == b"r7",
            match_unfiltered=False,
        ),
    )
    assert len(got) == 10
    assert {bytes(m.body) for _, m in got} == {  # type: ignore[attr-defined]
        b"%d-%d" % (b, i) for b in range(5) for i in (7, 57)
    }


async def test_match_unfiltered_adds_messages_without_a_value(
    server: ServerProcess, qname: str
) -> None:
    async def extract(msg: AMQPMessage) -> str:
        return str(msg.application_properties["v"])  # type: ignore[index]

    async with producer(server) as p:  # Publish v1: no filter value
        await p.create_stream(qname)
        await p.send_batch(qname, [AMQPMessage(body=b"plain")])
    async with producer(server, filter_value_extractor=extract) as p:  # Publish v2
        await p.send_batch(qname, [AMQPMessage(body=b"x", application_properties={"v": "x"})])
        await p.send_batch(qname, [AMQPMessage(body=b"y", application_properties={"v": "y"})])
    got = await _consume_all(
        server,
        qname,
        2,
        decoder=amqp_decoder,
        filter_input=FilterConfiguration(
            values_to_filter=["y"], predicate=lambda m: True, match_unfiltered=True
        ),
    )
    assert sorted(bytes(m.body) for _, m in got) == [b"plain", b"y"]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- dedup, offsets


async def test_named_publisher_deduplicates_and_continues(
    server: ServerProcess, qname: str
) -> None:
    async with producer(server) as p:
        await p.create_stream(qname)
        for i in range(1, 6):
            await p.send_wait(qname, RawMessage(b"%d" % i, publishing_id=i), publisher_name="ref")
        # ids at or below the stored one are confirmed but not written
        for i in (3, 4, 5):
            await p.send_wait(qname, RawMessage(b"dup", publishing_id=i), publisher_name="ref")
    client = await open_client(server)
    try:
        assert await client.query_publisher_sequence(qname, "ref") == 5
        assert await client.query_publisher_sequence(qname, "other") == 0
    finally:
        await client.close()
    async with producer(server) as p:  # a new producer continues at stored + 1
        await p.send_wait(qname, b"6", publisher_name="ref")
    got = await _consume_all(server, qname, 6)
    assert [m for _, m in got] == [b"1", b"2", b"3", b"4", b"5", b"6"]


def _sequence(server: ServerProcess, stream: str, ref: str) -> int:
    async def query() -> int:
        client = await open_client(server)
        try:
            return await client.query_publisher_sequence(stream, ref)
        finally:
            await client.close()

    return asyncio.run(query())


def _publish_named(server: ServerProcess, stream: str, ref: str, ids: range) -> None:
    async def publish() -> None:
        async with producer(server) as p:
            await p.create_stream(stream, exists_ok=True)
            await p.send_batch(
                stream, [RawMessage(b"%d" % i, publishing_id=i) for i in ids], publisher_name=ref
            )

    asyncio.run(publish())


def test_publisher_sequence_survives_restart_and_sigkill(fresh_server: ServerProcess) -> None:
    _publish_named(fresh_server, "s", "ref", range(1, 11))
    fresh_server.stop()
    fresh_server.start()
    assert _sequence(fresh_server, "s", "ref") == 10  # from the snapshot
    _publish_named(fresh_server, "s", "ref", range(11, 21))
    fresh_server.kill()
    fresh_server.start()
    assert _sequence(fresh_server, "s", "ref") == 20  # snapshot + scan of the rest


async def test_store_and_query_offset_shared_with_amqp_named_consumers(
    server: ServerProcess, qname: str
) -> None:
    async with producer(server) as p:
        await p.create_stream(qname)
        await p.send_batch(qname, [b"%d" % i for i in range(10)])
    async with consumer(server) as c:
        with pytest.raises(OffsetNotFound):
            await c.query_offset(qname, "tracker")
        await c.store_offset(qname, "tracker", 4)  # no reply: query until it is there
        await asyncio.sleep(0.1)
        assert await c.query_offset(qname, "tracker") == 4
    # an AMQP 0-9-1 consumer with the same name resumes after the stored offset
    conn = connect(server)
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        bodies: list[bytes] = []
        for _method, _props, body in ch.consume(
            qname,
            arguments={"x-stream-consumer-name": "tracker"},
            inactivity_timeout=1.0,
        ):
            if body is None:
                break
            bodies.append(body)
        assert bodies == [b"%d" % i for i in range(5, 10)]
    finally:
        conn.close()


# --------------------------------------------------------------------------- cleanup


async def test_deleting_a_stream_tells_its_consumers(server: ServerProcess, qname: str) -> None:
    updates: list[str] = []

    async def on_update(frame: object) -> None:
        updates.append(frame.metadata_info.stream)  # type: ignore[attr-defined]

    client = await open_client(server)
    try:
        await client.create_stream(qname)
        client.add_handler(__import__("rstream.schema").schema.MetadataUpdate, on_update)
        await client.subscribe(
            qname,
            subscription_id=1,
            offset_spec=__import__("rstream.schema").schema.OffsetSpec.from_params(
                OffsetType.FIRST, None
            ),
        )
        async with producer(server) as p:
            await p.delete_stream(qname)
        await eventually(lambda: updates == [qname])
    finally:
        await client.close()


async def test_whole_chunk_delivery_on_request_skips_only_by_bloom(
    server: ServerProcess, qname: str
) -> None:
    async def extract(msg: AMQPMessage) -> str:
        return str(msg.application_properties["v"])  # type: ignore[index]

    async with producer(server, filter_value_extractor=extract) as p:
        await p.create_stream(qname)
        mixed = [AMQPMessage(body=v.encode(), application_properties={"v": v}) for v in "xyx"]
        await send_confirmed(p, qname, mixed)  # one chunk with x and y
        await send_confirmed(p, qname, [AMQPMessage(body=b"z", application_properties={"v": "z"})])
    everything = FilterConfiguration(values_to_filter=["x"], predicate=lambda m: True)
    exact = await _consume_all(server, qname, 2, decoder=amqp_decoder, filter_input=everything)
    assert [(o, bytes(m.body)) for o, m in exact] == [(0, b"x"), (2, b"x")]  # type: ignore[attr-defined]
    whole = await _consume_all(
        server,
        qname,
        3,
        decoder=amqp_decoder,
        filter_input=everything,
        properties={"sievemq-whole-chunks": "true"},
    )
    # the x/y chunk whole (as RabbitMQ sends it), the z chunk skipped by its Bloom filter
    assert [(o, bytes(m.body)) for o, m in whole] == [(0, b"x"), (1, b"y"), (2, b"x")]  # type: ignore[attr-defined]
