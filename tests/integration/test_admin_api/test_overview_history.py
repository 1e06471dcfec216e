"""``/api/overview/history``: each round of the rate sampler leaves one node-wide point (the
overview's message rates and queue lengths), so the dashboard's charts open with the last
minutes instead of starting empty."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from sievemq.testing import ServerProcess


@pytest.fixture
def fast_sampler(tmp_path: Path) -> Iterator[ServerProcess]:
    args = ("--collect-statistics-interval-ms", "100")  # the fewest ms the setting allows
    with ServerProcess(tmp_path / "data", args) as proc:
        yield proc


def _until(http: httpx.Client, ok: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60  # generous: a loaded machine samples late
    while True:
        points: list[dict[str, Any]] = http.get("/api/overview/history").json()
        if ok(points) or time.monotonic() > deadline:
            return points
        time.sleep(0.1)


def test_history_holds_the_rates_and_lengths_of_each_round(fast_sampler: ServerProcess) -> None:
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(fast_sampler.host, fast_sampler.amqp_port)
    )
    ch = conn.channel()
    ch.queue_declare("history")
    ch.confirm_delivery()
    for _ in range(20):
        ch.basic_publish("", "history", b"m")
    method, _props, _body = ch.basic_get("history")  # one unacked
    assert method is not None

    def busy(p: dict[str, Any]) -> bool:  # the publishes, confirms and the one get seen
        rates = p["publish_rate"] > 0 and p["confirm_rate"] > 0
        return rates and p["messages"] == 20 and p["messages_unacknowledged"] == 1

    with httpx.Client(base_url=fast_sampler.admin_url, auth=("guest", "guest")) as http:
        points = _until(http, lambda ps: any(busy(p) for p in ps))
    conn.close()
    assert len(points) <= 120  # ten minutes of 5 s rounds, no more
    stamps = [p["timestamp"] for p in points]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    seen = [p for p in points if busy(p)]
    assert seen and seen[-1]["messages_ready"] == 19, points[-3:]
    assert set(points[0]) == {
        "timestamp",
        "publish_rate",
        "confirm_rate",
        "deliver_get_rate",
        "ack_rate",
        "redeliver_rate",
        "messages",
        "messages_ready",
        "messages_unacknowledged",
    }
