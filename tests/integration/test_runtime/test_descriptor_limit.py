"""Living within the process's descriptor limit (issue 21): the real server under
``ulimit -n 256`` and ``1024``, soft and hard, so it cannot raise them.

Thousands of streams in use cost no more descriptors than the budget gives the storage
cache; clients past the connections' share are closed at accept; running out anyway costs
one operation a 506 naming the limit, and the node recovers once descriptors free up.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client
from sievemq.testing.pika_client import connect

STREAMS = 3000
SAMPLE_EVERY = 250
CLASSIC = 600


@pytest.fixture
def limited(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path / "data", fd_limit=request.param) as proc:
        yield proc
        assert proc.running, proc.stderr()
        assert "INTERNAL_ERROR" not in proc.stderr()
        assert "Traceback" not in proc.stderr(), proc.stderr()


def node_figures(server: ServerProcess) -> dict[str, int]:
    with client(server) as http:
        node = http.get("/api/nodes").json()[0]
    return {k: node[k] for k in ("fd_used", "fd_total", "sockets_used", "sockets_total")}


def metric(server: ServerProcess, name: str) -> float:
    with client(server) as http:
        text = http.get("/metrics").text
    line = next(x for x in text.splitlines() if x.startswith(name + " "))
    return float(line.split()[1])


def stream_args() -> dict[str, object]:
    return {"x-queue-type": "stream"}


def arrivals(server: ServerProcess, stop: threading.Event, done: list[int]) -> None:
    """New connections arriving all along: each declares its stream, publishes one
    confirmed message and leaves."""
    n = 0
    while not stop.is_set():
        conn = connect(server)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(f"arrival-{n}", durable=True, arguments=stream_args())
        ch.basic_publish("", f"arrival-{n}", f"arrival {n}".encode())
        conn.close()
        n += 1
        done.append(n)


def first_message(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> bytes:
    ch.basic_qos(prefetch_count=1)
    for _method, _props, body in ch.consume(
        queue, arguments={"x-stream-offset": "first"}, inactivity_timeout=30
    ):
        assert body is not None, f"nothing read back from {queue}"
        ch.cancel()
        return body
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("limited", "sockets_total"), [(256, 96), (1024, 480)], indirect=["limited"]
)
def test_thousands_of_streams_within_the_descriptor_limit(
    limited: ServerProcess, sockets_total: int
) -> None:
    fd_total = 256 if sockets_total == 96 else 1024
    figures = node_figures(limited)
    assert figures["fd_total"] == fd_total
    assert figures["sockets_total"] == sockets_total
    assert 0 < figures["fd_used"] < fd_total
    assert metric(limited, "rabbitmq_process_max_fds") == fd_total

    stop = threading.Event()
    arrived: list[int] = []
    failures: list[BaseException] = []

    def arrive() -> None:
        try:
            arrivals(limited, stop, arrived)
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    worker = threading.Thread(target=arrive, daemon=True)
    worker.start()
    try:
        conn = connect(limited)
        ch = conn.channel()
        ch.confirm_delivery()  # a nack or a closed channel raises: every publish confirmed
        for i in range(STREAMS):
            ch.queue_declare(f"many-{i}", durable=True, arguments=stream_args())
            ch.basic_publish("", f"many-{i}", f"message {i}".encode())
        peak = node_figures(limited)
        assert peak["fd_used"] < fd_total
        assert metric(limited, "rabbitmq_process_open_fds") < fd_total
    finally:
        stop.set()
        worker.join(120)
    assert failures == []
    assert arrived, "no connection arrived meanwhile"
    reader = conn.channel()
    for i in range(0, STREAMS, SAMPLE_EVERY):
        assert first_message(reader, f"many-{i}") == f"message {i}".encode()
    for n in range(0, len(arrived), max(1, len(arrived) // 5)):
        assert first_message(reader, f"arrival-{n}") == f"arrival {n}".encode()
    conn.close()


@pytest.mark.parametrize("limited", [256], indirect=True)
def test_connections_past_their_share_are_closed_at_accept(limited: ServerProcess) -> None:
    share = node_figures(limited)["sockets_total"]
    conns = [connect(limited) for _ in range(share)]
    assert node_figures(limited)["sockets_used"] == share
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(limited)
    conns.pop().close()
    again = connect(limited)  # room again
    again.channel().queue_declare("after-refusal", durable=True, arguments=stream_args())
    for conn in [again, *conns]:
        conn.close()


@pytest.mark.parametrize("limited", [256], indirect=True)
def test_many_durable_classic_queues_within_the_descriptor_limit(limited: ServerProcess) -> None:
    """Their files go through the storage cache too (80 of them used to exhaust 256)."""
    conn = connect(limited)
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(CLASSIC):
        ch.queue_declare(f"deep-{i}", durable=True)
        ch.basic_publish("", f"deep-{i}", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    assert node_figures(limited)["fd_used"] < 256
    for i in range(0, CLASSIC, 50):
        method, _props, body = ch.basic_get(f"deep-{i}", auto_ack=True)
        assert method is not None and body == b"m%d" % i
    conn.close()


def hog_descriptors(server: ServerProcess, count: int) -> list[socket.socket]:
    """Clients of the admin port that send half a request and wait: each holds one of the
    server's descriptors (no connection limit counts them), until closed."""
    hogs = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", server.admin_port), timeout=10)
        sock.sendall(b"GET /api/overview HTTP/1.1\r\nHost: hog\r\n")  # never finished
        hogs.append(sock)
    wait_until_exhausted(server.pid, server_limit=256)
    return hogs


def wait_until_exhausted(pid: int, server_limit: int, timeout: float = 60.0) -> None:
    """The hogs sit in the listener's backlog until the server accepts them, which on a busy
    machine lags the client's connect: wait until the process really holds every
    descriptor it may open."""
    deadline = time.monotonic() + timeout
    while (held := len(os.listdir(f"/proc/{pid}/fd"))) < server_limit:
        assert time.monotonic() < deadline, f"the server holds only {held} descriptors"
        time.sleep(0.05)


@pytest.mark.parametrize("limited", [256], indirect=True)
def test_running_out_costs_one_operation_and_the_node_recovers(limited: ServerProcess) -> None:
    """Another party takes every descriptor the process may open: a channel operation that
    needs one gets a 506 naming the limit (never a 541) and only its channel closes; a new
    client is closed at once; once descriptors free up the node serves again by itself."""
    conn = connect(limited)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("before", durable=True)
    ch.basic_publish("", "before", b"kept", pika.BasicProperties(delivery_mode=2))
    hogs = hog_descriptors(limited, 300)  # more than the 256 the server may open
    try:
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            connect(limited)  # closed at accept
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.queue_declare("during", durable=True)  # its log files need descriptors
        assert refused.value.reply_code == 506
        assert "out of file descriptors" in refused.value.reply_text
        assert "this process may open 256" in refused.value.reply_text
    finally:
        for sock in hogs:
            sock.close()
    cleanup = conn.channel()  # the connection lived on: only that channel closed
    assert cleanup.queue_declare("before", durable=True, passive=True).method.message_count == 1
    late = connect(limited)  # served again
    lch = late.channel()
    lch.confirm_delivery()
    lch.queue_declare("after-recovery", durable=True, arguments=stream_args())
    lch.basic_publish("", "after-recovery", b"fine")
    assert first_message(lch, "after-recovery") == b"fine"
    late.close()
    conn.close()
    assert "out of file descriptors" in limited.stderr()  # logged as a warning
