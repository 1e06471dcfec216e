"""A rolling restart under load: three real nodes and a real etcd (2 s lease TTL).

Two replicated streams (three members each, led by different nodes) take confirmed
publishes all along: an AMQP 0-9-1 publisher with dedup ids (pika) and a Stream-protocol
named publisher (rstream), each resending what was not confirmed, through another node
when theirs stops; an AMQP consumer reads one of them. Each node in turn is stopped
(SIGTERM, or SIGKILL in the second test), started again on its data, and waited for until
its copies caught up, before the next. Meanwhile every running node's ``/api/queues`` is
polled. Then:

- every confirmed message is in its stream, once (dedup ids), and nothing never sent;
- the consumer's offsets have no gap;
- no publisher went longer without a confirm than the lease and a margin (a leader that
  stops hands over: SIGTERM at once, SIGKILL once its lease expires);
- every answer of ``/api/queues`` named a running leader and, as ``online``, exactly the
  running members (a node whose state changed within the lease and a margin may be either);
- every copy ends byte-identical to its leader's.

``SIEVEMQ_ROLLING_ROUNDS`` (``make rolling-restart ROUNDS=N``) rolls the cluster N times.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.etcd import running_etcd
from tests.chaos.checkers import (
    Stored,
    check_publisher,
    check_reader,
    longest_gap,
    replicas_equal,
)
from tests.chaos.workload import StreamPublisher, StreamReader, parse

from .cluster_helpers import TTL_S, channel, get, queues, started_nodes, until
from .fault_load import read_messages, wait_for_progress
from .rolling_load import DedupPublisher, MembersPoller, NodeRing, Timeline, untruthful

NAMES = ("a", "b", "c")
STREAMS = ("roll-amqp", "roll-stream")
ROUNDS = int(os.environ.get("SIEVEMQ_ROLLING_ROUNDS", "1"))
# a stopped leader's streams are led again within its lease; the margin is the election
# (up to 2 s waiting for the members' tails), the clients' reconnection and a loaded
# 2-core machine's scheduling
GAP_LIMIT_S = TTL_S + 8.0
GRACE_S = TTL_S + 4.0  # how long /api/queues may lag a node's stop or start


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    """Three fresh nodes and their own etcd per test (the streams' records of the test
    before, led by nodes of the same names, would be found there)."""
    with running_etcd(tmp_path / "etcd") as etcd, started_nodes(etcd, tmp_path, NAMES) as procs:
        yield procs


def stream_status(node: ServerProcess, stream: str) -> list[dict[str, object]]:
    return list(get(node, f"/api/queues/%2F/{stream}/replicas"))


def caught_up(node: ServerProcess, via: ServerProcess, stream: str, target: int) -> bool:
    """``node``'s copy of ``stream`` holds at least offset ``target`` (its stream_status)."""
    rows = {str(r["node"]): r for r in stream_status(via, stream)}
    row = rows.get(node.data_dir.name, {})
    offset = row.get("offset")
    return bool(row.get("online")) and isinstance(offset, int) and offset >= target


def led_elsewhere(via: ServerProcess, stream: str, gone: str) -> bool:
    """``via`` lists ``stream`` with a leader other than ``gone``."""
    return queues(via).get(stream, {}).get("leader") not in (None, gone)


def leader_offset(via: ServerProcess, stream: str) -> int:
    rows = stream_status(via, stream)
    offset = rows[0].get("offset") if rows else None
    return offset if isinstance(offset, int) else -1


Load = list[DedupPublisher | StreamPublisher]


def roll(
    nodes: dict[str, ServerProcess], ring: NodeRing, timeline: Timeline, kill: bool, load: Load
) -> None:
    """Stop and start every node in turn, each caught up before the next; while a node is
    down every publisher confirms a few more."""
    for name, node in nodes.items():
        ring.down.add(name)
        timeline.mark(name, None)
        if kill:
            node.kill()
        else:
            assert node.stop() == 0, node.stderr()
        timeline.mark(name, False)
        began = time.monotonic()
        via = next(n for n in nodes.values() if n is not node)
        for stream in STREAMS:  # every stream led by a running node again
            until(
                lambda s=stream, v=via, gone=name: led_elsewhere(v, s, gone),
                f"{stream} led by a running node after {name} stopped",
            )
        wait_for_progress(load, 20)  # type: ignore[arg-type]
        timeline.mark(name, None)
        started = time.monotonic()
        node.start()
        timeline.mark(name, True)
        ring.down.discard(name)
        ready = time.monotonic()
        for stream in STREAMS:
            target = leader_offset(via, stream)
            until(
                lambda s=stream, t=target, n=node, v=via: caught_up(n, v, s, t),
                f"{name} caught up on {stream} (offset {target})",
                timeout=60,
            )
        print(
            f"{name}: handed over and load went on {started - began:.1f} s, "
            f"started {ready - started:.1f} s, caught up {time.monotonic() - ready:.1f} s"
        )


