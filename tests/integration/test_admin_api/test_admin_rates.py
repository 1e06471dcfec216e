"""Rates in the management API are real: a client publishes at a steady pace, and the very
first request afterwards (no earlier request primed anything: the server's own sampler did)
shows publish and length rates of that order on the queue's page, in the overview, the vhost
and on the connection, as RabbitMQ's management plugin does."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import client, q
from sievemq.testing.pika_client import connect

PACE = 40  # messages a second to each queue
SECONDS = 6.0  # longer than the 5 s rate window


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose sampler runs every second (``--collect-statistics-interval-ms``)."""
    data = tmp_path_factory.mktemp("rates") / "data"
    with ServerProcess(data, extra_args=("--collect-statistics-interval-ms", "1000")) as proc:
        yield proc
        assert proc.running, proc.stderr()


def _steady_publish(ch: Any, conn: Any, queues: list[str], body: bytes) -> int:
    """PACE messages a second to each queue for SECONDS; returns how many went to each."""
    sent = 0
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < SECONDS:
        if sent < elapsed * PACE:
            for name in queues:
                ch.basic_publish("", name, body)
            sent += 1
        else:
            conn.sleep(0.005)
    return sent


def _poll(http: Any, path: str, done: Callable[[Any], bool], timeout: float) -> Any:
    """GET ``path`` until ``done`` holds or ``timeout`` passes; the last answer either way."""
    deadline = time.monotonic() + timeout
    while True:
        page = http.get(path).json()
        if done(page) or time.monotonic() > deadline:
            return page
        time.sleep(0.1)


def _pages_once_stored(http: Any, names: list[str], sent: int) -> list[Any]:
    """The queues' pages once each counts ``sent`` messages (a stream's last batch may still
    be on its way to the disk when the declare-ok is sent)."""
    deadline = time.monotonic() + 5
    while True:
        pages = [http.get(f"/api/queues/%2F/{q(name)}").json() for name in names]
        if all(p["messages"] == sent for p in pages) or time.monotonic() > deadline:
            return pages
        time.sleep(0.05)


def _of_the_pace(rate: float) -> bool:
    # the machine is shared and noisy: the right order, not the exact figure
    return PACE * 0.4 <= rate <= PACE * 2.5


def test_first_request_shows_real_rates(sampled: ServerProcess, tmp_path: Path) -> None:
    classic, stream = "rates-classic", "rates-stream"
    body = b"x" * 200
    conn = connect(sampled)
    ch = conn.channel()
    ch.queue_declare(classic, durable=True)
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    sent = _steady_publish(ch, conn, [classic, stream], body)
    # the declare-oks come after every publish before them was read by the server
    ch.queue_declare(classic, durable=True, passive=True)
    ch.queue_declare(stream, durable=True, passive=True)
    with client(sampled) as http:
        cq, sq = _pages_once_stored(http, [classic, stream], sent)
        overview = http.get("/api/overview").json()
        vhost = http.get("/api/vhosts/%2F").json()
        connections = http.get("/api/connections").json()
    assert cq["messages"] == sq["messages"] == sent
    for page in (cq, sq):
        assert _of_the_pace(page["message_stats"]["publish_details"]["rate"]), page
        assert _of_the_pace(page["messages_details"]["rate"]), page
        assert _of_the_pace(page["messages_ready_details"]["rate"]), page
        assert page["messages_unacknowledged_details"] == {"rate": 0.0}
    # the overview counts each message once per publish (two publishes a tick here)
    assert _of_the_pace(overview["message_stats"]["publish_details"]["rate"] / 2), overview
    assert _of_the_pace(overview["queue_totals"]["messages_details"]["rate"] / 2), overview
    assert _of_the_pace(vhost["messages_details"]["rate"] / 2), vhost
    (c,) = connections
    # the socket's counts: at least the bodies came in, at least 2 x 200 B x PACE a second
    assert c["recv_oct"] > 2 * sent * len(body)
    assert c["recv_cnt"] > 0 and c["send_oct"] > 0 and c["send_cnt"] > 0
    assert 2 * len(body) * PACE * 0.4 <= c["recv_oct_details"]["rate"] <= 2 * 1024 * PACE * 2.5

    # draining the classic queue: its length's rate goes negative, deliver and ack rates up
    ch.basic_qos(prefetch_count=50)
    got = 0

    def on_message(chan: Any, method: Any, _props: Any, _body: bytes) -> None:
        nonlocal got
        got += 1
        chan.basic_ack(method.delivery_tag)

    ch.basic_consume(classic, on_message)
    deadline = time.monotonic() + 30
    while got < sent and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    assert got == sent
    # the next samples of the drained queue (the sampler runs every second; within the 5 s
    # window the drain shows as a negative length rate)
    with client(sampled) as http:
        drained = _poll(
            http,
            f"/api/queues/%2F/{q(classic)}",
            lambda page: page["messages"] == 0 and page["messages_details"]["rate"] < 0,
            timeout=4.0,
        )
    conn.close()
    assert drained["messages"] == 0
    assert drained["messages_details"]["rate"] < 0, drained
    stats = drained["message_stats"]
    assert stats["deliver_get_details"]["rate"] > 0 and stats["ack_details"]["rate"] > 0


def test_idle_server_has_zero_rates(sampled: ServerProcess) -> None:
    """Rates come down when nothing moves (the sampler keeps sampling)."""
    with client(sampled) as http:
        http.put("/api/queues/%2F/idle-q", json={"durable": True})
        time.sleep(6.5)  # longer than the 5 s window since anything last moved
        # a loaded machine may run the sampler late: wait for its samples, not a fixed time
        page = _poll(
            http,
            "/api/queues/%2F/idle-q",
            lambda p: p["messages_details"] == {"rate": 0.0},
            timeout=20.0,
        )
        overview = _poll(
            http,
            "/api/overview",
            lambda o: (
                o["queue_totals"]["messages_details"] == {"rate": 0.0}
                and o["message_stats"]["publish_details"] == {"rate": 0.0}
            ),
            timeout=20.0,
        )
    assert page["messages_details"] == {"rate": 0.0}
    assert overview["message_stats"]["publish_details"] == {"rate": 0.0}
    assert overview["queue_totals"]["messages_details"] == {"rate": 0.0}
