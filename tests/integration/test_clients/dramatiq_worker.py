"""A Dramatiq worker as a user runs one, against the server at ``sys.argv[1]``.

Run as a process by test_dramatiq.py (``python -m ... URL LOG QUEUE``). Its actors write one
JSON line per event to LOG so the test can see what ran: ``add`` (a plain task), ``flaky``
(fails twice, then succeeds: Dramatiq's retries with backoff), ``doomed`` (always fails, no
retries: rejected into the queue's dead-letter queue ``QUEUE.XQ``). Delays go through
Dramatiq's ``QUEUE.DQ`` queue, which this worker also consumes. Not a test.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker


def main(url: str, log: Path, queue: str) -> None:
    broker = RabbitmqBroker(url=url)
    dramatiq.set_broker(broker)
    lock = threading.Lock()

    def note(**event: object) -> None:
        with lock, log.open("a") as out:
            out.write(json.dumps(event) + "\n")

    @dramatiq.actor(queue_name=queue, actor_name="add")
    def add(a: int, b: int) -> None:
        note(actor="add", result=a + b, at=time.time())

    @dramatiq.actor(queue_name=queue, actor_name="flaky", max_retries=5, min_backoff=50)
    def flaky(key: str) -> None:
        lines = log.read_text().splitlines() if log.exists() else []
        tries = sum(1 for line in lines if key in line)
        note(actor="flaky", key=key, attempt=tries + 1)
        if tries < 2:
            raise RuntimeError("not yet")

    @dramatiq.actor(queue_name=queue, actor_name="doomed", max_retries=0)
    def doomed() -> None:
        note(actor="doomed")
        raise RuntimeError("always")

    worker = dramatiq.Worker(broker, worker_threads=2)
    worker.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("worker ready", flush=True)
    stop.wait()
    worker.stop()
    broker.close()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
