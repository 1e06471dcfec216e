"""Dramatiq against SieveMQ: a worker process runs tasks, retries a failing one with backoff,
holds a delayed one in its delay queue, and dead-letters one that fails for good (classic
queues with x-dead-letter-exchange, as Dramatiq declares them on RabbitMQ)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dramatiq import Message
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

from .workers import worker_process

pytestmark = pytest.mark.timeout(120)

WORKER = "tests.integration.test_clients.dramatiq_worker"


@pytest.fixture
def worker(server: ServerProcess, qname: str, tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "events.jsonl"
    with worker_process(WORKER, server.url, str(log), qname, stderr=tmp_path / "worker.err"):
        yield log


def _events(log: Path, want: Any, timeout: float = 30) -> list[dict[str, Any]]:
    """The worker's events once ``want(events)`` holds (or the deadline passes)."""
    deadline = time.monotonic() + timeout
    events: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        if log.exists():
            events = [json.loads(line) for line in log.read_text().splitlines() if line]
            if want(events):
                break
        time.sleep(0.05)
    return events


def test_tasks_retries_delays_and_dead_letters(
    server: ServerProcess, qname: str, worker: Path
) -> None:
    broker = RabbitmqBroker(url=server.url)
    try:

        def send(actor: str, *args: Any, delay: int | None = None) -> None:
            message = Message(queue_name=qname, actor_name=actor, args=args, kwargs={}, options={})
            broker.enqueue(message, delay=delay)

        sent = time.time()
        send("add", 1, 2, delay=400)  # held in QUEUE.DQ by the worker until its eta
        send("add", 20, 22)
        send("flaky", "k1")
        send("doomed")
        events = _events(
            worker,
            lambda ev: (
                sum(e["actor"] == "add" for e in ev) == 2
                and sum(e["actor"] == "flaky" for e in ev) == 3
                and any(e["actor"] == "doomed" for e in ev)
            ),
        )
        ran_at = {e["result"]: e["at"] for e in events if e["actor"] == "add"}
        assert sorted(ran_at) == [3, 42]
        assert ran_at[3] >= sent + 0.4  # the delayed one waited for its eta
        assert [e["attempt"] for e in events if e["actor"] == "flaky"] == [1, 2, 3]
        assert sum(e["actor"] == "doomed" for e in events) == 1  # no retries
    finally:
        broker.close()
    conn = connect(server)
    try:
        ch = conn.channel()
        deadline = time.monotonic() + 10
        dead = 0
        while time.monotonic() < deadline and dead == 0:
            dead = ch.queue_declare(f"{qname}.XQ", passive=True).method.message_count
            time.sleep(0.05)
        assert dead == 1  # rejected without requeue -> x-dead-letter-exchange -> QUEUE.XQ
        method, _props, body = ch.basic_get(f"{qname}.XQ", auto_ack=True)
        assert method is not None and json.loads(body)["actor_name"] == "doomed"
    finally:
        conn.close()
