"""Load for a rolling restart: clients that go to another node when theirs stops, and a
poller that keeps what each node's ``/api/queues`` said about the streams' members.

- ``NodeRing``: the nodes a client may use, with those the test is stopping left out; it
  quacks like a ``ServerProcess`` (``url``, ``host``, ``stream_port``) so the chaos suite's
  clients (``StreamPublisher``, ``StreamReader``) reconnect through a node that runs.
- ``DedupPublisher``: pika, confirms, one message at a time, each with a publisher id and
  publishing id (``x-sievemq-publisher``); a nack or a dropped connection sends the same
  message again, with the same id, through the next node: exactly once in the stream.
- ``MembersPoller``: ``/api/queues`` of every running node, again and again, each answer
  kept with the time it was asked, for a checker that compares it with which nodes ran.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import pika
from pika.exceptions import AMQPError, NackError, UnroutableError

from sievemq.testing import ServerProcess

from .fault_load import Background, Publisher


@dataclass
class NodeRing:
    """The running nodes in turn; ``down`` holds those the test is stopping or starting."""

    nodes: list[ServerProcess]
    down: set[str] = field(default_factory=set)
    _at: int = 0
    _chosen: ServerProcess | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def up(self) -> list[ServerProcess]:
        with self._lock:
            return [n for n in self.nodes if n.data_dir.name not in self.down]

    def next(self) -> ServerProcess:
        """The next node that runs (the first one when every node is down)."""
        with self._lock:
            for _ in range(len(self.nodes)):
                self._at += 1
                node = self.nodes[self._at % len(self.nodes)]
                if node.data_dir.name not in self.down:
                    self._chosen = node
                    return node
            self._chosen = self.nodes[0]
            return self._chosen

    @property
    def url(self) -> str:
        return self.next().url

    @property
    def host(self) -> str:
        return self.next().host

    @property
    def stream_port(self) -> int:
        """The port of the node ``host`` chose (read right after it)."""
        return (self._chosen or self.next()).stream_port


@dataclass
class DedupPublisher(Publisher):
    """Publishes ``LABEL:SEQ`` to ``queue`` with publishing id SEQ + 1 under the publisher
    id LABEL; resends a message until it is confirmed, through the next node after a nack
    (counted in ``rejected``) or a dropped connection. ``node`` is a ``NodeRing``."""

    sent: set[int] = field(default_factory=set)

    @property
    def ring(self) -> NodeRing:
        return cast(NodeRing, self.node)

    def attempted(self) -> set[int]:
        return set(self.sent)

    def _run(self) -> None:
        pending: int | None = None
        while not self._stop.is_set():
            node = self.ring.next()
            try:
                params = pika.URLParameters(node.url + "?connection_attempts=1&socket_timeout=5")
                conn = pika.BlockingConnection(params)
            except (AMQPError, OSError) as error:
                self.drops += 1
                self.errors.append(f"connect {node.data_dir.name}: {error!r}"[:200])
                self._stop.wait(0.1)
                continue
            try:
                pending = self._publish(conn, pending)
            except (AMQPError, OSError) as error:
                self.drops += 1
                self.errors.append(f"publish {node.data_dir.name}: {error!r}"[:200])
            finally:
                if conn.is_open:
                    with contextlib.suppress(AMQPError, OSError):
                        conn.close()

    def _publish(self, conn: pika.BlockingConnection, pending: int | None) -> int | None:
        """Publish until stopped or refused; returns the message still to be confirmed."""
        ch = conn.channel()
        ch.confirm_delivery()
        while not self._stop.is_set():
            if pending is None:
                pending = self._next
                self._next += 1
            self.sent.add(pending)
            headers = {"x-sievemq-publisher": self.label, "x-sievemq-publishing-id": pending + 1}
            props = pika.BasicProperties(delivery_mode=2, headers=headers)
            body = f"{self.label}:{pending}".encode()
            try:
                ch.basic_publish("", self.queue, body, props, mandatory=True)
            except (NackError, UnroutableError):
                self.rejected.append(pending)
                self._stop.wait(0.05)
                return pending  # again, through the next node
            self.confirmed.append(pending)
            self.confirm_times.append(time.monotonic())
            pending = None
        return pending


@dataclass
class Sample:
    """One ``/api/queues`` answer: asked at ``start``, answered by ``end`` (monotonic)."""

    node: str
    start: float
    end: float
    streams: dict[str, dict[str, Any]]  # name: {leader, members, online}
    error: str = ""


@dataclass
class MembersPoller(Background):
    """Asks every running node's ``/api/queues`` for ``streams``, every ``every_s``."""

    ring: NodeRing
    streams: tuple[str, ...]
    every_s: float = 0.25
    samples: list[Sample] = field(default_factory=list)

    def _run(self) -> None:
        with httpx.Client(auth=("guest", "guest"), timeout=5) as client:
            while not self._stop.wait(self.every_s):
                for node in self.ring.up():
                    self._ask(client, node)

    def _ask(self, client: httpx.Client, node: ServerProcess) -> None:
        start = time.monotonic()
        name = node.data_dir.name
        try:
            response = client.get(node.admin_url + "/api/queues")
            response.raise_for_status()
            listed = {q["name"]: q for q in response.json()}
        except (httpx.HTTPError, ValueError) as error:
            self.samples.append(Sample(name, start, time.monotonic(), {}, repr(error)[:200]))
            return
        streams = {
            s: {k: listed[s].get(k) for k in ("leader", "members", "online")}
            for s in self.streams
            if s in listed
        }
        self.samples.append(Sample(name, start, time.monotonic(), streams))


