"""Stream failover: three real nodes and a real etcd (2 s lease TTL); pika and aiormq publish.

A stream's leader SIGKILLed under confirmed publishing: a replica leads it within the TTL
and a few seconds, publishing through a surviving node resumes, and every confirmed message
is read back from the new leader; the old leader restarted comes back as a replica, equal to
the leader. A leader holding chunks no replica took (both replicas were down) truncates them
when it returns after a failover. A leader SIGSTOPped past the TTL confirms nothing once
continued (it is fenced) and becomes a replica.

Every test publishes, then waits for the replicas to hold what was confirmed before it
kills the leader: a confirm does not wait for the replicas yet (docs/cluster.md), so what a
killed leader confirmed and no replica took is lost in a failover.
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import threading
import time

import aiormq
import pika
import pytest
from pika.exceptions import AMQPError, NackError, UnroutableError

from sievemq.streamproto import wire
from sievemq.testing import ServerProcess
from sievemq.testing.etcd import EtcdProcess
from sievemq.testing.stream_client import RawStreamClient, open_client

from .cluster_helpers import TTL_S, WAIT_S, channel, copy_of, led_by, queues, until

STREAM = {"x-queue-type": "stream", "x-initial-cluster-size": 3}


async def _publish(node: ServerProcess, name: str, bodies: list[bytes]) -> None:
    connection = await aiormq.connect(node.url)
    try:
        ch = await connection.channel(publisher_confirms=True)
        for start in range(0, len(bodies), 500):
            confirms = [ch.basic_publish(b, routing_key=name) for b in bodies[start : start + 500]]
            for confirm in await asyncio.gather(*confirms):
                assert isinstance(confirm, aiormq.spec.Basic.Ack)
    finally:
        await connection.close()


def publish(node: ServerProcess, name: str, bodies: list[bytes]) -> None:
    """Every body published with confirms through ``node``, each one acked."""
    asyncio.run(_publish(node, name, bodies))


async def _unconfirmed(node: ServerProcess, name: str, bodies: list[bytes], wait_s: float) -> int:
    connection = await aiormq.connect(node.url)
    try:
        ch = await connection.channel(publisher_confirms=True)
        confirms = [asyncio.ensure_future(ch.basic_publish(b, routing_key=name)) for b in bodies]
        done, _ = await asyncio.wait(confirms, timeout=wait_s)
        return len(done)
    finally:
        await connection.close()


def publish_held(node: ServerProcess, name: str, bodies: list[bytes], wait_s: float) -> int:
    """Publish with confirms through ``node``; how many confirms came within ``wait_s``."""
    return asyncio.run(_unconfirmed(node, name, bodies, wait_s))


def read_all(node: ServerProcess, name: str, expect: int) -> list[bytes]:
    """The stream's messages from its first offset, consumed through ``node``."""
    ch = channel(node)
    ch.basic_qos(prefetch_count=1000)
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    for method, _, body in ch.consume(
        name, arguments={"x-stream-offset": "first"}, inactivity_timeout=2.0
    ):
        if method is None:
            if len(got) >= expect or time.monotonic() > deadline:
                break
            continue
        got.append(body)
        ch.basic_ack(method.delivery_tag)
    ch.cancel()
    return got


async def _metadata_leader(node: ServerProcess, name: str) -> int:
    client = await open_client(node)
    try:
        leader, _ = await client.query_leader_and_replicas(name)
        return int(leader.port)
    finally:
        await client.close()


def metadata_leader(node: ServerProcess, name: str) -> int:
    """The stream port of the leader that ``node``'s Metadata names (Stream protocol)."""
    return asyncio.run(_metadata_leader(node, name))


def _reply_frame(raw: RawStreamClient) -> tuple[int, bytes]:
    while True:
        key, _, body = raw.read_frame()
        if key != wire.HEARTBEAT:
            return key, body


