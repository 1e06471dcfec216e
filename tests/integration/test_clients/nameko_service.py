"""A nameko service and a nameko client, each run as its own process by test_nameko.py.

``python -m ... service URL``: the service (``calculator``) answers RPC and handles the
``orders.placed`` event of the ``orders`` service. ``python -m ... client URL``: an RPC call,
an event dispatched, then RPC again until the service has seen it; prints the results as one
JSON line. nameko runs on eventlet, so neither lives in the pytest process. Not a test.
"""

from __future__ import annotations

import eventlet

eventlet.monkey_patch()

import json  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from nameko.events import event_handler  # noqa: E402
from nameko.rpc import rpc  # noqa: E402
from nameko.runners import ServiceRunner  # noqa: E402
from nameko.standalone.events import event_dispatcher  # noqa: E402
from nameko.standalone.rpc import ClusterRpcProxy  # noqa: E402

SEEN: list[Any] = []


class Calculator:
    name = "calculator"

    @rpc
    def add(self, a: int, b: int) -> int:
        return a + b

    @rpc
    def seen(self) -> list[Any]:
        return SEEN

    @event_handler("orders", "orders.placed")
    def on_order(self, payload: Any) -> None:
        SEEN.append(payload)


def serve(url: str) -> None:
    runner = ServiceRunner({"AMQP_URI": url})
    runner.add_service(Calculator)
    runner.start()
    stopped = eventlet.event.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.send(True))
    print("worker ready", flush=True)
    stopped.wait()
    runner.stop()


def call(url: str) -> None:
    config = {"AMQP_URI": url}
    with ClusterRpcProxy(config, timeout=30) as cluster:
        total = cluster.calculator.add(40, 2)
        event_dispatcher(config)("orders", "orders.placed", {"order": 7})
        seen: list[Any] = []
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            seen = cluster.calculator.seen()
            eventlet.sleep(0.05)
    print(json.dumps({"add": total, "seen": seen}), flush=True)


if __name__ == "__main__":
    {"service": serve, "client": call}[sys.argv[1]](sys.argv[2])