@dataclass
class Timeline:
    """When each node began and ended stopping or starting (monotonic), as the test did it:
    ``runs`` None while it changes (a starting node registers before its ready line)."""

    changes: list[tuple[float, str, bool | None]] = field(default_factory=list)

    def mark(self, node: str, runs: bool | None) -> None:
        self.changes.append((time.monotonic(), node, runs))

    def _state(self, names: set[str], at: float) -> dict[str, bool | None]:
        state: dict[str, bool | None] = dict.fromkeys(names, True)
        for t, node, runs in self.changes:
            if t <= at:
                state[node] = runs
        return state

    def running(self, names: set[str], at: float) -> set[str]:
        return {n for n, runs in self._state(names, at).items() if runs}

    def settling(self, names: set[str], start: float, end: float, grace_s: float) -> set[str]:
        """Nodes stopping or starting during ``[start, end]``, or done within ``grace_s``
        before it: the cluster may still be learning of it (a lease to expire, a watch)."""
        changing = {n for n, runs in self._state(names, end).items() if runs is None}
        recent = {node for t, node, _ in self.changes if start - grace_s <= t <= end}
        return changing | recent


def untruthful(
    sample: Sample,
    streams: tuple[str, ...],
    names: set[str],
    timeline: Timeline,
    grace_s: float,
    election_s: float,
) -> list[str]:
    """What ``sample`` says about its streams that was not so: a missing stream or field,
    ``online`` not the running members (nodes that changed state within ``grace_s`` may be
    either), a leader that does not run (longer than ``election_s`` after it stopped: until
    a replica is elected the record names the stopped leader, ``state: down``)."""
    running = timeline.running(names, sample.start)
    settling = timeline.settling(names, sample.start, sample.end, grace_s)
    electing = timeline.settling(names, sample.start, sample.end, election_s)
    if sample.error:  # a node asked as it began to stop may not answer
        return [] if sample.node in settling else [f"{sample.node}: failed: {sample.error}"]
    wrong = [f"{sample.node}: {s} not listed" for s in streams if s not in sample.streams]
    for stream, row in sample.streams.items():
        leader, members, online = row["leader"], row["members"], row["online"]
        if not isinstance(members, list) or not isinstance(online, list) or not leader:
            wrong.append(f"{sample.node}: {stream} lists {row}")
            continue
        said = f"{sample.node} at {sample.start:.1f}: {stream} {row} (running {sorted(running)})"
        if leader not in members or not set(online) <= set(members):
            wrong.append(f"{said}: leader or online not among the members")
        if leader not in running and leader not in electing:
            wrong.append(f"{said}: the leader does not run")
        sure = set(members) - settling
        if set(online) & sure != set(members) & running & sure:
            wrong.append(f"{said}: online is not the running members")
    return wrong