def _reply(raw: RawStreamClient) -> tuple[int, int]:
    """The next response's key and code (after its correlation id)."""
    key, body = _reply_frame(raw)
    return key, int(struct.unpack_from(">H", body, 4)[0])


def leader_of(node: ServerProcess, name: str) -> str:
    return str(queues(node).get(name, {}).get("leader"))


def first_confirm(node: ServerProcess, name: str, body: bytes) -> float:
    """Publish ``body`` through ``node`` with a confirm, again until it is acked (a nack
    or a dropped connection: try again); returns the monotonic time of the ack."""
    deadline = time.monotonic() + WAIT_S + TTL_S
    while time.monotonic() < deadline:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(node.url))
        except AMQPError:
            time.sleep(0.05)
            continue
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            while time.monotonic() < deadline:
                try:
                    ch.basic_publish("", name, body, mandatory=True)
                    return time.monotonic()
                except (NackError, UnroutableError):
                    time.sleep(0.05)
        except AMQPError:
            time.sleep(0.05)
        finally:
            if conn.is_open:
                conn.close()
    raise AssertionError(f"no confirm through {node.url} within {WAIT_S + TTL_S} s")


def _dedup_props(publishing_id: int) -> pika.BasicProperties:
    headers = {"x-sievemq-publisher": "amqp-ref", "x-sievemq-publishing-id": publishing_id}
    return pika.BasicProperties(headers=headers)


def test_leader_killed_a_replica_takes_over(fresh_nodes: dict[str, ServerProcess]) -> None:
    a, b, c = fresh_nodes["a"], fresh_nodes["b"], fresh_nodes["c"]
    channel(a).queue_declare("fo", durable=True, arguments=STREAM)
    before = [f"before {i}".encode() for i in range(3000)]
    publish(a, "fo", before)
    for replica in (b, c):
        until(lambda r=replica: copy_of(r, "fo") == led_by(a, "fo"), "replicas hold it all")

    a.kill()
    killed = time.monotonic()
    acked = first_confirm(b, "fo", b"first after")
    failover_s = acked - killed
    print(f"failover: SIGKILL to the first confirm through another node {failover_s:.2f} s")
    assert failover_s < TTL_S + 10
    leader = leader_of(b, "fo")
    assert leader in ("b", "c")
    new = fresh_nodes[leader]
    other = c if new is b else b
    assert queues(other)["fo"]["leader_epoch"] == 2
    assert queues(other)["fo"]["members"] == [leader, other.data_dir.name, "a"]
    for node in (b, c):  # Stream-protocol clients are sent to the new leader
        assert metadata_leader(node, "fo") == new.stream_port
    after = [f"after {i}".encode() for i in range(1000)]
    publish(c, "fo", after)  # through the new leader or the other survivor

    got = read_all(new, "fo", len(before) + 1 + len(after))
    assert got == [*before, b"first after", *after]  # all of it, in order, once

    until(lambda: copy_of(other, "fo") == led_by(new, "fo"), "the other survivor follows it")
    # the new leader commits by majority too: with its only live replica stopped, it holds
    os.kill(other.pid, signal.SIGSTOP)
    try:
        assert publish_held(new, "fo", [b"held"], 3.0) == 0
    finally:
        os.kill(other.pid, signal.SIGCONT)
    a.start()  # the old leader returns: its copy becomes a replica of the new leader
    until(lambda: copy_of(a, "fo") == led_by(new, "fo"), "the old leader's copy = the leader's")
    assert not led_by(a, "fo")
    assert leader_of(a, "fo") == leader