def read_stream(node: ServerProcess, stream: str, want: set[tuple[str, int]]) -> Stored:
    bodies = {f"{label}:{seq}".encode() for label, seq in want}
    stored = Stored()
    for offset, body in read_messages(node, stream, "stream", bodies, idle_s=1.0):
        label, seq = parse(body)
        stored.messages.append((offset, label, seq))
    return stored


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_rolling_restart_under_load(nodes: dict[str, ServerProcess], kill: bool) -> None:
    a, b = nodes["a"], nodes["b"]
    arguments = {"x-queue-type": "stream", "x-initial-cluster-size": 3}
    channel(a).queue_declare(STREAMS[0], durable=True, arguments=arguments)
    channel(b).queue_declare(STREAMS[1], durable=True, arguments=arguments)
    for node in nodes.values():
        for stream in STREAMS:
            until(lambda n=node, s=stream: len(queues(n)[s]["online"]) == 3, f"{stream} on {node}")
    ring = NodeRing(list(nodes.values()))
    timeline = Timeline()
    amqp = DedupPublisher(ring, STREAMS[0], label="amqp")  # type: ignore[arg-type]
    rstream = StreamPublisher(ring, STREAMS[1], "stream", dedup=True)  # type: ignore[arg-type]
    reader = StreamReader(ring, STREAMS[0], "reader")  # type: ignore[arg-type]
    poller = MembersPoller(ring, STREAMS)
    load: Load = [amqp, rstream]
    for client in (amqp, rstream, reader, poller):
        client.start()
    try:
        wait_for_progress(load, 50)  # type: ignore[arg-type]
        start = time.monotonic()
        for _ in range(ROUNDS):
            roll(nodes, ring, timeline, kill, load)
        wait_for_progress(load, 50)  # type: ignore[arg-type]
        end = time.monotonic()
    finally:
        for client in (amqp, rstream, reader, poller):
            client.stop()

    gaps = {p.name: longest_gap(p.confirm_times, start, end) for p in load}
    print(
        f"rolling restart ({'SIGKILL' if kill else 'SIGTERM'}, {ROUNDS} rounds): "
        f"confirmed {[p.count() for p in load]}, longest confirm gaps {gaps}, "
        f"nacks {len(amqp.rejected)}, drops {amqp.drops}/{rstream.drops}, "
        f"{len(poller.samples)} /api/queues answers"
    )
    listed = queues(a)
    stored = {}
    for pub in load:
        leader = nodes[listed[pub.queue]["leader"]]
        stored[pub.queue] = read_stream(leader, pub.queue, {(pub.name, s) for s in pub.confirmed})
        result = check_publisher(pub.name, pub.confirmed, pub.attempted(), stored[pub.queue], True)
        assert not result.findings, (result.findings, result.figures)
    result = check_reader("reader", reader.deliveries, stored[STREAMS[0]])
    assert not result.findings, result.findings[:5]
    assert reader.deliveries, "the consumer got nothing"
    assert max(gaps.values()) < GAP_LIMIT_S, gaps

    wrong = [
        w
        for sample in poller.samples
        for w in untruthful(sample, STREAMS, set(NAMES), timeline, GRACE_S, GAP_LIMIT_S)
    ]
    assert not wrong, wrong[:5]
    assert len({s.node for s in poller.samples}) == len(NAMES)

    data = {n: node.data_dir for n, node in nodes.items()}
    for stream in STREAMS:
        leader, *replicas = listed[stream]["members"]

        def equal(stream: str = stream, leader: str = leader, rs: list[str] = replicas) -> bool:
            copies = {r: data[r] for r in rs}
            return not any(replicas_equal(data[leader], copies, "/", stream).values())

        until(equal, f"every copy of {stream} equals its leader's", timeout=60)
