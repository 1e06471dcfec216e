"""Load that lives through the cluster's faults, and the checker that reads it all back.

A ``Publisher`` is one pika client thread publishing with confirms, one message at a time, to
one queue through the node that leads it. It numbers its messages (body ``QUEUE:SEQ``) and
keeps the number and the time of every confirm, so a test can tell what the cluster promised
(confirmed), what it may hold (in doubt: sent, connection lost before the confirm) and how
long the confirms stopped (``longest_gap``). A dropped connection is counted and the thread
connects again, to the node's current port (a node restarted on its data has new ports).

``read_back`` consumes a queue on its leader (a stream from its first offset) until every
confirmed number has arrived, and returns what arrived: a test asserts that nothing
confirmed is missing.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Self

import pika
from pika.exceptions import AMQPError, NackError, UnroutableError

from sievemq.testing import ServerProcess

READ_TIMEOUT_S = 60.0  # generous: a loaded machine; returns as soon as all arrived


def declare(node: ServerProcess, queue: str, kind: str, copies: int = 1) -> None:
    """Declare a durable ``kind`` (stream or classic) queue through ``node`` (its leader);
    ``copies``: a stream's ``x-initial-cluster-size``. One by default: these faults test a
    node's own queues through outages; a replicated stream fails over (and is fenced while
    its leader's lease is late), which ``test_failover.py`` and the chaos suite test, and
    until confirms wait for a majority a failover loses what the dead leader confirmed
    last, which this checker would report."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    try:
        arguments: dict[str, Any] = {"x-queue-type": kind}
        if kind == "stream":
            arguments["x-initial-cluster-size"] = copies
        conn.channel().queue_declare(queue, durable=True, arguments=arguments)
    finally:
        conn.close()


@dataclass
class Background:
    """A client running in a thread of its own (``_run``) until ``stop``."""

    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        name = f"{type(self).__name__}-{id(self):x}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            assert not self._thread.is_alive(), f"{self!r} did not stop"


@dataclass
class Publisher(Background):
    """Publishes ``QUEUE:SEQ`` with confirms to ``queue`` through ``node`` until stopped."""

    node: ServerProcess
    queue: str
    kind: str = "stream"
    label: str = ""  # the bodies' prefix (default the queue): several publishers, one queue
    filter_values: tuple[str, ...] = ()  # x-stream-filter-value of SEQ: [SEQ % len]
    pause_s: float = 0.0  # between publishes (the chaos suite's steady rate)
    confirmed: list[int] = field(default_factory=list)
    confirm_times: list[float] = field(default_factory=list)  # time.monotonic() of each
    in_doubt: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)  # nacked or returned unroutable
    drops: int = 0  # connections lost (or refused) while publishing
    errors: list[str] = field(default_factory=list)
    _next: int = 0

    @property
    def name(self) -> str:
        return self.label or self.queue

    def count(self) -> int:
        return len(self.confirmed)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                params = pika.URLParameters(self.node.url + "?connection_attempts=1")
                conn = pika.BlockingConnection(params)
            except (AMQPError, OSError) as error:
                self.drops += 1
                self.errors.append(f"connect: {error!r}")
                self._stop.wait(0.2)
                continue
            try:
                self._publish(conn)
            except (AMQPError, OSError) as error:
                self.drops += 1
                self.errors.append(f"publish: {error!r}")
            finally:
                if conn.is_open:
                    with contextlib.suppress(AMQPError, OSError):
                        conn.close()

    def _publish(self, conn: pika.BlockingConnection) -> None:
        ch = conn.channel()
        ch.confirm_delivery()
        while not self._stop.is_set():
            seq = self._next
            self._next += 1
            body = f"{self.name}:{seq}".encode()
            headers = (
                {"x-stream-filter-value": self.filter_values[seq % len(self.filter_values)]}
                if self.filter_values
                else None
            )
            props = pika.BasicProperties(delivery_mode=2, headers=headers)
            try:
                ch.basic_publish("", self.queue, body, props, mandatory=True)
            except (NackError, UnroutableError):
                self.rejected.append(seq)
                continue
            except BaseException:
                self.in_doubt.append(seq)
                raise
            self.confirmed.append(seq)
            self.confirm_times.append(time.monotonic())
            if self.pause_s:
                self._stop.wait(self.pause_s)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time in [start, end] (monotonic) without a confirm, in seconds."""
        times = [t for t in self.confirm_times if start <= t <= end]
        edges = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(edges))


def wait_for_progress(publishers: list[Publisher], more: int, timeout: float = 60.0) -> None:
    """Until every publisher confirmed ``more`` messages beyond what it had at the call."""
    base = {id(p): p.count() for p in publishers}
    deadline = time.monotonic() + timeout
    while True:
        slow = [p.name for p in publishers if p.count() < base[id(p)] + more]
        if not slow:
            return
        if time.monotonic() > deadline:
            details = {p.name: (p.count(), p.drops, p.errors[-1:]) for p in publishers}
            raise AssertionError(f"no progress within {timeout} s on {slow}: {details}")
        time.sleep(0.05)


def read_messages(
    node: ServerProcess,
    queue: str,
    kind: str,
    want: set[bytes],
    idle_s: float = 0.0,
    timeout_s: float = READ_TIMEOUT_S,
) -> list[tuple[int, bytes]]:
    """(offset, body) of every message a consumer on ``node`` gets (a stream from its first
    offset, -1 for a classic queue's), in order, read until every body of ``want`` arrived
    and then nothing more for ``idle_s``, or for ``timeout_s`` at most."""
    messages: list[tuple[int, bytes]] = []
    missing = set(want)
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1000)
        arguments: dict[str, Any] = {"x-stream-offset": "first"} if kind == "stream" else {}
        deadline = time.monotonic() + timeout_s
        idle_since = time.monotonic()
        for method, props, body in ch.consume(queue, arguments=arguments, inactivity_timeout=0.2):
            now = time.monotonic()
            if method is not None:
                idle_since = now
                offset = int(props.headers["x-stream-offset"]) if kind == "stream" else -1
                messages.append((offset, body))
                missing.discard(body)
                ch.basic_ack(method.delivery_tag)
            if (not missing and now - idle_since >= idle_s) or now > deadline:
                break
        ch.cancel()
    finally:
        conn.close()
    return messages


def read_back(node: ServerProcess, queue: str, kind: str, confirmed: list[int]) -> set[int]:
    """Every ``QUEUE:SEQ`` number a consumer on ``node`` gets (a stream from first), read
    until all of ``confirmed`` arrived or nothing more came for a while."""
    want = {f"{queue}:{seq}".encode() for seq in confirmed}
    return {int(body.rsplit(b":", 1)[1]) for _, body in read_messages(node, queue, kind, want)}


def check_nothing_confirmed_lost(leaders: dict[str, ServerProcess], pubs: list[Publisher]) -> None:
    """Read every publisher's queue back on its leader; fail naming what is missing."""
    for pub in pubs:
        got = read_back(leaders[pub.queue], pub.queue, pub.kind, pub.confirmed)
        missing = sorted(set(pub.confirmed) - got)
        assert not missing, (
            f"{pub.queue}: {len(missing)} of {len(pub.confirmed)} confirmed messages lost, "
            f"first {missing[:10]}"
        )
        unexpected = got - set(pub.confirmed) - set(pub.in_doubt)
        assert not unexpected, f"{pub.queue}: messages never sent: {sorted(unexpected)[:10]}"