def test_returning_leader_truncates_what_no_replica_took(
    fresh_nodes: dict[str, ServerProcess],
) -> None:
    a, b, c = fresh_nodes["a"], fresh_nodes["b"], fresh_nodes["c"]
    channel(a).queue_declare("cut", durable=True, arguments=STREAM)
    shared = [f"shared {i}".encode() for i in range(500)]
    publish(a, "cut", shared)
    for replica in (b, c):
        until(lambda r=replica: copy_of(r, "cut") == led_by(a, "cut"), "replicas hold it all")
    b.kill()
    c.kill()
    # written by a alone: never confirmed (no majority holds them), lost in the failover below
    written = led_by(a, "cut")
    assert publish_held(a, "cut", [f"alone {i}".encode() for i in range(300)], 3.0) == 0
    until(lambda: led_by(a, "cut") != written, "a wrote them")
    a.kill()
    b.start()
    # b alone is one of three members: no unclean election, the stream takes no publishes
    until(lambda: "no leader is chosen without a majority" in b.stderr(), "b waits for c")
    assert leader_of(b, "cut") == "a"
    ch = channel(b)
    ch.confirm_delivery()
    with pytest.raises(NackError):
        ch.basic_publish("", "cut", b"without a majority")
    c.start()
    until(lambda: leader_of(b, "cut") in ("b", "c"), "b or c leads the stream", WAIT_S * 2)
    leader = fresh_nodes[leader_of(b, "cut")]
    publish(b, "cut", [b"new epoch"])
    a.start()
    until(lambda: copy_of(a, "cut") == led_by(leader, "cut"), "a's copy, cut back, = the leader's")
    assert read_all(a, "cut", len(shared) + 1) == [*shared, b"new epoch"]
    assert "were never taken by the leader of epoch 2; dropped" in a.stderr()


def test_leader_stopped_past_the_ttl_is_fenced(fresh_nodes: dict[str, ServerProcess]) -> None:
    a, b, c = fresh_nodes["a"], fresh_nodes["b"], fresh_nodes["c"]
    channel(a).queue_declare("zombie", durable=True, arguments=STREAM)
    publish(a, "zombie", [f"m {i}".encode() for i in range(200)])
    for replica in (b, c):
        until(lambda r=replica: copy_of(r, "zombie") == led_by(a, "zombie"), "replicas caught up")

    confirmed: list[bytes] = []
    stop = threading.Event()
    continued = threading.Event()
    after_continue: list[bytes] = []

    def publisher() -> None:
        """A client of a publishing with confirms all along, one message at a time."""
        i = 0
        while not stop.is_set():
            try:
                conn = pika.BlockingConnection(pika.URLParameters(a.url))
                ch = conn.channel()
                ch.confirm_delivery()
                while not stop.is_set():
                    body = f"z {i}".encode()
                    i += 1
                    try:
                        ch.basic_publish("", "zombie", body)
                    except NackError:
                        continue
                    confirmed.append(body)
                    if continued.is_set():
                        after_continue.append(body)
                conn.close()
            except AMQPError:
                time.sleep(0.05)

    thread = threading.Thread(target=publisher, daemon=True)
    thread.start()
    until(lambda: len(confirmed) > 20, "a confirms publishes")
    os.kill(a.pid, signal.SIGSTOP)
    try:
        until(lambda: leader_of(b, "zombie") in ("b", "c"), "a new leader while a is stopped")
    finally:
        continued.set()
        os.kill(a.pid, signal.SIGCONT)
    leader = fresh_nodes[leader_of(b, "zombie")]
    until(lambda: copy_of(a, "zombie") == led_by(leader, "zombie") != {}, "a follows it")
    until(lambda: len(after_continue) > 20, "publishing through a goes on (forwarded)")
    stop.set()
    thread.join(WAIT_S)
    got = set(read_all(leader, "zombie", 200 + len(confirmed)))
    lost = [body for body in confirmed if body not in got]
    assert lost == [], f"{len(lost)} confirmed messages lost, first {lost[:5]}"
    assert "cannot be sure it still leads" in a.stderr()


def test_replicated_streams_take_no_publishes_while_etcd_is_away(
    etcd: EtcdProcess, fresh_nodes: dict[str, ServerProcess]
) -> None:
    """A leader cut off from etcd cannot know it still leads: it nacks; once etcd answers
    (and the stream stayed its own, or moved), publishes are confirmed again."""
    a, b = fresh_nodes["a"], fresh_nodes["b"]
    assert etcd.proc is not None
    channel(a).queue_declare("away", durable=True, arguments=STREAM)
    publish(a, "away", [f"m {i}".encode() for i in range(100)])
    ch = channel(a)
    ch.confirm_delivery()
    ch.basic_publish("", "away", b"amqp id 1", _dedup_props(1))  # a deduplicated publisher
    raw = RawStreamClient(a)  # and a Stream-protocol publisher
    assert raw.open() == wire.OK
    raw.request(wire.DECLARE_PUBLISHER, b"\x01" + wire.enc_string("") + wire.enc_string("away"))
    assert _reply(raw) == (wire.DECLARE_PUBLISHER | wire.RESPONSE, wire.OK)
    # and one with a reference (dedup): an id refused now is no duplicate when sent again
    raw.request(wire.DECLARE_PUBLISHER, b"\x02" + wire.enc_string("ref") + wire.enc_string("away"))
    assert _reply(raw) == (wire.DECLARE_PUBLISHER | wire.RESPONSE, wire.OK)
    os.kill(etcd.proc.pid, signal.SIGSTOP)
    try:
        until(lambda: "cannot be sure it still leads" in a.stderr(), "a fences its stream")
        with pytest.raises(NackError):
            ch.basic_publish("", "away", b"while etcd is away")
        with pytest.raises(NackError):  # refused unwritten: id 2 is not the stream's
            ch.basic_publish("", "away", b"amqp id 2", _dedup_props(2))
        raw.send(wire.PUBLISH, struct.pack(">BiQI", 1, 1, 7, 4) + b"away")
        key, body = _reply_frame(raw)
        assert key == wire.PUBLISH_ERROR
        assert struct.unpack_from(">BiQH", body) == (1, 1, 7, wire.STREAM_NOT_AVAILABLE)
        raw.send(wire.PUBLISH, struct.pack(">BiQI", 2, 1, 9, 5) + b"dedup")
        key, body = _reply_frame(raw)
        assert key == wire.PUBLISH_ERROR
        assert struct.unpack_from(">BiQH", body) == (2, 1, 9, wire.STREAM_NOT_AVAILABLE)
    finally:
        os.kill(etcd.proc.pid, signal.SIGCONT)
        raw.close()
    first_confirm(a, "away", b"etcd is back")
    again_amqp = channel(a)  # id 2 again (through a: forwarded if the stream moved)
    again_amqp.confirm_delivery()
    again_amqp.basic_publish("", "away", b"amqp id 2", _dedup_props(2))
    again_amqp.basic_publish("", "away", b"amqp id 1", _dedup_props(1))  # a duplicate
    leader = fresh_nodes[
        until(lambda: leader_of(b, "away") in ("a", "b", "c") and leader_of(b, "away"), "a leader")
    ]
    again = RawStreamClient(leader)  # the refused id 9 again, to the leader: stored
    try:
        assert again.open() == wire.OK
        again.request(
            wire.DECLARE_PUBLISHER, b"\x02" + wire.enc_string("ref") + wire.enc_string("away")
        )
        assert _reply(again) == (wire.DECLARE_PUBLISHER | wire.RESPONSE, wire.OK)
        again.send(wire.PUBLISH, struct.pack(">BiQI", 2, 1, 9, 5) + b"dedup")
        key, body = _reply_frame(again)
        assert (key, struct.unpack_from(">BiQ", body)) == (wire.PUBLISH_CONFIRM, (2, 1, 9))
    finally:
        again.close()
    got = read_all(leader, "away", 105)
    assert got[:101] == [*(f"m {i}".encode() for i in range(100)), b"amqp id 1"]
    assert b"etcd is back" in got
    assert got.count(b"dedup") == 1  # confirmed means stored
    assert got.count(b"amqp id 2") == 1 and got.count(b"amqp id 1") == 1
    assert b"while etcd is away" not in got and b"away" not in got
